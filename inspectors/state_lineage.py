"""What a checkpoint-format-2 RocksDB store restores, the way Spark loads it: by the lineage its
changelogs record, not by any chain of files (docs/formats/state.md#checkpoint-format-2).

Spark's `RocksDB.loadWithCheckpointId(v, id)`: `v_id.zip` when it exists; else the lineage read
from `v_id.changelog` (the versions below v back to the snapshot its writer loaded from, each
with its id) plus `(v, id)`; the newest zip of that lineage is the base, else the empty store when
the lineage starts at version 1, else the load fails (`cannotFindBaseSnapshotCheckpoint`); then
the lineage's changelogs above the base are replayed. So a zip deleted from the middle of a
store breaks every version whose lineage starts at it, although changelogs back to version 1 may
still be there. When the base zip is there but fails to load, Spark 4.2+'s auto snapshot repair
reads the lineage back further (`getFullLineage`) and loads an older zip of it, or the empty
store when it reaches version 1 (`_repair`: the status's `fallback_files`, as for format 1).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from streamctl.formats.state import is_full_file, is_zip_file, state_file
from streamctl.inspectors.state_listing import StoreFiles
from streamctl.inspectors.state_restore import MAX_CHANGE_FILE_REPLAY, StoreStatus

#: a changelog's lineage by its name: [(version, id)], [] for none, None when it cannot be told
LineageOf = Callable[[str], Optional[list[tuple[int, str]]]]


class _Load:
    """One version's load: the files it reads (oldest first) or the files it lacks."""

    __slots__ = ("files", "missing")

    def __init__(self, files: list[str], missing: list[str]) -> None:
        self.files, self.missing = files, missing


def _load(files: StoreFiles, v: int, uid: str, lineage_of: LineageOf) -> Optional[_Load]:
    """How Spark loads (v, uid) from `files`; None when a lineage cannot be read (judged as before)."""
    if uid in files.full_ids.get(v, ()):
        return _Load([files.file_name(v, uid, True)], [])
    if uid not in files.incr_ids.get(v, ()):
        return _Load([], [files.file_name(v, uid, False)])
    lineage = lineage_of(files.file_name(v, uid, False))
    if lineage is None:
        return None
    items = sorted({*(i for i in lineage if i[0] < v), (v, uid)})
    zips = [i for i in items if i[1] in files.full_ids.get(i[0], ())]
    if zips:
        base = max(zips)[0]
        chain = [files.file_name(*max(zips), True)]
    elif items[0][0] == 1:
        base, chain = 0, []
    else:  # the lineage starts at a snapshot that is gone
        return _Load([], [files.file_name(items[0][0], items[0][1], True)])
    missing: list[str] = []
    for x, u in items:
        if x > base:
            name = files.file_name(x, u, False)
            (chain if u in files.incr_ids.get(x, ()) else missing).append(name)
    return _Load(chain if not missing else [], missing)


def _full_lineage(files: StoreFiles, v: int, uid: str, lineage_of: LineageOf) -> Optional[list[tuple[int, str]]]:
    """`RocksDB.getFullLineage(max(1, v - maxChangeFileReplay), v, uid)`: (v, uid) and the lineages
    of its changelogs read back one after another to that floor; None where Spark's walk fails
    (a changelog gone or without a lineage, no progress, a hole), as the repair then keeps the
    lineage it had."""
    floor = max(1, v - MAX_CHANGE_FILE_REPLAY)
    items = {(v, uid)}
    cur = (v, uid)
    while cur[0] > floor:
        if cur[1] not in files.incr_ids.get(cur[0], ()):
            return None
        lineage = lineage_of(files.file_name(cur[0], cur[1], False))
        if not lineage:
            return None
        items.update(i for i in lineage if floor <= i[0] < cur[0])
        low = min(items)
        if low == cur:
            return None
        cur = low
    out = sorted(items)
    if [x for x, _u in out] != list(range(floor, v + 1)):
        return None
    return out


def _repair(files: StoreFiles, v: int, uid: str, tried: int, lineage_of: LineageOf) -> list[str]:
    """What Spark 4.2+'s auto snapshot repair of a format-2 load reads when the snapshot of
    version `tried` fails to load (`AutoSnapshotLoader.loadSnapshot`; 0, the empty store, is the
    first try when no zip of the lineage exists): the lineage made full
    (`getAdditionalEligibleSnapshots`), its newest other snapshot within maxChangeFileReplay,
    else the empty store when the full lineage starts at 1 and it was not the one tried, then its
    changelogs above that; [] when there is none."""
    full = _full_lineage(files, v, uid, lineage_of)
    if full is None:
        return []
    zips = [i for i in full if i[0] != tried and i[1] in files.full_ids.get(i[0], ())]
    base = max(zips) if zips else (0, "") if full[0][0] == 1 and tried != 0 else None
    if base is None:
        return []
    chain = [files.file_name(base[0], base[1], True)] if base[0] else []
    for x, u in full:
        if x > base[0]:
            if u not in files.incr_ids.get(x, ()):
                return []  # the replay fails: no repair
            chain.append(files.file_name(x, u, False))
    return chain


def id_at(files: StoreFiles, v: int, valid: dict[int, str]) -> Optional[str]:
    """The id a restart loads version v with: the commit log's, else the one id files of v carry."""
    if v in valid:
        return valid[v]
    ids = files.full_ids.get(v, set()) | files.incr_ids.get(v, set())
    return next(iter(ids)) if len(ids) == 1 else None


def lineage_status(status: StoreStatus, files: StoreFiles, valid: dict[int, str],
                   lineage_of: LineageOf) -> StoreStatus:
    """`status` (store_status's chains of files) narrowed to what Spark's lineage load restores.
    Only versions store_status found restorable are read again (a load by lineage needs a chain
    of files too): one changelog head per such version without a zip of its own. A version whose
    lineage cannot be read keeps store_status's answer."""
    ok: set[int] = {0}
    loads: dict[int, _Load] = {}
    req = status.required_version
    versions = set(status.restorable_versions)
    if req and not status.restorable_required and req in valid:
        # the version a restart loads, by the id the newest commit names: its lineage decides, not
        # the chain of ids older commits name (no restart reads those; observed 4.3.0: one changed
        # in a middle commit, the restart exact)
        versions.add(req)
    for v in sorted(versions):
        if v == 0:
            continue
        uid = id_at(files, v, valid)
        got = None if uid is None else _load(files, v, uid, lineage_of)
        if got is not None:
            loads[v] = got
        if got is None or got.files:
            ok.add(v)
    real = sorted(ok - {0})
    changes: dict[str, object] = dict(
        restorable_versions=frozenset(ok), first_restorable=real[0] if real else None,
        durable_version=real[-1] if real else None, fallback_files=(),
        broken_at=next((a + 1 for a, b in zip(real, real[1:], strict=False) if b != a + 1), None))
    got = loads.get(req) if req else None
    if req and got is not None and (status.restorable_required or got.files):
        if got.files:
            changes.update(restore_files=tuple(got.files), restorable_required=True, missing=())
            uid = id_at(files, req, valid)
            base = state_file(got.files[0])
            if files.has_crc and uid is not None and base is not None and is_full_file(got.files[0]):
                changes.update(fallback_files=tuple(_repair(files, req, uid, base.version, lineage_of)))
        else:
            changes.update(restorable_required=False, missing=tuple(got.missing), restore_files=())
            uid = id_at(files, req, valid)
            if files.has_crc and uid is not None and is_zip_file(got.missing[0]):
                # the zip the lineage starts from is gone: Spark's first try is the empty store,
                # which the short lineage cannot replay; its repair may load an older zip
                changes.update(fallback_files=tuple(_repair(files, req, uid, 0, lineage_of)))
    # a file a kept version's load reads is no orphan, whatever id the commit log names for its
    # version (a changed older commit: align and trim must never move what the restart loads)
    fallback: tuple[str, ...] = changes.get("fallback_files", ())  # type: ignore[assignment]
    used = {n for load in loads.values() for n in load.files} | set(fallback)
    if used & set(status.orphans):
        changes.update(orphans=tuple(o for o in status.orphans if o not in used))
    return replace(status, **changes)  # type: ignore[arg-type]

"""Which versions of a state store can be restored (`store_status`, `StoreStatus`), relative
to the version the next run needs; the files a restart reads to restore it and those missing.
The store's files are inspectors/state_listing.py's (docs/formats/state.md).

Version v holds the state after epoch v-1; version 0 is the empty store and has no file.
Restoring v needs a full file at some s <= v and every incremental file s+1..v.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from streamctl.formats.state import is_full_file, state_file
from streamctl.inspectors.state_listing import StoreFiles, remember

#: store_status's answers by (shape, required, planned) (bounded by state_listing's `remember`)
_STATUSES: dict[tuple[str, Optional[int], Optional[int]], tuple[Any, ...]] = {}


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """What one store can restore, relative to the version the next run needs."""

    operator_id: int
    partition: int
    store: str
    path: str
    provider: str
    unique_ids: bool
    min_version: Optional[int]
    max_version: Optional[int]
    version_count: int
    newest_snapshot: Optional[int]
    first_restorable: Optional[int]
    durable_version: Optional[int]
    broken_at: Optional[int]
    required_version: Optional[int]
    restorable_required: bool
    missing: tuple[str, ...]  # files that would restore `required_version`
    orphans: tuple[str, ...]
    temp_files: tuple[str, ...]
    restorable_versions: frozenset[int] = frozenset()  # every version <= planned + 1 that can be restored
    restore_files: tuple[str, ...] = ()  # what Spark reads to restore `required_version`, oldest first
    files: Optional[StoreFiles] = field(default=None, compare=False, repr=False)  # what it was judged from
    fallback_files: tuple[str, ...] = ()  # what Spark 4.1+'s auto snapshot repair reads instead (older snapshot)

    @property
    def listing(self) -> tuple[str, ...]:
        """The store folder's file names as listed."""
        return self.files.names if self.files is not None else ()

    @property
    def chain(self) -> str:
        if self.required_version is not None and not self.restorable_required:
            return "unrestorable"
        if self.broken_at is not None:
            return "broken"
        if self.orphans or self.temp_files:
            return "orphans"
        if self.durable_version is None and self.required_version not in (None, 0):
            return "empty"
        return "ok"

    def to_record(self) -> dict[str, Any]:
        return {
            "operator": self.operator_id,
            "partition": self.partition,
            "store": self.store,
            "path": self.path,
            "provider": self.provider,
            "unique_ids": self.unique_ids,
            "versions": None if self.min_version is None else [self.min_version, self.max_version],
            "version_count": self.version_count,
            "newest_snapshot": self.newest_snapshot,
            "first_restorable": self.first_restorable,
            "durable_version": self.durable_version,
            "required_version": self.required_version,
            "chain": self.chain,
            "broken_at": self.broken_at,
            "missing": list(self.missing),
            "orphans": list(self.orphans),
            "temp_files": list(self.temp_files),
        }


_STATUS_FIELDS = tuple(StoreStatus.__dataclass_fields__)
_FILES = _STATUS_FIELDS.index("files")
assert _STATUS_FIELDS[:4] == ("operator_id", "partition", "store", "path")  # store_status's memo sets them


def store_status(
    store: StoreFiles,
    required: Optional[int],
    planned: Optional[int],
    valid_ids: Mapping[int, str],
) -> StoreStatus:
    """Decide which versions of `store` can be restored.

    required: the version the next run loads (committed + 1), None if unknown.
    planned: the newest epoch in offsets/; versions above planned + 1 are orphans.
    valid_ids: for checkpoint format 2, version -> the unique id the commit log names for this
      store. Files of a named version with another id are orphans; versions the commit log does
      not cover accept any id.

    A store classified from a listing alone (its `shape`) and judged without ids answers as
    the last store of the same shape did, with its own place (`_STATUSES`).
    """
    key = None if store.shape is None or valid_ids else (store.shape[0], required, planned)
    if key is not None:
        known = _STATUSES.get(key)
        if known is not None:
            values = list(known)
            values[:4] = store.operator_id, store.partition, store.store, store.path
            values[_FILES] = store
            return StoreStatus(*values)
    status = _store_status(store, required, planned, valid_ids)
    if key is not None:
        remember(_STATUSES, key, tuple(getattr(status, f) for f in _STATUS_FIELDS))
    return status


def _store_status(store: StoreFiles, required: Optional[int], planned: Optional[int],
                  valid_ids: Mapping[int, str]) -> StoreStatus:
    versions = store.all_versions()
    orphans: list[str] = []
    limit = None if planned is None else planned + 1
    if limit is not None and versions and max(versions) > limit:
        for v in sorted(versions):
            if v > limit:
                orphans += [store.file_name(v, None, True)] if v in store.full else []
                orphans += [store.file_name(v, None, False)] if v in store.incr else []
                orphans += [store.file_name(v, u, True) for u in sorted(store.full_ids.get(v, ()))]
                orphans += [store.file_name(v, u, False) for u in sorted(store.incr_ids.get(v, ()))]
    use_ids = store.uses_unique_ids
    # With unique ids only what the commit log names counts: versions above the newest named
    # one (an uncommitted attempt) are not durable; versions below the oldest retained commit
    # accept any id (their commits were purged).
    max_named = max(valid_ids) if valid_ids else None

    def id_file_at(v: int, table: dict[int, set[str]]) -> bool:
        ids = table.get(v)
        if not ids:
            return False
        want = valid_ids.get(v)
        if want is not None:
            return want in ids
        return max_named is None or v < max_named

    def full_at(v: int) -> bool:
        return v in store.full or (use_ids and id_file_at(v, store.full_ids))

    def incr_at(v: int) -> bool:
        return v in store.incr or (use_ids and id_file_at(v, store.incr_ids))

    if use_ids:
        for table, full in ((store.full_ids, True), (store.incr_ids, False)):
            for v, uids in table.items():
                want = valid_ids.get(v)
                if want is None or (limit is not None and v > limit):
                    continue
                orphans += [store.file_name(v, u, full) for u in uids if u != want]

    top = max(versions) if versions else 0
    if limit is not None:
        top = min(top, limit) if versions else 0
    restorable: dict[int, bool] = {0: True}
    first = None
    last = None
    broken_at = None
    low = min(versions) if versions else 1
    # Versions below the lowest file can only be restored from the empty store (version 0).
    prev_ok = low <= 1
    full_set, incr_set = store.full, store.incr
    start = max(low, 1)
    prev_v = start - 1
    contiguous = (not use_ids and versions and low == start and top == max(versions)
                  and top - low + 1 == len(versions))
    if contiguous:
        # One run of versions without a hole, every one with a file of its own (ids aside): the
        # chain is restorable from the first version the loop below would accept (the lowest
        # when the store starts at version 1, else its lowest snapshot) to the top, never broken
        # (the loop's answer, in C: a store holds 100s of versions, a checkpoint 1000s of stores).
        first = low if prev_ok else min(full_set, default=None)
        if first is not None:
            last = top
            restorable.update(dict.fromkeys(range(first, top + 1), True))
        versions_in_range: list[int] = []
    else:
        versions_in_range = sorted(x for x in set(versions) if start <= x <= top)  # cost: the files, never the gap
    for v in versions_in_range:
        if v != prev_v + 1:
            prev_ok = False  # a version without any file lies between: not restorable
        prev_v = v
        if use_ids:
            ok = full_at(v) or (prev_ok and incr_at(v))
        else:
            ok = v in full_set or (prev_ok and v in incr_set)
        restorable[v] = ok
        prev_ok = ok
        if ok:
            if first is None:
                first = v
            elif last is not None and last < v - 1 and broken_at is None:
                broken_at = last + 1
            last = v
    missing: list[str] = []
    req_ok = True
    if required is not None and required > 0:
        req_ok = restorable.get(required, False)
        if not req_ok:
            missing = _missing_for(store, required, full_at, incr_at, valid_ids)
    newest_snapshot = max([*store.full, *(v for v in store.full_ids if full_at(v))], default=None)
    chain = _restore_files(store, required, full_at, incr_at, valid_ids) if req_ok and required else None
    fallback = None
    # Spark 4.1+'s auto snapshot repair: only a checksum can call the snapshot corrupt, and only a
    # load without checkpoint ids repairs (checkpoint format 2 loads by lineage: state_lineage.py)
    if chain and required is not None and is_full_file(chain[0]) and store.has_crc and not use_ids:
        base = state_file(chain[0])
        fallback = _restore_files(store, required, full_at, incr_at, valid_ids, below=base.version if base else None)
    return StoreStatus(
        operator_id=store.operator_id,
        partition=store.partition,
        store=store.store,
        path=store.path,
        provider=store.provider,
        unique_ids=use_ids,
        min_version=min(versions) if versions else None,
        max_version=max(versions) if versions else None,
        version_count=len(versions),
        newest_snapshot=newest_snapshot,
        first_restorable=first,
        durable_version=last,
        broken_at=broken_at,
        required_version=required,
        restorable_required=req_ok,
        missing=tuple(missing),
        orphans=tuple(sorted(orphans, key=_version_sort_key)),
        temp_files=tuple(sorted(store.temp_files)),
        restorable_versions=frozenset(v for v, ok in restorable.items() if ok),
        restore_files=tuple(chain or ()),
        fallback_files=tuple(fallback or ()),
        files=store,
    )


def _version_sort_key(name: str) -> tuple[int, str]:
    head = name.split(".", 1)[0].split("_", 1)[0]
    return (int(head) if head.isdigit() else -1, name)


MAX_CHANGE_FILE_REPLAY = 500  # spark.sql.streaming.stateStore.autoSnapshotRepair.maxChangeFileReplay (4.1+)


def _restore_files(store: StoreFiles, required: int, full_at: Any, incr_at: Any, valid_ids: Mapping[int, str],
                   below: Optional[int] = None) -> Optional[list[str]]:
    """The files a restart reads to restore `required`: the newest full version at or below it
    (below `below` when given), then every incremental file above it; None when an incremental
    is missing. Cost: the chain (at most MAX_CHANGE_FILE_REPLAY incrementals past `below`)."""
    top = required if below is None else below - 1
    known = set(store.full) | set(store.full_ids)
    base = max((v for v in known if 0 < v <= top and full_at(v)), default=0)
    if below is not None and required - base > MAX_CHANGE_FILE_REPLAY:
        return None

    def name(v: int, full: bool) -> str:
        if v in (store.full if full else store.incr):
            return store.file_name(v, None, full)
        ids = (store.full_ids if full else store.incr_ids).get(v, set())
        uid = valid_ids.get(v) if valid_ids.get(v) in ids else min(ids)
        return store.file_name(v, uid, full)

    files = [name(base, True)] if base else []
    for v in range(base + 1, required + 1):
        if not incr_at(v):
            return None
        files.append(name(v, False))
    return files


def _missing_for(store: StoreFiles, required: int, full_at: Any, incr_at: Any, valid_ids: Mapping[int, str]) -> list[str]:
    """Name the files that would make `required` restorable from the newest full file below it.
    Cost follows the files and commit ids that exist: a gap is one `a..b.ext` entry."""
    known = set(store.full) | set(store.incr) | set(store.full_ids) | set(store.incr_ids)
    base = max((v for v in known if 0 < v <= required and full_at(v)), default=0)
    hdfs = store.provider != "rocksdb"
    ext = "delta" if hdfs else "changelog"
    missing: list[str] = []
    run: list[int] = []  # [first, last] of consecutive missing versions without ids

    def flush() -> None:
        if run:
            missing.append(f"{run[0]}.{ext}" if run[0] == run[1] else f"{run[0]}..{run[1]}.{ext}")
            run.clear()

    def extend(a: int, b: int) -> None:
        if run and run[1] == a - 1:
            run[1] = b
        else:
            flush()
            run.extend([a, b])

    points = sorted(v for v in known | set(valid_ids) if base < v <= required)
    cur = base + 1
    for v in points + [required + 1]:
        if v > cur:
            extend(cur, v - 1)
        cur = v + 1
        if v > required:
            break
        if incr_at(v):
            flush()
            continue
        uid = valid_ids.get(v)
        if uid:
            flush()
            missing.append(f"{v}_{uid}.{ext}")
        else:
            extend(v, v)
    flush()
    if not missing:  # pragma: no cover - defensive: nothing missing means it was restorable
        missing.append(f"{required}.{'snapshot' if hdfs else 'zip'}")
    return missing

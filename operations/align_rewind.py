"""align's `--to TIME` and `--to savepoint:NAME` (docs/model.md#rewind-by-time,
docs/model.md#savepoints): the epoch either names, turned into `--to <epoch>` before the
choice of target, so the plan, its delivery class, journal and undo are those of any `--to N`.
The time is resolved by inspectors/rewind_time.py (the one place), a savepoint read and judged by
inspectors/savepoints.py; a time outside the kept window or a broken savepoint is refused (exit 4,
nothing changed)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from streamctl.formats.errors import UsageError
from streamctl.formats.savepoint import Savepoint, check_name
from streamctl.inspectors.query_inspection import QueryInspection
from streamctl.inspectors.rewind_time import OutsideWindow, iso, looks_like_time, parse_time, resolve_time
from streamctl.operations.align_evidence import AlignRequest
from streamctl.operations.plan import Refused

SAVEPOINT_PREFIX = "savepoint:"


def check_to(to: str) -> None:
    """A usage check of `--to` before anything is read: auto, max, an epoch, a time with its zone
    or savepoint:NAME."""
    if to in ("auto", "max") or to.isdigit():
        return
    if to.startswith(SAVEPOINT_PREFIX):
        check_name(to[len(SAVEPOINT_PREFIX):])
    elif looks_like_time(to):
        parse_time(to, "--to")
    else:
        raise UsageError(f"invalid value for --to: {to[:80]!r} (auto, max, an epoch number, an ISO-8601 time with its "
                         "zone or savepoint:NAME)")


def _savepoint(checkpoint: str, name: str) -> Savepoint:
    from streamctl.formats.savepoint import savepoint_file
    from streamctl.inspectors.savepoints import read_savepoint, savepoint_names
    from streamctl.inspectors.storage import Storage

    st = Storage.open(checkpoint)
    if st.lookup(savepoint_file(name)) is None:
        raise UsageError(f"--to savepoint:{name}: {checkpoint} has no savepoint {name} (savepoints: "
                         f"{', '.join(savepoint_names(st)) or 'none'})")
    return read_savepoint(st, name)


def with_savepoint_sink(req: AlignRequest) -> AlignRequest:
    """`--to savepoint:NAME` without `--sink`: the sink the savepoint recorded is rolled back with the
    checkpoint (its delivery class judged against it), as when `--sink` names it."""
    if not req.to.startswith(SAVEPOINT_PREFIX) or req.sink is not None:
        return req
    sp = _savepoint(req.checkpoint, req.to[len(SAVEPOINT_PREFIX):])
    if sp.sink and sp.sink.get("uri"):
        return replace(req, sink=str(sp.sink["uri"]), sink_kind=str(sp.sink.get("kind") or "auto"))
    return req


def resolve_to(q: QueryInspection, req: AlignRequest, notes: list[str]) -> tuple[AlignRequest, Optional[dict[str, Any]]]:
    """`req` with `--to` as an epoch, a note saying what the time or savepoint named, and the
    plan's `rewind` record (None for auto, max or an epoch number)."""
    to = req.to
    if to in ("auto", "max") or to.isdigit():
        return req, None
    from streamctl.inspectors.rewind_time import batch_time
    from streamctl.inspectors.storage import Storage

    try:
        if to.startswith(SAVEPOINT_PREFIX):
            name = to[len(SAVEPOINT_PREFIX):]
            sp = _savepoint(q.checkpoint, name)
            from streamctl.inspectors.savepoints import missing_for

            missing = missing_for(q, sp)
            if sp.query_id and q.query_id and sp.query_id != q.query_id:
                missing.insert(0, f"it was made for query {sp.query_id}, this checkpoint is query {q.query_id}")
            if missing:
                raise Refused(f"{q.checkpoint}: savepoint {name} (epoch {sp.epoch}) is broken: {'; '.join(missing)} "
                              "missing; nothing was changed")
            epoch, epoch_ms = sp.epoch, sp.batch_timestamp_ms
            later = sorted(b for b in q.offsets.batch_ids if b > epoch)
            nxt = later[0] if later else None
            next_ms = batch_time(Storage.open(q.checkpoint), nxt) if nxt is not None else None
            notes.append(f"savepoint {name} (created {sp.created}): epoch {epoch}, started {iso(epoch_ms)}"
                         + (f"; epoch {nxt} (started {iso(next_ms)}) and every later batch runs again" if nxt is not None else ""))
            position = (sp.sink or {}).get("position") or {}
            if (sp.sink or {}).get("kind") == "delta" and position.get("table_version") is not None:
                notes.append(f"savepoint {name} recorded Delta table version {position['table_version']}: streamctl "
                             "does not roll a Delta table back, and a Delta RESTORE keeps the table's txn version, "
                             "so the writer still skips the replayed epochs (docs/model.md#savepoints)")
            record: dict[str, Any] = {"to": to, "savepoint": name}
        else:
            rw = resolve_time(q, parse_time(to, "--to"), f"--to {to}")
            epoch, epoch_ms, nxt, next_ms = rw.epoch, rw.epoch_ms, rw.next_epoch, rw.next_ms
            notes.append(f"--to {to}: {rw.text()}")
            record = {"to": to, "time": iso(rw.time_ms), "window": list(rw.window)}
    except OutsideWindow as exc:
        raise Refused(str(exc)) from None
    record.update({"epoch": epoch, "epoch_time": iso(epoch_ms) if epoch_ms is not None else None,
                   "next_epoch": nxt, "next_time": iso(next_ms) if next_ms is not None else None})
    return replace(req, to=str(epoch)), record


def savepoints_lost(q: QueryInspection, x: int, notes: list[str]) -> list[dict[str, Any]]:
    """The savepoints of `q`'s checkpoint pinning an epoch above the target `x`: the rewind moves
    their restore files into the backup (and a restart writes other batches with their numbers), so
    the plan names each, never breaking one in silence; `[{name, epoch}]`, empty when there is none."""
    from streamctl.formats.errors import StreamctlError
    from streamctl.inspectors.savepoints import read_savepoint, savepoint_names
    from streamctl.inspectors.storage import Storage

    st = Storage.open(q.checkpoint)
    lost = []
    for name in savepoint_names(st):
        try:
            sp = read_savepoint(st, name)
        except StreamctlError:
            continue  # unreadable: savepoint list and trim already name it broken
        if sp.epoch > x and not (sp.query_id and q.query_id and sp.query_id != q.query_id):
            lost.append({"name": name, "epoch": sp.epoch})
    if lost:
        notes.append("breaks savepoint(s) " + ", ".join(f"{s['name']} (epoch {s['epoch']})" for s in lost)
                     + f": their epochs are above {x}; --undo brings their files back, after a restart "
                     "`streamctl savepoint delete` them (or pin them anew)")
    return lost

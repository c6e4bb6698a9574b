"""`streamctl savepoint create` and `delete` (docs/model.md#savepoints): pin an epoch of a
checkpoint as a named rollback point, or unpin it. Each runs under the checkpoint's lock
(operations/lock.py) and writes or deletes one file, `_streamctl/savepoints/<name>.json`
(formats/savepoint.py), atomically. Nothing of Spark's is touched: trim keeps what a savepoint
needs, `align --to savepoint:NAME` rewinds to it.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional

from streamctl.formats.coordinated_log import COORD_COMMITS, commit_record_name
from streamctl.formats.errors import UsageError
from streamctl.formats.kafka_offsets import parse_kafka_offsets
from streamctl.formats.layout import OFFSETS_DIR
from streamctl.formats.offsets import iso_time, parse_offsets
from streamctl.formats.savepoint import Savepoint, check_name, parse_savepoint, savepoint_file, serialize_savepoint
from streamctl.inspectors.checkpoint import inspect_checkpoint, require_checkpoint
from streamctl.inspectors.errors import raise_unreadable
from streamctl.inspectors.query_inspection import QueryInspection
from streamctl.inspectors.rewind_time import epoch_or_time, parse_time, resolve_time
from streamctl.inspectors.savepoints import list_savepoints, missing_for
from streamctl.inspectors.storage import Storage
from streamctl.operations.files import Root
from streamctl.operations.lock import Lock
from streamctl.operations.plan import Refused


def _sink_position(q: QueryInspection, x: int) -> Optional[dict[str, Any]]:
    """Where the sink stands at epoch x: a file sink's log batch, a Delta txn, a coordinated epoch."""
    sink = q.sink
    if sink is None:
        return None
    if sink.kind == "file":
        position: dict[str, Any] = {"log_batch": x}
    elif sink.kind == "delta":
        version = sink.table_version if sink.epoch == x else None
        if version is None and sink.app_id:
            from streamctl.inspectors.delta_sink import delta_version_of_epoch

            version = delta_version_of_epoch(Storage.open(sink.uri), sink.app_id, x)
        position = {"txn_app_id": sink.app_id, "txn_version": x, "table_version": version}
    elif sink.kind == "coordinated":
        position = {"epoch": x, "commit": f"{COORD_COMMITS}/{commit_record_name(x)}"}
    else:
        position = {"epoch": x}
    return {"kind": sink.kind, "uri": sink.uri, "position": position}


def _kafka(st: Storage, x: int) -> Optional[list[dict[str, Any]]]:
    """Per Kafka source, the offsets epoch x ends at (where a restart from it reads on), as Spark logged them."""
    entry = parse_offsets(st.read(f"{OFFSETS_DIR}/{x}"), st.uri(f"{OFFSETS_DIR}/{x}"), x)
    lines = [{"source": s.source_id, "starting_offsets": s.raw} for s in entry.sources
             if s.raw is not None and parse_kafka_offsets(s.raw) is not None]
    return lines or None


def _choose(q: QueryInspection, epoch: Optional[str], at: Optional[int], at_text: Optional[str]) -> int:
    if q.committed is None:
        raise Refused(f"{q.checkpoint}: nothing committed yet: no epoch to pin")
    if at is not None:
        return resolve_time(q, at, f"--at {at_text}").epoch
    if epoch is None:
        return q.committed
    x, _ = epoch_or_time(q, epoch, "--epoch")
    if x > q.committed:
        raise Refused(f"{q.checkpoint}: --epoch {x} is above the newest commit {q.committed}: only a committed epoch is a rollback point")
    return x


def create(location: str, name: str, sink: Optional[str], sink_kind: str, app_id: Optional[str],
           epoch: Optional[str], at: Optional[str], replace: bool, break_lock: bool) -> tuple[Savepoint, bool]:
    """Pin an epoch as savepoint `name`; (the savepoint, whether it replaced one). UsageError for a
    bad name, time or an existing name without `replace`; Refused (exit 4) for an epoch no restart
    can start from."""
    from streamctl.operations.runner import new_op_id

    check_name(name)
    if epoch is not None and at is not None:
        raise UsageError("--epoch and --at name the same thing: give one")
    at_ms = parse_time(at, "--at") if at is not None else None
    st = Storage.open(location)
    require_checkpoint(st)  # before the lock: nothing is created where no checkpoint is
    root = Root("checkpoint", location)
    lock = Lock.acquire(root, "savepoint create", new_op_id("savepoint"), break_lock)
    try:
        rel = savepoint_file(name)
        existed = root.exists(rel)
        if existed and not replace:
            old = parse_savepoint(root.read(rel), root.uri(rel))
            raise UsageError(f"{root.uri(rel)}: savepoint {name} exists (epoch {old.epoch}, created {old.created}); "
                             "pass --replace to pin it anew")
        q = inspect_checkpoint(location, sink=sink, sink_kind=sink_kind, app_id=app_id, quiet_period_s=0, deep=True)
        raise_unreadable(q)
        x = _choose(q, epoch, at_ms, at)
        entry_ms = parse_offsets(st.read(f"{OFFSETS_DIR}/{x}"), st.uri(f"{OFFSETS_DIR}/{x}"), x).timestamp_ms \
            if x in q.offsets.batch_ids else None
        now = int(time.time() * 1000)
        sp = Savepoint(name, q.query_id, x, iso_time(entry_ms) if entry_ms is not None else None, entry_ms,
                       iso_time(now), now, _sink_position(q, x), None)
        missing = missing_for(q, sp)
        if missing:
            raise Refused(f"{q.checkpoint}: epoch {x} is no rollback point any more ({'; '.join(missing)} missing): "
                          "a savepoint there could not be restored")
        sp = Savepoint(**{**sp.__dict__, "kafka": _kafka(st, x)})
        root.write_atomic(rel, serialize_savepoint(sp))
        return sp, existed
    finally:
        lock.release()


def delete(location: str, name: str, break_lock: bool) -> Savepoint:
    """Unpin savepoint `name` (its file deleted under the lock); UsageError when there is none."""
    from streamctl.operations.runner import new_op_id

    check_name(name)
    require_checkpoint(Storage.open(location))
    root = Root("checkpoint", location)
    lock = Lock.acquire(root, "savepoint delete", new_op_id("savepoint"), break_lock)
    try:
        rel = savepoint_file(name)
        if not root.exists(rel):
            raise UsageError(f"{root.uri(rel)}: no savepoint {name}")
        sp = parse_savepoint(root.read(rel), root.uri(rel))
        root.delete(rel)
        return sp
    finally:
        lock.release()


def carried(q: QueryInspection, sink: Optional[str], sink_dest: Optional[str],
            new_query_id: Optional[str]) -> tuple[dict[str, bytes], list[dict[str, Any]], list[str]]:
    """What `streamctl copy` does with the old place's savepoints (docs/model.md#copy): every intact
    one is written at the new place (a copy keeps what trim keeps, so its restore files come along),
    its sink's URI the new place's when the sink moves with `--sink-dest`, its query id the new one
    with `--new-query-id`; a broken one stays behind, named. (the files by path, the plan's records
    `[{name, epoch, carried, why}]`, the notes)"""
    old_sink = Storage.open(sink).display if sink and sink_dest else None
    new_sink = Storage.open(sink_dest).display if sink and sink_dest else None
    files: dict[str, bytes] = {}
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    for s in list_savepoints(q):
        if not s.intact or s.savepoint is None:
            records.append({"name": s.name, "epoch": s.savepoint.epoch if s.savepoint else None, "carried": False,
                            "why": "broken: " + "; ".join(s.missing)})
            notes.append(f"savepoint {s.name} is {s.status()}: not copied (it stays at the old place)")
            continue
        sp = s.savepoint
        moved_sink = sp.sink
        if sp.sink and old_sink is not None and sp.sink.get("uri") == old_sink:
            moved_sink = {**sp.sink, "uri": new_sink}
        sp = dataclasses.replace(sp, query_id=new_query_id or sp.query_id, sink=moved_sink)
        files[savepoint_file(sp.name)] = serialize_savepoint(sp)
        records.append({"name": sp.name, "epoch": sp.epoch, "carried": True,
                        "why": "its restore files are copied" + (", its sink's URI the new place's"
                                                                  if moved_sink is not s.savepoint.sink else "")})
    if files:
        notes.append("copies savepoint(s) " + ", ".join(f"{r['name']} (epoch {r['epoch']})" for r in records
                                                       if r["carried"]) + " with their restore files")
    return files, records, notes

"""Savepoints (docs/model.md#savepoints): the named rollback points recorded beside a checkpoint
(`_streamctl/savepoints/<name>.json`, formats/savepoint.py), read and judged. A savepoint is
intact while every file a restart from its epoch reads is still there: `offsets/<X>` and
`offsets/<X-1>`, `commits/<X>`, every state store able to restore version X+1, and the sink's
record of epoch X (a file sink's log entry, a coordinated sink's commit record), and `offsets/X`
is still the batch it pinned (the same `batchTimestampMs`: a rewind below X and a restart write
another batch X). A broken one is reported with what is missing, never skipped. Read-only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from streamctl.formats.coordinated_log import COORD_COMMITS, commit_record_name
from streamctl.formats.errors import StreamctlError
from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR, SAVEPOINTS_DIR
from streamctl.formats.savepoint import Savepoint, name_of_file, parse_savepoint, savepoint_file
from streamctl.inspectors.query_inspection import QueryInspection
from streamctl.inspectors.rewind_time import batch_time, iso
from streamctl.inspectors.storage import Storage


@dataclass(frozen=True)
class SavepointStatus:
    name: str
    path: str  # the savepoint file's URI
    savepoint: Optional[Savepoint]  # None when its file cannot be read
    missing: tuple[str, ...]  # what a restart from it lacks (or why its file cannot be read)

    @property
    def intact(self) -> bool:
        return self.savepoint is not None and not self.missing

    def status(self) -> str:
        return "intact" if self.intact else f"broken: {'; '.join(self.missing)}"

    def to_record(self) -> dict[str, object]:
        rec: dict[str, object] = {"name": self.name, "path": self.path, "intact": self.intact,
                                  "status": "intact" if self.intact else "broken", "missing": list(self.missing)}
        if self.savepoint is not None:
            rec.update(self.savepoint.to_record())
            rec.pop("format", None)
        return rec


def read_savepoint(st: Storage, name: str) -> Savepoint:
    """Savepoint `name` of the checkpoint in `st`; StorageError when it does not exist."""
    rel = savepoint_file(name)
    return parse_savepoint(st.read(rel), st.uri(rel))


def savepoint_names(st: Storage) -> list[str]:
    return sorted(n for n in (name_of_file(e.name) for e in st.list_dir(SAVEPOINTS_DIR) or [] if not e.is_dir)
                  if n is not None)


def missing_for(q: QueryInspection, sp: Savepoint) -> list[str]:
    """The files (or restorable versions) a restart from `sp`'s epoch needs and the checkpoint, or
    the sink the savepoint names, no longer holds."""
    x = sp.epoch
    missing = []
    if x not in q.offsets.batch_ids:
        missing.append(f"{OFFSETS_DIR}/{x}")
    elif sp.batch_timestamp_ms is not None:
        # a rewind below X and a restart write a new batch X: the pinned one is gone, whatever its number
        now_ms = batch_time(Storage.open(q.checkpoint), x)
        if now_ms is not None and now_ms != sp.batch_timestamp_ms:
            missing.append(f"{OFFSETS_DIR}/{x} as pinned (epoch {x} ran again: its batch started {iso(now_ms)}, "
                           f"the pinned one {iso(sp.batch_timestamp_ms)})")
    if x > 0 and x - 1 not in q.offsets.batch_ids and not q.async_progress:
        missing.append(f"{OFFSETS_DIR}/{x - 1}")
    if x not in q.commits.batch_ids:
        missing.append(f"{COMMITS_DIR}/{x}")
    for op in q.operators:
        for s in op.stores:
            if x + 1 not in s.restorable_versions:
                missing.append(f"{s.path} (state version {x + 1} cannot be restored)")
    sink = sp.sink or {}
    if sink.get("uri") and sink.get("kind") in ("file", "coordinated"):
        try:
            sink_st = Storage.open(str(sink["uri"]))
            if sink["kind"] == "file":
                from streamctl.inspectors.sinks import list_file_sink_log

                log = list_file_sink_log(sink_st)
                if x not in log.ids and not any(c >= x for c in log.compactions):
                    missing.append(f"{sink['uri']}: _spark_metadata/{x}")
            elif sink_st.lookup(f"{COORD_COMMITS}/{commit_record_name(x)}") is None:
                missing.append(f"{sink['uri']}: {COORD_COMMITS}/{commit_record_name(x)}")
        except StreamctlError as exc:
            missing.append(f"the sink {sink['uri']} cannot be read ({exc})")
    return missing


def list_savepoints(q: QueryInspection) -> list[SavepointStatus]:
    """Every savepoint of the checkpoint `q` inspects, by name, each judged intact or broken."""
    st = Storage.open(q.checkpoint)
    out = []
    for name in savepoint_names(st):
        rel = savepoint_file(name)
        try:
            sp = parse_savepoint(st.read(rel), st.uri(rel))
        except StreamctlError as exc:
            out.append(SavepointStatus(name, st.uri(rel), None, (f"its file cannot be read ({exc})",)))
            continue
        missing = missing_for(q, sp)
        if sp.query_id and q.query_id and sp.query_id != q.query_id:
            missing.insert(0, f"it was made for query {sp.query_id}, this checkpoint is query {q.query_id}")
        out.append(SavepointStatus(name, st.uri(rel), sp, tuple(missing)))
    return out

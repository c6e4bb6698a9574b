"""Safe teardown (`streamctl drop-sink --safe`): stop the writer, confirm it drained, hand off its
final position, then retire the checkpoint and the sink's commit log (docs/model.md#drop-sink).

The planner (`plan_teardown`) is pure over an inspection and the roots' listings; the file moves
run through `streamctl.operations.executor.Executor` (journal, backup, resume), which this module
uses as is. What this module adds around it:

* `stop_writer` (operations/stop_writer.py): a graceful stop through the agent's lease, or,
  without a lease, the operator's word and no file change for the quiet period;
* `check_drained`: planned == committed and sink epoch == committed (or, on request, the
  uncommitted epoch is discarded);
* `handoff_record`: the successor's starting point (final epoch, Kafka `startingOffsets`, ...);
* `purge`: with `--purge`, the archived copies are deleted after the moves (journaled);
* `verify_teardown`: what the finished operation must have left behind.

Order of the steps, and why (each one journaled, each checked by the executor before the next):

1. write `ARCHIVE/handoff.json` (nothing in the checkpoint changes yet);
2. move `.metadata.crc`, then replace `metadata` by a *tombstone*: a JSON object without the query
   `id`. From here on every restart of the old query against this checkpoint fails loudly in
   `start()` (Spark cannot read its stream metadata) before it plans, reads or writes anything.
   Before this step the checkpoint is untouched, so a restart simply continues exactly once.
   (A crash between moving `metadata` away and writing the tombstone leaves `offsets/`,
   `commits/`, state and the sink log intact: a restart continues exactly once with a new id.)
3. with `--discard-in-flight`, move the uncommitted `offsets/P`;
4. retire the state stores (`state/<operator>`, then `state/`);
5. retire the remaining checkpoint logs (`commits/`, `offsets/`, `sources/`, the rest);
6. retire the sink's commit log (`_spark_metadata/`; `_commits/` and `_staging/` of a coordinated
   sink). A Delta table's log *is* the table and is never touched (the old query's `txn` app id
   stays in it, harmless to a successor with a new query id);
7. with `--purge-data` only, the data files the sink log lists *inside the sink root* (files
   listed outside it are reported and never touched).

The tombstone stays in the checkpoint folder (also with --purge): the folder keeps refusing a
restart until an operator deletes it on purpose.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional
from urllib.parse import unquote, urlparse

from streamctl.formats.checksum import crc_name
from streamctl.formats.coordinated_log import COORD_COMMITS, COORD_STAGING
from streamctl.formats.errors import StorageError
from streamctl.formats.file_sink_log import FILE_SINK_LOG
from streamctl.formats.journal import Event
from streamctl.formats.layout import (
    BACKED_UP_DIR,
    COMMITS_DIR,
    HANDOFF_FILE,
    METADATA_FILE,
    OFFSETS_DIR,
    RETIRED_DIR,
    SOURCES_DIR,
    STATE_DIR,
    STREAMCTL_DIR,
)
from streamctl.inspectors.documents import document
from streamctl.inspectors.findings import positions_text, shown
from streamctl.inspectors.lease import TOMBSTONE_KIND
from streamctl.operations.files import Root
from streamctl.operations.plan import EXACTLY_ONCE, Plan, Refused, Step  # noqa: F401 - Refused: the one refusal of every mutation
from streamctl.operations.stop import now_ms
from streamctl.operations.stop_writer import NO_PROOF, Say, read_checkpoint_lease, stop_writer, stopped_evidence

KEEP = (STREAMCTL_DIR, METADATA_FILE, crc_name(METADATA_FILE))
LOG_ORDER = (COMMITS_DIR, OFFSETS_DIR, SOURCES_DIR)
SINK_LOGS = {"file": (FILE_SINK_LOG,), "coordinated": (COORD_COMMITS, COORD_STAGING), "delta": ()}




@dataclass
class TeardownRequest:
    checkpoint: str
    sink: str
    sink_kind: str = "auto"
    app_id: Optional[str] = None
    archive: Optional[str] = None
    discard_in_flight: bool = False
    purge: bool = False
    purge_data: bool = False
    safe: bool = False  # stop the writer through the agent's lease first
    assume_stopped: bool = False  # without --safe: proceed when no lease is live and the logs are quiet
    quiet_period_s: float = 0.0
    stop_timeout_s: float = 60.0


# ------------------------------------------------------------------------------ the two modes


def open_roots(req: TeardownRequest) -> tuple[Root, Root]:
    """The checkpoint and sink roots; refuses an unsafe request first, then a root that is no folder."""
    if not req.safe and not req.assume_stopped:
        raise Refused(f"{req.checkpoint}: drop-sink retires a query's checkpoint and sink: pass --safe (stop the "
                      "writer, confirm it drained) or, for a query you know is stopped, --assume-stopped")
    roots = Root("checkpoint", req.checkpoint), Root("sink", req.sink)
    for r in roots:
        what = r.storage.kind()
        if what != "dir":
            raise StorageError(r.location, "does not exist" if what == "missing" else "is not a folder")
    return roots


def _inspect(req: TeardownRequest, ck: Root, sink: Root) -> Any:
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    return inspect_checkpoint(ck.location, sink=sink.location, sink_kind=req.sink_kind, app_id=req.app_id,
                              quiet_period_s=0)


def _detail(req: TeardownRequest, sink: Root) -> Any:
    """The sink log with every data file it lists (--purge-data only)."""
    if not req.purge_data:
        return None
    from streamctl.inspectors.sinks import read_sink

    return read_sink(sink.location, req.sink_kind, req.app_id, detail=True)


def execute_request(req: TeardownRequest, ck: Root, sink: Root, break_lock: bool, say: Say) -> Any:
    """The runner's request of `--execute`: under the lock, stop the writer, confirm it drained,
    plan; the stop and the drain are the journal's opening records."""
    from streamctl.operations import runner

    opening: list[dict[str, Any]] = []

    def planner(op_id: str, archive_root: Any) -> Any:
        stopped = stop_writer(ck.location, safe=req.safe, quiet_period_s=req.quiet_period_s,
                              stop_timeout_s=req.stop_timeout_s, say=say, assume_stopped=req.assume_stopped)
        q = _inspect(req, ck, sink)
        discarded = check_drained(q, req.discard_in_flight)
        opening.extend([{"event": Event.WRITER_STOPPED, **stopped},
                        {"event": Event.DRAINED, "planned": q.planned, "committed": q.committed,
                         "sink_epoch": q.sink.epoch if q.sink else None, "discarded_epoch": discarded}])
        plan = plan_teardown(req, q, ck, sink, archive_root, op_id, discarded, _detail(req, sink))
        plan.before["liveness"] = stopped.get("evidence", "")
        return plan

    return runner.Request(ck.location, planner, req.archive, break_lock, opening)


def preview(req: TeardownRequest, ck: Root, sink: Root) -> Plan:
    """The plan as of now, nothing changed (plan mode). A running query is planned as if stopped,
    with a note (--execute stops it first); without --safe it refuses."""
    from streamctl.inspectors.lease import lease_status
    from streamctl.operations import runner

    # checked in plan mode too: a named archive is new or empty
    archive_root = runner.check_backup_target(
        req.archive or ck.uri(f"{RETIRED_DIR}/{runner.new_op_id('drop-sink')}"), "--archive", "archive")
    lease = read_checkpoint_lease(ck.location)
    status = lease_status(lease, now_ms()) if lease is not None else None
    live = status == "live"
    if live and not req.safe:
        raise Refused(f"{ck.location}: the query is running (live agent lease); use --safe")
    if status is None and not req.assume_stopped:
        raise Refused(f"{ck.location}: {NO_PROOF}")
    q = _inspect(req, ck, sink)
    discarded = None if live else check_drained(q, req.discard_in_flight)
    plan = plan_teardown(req, q, ck, sink, archive_root, "(assigned by --execute)", discarded, _detail(req, sink))
    if live:
        plan.notes.insert(0, "the query is running: --execute first asks the agent to stop it, then checks it "
                             "drained; the steps below are as of now")
        plan.before["liveness"] = "the streamctl agent's live lease: --execute asks it to stop the query and waits"
    else:
        plan.before["liveness"] = stopped_evidence(status, req.assume_stopped)
    return plan


# ------------------------------------------------------------------------------ drained?


def check_drained(q: Any, discard_in_flight: bool) -> Optional[int]:
    """The epoch to discard (the in-flight one, with `discard_in_flight`), or None. Refused when
    the query has not drained: P != C, or the sink epoch differs from C."""
    where = q.checkpoint
    bad = [f for f in q.findings if f.code == "UNREADABLE"]
    if bad:
        raise Refused(f"{where}: cannot confirm the query drained: {bad[0].message}")
    if q.sink is None or any(f.code == "UNREADABLE" for f in q.sink.findings):
        why = next((f.message for f in (q.sink.findings if q.sink else ()) if f.code == "UNREADABLE"), "no sink")
        raise Refused(f"{where}: cannot read the sink's commit log: {why}")
    P, C, S = q.planned, q.committed, q.sink.epoch
    discard = None
    if P != C:
        in_flight = P is not None and P == (C if C is not None else -1) + 1
        if not in_flight:
            raise Refused(f"{where}: the logs disagree (planned {shown(P)}, committed {shown(C)}): not a drained query; "
                          "run streamctl align first")
        if not discard_in_flight:
            raise Refused(f"{where}: epoch {P} is in flight (planned, not committed): restart the query to finish "
                          "it, or pass --discard-in-flight to drop it (its input goes to the successor)")
        if S == P:
            raise Refused(f"{where}: the sink already committed the in-flight epoch {P}: discarding it would hand "
                          "its input to the successor a second time; restart the query to finish it, or run "
                          "streamctl align")
        discard = P
    if S != C:
        raise Refused(f"{where}: the sink epoch {shown(S)} differs from the committed epoch {shown(C)} (run streamctl inspect "
                      "epochs --sink, then streamctl align)")
    return discard


# ------------------------------------------------------------------------------ hand-off


def handoff_record(q: Any, ck: Root, op_id: str, discarded: Optional[int]) -> dict[str, Any]:
    """Where a successor starts so that it continues exactly once: the final committed epoch,
    and per source the position consumed through (Kafka: a ready `startingOffsets`)."""
    from streamctl.formats.kafka_offsets import offsets_text, parse_kafka_offsets
    from streamctl.formats.source_log import entry_paths
    from streamctl.inspectors.sources import read_compactible_log

    C = q.committed
    entry = q.committed_offsets if (q.committed_offsets is not None and q.committed_offsets.batch_id == C) else None
    sources: list[dict[str, Any]] = []
    kafka: list[str] = []
    kinds = {s.source_id: s.kind for s in q.sources}
    for so in (entry.sources if entry is not None else ()):
        kind = kinds.get(so.source_id, "unknown")
        kafka_offsets = parse_kafka_offsets(so.raw)
        if kind != "file" and kafka_offsets is not None:
            kind = "kafka"  # Kafka-shaped offsets (streamctl's Python Kafka source writes no sources/<n>/0)
        rec: dict[str, Any] = {"source": so.source_id, "kind": kind, "offset": so.parsed()}
        if kind == "kafka" and kafka_offsets is not None:
            starting = offsets_text(kafka_offsets)
            rec["startingOffsets"] = starting
            kafka.append(starting)
        elif kind == "file":
            files: list[str] = []
            for b in read_compactible_log(ck.storage, f"{SOURCES_DIR}/{so.source_id}"):
                if C is not None and b.batch_id <= C:
                    if b.compact:
                        files = []
                    files.extend(entry_paths(b))
            rec["processed_files"] = len(set(files))
            rec["processed"] = sorted(set(files))
        sources.append(rec)
    return document("Handoff", {"op_id": op_id, "query_id": q.query_id,
        "checkpoint": q.checkpoint, "final_epoch": C, "sink": q.sink.position() if q.sink else None,
        "sink_epoch": q.sink.epoch if q.sink else None, "discarded_epoch": discarded,
        **({"sink_snapshot_id": q.sink.table_version} if q.sink is not None and q.sink.kind == "iceberg" else {}),
        "sources": sources, "kafka_starting_offsets": kafka[0] if len(kafka) == 1 else None,
        "successor": ("start a new query with a new checkpoint reading from the positions above: for Kafka, "
                      "option('startingOffsets', kafka_starting_offsets); for files, only files not in 'processed'")})


# ------------------------------------------------------------------------------ the plan


def tombstone(op_id: str, query_id: Optional[str], archive: str, moved_to: Optional[str] = None) -> bytes:
    """The `metadata` that retires a checkpoint (docs/formats/streamctl.md#the-tombstone): drop-sink's,
    or with `moved_to` copy --move's (the query goes on at `moved_to`; `archive` holds the old `metadata`)."""
    doc = {"streamctl": TOMBSTONE_KIND, "op_id": op_id, "query_id_was": query_id, "archive": archive,
           "note": "this checkpoint was retired by streamctl drop-sink; it must not be restarted"}
    if moved_to is not None:
        doc.update(command="copy --move", moved_to=moved_to,
                   note=f"this query was moved by streamctl copy --move to {moved_to}; it must not be restarted here")
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


def _names(root: Root, rel: str = "") -> list[tuple[str, bool]]:
    return sorted((e.name, e.is_dir) for e in (root.storage.list_dir(rel) or []))


def _inside(sink: Root, path: str) -> Optional[str]:
    """A path (a data file from a sink log, an archive location) relative to the root `sink`, or
    None when it is outside it."""
    if not sink.is_local:
        from streamctl.inspectors.placement import sink_rel

        return sink_rel(path, sink.location.partition("?")[0], False)
    parsed = urlparse(path)
    local = unquote(parsed.path) if parsed.scheme in ("file",) else path
    if not os.path.isabs(local):
        local = os.path.join(sink.location, local)
    real_root = os.path.realpath(sink.location)
    real = os.path.realpath(local)
    if os.path.commonpath([real_root, real]) != real_root or real == real_root:
        return None
    rel = os.path.relpath(real, real_root).replace(os.sep, "/")
    return rel if not rel.startswith("..") else None


def plan_teardown(req: TeardownRequest, q: Any, ck: Root, sink: Root, archive: Root, op_id: str,
                  discarded: Optional[int], sink_log_detail: Any = None) -> Plan:
    """The ordered steps of a teardown (module docstring). Pure over the inspection `q` and the
    roots' listings; `sink_log_detail` (a SinkLog read with detail) is needed for --purge-data."""
    steps: list[Step] = []
    notes: list[str] = []
    if ck.exists(crc_name(METADATA_FILE)):
        steps.append(Step("move", "checkpoint", crc_name(METADATA_FILE), "checksum of the metadata about to be tombstoned"))
    steps.append(Step("write", "checkpoint", METADATA_FILE, "tombstone: from here on a restart of the old query fails "
                      "loudly", tombstone(op_id, q.query_id, archive.location)))
    if discarded is not None:
        steps.append(Step("move", "checkpoint", f"{OFFSETS_DIR}/{discarded}", f"discard the in-flight epoch {discarded}"))
        if ck.exists(crc_name(f"{OFFSETS_DIR}/{discarded}")):
            steps.append(Step("move", "checkpoint", crc_name(f"{OFFSETS_DIR}/{discarded}"), "checksum of a moved entry"))
    top = dict(_names(ck))
    skip = set(KEEP)
    inner = _inside(ck, archive.location) if ck.is_local and archive.is_local else None
    if inner is not None:
        skip.add(inner.split("/")[0])  # an archive inside the checkpoint is never moved into itself
    # One move per folder, never a folder after some of its children: the executor keeps each
    # moved path at files/<root>/<path>, and a parent moved later would land on top of them.
    if STATE_DIR in top and STATE_DIR not in skip:
        for name, _is_dir in _names(ck, STATE_DIR):
            steps.append(Step("move", "checkpoint", f"{STATE_DIR}/{name}", f"retire state of operator {name}"))
    rest = [n for n in LOG_ORDER if n in top] + sorted(n for n in top if n not in LOG_ORDER and n != STATE_DIR)
    for name in rest:
        if name in skip:
            continue
        if name == OFFSETS_DIR and discarded is not None:
            gone = {f"{discarded}", crc_name(str(discarded))}
            for sub, _d in _names(ck, OFFSETS_DIR):
                if sub not in gone:
                    steps.append(Step("move", "checkpoint", f"{OFFSETS_DIR}/{sub}", "retire a checkpoint log entry"))
            continue
        steps.append(Step("move", "checkpoint", name, "retire a checkpoint log" if name in LOG_ORDER
                          else "retire what remains of the checkpoint"))
    kind = q.sink.kind if q.sink is not None else req.sink_kind
    sink_names = dict(_names(sink))
    for name in SINK_LOGS.get(kind, ()):
        if name in sink_names:
            steps.append(Step("move", "sink", name, f"retire the {kind} sink's commit log"))
    if kind == "file" and q.sink is not None:
        # files no log entry names (a failed batch's): with the log gone, every reader of the folder
        # would see them as data; they go to the archive with it (docs/formats/sinks.md#orphan-files)
        for f in q.sink.findings:
            for uri in (f.details.get("files", []) if f.code == "SINK_ORPHANS" else []):
                rel = _inside(sink, uri)
                if rel is None:
                    continue
                steps.append(Step("move", "sink", rel, "orphan data file no sink-log entry names"))
                if sink.exists(crc_name(rel)):
                    steps.append(Step("move", "sink", crc_name(rel), "checksum of a moved data file"))
    if kind == "delta":
        notes.append("a Delta table's _delta_log is the table itself and is not touched; the old query id's txn "
                     "entries stay (a successor has a new query id)")
    if kind == "iceberg":
        snap = q.sink.table_version if q.sink is not None else None
        notes.append(f"an Iceberg table's metadata is the table itself and is not touched (current snapshot {shown(snap)}, "
                     f"the query's last epoch {shown(q.sink.epoch if q.sink is not None else None)}); streamctl never expires its "
                     "snapshots")
    if req.purge_data:
        if kind in ("delta", "iceberg"):
            raise Refused(f"{sink.location}: --purge-data is not supported for {kind.title()} tables (drop the table with "
                          f"{kind.title()} tooling)")
        outside: list[str] = []
        seen: set[str] = set()
        for ep in (sink_log_detail.epochs if sink_log_detail is not None else ()):
            for path in ep.files:
                rel = _inside(sink, path)
                if rel is None:
                    outside.append(path)
                    continue
                if rel in seen or any(rel == n or rel.startswith(n + "/") for n in SINK_LOGS.get(kind, ())):
                    continue
                seen.add(rel)
                steps.append(Step("move", "sink", rel, f"data file of epoch {ep.epoch} (--purge-data)"))
                crc = crc_name(rel)
                if sink.exists(crc):
                    steps.append(Step("move", "sink", crc, "checksum of a moved data file"))
        if outside:
            notes.append(f"{len(outside)} data file(s) the sink log lists outside the sink root are not touched "
                         f"(e.g. {outside[0]})")
    if req.purge:
        notes.append("--purge: the archived copies (files/) are deleted once every step is done; handoff.json, "
                     "plan.json, journal.jsonl and manifest.json stay")
    handoff = handoff_record(q, ck, op_id, discarded)
    handoff["retired_files"] = _file_counts(steps, {"checkpoint": ck, "sink": sink}, SINK_LOGS.get(kind, ()))
    steps.insert(0, Step("write", "archive", HANDOFF_FILE, "hand-off manifest: where a successor starts",
                         (json.dumps(handoff, indent=2, sort_keys=True) + "\n").encode()))
    roots = {"checkpoint": ck.location, "sink": sink.location, "archive": archive.location}
    b = {"planned": q.planned, "committed": q.committed, "sink_epoch": q.sink.epoch if q.sink else None,
         "query_id": q.query_id, "verdict": q.verdict}
    return Plan(command="drop-sink", roots=roots, strategy="teardown", target=q.committed,
                classification=EXACTLY_ONCE, steps=steps, expected_verdict="retired", before=b,
                after={"final_epoch": q.committed, "discarded_epoch": discarded}, notes=notes,
                settings={"sink_kind": kind, "app_id": req.app_id, "purge": req.purge, "purge_data": req.purge_data,
                          "handoff": handoff}, op_id=op_id)


def _file_counts(steps: list[Step], roots: dict[str, Root], sink_logs: tuple[str, ...]) -> dict[str, int]:
    """How many files the moves retire: checkpoint, sink commit log, sink data."""
    out = {"checkpoint": 0, "sink_log": 0, "sink_data": 0}
    for s in steps:
        if s.action != "move":
            continue
        root = roots[s.root]
        n = len(root.walk_files(s.path)) if root.kind(s.path) == "dir" else 1
        key = "checkpoint" if s.root == "checkpoint" else ("sink_log" if s.path.split("/")[0] in sink_logs else "sink_data")
        out[key] += n
    return out


# ------------------------------------------------------------------------------ purge and verify


PURGE_BATCH = 1000  # archived files deleted per request on S3 (DeleteObjects), per meter update


def purge(plan: Plan, archive: Root, journal: Any, meter: Optional[Callable[[str], None]] = None) -> None:
    """--purge: delete the archived copies, journaled (idempotent: a resumed run deletes again):
    the files of one listing in batches (`meter` gets files done, bytes, rate and eta), then what
    is left of the folders."""
    from streamctl.operations.meter import Meter

    for name in ("checkpoint", "sink"):
        rel = f"{BACKED_UP_DIR}/{name}"
        journal.append({"event": Event.PURGE_BEGIN, "path": rel})
        files = archive.walk_sizes(rel)
        done = Meter(len(files), meter, label=f"purge {rel}: ")
        for start in range(0, len(files), PURGE_BATCH):
            batch = files[start:start + PURGE_BATCH]
            archive.delete_many([f"{rel}/{sub}" for sub, _size in batch])
            for _sub, size in batch:
                done.tick(size)
        if archive.exists(rel):
            archive.delete(rel)
        journal.append({"event": Event.PURGE_DONE, "path": rel})
    if archive.exists("files") and not archive.walk_files("files"):
        archive.remove_empty_dirs("files")


def _empty_dir(root: Root, rel: str) -> bool:
    return root.kind(rel) == "dir" and not root.walk_files(rel)


def verify_teardown(plan: Plan, roots: dict[str, Root]) -> tuple[bool, dict[str, Any]]:
    """Every moved path is gone from its root (an empty folder a failed restart recreated is
    tolerated), the tombstone and the hand-off are in place, and with --purge the copies are gone."""
    problems: list[str] = []
    for s in plan.steps:
        root = roots[s.root]
        if s.action == "move":
            if root.exists(s.path) and not _empty_dir(root, s.path):
                problems.append(f"{root.uri(s.path)} is still there")
        elif not root.exists(s.path) or root.read_all(s.path) != s.content:
            problems.append(f"{root.uri(s.path)} does not hold what the plan wrote")
    if plan.settings.get("purge"):
        for name in ("checkpoint", "sink"):
            if roots["archive"].exists(f"{BACKED_UP_DIR}/{name}"):
                problems.append(f"{roots['archive'].uri(f'{BACKED_UP_DIR}/{name}')} was not purged")
    return not problems, {"problems": problems, "final_epoch": plan.target,
                          "handoff": roots["archive"].uri(HANDOFF_FILE)}


def _in_place(plan: Plan, step: Step) -> bool:
    root = Root(step.root, plan.roots[step.root])
    try:
        return root.exists(step.path) and root.read(step.path) == step.content
    except StorageError:
        return False


def moved_on(plan: Plan, journal_state: Any) -> Optional[str]:
    """On --resume while the tombstone is not yet in place (a restart could still run the old
    query): the reason to refuse when the query ran again after the crash (the hand-off in the plan
    would be stale), else None."""
    stone = next((i for i, s in enumerate(plan.steps) if s.root == "checkpoint" and s.path == METADATA_FILE), None)
    if stone is None or stone in journal_state.done:
        return None
    if stone in journal_state.begun and _in_place(plan, plan.steps[stone]):
        return None  # the tombstone acted before the crash (its done record was still to be group-committed)
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    q = inspect_checkpoint(plan.roots["checkpoint"], quiet_period_s=0)
    live = [f for f in q.findings if f.code == "LIVE_QUERY"]
    if live:
        return f"{plan.roots['checkpoint']}: the old query was restarted after the crash: {live[0].message}"
    if (q.planned, q.committed) != (plan.before.get("planned"), plan.before.get("committed")):
        now = positions_text({"planned": q.planned, "committed": q.committed}, False)
        return (f"{plan.roots['checkpoint']}: the query ran again after the crash (now {now}; the plan was made at "
                f"{positions_text(plan.before, False)}); the checkpoint was not retired: run drop-sink again (the "
                f"interrupted operation's archive {plan.roots['archive']} may hold .metadata.crc)")
    return None


def finish(plan: Plan, roots: dict[str, Root], steps: Any) -> None:
    """After the moves: --purge deletes the archived copies; folders emptied entry by entry
    (`offsets/` with --discard-in-flight, `state/`) go."""
    if plan.settings.get("purge"):
        purge(plan, roots["archive"], steps.journal, getattr(getattr(steps, "meter", None), "out", None))
    for rel in (STATE_DIR, OFFSETS_DIR):
        if roots["checkpoint"].exists(rel) and not roots["checkpoint"].walk_files(rel):
            roots["checkpoint"].remove_empty_dirs(rel)


def operation() -> Any:
    """drop-sink, as the runner (operations/runner.py) runs, resumes and undoes it: the archive is
    its backup folder (and a root of its plan: the hand-off is written there)."""
    from streamctl.operations.runner import Operation

    return Operation("drop-sink", verify_teardown, backup_flag="--archive", backup_under=RETIRED_DIR,
                     backup_root="archive", finish=finish, resumable=moved_on)

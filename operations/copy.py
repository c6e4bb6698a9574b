"""`streamctl copy`: a query copied to a new place, to restart there exactly once
(docs/model.md#copy).

What is copied is what a restart reads: every file `trim` keeps (its plan's complement, so the
two never disagree) or, with `--all`, every file; streamctl's own `_streamctl/` stays behind but
for the savepoints (operations/savepoints.py `carried`: the intact ones, with the new sink's URI).
The copy steps write only at the new place, whose roots are `checkpoint` and `sink` (the runner
locks, backs up under and verifies them); the old place is read (`from_checkpoint`,
`from_sink`) and never changed. Files whose bytes name the old place are written instead of
copied: the file sink log's data-file paths, with `--source-path` the file source's logged
input paths, transformWithState's state schema paths in its operator metadata v2, each with a new
Hadoop sidecar where the old file had one. The query id is kept, or
with `--new-query-id` a fresh one is written into the new `metadata`. With `--move` the old place
is retired once the copy verifies (copy_verify.py's gate): its `metadata` becomes drop-sink's
tombstone (the original kept in the backup), every other file of the old place stays as it is.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from streamctl.formats.checksum import crc_name, crc_target, hadoop_crc, is_checksum_name
from streamctl.formats.compactible import compactible_name
from streamctl.formats.delta_txn import DELTA_LOG
from streamctl.formats.errors import LogParseError
from streamctl.formats.file_sink_log import FILE_SINK_LOG
from streamctl.formats.layout import CHECKPOINT_LOGS, LOCK_FILE, METADATA_FILE, SOURCES_DIR, STATE_DIR, STREAMCTL_DIR
from streamctl.formats.state import is_operator_metadata_v2, rewrite_schema_paths
from streamctl.inspectors.storage import Storage
from streamctl.operations.copy_paths import check_empty, check_places, place_key, relocator, rewrite_log
from streamctl.operations.files import Root
from streamctl.operations.plan import (
    EXACTLY_ONCE,
    CheckpointRequest,
    Plan,
    Refused,
    Step,
    liveness_evidence,
    refuse_corrupt_state,
)
from streamctl.operations.savepoints import carried

PARTS = ("logs", "state", "sources", "other", "sink_log", "sink_data")
_RANK = {"sink_log": 1, "logs": 2}  # copied after the data and state they name
SCANNED_MAX = 1 << 20  # metadata files read for the old place's location up to this size


@dataclass
class CopyRequest(CheckpointRequest):
    dest: str = ""
    sink_dest: Optional[str] = None
    source_paths: list[tuple[str, str]] = field(default_factory=list)  # (OLD, NEW) input folders
    keep_epochs: int = 10
    copy_all: bool = False
    move: bool = False  # retire the old place once the copy verifies
    new_query_id: bool = False  # a fresh query id in the new place's `metadata`


def check_targets(req: CopyRequest, under_lock: bool = False) -> None:
    """The places, before anything is created: a sink comes with its new place, no two places
    nest, each new place holds nothing (under the lock: nothing but the lock)."""
    from streamctl.formats.errors import UsageError

    if bool(req.sink) != bool(req.sink_dest):
        raise UsageError("--sink and --sink-dest go together: name the sink and its new place (or neither, to copy "
                         "the checkpoint alone)")
    places = {"checkpoint": req.checkpoint, "destination": req.dest}
    if req.sink and req.sink_dest:
        places.update({"sink": req.sink, "sink destination": req.sink_dest})
    check_places(places)
    check_empty(Root("checkpoint", req.dest), "destination", under_lock)
    if req.sink_dest:
        check_empty(Root("sink", req.sink_dest), "sink destination")


def _part(rel: str, sink: bool) -> str:
    top = rel.split("/", 1)[0]
    if sink:
        return "sink_log" if top in (FILE_SINK_LOG, DELTA_LOG) else "sink_data"
    if top in CHECKPOINT_LOGS or top == METADATA_FILE or crc_target(top) == METADATA_FILE:
        return "logs"
    return {STATE_DIR: "state", SOURCES_DIR: "sources"}.get(top, "other")


def _wave(root: str, rel: str) -> tuple[str, int, bool]:
    """(root, rank, is `metadata`): the plan copies a root's files in this order, data and state
    first, then the sink log, then the query's logs, `metadata` (and its sidecar) last."""
    return root, _RANK.get(_part(rel, root == "sink"), 0), rel == METADATA_FILE or crc_target(rel) == METADATA_FILE


def copy_wave(step: Step) -> tuple[str, int, bool]:
    """The executor's wave of a copy step (operations/executor.py: copies on an object store go
    on threads, a wave at a time): `_wave`, so no file is copied before a file the plan orders
    before it in an earlier wave is whole (the logs after the data and state, `metadata` last)."""
    return _wave(step.root, step.path)


def _refuse_unready(q: Any, ck: Storage) -> None:
    """What a copy will not carry: a query that does not restart as it stands (align first), a
    held streamctl lock on the old place (another operation is changing it)."""
    refuse_corrupt_state(q)
    errors = sorted({f.code for f in q.findings if f.severity == "error"})
    if q.verdict in ("misaligned", "unreadable") and errors:
        raise Refused(f"{q.checkpoint}: {q.verdict} ({', '.join(errors)}): a copy carries a query that restarts "
                      "exactly once as it stands: run `streamctl align` on the old place first")
    if ck.lookup(LOCK_FILE) is not None:
        raise Refused(f"{ck.uri(LOCK_FILE)}: another streamctl operation holds the old place; copy once it is done")


def _left_out(req: CopyRequest, q: Any) -> dict[str, set[str]]:
    """What trim would move away (per root: `checkpoint`, `sink`): no restart and no kept
    rollback reads it; nothing with --all or before the first commit."""
    if req.copy_all or q.committed is None:
        return {}
    from streamctl.operations.trim import TrimRequest, plan_trim

    plan, _sizes = plan_trim(TrimRequest(req.checkpoint, req.sink, req.sink_kind, req.app_id, req.quiet_period_s,
                                         keep_epochs=req.keep_epochs), q)
    out: dict[str, set[str]] = {}
    for s in plan.steps:
        out.setdefault(s.root, set()).add(s.path)
    return out


def _excluded(rel: str, left: set[str]) -> bool:
    if rel in left:
        return True
    head = rel
    while "/" in head:
        head = head.rpartition("/")[0]
        if head in left:
            return True
    return False


def _files(root: Root, left: set[str]) -> tuple[list[tuple[str, int]], int, int]:
    """(rel, size) of every file to copy, and the files and bytes left out."""
    keep, n, size = [], 0, 0
    for rel, sz in root.walk_sizes(""):
        if rel.split("/", 1)[0] == STREAMCTL_DIR:
            continue
        if left and _excluded(rel, left):
            n, size = n + 1, size + sz
            continue
        keep.append((rel, sz))
    return keep, n, size


def _refuse_absolute(q: Any, src: Root, files: list[tuple[str, int]], written: dict[str, bytes]) -> None:
    """Unknown means refuse: a metadata file (the query's, an operator's: `_metadata/`,
    `_stateSchema/`) whose bytes, as the copy writes them, still name the old place by absolute
    path would send a restart back to it. transformWithState's `stateSchemaFilePaths` are
    rewritten (`_schema_rewrites`), so this holds for anything else only."""
    ck = Storage.open(q.checkpoint)
    needles = {ck.display.partition("?")[0].rstrip("/").encode(), place_key(ck).encode()}
    needles |= {n.split(b"://", 1)[-1] for n in needles if b"://" in n}
    # the old place itself or a path below it, not a sibling whose name goes on (`/ck` in `/ck2/...`)
    named = re.compile(b"|".join(re.escape(n) + rb"(?![A-Za-z0-9_.~%+-])" for n in sorted(needles) if n))
    for rel, size in files:
        parts = rel.split("/")
        scanned = rel == METADATA_FILE or (parts[0] == STATE_DIR and len(parts) > 2 and not parts[2].isdigit())
        if scanned and size <= SCANNED_MAX and not is_checksum_name(parts[-1]):
            data = written[rel] if rel in written else src.read(rel)
            if named.search(data):
                raise Refused(f"{src.uri(rel)}: names the old place {ck.display} by absolute path outside what streamctl "
                              "copy rewrites (transformWithState's stateSchemaFilePaths): nothing was changed")


def _schema_rewrites(src: Root, new: Storage, files: list[tuple[str, int]],
                     rewrites: list[dict[str, Any]]) -> dict[str, bytes]:
    """transformWithState's operator metadata v2 (`state/<op>/_metadata/v2/<batch>`) with its
    `stateSchemaFilePaths` at the new place. Spark names the state schema files there by absolute
    path (Hadoop's `Path.toString`: `file:/old/ck/state/0/_stateSchema/default/0_<uuid>`); a
    restart opens the newest file's paths as they stand and, when the schema did not change,
    names the same paths again in the new run's metadata (TransformWithStateMetadataUtils
    `validateAndWriteStateSchema`, StateSchemaCompatibilityChecker), so an unrewritten copy reads
    the old place for good. A path outside the old checkpoint (a copy made by hand before) is
    refused: which file it means is not this copy's to guess. docs/model.md#copy"""
    present = {rel for rel, _ in files}
    move = relocator(src.storage, new, encoded=False)
    written: dict[str, bytes] = {}
    for rel, _size in files:
        if not is_operator_metadata_v2(rel):
            continue
        content = src.read(rel)
        try:
            got, count, kept = rewrite_schema_paths(content, src.uri(rel), move)
        except LogParseError as exc:
            raise Refused(f"{exc}: its state schema paths cannot be rewritten; nothing was changed") from None
        if kept:
            raise Refused(f"{src.uri(rel)}: names a state schema file outside the old checkpoint ({kept[0]}); a copy "
                          "cannot point it at the new place: nothing was changed")
        if got != content:
            _with_sidecar(written, rel, got, present)
            rewrites.append({"root": "checkpoint", "path": rel, "paths": count})
    return written


def _refuse_sink_kind(q: Any, sink: Storage) -> None:
    """A Delta table names its files relative to the table (checked); kinds whose logs name
    absolute paths that this copy cannot rewrite are refused."""
    kind = q.sink.kind if q.sink is not None else None
    if kind in (None, "file", "coordinated"):
        return
    if kind == "delta":
        from streamctl.inspectors.delta_sink import delta_add_paths

        absolute = [p for p in delta_add_paths(sink) if "://" in p or p.startswith("/")]
        if absolute:
            raise Refused(f"{sink.uri(DELTA_LOG)}: names {len(absolute)} data file(s) by absolute path (first: "
                          f"{absolute[0]}); a copy of the table would still read the old place: refused")
        return
    raise Refused(f"{sink.display}: a {kind} sink: its metadata names files by absolute path, which streamctl copy "
                  "does not rewrite yet; copy the checkpoint alone (no --sink) and move the table with its own tools")


UNASSIGNED = "(assigned by --execute)"


def plan_copy(req: CopyRequest, under_lock: bool = False, op_id: str = UNASSIGNED, backup: str = UNASSIGNED) -> Plan:
    """The copy plan: a copy step per file a restart reads, a write step per file whose paths
    move (and its sidecar), files and bytes per part, and with --move the old place's retirement
    last; refused (exit 4) as check_targets and `_refuse_unready` say, or when a --source-path
    names no logged input."""
    check_targets(req, under_lock)
    q = req.inspect()  # unreadable, LIVE_QUERY (the lease, the quiet period), layout conflicts refused
    ck = Storage.open(req.checkpoint)
    _refuse_unready(q, ck)
    left = _left_out(req, q)
    src = Root("from_checkpoint", req.checkpoint)
    roots = {"checkpoint": Root("checkpoint", req.dest).location, "from_checkpoint": src.location}
    sizes = {p: {"files": 0, "bytes": 0} for p in PARTS}
    skipped = {"files": 0, "bytes": 0}
    steps: list[Step] = []
    rewrites: list[dict[str, Any]] = []
    parts: list[tuple[str, Root, list[tuple[str, int]], dict[str, bytes]]] = []

    files, n, size = _files(src, left.get("checkpoint", set()))
    skipped["files"] += n
    skipped["bytes"] += size
    ck_written = _source_rewrites(req, q, src, files, rewrites)
    ck_written.update(_schema_rewrites(src, Storage.open(req.dest), files, rewrites))
    _refuse_absolute(q, src, files, ck_written)
    new_id = _new_query_id(req, q, ck_written, {rel for rel, _ in files})
    parts.append(("checkpoint", src, files, ck_written))
    if req.sink and req.sink_dest:
        sink_src = Root("from_sink", req.sink)
        roots.update({"sink": Root("sink", req.sink_dest).location, "from_sink": sink_src.location})
        _refuse_sink_kind(q, sink_src.storage)
        sfiles, n, size = _files(sink_src, left.get("sink", set()))
        skipped["files"] += n
        skipped["bytes"] += size
        written = _sink_rewrites(q, sink_src, Storage.open(req.sink_dest), sfiles, rewrites)
        parts.append(("sink", sink_src, sfiles, written))

    for root, _src, files, written in parts:
        # the logs last, `metadata` very last: a copy cut short holds no query a restart takes for whole
        order = sorted(files, key=lambda f: (*_wave(root, f[0])[1:], f[0]))
        for rel, sz in order:
            part = _part(rel, root == "sink")
            sizes[part]["files"] += 1
            sizes[part]["bytes"] += sz
            if rel in written:
                why = ("the new query id" if new_id and root == "checkpoint" and METADATA_FILE in (rel, crc_target(rel))
                       else "names paths of the old place: written with the new place's")
                steps.append(Step("write", root, rel, why, written[rel]))
            else:
                steps.append(Step("copy", root, rel, part))

    before = {"planned": q.planned, "committed": q.committed, "sink_epoch": q.sink.epoch if q.sink else None,
              "state_epoch": q.state_epoch, "verdict": q.verdict, "query_id": q.query_id,
              "findings": sorted({f.code for f in q.findings}), "liveness": liveness_evidence(q, req.quiet_period_s)}
    what = ("every file (--all)" if req.copy_all else "every file (nothing committed yet)" if q.committed is None
            else f"what `trim --keep-epochs {req.keep_epochs}` keeps")
    notes = [f"copies what a restart reads: {what}", _id_note(q, new_id)]
    sp_files, sp_records, sp_notes = carried(q, req.sink, req.sink_dest, new_id)
    # first: a copy cut short holds a savepoint only beside logs it cannot restart from yet
    steps[:0] = [Step("write", "checkpoint", rel, "savepoint: its restore files are copied", data)
                 for rel, data in sp_files.items()]
    notes += sp_notes
    retire_from = _retire_steps(req, q, ck, steps, notes, op_id, backup, roots["checkpoint"])
    return Plan(command="copy", roots=roots, strategy="copy", target=q.committed, classification=EXACTLY_ONCE,
                steps=steps, expected_verdict=q.verdict, before=before,
                after={"planned": q.planned, "committed": q.committed, "sink_epoch": before["sink_epoch"],
                       "state_epoch": q.state_epoch, "parts": sizes, "left_out": skipped, "rewrites": rewrites,
                       "keep_epochs": None if req.copy_all else req.keep_epochs,
                       "query_id": new_id or q.query_id, "savepoints": sp_records},
                notes=notes,
                settings={"sink_kind": q.sink.kind if q.sink else None,
                          "app_id": req.app_id or (q.sink.app_id if q.sink else None),
                          "move": req.move, "retire_from": retire_from})


def _with_sidecar(written: dict[str, bytes], rel: str, new: bytes, present: set[str]) -> None:
    written[rel] = new
    if crc_name(rel) in present:
        written[crc_name(rel)] = hadoop_crc(new)


def _sink_rewrites(q: Any, src: Root, new: Storage, files: list[tuple[str, int]],
                   rewrites: list[dict[str, Any]]) -> dict[str, bytes]:
    """The file sink log's files (`N`, `N.compact`) with their data files' paths at the new place."""
    if q.sink is None or q.sink.kind != "file":
        return {}
    present = {rel for rel, _ in files}
    move = relocator(src.storage, new)
    written: dict[str, bytes] = {}
    for rel, _size in files:
        head, _, name = rel.rpartition("/")
        if head != FILE_SINK_LOG or compactible_name(name) is None:
            continue
        content = src.read(rel)
        got, count = rewrite_log(content, [move])
        if got != content:
            _with_sidecar(written, rel, got, present)
            rewrites.append({"root": "sink", "path": rel, "paths": count})
    return written


def _source_rewrites(req: CopyRequest, q: Any, src: Root, files: list[tuple[str, int]],
                     rewrites: list[dict[str, Any]]) -> dict[str, bytes]:
    """With --source-path OLD=NEW: each file source's log files with the input paths under OLD at
    NEW; a pair no logged path matches is refused (a misspelt folder would copy unchanged)."""
    if not req.source_paths:
        return {}
    moves = [(old, relocator(Storage.open(old), Storage.open(new))) for old, new in req.source_paths]
    used = {old: 0 for old, _ in req.source_paths}

    def first_move(raw: str) -> Optional[str]:
        """The first pair's new path for `raw`; every pair that moves it is counted as used."""
        got = [(old, move(raw)) for old, move in moves]
        for old, new_path in got:
            used[old] += new_path is not None and new_path != raw
        return next((new_path for _, new_path in got if new_path is not None), None)

    present = {rel for rel, _ in files}
    folders = {f"{SOURCES_DIR}/{s.source_id}" for s in q.sources if s.kind == "file"}
    written: dict[str, bytes] = {}
    for rel, _size in files:
        head, _, name = rel.rpartition("/")
        if head not in folders or compactible_name(name) is None:
            continue
        content = src.read(rel)
        got, count = rewrite_log(content, [first_move])
        if got != content:
            _with_sidecar(written, rel, got, present)
            rewrites.append({"root": "checkpoint", "path": rel, "paths": count})
    unused = [old for old, n in used.items() if not n]
    if unused:
        raise Refused(f"--source-path {unused[0]}=...: no input path the file source logs in {src.location} lies under "
                      f"{unused[0]}; name the folder as the query read it")
    return written


def _new_query_id(req: CopyRequest, q: Any, written: dict[str, bytes], present: set[str]) -> Optional[str]:
    """With --new-query-id: a fresh UUID, `metadata` (and its sidecar) written with it in the
    bytes Spark writes. Refused where the sink's dedupe is keyed by the query id: a Delta sink
    whose `txn` appId is the query id (no --app-id) would find no `txn` of the new id."""
    if not req.new_query_id:
        return None
    if q.sink is not None and q.sink.kind == "delta" and not req.app_id:
        raise Refused(f"{req.sink}: a Delta sink's txn appId is the query id unless the writer sets its own: with a "
                      "new query id the table holds no txn for it, so a replayed batch is written again; keep the "
                      "query id, or name the appId the writer sets (--app-id)")
    import uuid

    from streamctl.formats.metadata import serialize_query_metadata

    new_id = str(uuid.uuid4())
    _with_sidecar(written, METADATA_FILE, serialize_query_metadata(new_id), present)
    return new_id


def _id_note(q: Any, new_id: Optional[str]) -> str:
    if new_id is None:
        return ("the query id is kept (the sink's exactly-once dedupe depends on it: a coordinated sink records "
                "it, a Delta sink's txn appId defaults to it): run the query at one place only")
    return (f"new query id {new_id} (was {q.query_id}): a file sink and the coordinated sink dedupe by batch id "
            "and go on exactly once; the coordinated sink's commit records name the new id from the next batch; "
            "a Delta txn keyed by the query id would not (refused); listeners, metrics and monitoring that "
            "key on the query id see a new query")


def _retire_steps(req: CopyRequest, q: Any, ck: Storage, steps: list[Step], notes: list[str], op_id: str,
                  backup: str, moved_to: str) -> Optional[int]:
    """With --move: the old checkpoint's `.metadata.crc` moved and `metadata` replaced by drop-sink's
    tombstone (the original kept in the backup), after every copy step; the index of the first."""
    if not req.move:
        notes.append("the old place is only read; it stays as it is (--move retires it once the copy verifies)")
        return None
    from streamctl.operations.teardown import tombstone

    at = len(steps)
    if ck.lookup(crc_name(METADATA_FILE)) is not None:
        steps.append(Step("move", "from_checkpoint", crc_name(METADATA_FILE), "checksum of the metadata about to "
                          "be tombstoned"))
    steps.append(Step("write", "from_checkpoint", METADATA_FILE, "tombstone: a restart of the old place fails "
                      "before it reads or writes anything", tombstone(op_id, q.query_id, backup, moved_to=moved_to)))
    notes.append("--move: once the new place verifies with the old one's verdict and positions, and only if the old "
                 "place did not change meanwhile, the old checkpoint's `metadata` is replaced by a tombstone "
                 "(the original kept in the backup): Spark refuses to start there and streamctl reads it RETIRED "
                 "and changes nothing there; no other file of the old place is touched or deleted"
                 + (" (the old sink neither: only the old query writes there, and it can no longer start)"
                    if req.sink else "") + "; --undo puts the old `metadata` back")
    return at

"""Inspect one checkpoint: positions, state stores, parallel writers, findings, verdict.

`inspect_checkpoint(location)` never raises for bad input: whatever cannot be read becomes an
`UNREADABLE` finding naming the file. It reads only small files: `metadata`, the newest
offsets files, the newest commit (all retained commits when state uses unique ids), operator
metadata and `sources/`; everything else is decided from folder listings.

This module assembles the inspection (`_Inspector.run`); the families of findings are their own
modules (log_findings, source_findings, state_findings, liveness_findings, spark_line_findings,
sink_findings), the result's dataclasses are query_inspection's.
"""
from __future__ import annotations

import functools
from typing import Any, Optional

from streamctl.formats.commits import CommitEntry, parse_commit
from streamctl.formats.errors import NotACheckpoint, StorageError, StreamctlError
from streamctl.formats.layout import COMMITS_DIR, METADATA_FILE, OFFSETS_DIR, SOURCES_DIR, STATE_DIR, STREAMCTL_DIR
from streamctl.formats.metadata import parse_query_metadata
from streamctl.formats.offsets import OffsetEntry, SourceId, parse_offsets, source_id_of
from streamctl.inspectors.chains import required_version
from streamctl.inspectors.checkpoint_reads import Progress
from streamctl.inspectors.findings import Finding
from streamctl.inspectors.liveness_findings import LivenessFindings
from streamctl.inspectors.log_findings import LogFindings, async_progress_pattern
from streamctl.inspectors.logs import LogListing
from streamctl.inspectors.masked import masked
from streamctl.inspectors.query_inspection import QueryInspection
from streamctl.inspectors.source_findings import SourceFindings
from streamctl.inspectors.sources import read_source
from streamctl.inspectors.spark_line_findings import SparkLineFindings
from streamctl.inspectors.state_findings import StateFindings
from streamctl.inspectors.state_listing import StateFiles, read_state
from streamctl.inspectors.storage import Storage
from streamctl.inspectors.writer_windows import checkpoint_writers

# what a checkpoint folder holds: the advice for a path that is none
CHECKPOINT_HOLDS = ("a checkpoint is the folder a query's checkpointLocation names: it holds metadata, offsets/ and "
                    "commits/, and state/ for a stateful query")


def require_checkpoint(st: Storage) -> dict[str, Any]:
    """The checkpoint folder's entries by name; NotACheckpoint when `st` does not exist, is a
    file, or holds none of a checkpoint's parts (nothing is created or changed)."""
    kind = st.kind("")
    if kind == "missing":
        raise NotACheckpoint(st.display, f"does not exist: not a checkpoint ({CHECKPOINT_HOLDS})")
    if kind == "file":
        raise NotACheckpoint(st.display, f"is a file, not a checkpoint ({CHECKPOINT_HOLDS})")
    root = {e.name: e for e in st.list_dir("") or []}
    if not ({METADATA_FILE, OFFSETS_DIR, COMMITS_DIR, STATE_DIR} & set(root)):
        raise NotACheckpoint(st.display, f"not a Spark checkpoint: no metadata, offsets/, commits/ or state/ "
                                         f"({CHECKPOINT_HOLDS}; a query that has not run yet wrote none)")
    return root


def _unreadable(checkpoint: str, path: str, reason: str, not_a_checkpoint: bool = False) -> QueryInspection:
    details: dict[str, Any] = {"path": path, "reason": reason}
    if not_a_checkpoint:
        details["not_a_checkpoint"] = True
    finding = Finding("UNREADABLE", f"{path}: {reason}", details=details)
    empty = LogListing(exists=False)
    return QueryInspection(checkpoint, None, None, None, None, empty, empty, False, 1, (), (), None, (), None, None, (finding,))


def inspect_checkpoint(location: str, progress: Optional[Progress] = None, sink: Optional[str] = None,
                       sink_kind: str = "auto", app_id: Optional[str] = None,
                       quiet_period_s: Optional[float] = None, now_ms: Optional[int] = None,
                       absent: frozenset[str] = frozenset(), sink_absent: frozenset[str] = frozenset(),
                       deep: bool = False, target_spark: Optional[tuple[int, int]] = None) -> QueryInspection:
    """Inspect the checkpoint at `location` (local path or URI), and with `sink` the sink it
    writes to (its epoch joins the positions, its writers the parallel-writer analysis; a Delta
    sink's txn app id defaults to the checkpoint's query id). Never raises for bad input.

    Liveness (LIVE_QUERY): with `quiet_period_s` (0 turns it off; a negative value means "derive
    it from the trigger interval"), a newest offsets/commits file changed within the quiet period
    means the query looks alive.

    `absent` / `sink_absent`: files of the checkpoint / sink (relative paths) taken as absent:
    align inspects the checkpoint as its plan leaves it after moving torn files aside
    (inspectors/masked.py).

    `deep`: on object stores and HDFS too, read the head and tail of the state files a restart
    starts from (a ranged read or two per store) to find torn ones; local checkpoints always are.
    The mutations (align, trim, diagnose's plan) inspect deep; `inspect epochs --deep` asks for it.

    `target_spark`: the Spark line (major, minor) that will restart the query: what it refuses is
    SPARK_LINE_REFUSES, else SPARK_LINE_CHECKED; line-dependent verdicts take it instead of the
    checkpoint's own evidence (inspectors/lines.py, docs/model.md#spark-lines)."""
    known = True
    storage: Optional[Storage] = None
    missing = False
    try:
        storage = masked(Storage.open(location), absent)
        q = _Inspector(storage, progress, quiet_period_s, now_ms, deep, target_spark).run()
    except StorageError as exc:
        q = _unreadable(location, exc.path, exc.reason, isinstance(exc, NotACheckpoint))
        known = False  # the positions are unknown, not absent: no sink finding is derived from them
        missing = storage is not None and exc.path == storage.display and isinstance(exc, NotACheckpoint) \
            and exc.reason.startswith(("does not exist", "not a Spark checkpoint"))
    if sink is None or any(f.code == "RETIRED" for f in q.findings):  # a retired query's sink log is archived too
        return q
    from streamctl.inspectors.sink_findings import join_sink  # sinks load only when a sink is inspected

    return join_sink(q, location, storage, sink, sink_kind, app_id, sink_absent, progress, known, missing)


def _quietly(call: Any, *args: Any) -> Optional[StreamctlError]:
    """call(*args), its failure returned, not raised (read_state lists again and says it there)."""
    try:
        call(*args)
    except StreamctlError as exc:
        return exc
    return None


def _parse_commit_at(batch: int, data: bytes, path: str) -> CommitEntry:
    return parse_commit(data, path, batch)


class _Inspector(LogFindings, SourceFindings, StateFindings, LivenessFindings, SparkLineFindings):
    """The inspection of one checkpoint: its reads (CheckpointReads) and its families of findings."""

    def run(self) -> QueryInspection:
        st = self.st
        root = require_checkpoint(st)
        for name in (OFFSETS_DIR, COMMITS_DIR, STATE_DIR, SOURCES_DIR):
            if name in root and not root[name].is_dir:
                raise StorageError(st.uri(name), "is a file, expected a folder")

        self.progress("listing offsets/ and commits/")
        # on object stores state/'s one recursive listing (read_state's prefetch) goes with these: its
        # pages follow one another, and no longer wait for the logs' listings and reads
        state_listing = [lambda: _quietly(st.prefetch, STATE_DIR)] if STATE_DIR in root and not st.is_local else []
        if METADATA_FILE in root:
            self.fetched[METADATA_FILE], offsets, commits, *_ = self.concurrently(
                lambda: self._try_read(METADATA_FILE), lambda: self.log_listing(OFFSETS_DIR),
                lambda: self.log_listing(COMMITS_DIR), *state_listing)
        else:
            offsets, commits, *_ = self.concurrently(lambda: self.log_listing(OFFSETS_DIR),
                                                     lambda: self.log_listing(COMMITS_DIR), *state_listing)
        query_id = None
        data = self.fetched.get(METADATA_FILE)
        retired = None  # the tombstone names streamctl: anything else is Spark's (no lease module loaded)
        if METADATA_FILE in root and isinstance(data, (bytes, bytearray)) and b"streamctl" in data:
            from streamctl.inspectors.lease import retired_record

            retired = retired_record(data)
        if retired is not None:  # a tombstone: a retired checkpoint is a state, not damage
            archive = str(retired.get("archive") or "")
            moved_to = retired.get("moved_to")
            command = "copy" if moved_to else "drop-sink"
            undo = f"streamctl {command} --undo {archive}" if archive else None
            where = (f"it was moved to {moved_to}; its files stay here as they were, its `metadata` is in "
                     f"{archive or 'the backup'}" if moved_to else
                     f"its logs, state and its sink's commit log are in {archive or 'the archive'}")
            self.findings.append(Finding(
                "RETIRED",
                f"retired by streamctl {'copy --move' if moved_to else 'drop-sink'} ({retired.get('op_id')}): the "
                f"query {retired.get('query_id_was')} must not be restarted here; {where}"
                + (f"; undo: {undo}" if undo else ""),
                details={"op_id": retired.get("op_id"), "query_id_was": retired.get("query_id_was"), "archive": archive,
                         "undo": undo, **({"moved_to": moved_to} if moved_to else {})}))
        elif METADATA_FILE in root:
            query_id = self.read(METADATA_FILE, parse_query_metadata)
        else:
            self.findings.append(Finding(
                "UNREADABLE", f"{st.uri(METADATA_FILE)}: missing (the query id is lost: Spark 4.2+ refuses to restart, "
                f"STREAMING_CHECKPOINT_MISSING_METADATA_FILE; older lines start a new query id; `streamctl align "
                f"--query-id ID` writes it back)",
                details={"path": st.uri(METADATA_FILE), "reason": "missing"}))
        planned, committed = offsets.latest, commits.latest
        wanted = [f"{OFFSETS_DIR}/{b}" for b in (planned, None if planned is None else planned - 1, committed)
                  if b is not None and b in offsets.batch_ids]
        self.prefetch(wanted + ([f"{COMMITS_DIR}/{committed}"] if committed is not None else []))

        latest_offsets: Optional[OffsetEntry] = None
        committed_offsets: Optional[OffsetEntry] = None
        prev: Optional[OffsetEntry] = None
        if planned is not None:
            latest_offsets = self.read(f"{OFFSETS_DIR}/{planned}", lambda d, p: parse_offsets(d, p, planned))
            if planned - 1 in offsets.batch_ids:
                prev = self.read(f"{OFFSETS_DIR}/{planned - 1}", lambda d, p: parse_offsets(d, p, planned - 1))
                if committed == planned - 1:
                    committed_offsets = prev
        if committed is not None and committed == planned:
            committed_offsets = latest_offsets
        elif committed is not None and committed in offsets.batch_ids and committed_offsets is None:
            committed_offsets = self.read(f"{OFFSETS_DIR}/{committed}", lambda d, p: parse_offsets(d, p, committed))
        commit_entries: dict[int, CommitEntry] = {}
        if committed is not None:
            entry = self.read(f"{COMMITS_DIR}/{committed}", lambda d, p: parse_commit(d, p, committed))
            if entry is not None:
                commit_entries[committed] = entry

        before_prev: Optional[OffsetEntry] = None
        if prev is not None and planned is not None and planned - 2 in offsets.batch_ids:
            # only to tell whether batch P-1 was a repartition: no restart reads it, so damage here
            # is no finding (a roll back that needs it reads it then)
            before_prev = self.read(f"{OFFSETS_DIR}/{planned - 2}", lambda d, p: parse_offsets(d, p, planned - 2), quietly=True)
        unfinished = self._repartition_findings(planned, committed, [latest_offsets, prev, before_prev])
        conf = dict(latest_offsets.conf) if latest_offsets is not None else {}
        self.newest_conf = conf  # evidence of the Spark line (_corrupt_findings)
        # the layout a restart reads: the newest batch's conf; an unfinished repartition's conf is
        # not (Spark refuses to start from it, align goes back to the committed batch)
        state_conf = dict(committed_offsets.conf) if unfinished and committed_offsets is not None else conf
        async_by_conf = any("asyncprogresstracking" in k.lower() and str(v).lower() == "true" for k, v in conf.items())

        self.progress("listing state/")
        # what each store restores and whether a restart can read it, judged as the store is
        # listed (read_state); _state_findings takes these for the stores whose inputs match (no
        # commit-log ids), and judges the others itself
        required_next = required_version(planned, committed)
        self.chains.set_codec(state_conf)
        prepare = functools.partial(self.chains.prepare, required_next, planned) if st.is_local else None
        state = read_state(st, prepare) if STATE_DIR in root else StateFiles(exists=False)
        self.prepared = state.prepared
        if self.target_spark is not None:
            self._line_findings(self.target_spark, latest_offsets, commit_entries.get(committed) if committed is not None else None,
                                state)
        # Spark refuses async progress tracking on stateful queries: state files rule it out
        async_by_logs = not state.operators and async_progress_pattern(offsets, commits)
        async_progress = async_by_conf or async_by_logs
        uses_ids = any(s.uses_unique_ids for op in state.operators.values() for s in op.stores())
        if uses_ids:
            self.prefetch([f"{COMMITS_DIR}/{b}" for b in commits.batch_ids if b not in commit_entries and b != committed])
            for b in commits.batch_ids:
                if b not in commit_entries and b != committed:  # commits/C was read above
                    # the ids of older versions (orphans, roll backs): no restart reads these files,
                    # so a bad one is no finding here (a roll back that needs it refuses then)
                    entry = self.read(f"{COMMITS_DIR}/{b}", functools.partial(_parse_commit_at, b), quietly=True)
                    if entry is not None:
                        commit_entries[b] = entry
        checkpoint_format = 2 if uses_ids or any(
            e.state_unique_ids is not None or e.version >= 2 for e in commit_entries.values()) else 1

        sources = []
        unread: set[SourceId] = set()
        if SOURCES_DIR in root:
            for e in sorted(st.list_dir(SOURCES_DIR) or [], key=lambda x: x.name):
                sid = source_id_of(e.name) if e.is_dir else None
                if sid is not None:
                    try:
                        sources.append(read_source(st, sid))
                    except StreamctlError as exc:
                        self.unreadable(exc)
                        unread.add(sid)
        moved: set[SourceId] = set()
        if latest_offsets is not None:
            self._offsets_order_finding(prev, latest_offsets, committed)
        if latest_offsets is not None and any(s.kind == "file" for s in sources):
            moved = self._moved_input_finding(sources, prev, latest_offsets)
            self._outside_base_findings([s for s in sources if s.source_id not in moved], prev, latest_offsets)
        if planned is not None and latest_offsets is not None and planned == (-1 if committed is None else committed) + 1 \
                and any(s.kind == "file" and s.source_id not in moved for s in sources):
            self._replay_finding([s for s in sources if s.source_id not in moved], committed_offsets, latest_offsets)
        self._source_log_gaps(sources, latest_offsets, unread, prev)

        self._log_findings(offsets, commits, async_progress, unfinished,
                           "offsets_conf" if async_by_conf else "log_pattern")
        lease = self._lease() if STREAMCTL_DIR in root else None
        if self.quiet_period_s and not (lease and lease["status"] == "live"):
            self._liveness(planned, committed, latest_offsets, prev)
        required = required_version(planned, committed)
        operators = self._state_findings(state, state_conf, required, planned, commit_entries)
        if planned is None and committed is None and state.operators:
            self._state_without_logs(sorted(state.operators))

        stores = [s for op in operators for s in op.stores]
        state_epoch = None
        if stores and all(s.durable_version is not None for s in stores):
            state_epoch = min(s.durable_version for s in stores) - 1  # type: ignore[operator,type-var]
        writers, window = checkpoint_writers(offsets, commits, stores, committed if committed is not None else planned)
        return QueryInspection(
            checkpoint=st.display,
            query_id=query_id,
            planned=planned,
            committed=committed,
            state_epoch=state_epoch,
            offsets=offsets,
            commits=commits,
            async_progress=async_progress,
            checkpoint_format=checkpoint_format,
            operators=tuple(operators),
            writers=tuple(writers),
            common_window=window,
            sources=tuple(sources),
            latest_offsets=latest_offsets,
            committed_offsets=committed_offsets,
            findings=tuple(self.findings),
            lease=self.lease_record,
        )


def cross_query_findings(queries: list[QueryInspection]) -> list[Finding]:
    """Findings that need several checkpoints at once (QUERY_ID_CLASH)."""
    by_id: dict[str, list[str]] = {}
    for q in queries:
        if q.query_id:
            by_id.setdefault(q.query_id, []).append(q.checkpoint)
    out = []
    for qid, paths in sorted(by_id.items()):
        if len(set(paths)) > 1:
            out.append(Finding(
                "QUERY_ID_CLASH",
                f"query id {qid} is shared by {len(paths)} checkpoints ({', '.join(sorted(paths))}): "
                "sinks keyed by query id will skip or mix their batches",
                details={"query_id": qid, "checkpoints": sorted(paths)}))
    return out

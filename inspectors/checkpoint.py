"""Inspect one checkpoint: positions, state stores, parallel writers, findings, verdict.

`inspect_checkpoint(location)` never raises for bad input: whatever cannot be read becomes an
`UNREADABLE` finding naming the file. It reads only small files: `metadata`, the newest
offsets files, the newest commit (all retained commits when state uses unique ids), operator
metadata and `sources/`; everything else is decided from folder listings.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

from streamctl.formats.checksum import crc_name
from streamctl.formats.commits import CommitEntry, parse_commit
from streamctl.formats.errors import NotACheckpoint, StorageError, StreamctlError
from streamctl.formats.metadata import parse_query_metadata
from streamctl.formats.offsets import OffsetEntry, SourceId, parse_offsets, source_id_of
from streamctl.formats.reader import load_json
from streamctl.formats.state import DEFAULT_STORE
from streamctl.inspectors.chains import Chains, required_version
from streamctl.inspectors.findings import (
    ERROR,
    INFO,
    WARNING,
    Finding,
    count_of,
    finding_records,
    ids_of,
    missing_ranges,
    ranges_text,
    shown,
    summarize,
    verdict_of,
)
from streamctl.inspectors.logs import LogListing, list_log
from streamctl.inspectors.masked import masked
from streamctl.inspectors.sources import SourceInfo, read_source
from streamctl.inspectors.state_listing import OperatorFiles, StateFiles, StoreFiles, read_state
from streamctl.inspectors.state_restore import StoreStatus
from streamctl.inspectors.storage import Storage, parallel_map

if TYPE_CHECKING:  # sinks load only when a sink is inspected: keep `inspect epochs` start-up lean
    from streamctl.inspectors.sinks import SinkLog

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
ROW_CHECKSUM_CONF = "spark.sql.streaming.stateStore.rowChecksum.enabled"  # in offsets confs of Spark 4.1+
AUTO_REPAIR_CONF = "spark.sql.streaming.stateStore.autoSnapshotRepair.enabled"
READ_WORKERS = 8  # concurrent reads of small files on object stores


@dataclass(frozen=True, slots=True)
class Writer:
    """One parallel writer and the epochs it can restart from."""

    name: str  # "offsets", "commits", "state/<op>/<partition>/<store>"
    kind: str  # "wal" | "commit_log" | "state_store"
    first: Optional[int]
    last: Optional[int]
    status: str  # ok | behind | ahead | broken | empty

    def to_record(self) -> dict[str, Any]:
        return {"writer": self.name, "kind": self.kind, "first": self.first, "last": self.last, "status": self.status}


@dataclass(frozen=True, slots=True)
class OperatorReport:
    operator_id: int
    name: Optional[str]
    num_partitions: Optional[int]
    num_partitions_source: Optional[str]  # "operator_metadata" | "offsets_conf" | None
    metadata_version: Optional[int]
    store_names: tuple[str, ...]
    partitions_found: tuple[int, ...]
    stores: tuple[StoreStatus, ...]

    @property
    def provider(self) -> str:
        kinds = {s.provider for s in self.stores if s.provider not in ("unknown",)}
        return kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "unknown")

    def summary(self) -> dict[str, Any]:
        chains: dict[str, int] = {}
        for s in self.stores:
            chains[s.chain] = chains.get(s.chain, 0) + 1
        durable = [s.durable_version for s in self.stores if s.durable_version is not None]
        return {
            "stores": len(self.stores),
            "chains": dict(sorted(chains.items())),
            "min_durable_version": min(durable) if durable else None,
            "max_durable_version": max(durable) if durable else None,
        }

    def to_record(self) -> dict[str, Any]:
        return {
            "operator": self.operator_id,
            "name": self.name,
            "provider": self.provider,
            "metadata_version": self.metadata_version,
            "num_partitions": self.num_partitions,
            "num_partitions_source": self.num_partitions_source,
            "store_names": list(self.store_names),
            "partitions_found": len(self.partitions_found),
            "summary": self.summary(),
            "stores": [s.to_record() for s in self.stores],
        }


@dataclass(frozen=True)
class QueryInspection:
    """Everything `inspect epochs` and `inspect state` say about one checkpoint."""

    checkpoint: str
    query_id: Optional[str]
    planned: Optional[int]
    committed: Optional[int]
    state_epoch: Optional[int]
    offsets: LogListing
    commits: LogListing
    async_progress: bool
    checkpoint_format: int
    operators: tuple[OperatorReport, ...]
    writers: tuple[Writer, ...]
    common_window: Optional[tuple[int, int]]
    sources: tuple[SourceInfo, ...]
    latest_offsets: Optional[OffsetEntry]
    committed_offsets: Optional[OffsetEntry]
    findings: tuple[Finding, ...]
    sink: Optional[SinkLog] = None
    kafka: Optional[dict[str, Any]] = None  # filled by inspectors.kafka.with_kafka
    lease: Optional[dict[str, Any]] = None  # the agent's lease, when there is one

    @property
    def verdict(self) -> str:
        return verdict_of(self.findings)

    @property
    def stateful(self) -> bool:
        return bool(self.operators)

    def to_record(self) -> dict[str, Any]:
        """The `queries[]` element of the EpochReport JSON contract."""
        def window(log: LogListing) -> Optional[list[int]]:
            return None if log.oldest is None else [log.oldest, log.latest]  # type: ignore[list-item]

        return {
            "checkpoint": self.checkpoint,
            "query_id": self.query_id,
            "planned": self.planned,
            "committed": self.committed,
            "state_epoch": self.state_epoch,
            "retained": {"offsets": window(self.offsets), "commits": window(self.commits)},
            "async_progress": self.async_progress,
            "checkpoint_format": self.checkpoint_format,
            "stateful": self.stateful,
            "writers": [w.to_record() for w in self.writers],
            "common_window": None if self.common_window is None else list(self.common_window),
            "sources": [_source_record(s) for s in self.sources],
            "sink": None if self.sink is None else self.sink.position(),
            "kafka": self.kafka,
            "lease": self.lease,
            "temp_files": sorted([f"offsets/{n}" for n in self.offsets.temp_files] + [f"commits/{n}" for n in self.commits.temp_files]),
            "findings": finding_records(self.findings),
            "verdict": self.verdict,
            "reclaimable": None,  # filled by `inspect epochs --reclaimable` (streamctl.operations.trim)
        }


def _source_record(s: SourceInfo) -> dict[str, Any]:
    rec: dict[str, Any] = {"source": s.source_id, "kind": s.kind}
    if s.kafka_initial is not None:
        rec["initial_offsets"] = s.kafka_initial.raw
    if s.kind == "file":
        rec["file_log_latest"] = s.file_log_latest
    if s.kind == "rate":
        rec["start_ms"] = s.rate_start_ms
    return rec


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
    if not ({"metadata", "offsets", "commits", "state"} & set(root)):
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


Progress = Callable[[str], None]


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
    from streamctl.inspectors.sinks import compare_sink, read_sink

    if progress:
        progress(f"reading sink {sink}")
    log = read_sink(sink, sink_kind, app_id or q.query_id, absent=sink_absent)
    from streamctl.inspectors.ownership import foreign_batches, foreign_finding

    if missing and log.kind == "iceberg" and log.extra.get("streaming_queries"):
        # a pre-flight: a new checkpoint is a new query id, which the table never saw (docs/formats/sinks.md#iceberg)
        others = list(log.extra["streaming_queries"])
        empty = LogListing(exists=False)
        f = Finding("SINK_NEW_QUERY",
                    f"{location} does not exist yet and the Iceberg table {log.uri} holds epochs of "
                    f"{len(others)} streaming query id(s) ({summarize(others, 2)}): a new checkpoint starts a new query "
                    "id, which the table skips nothing for, so the source is read again from its starting position and "
                    "every row it already delivered arrives again (duplicates) unless that position says otherwise",
                    details={"query_ids": others, "preflight": True})
        q = QueryInspection(q.checkpoint, None, None, None, None, empty, empty, False, 1, (), (), None, (), None,
                            None, (f,))
        return replace(q, sink=log)
    if missing and log.kind == "file" and log.epoch is not None:
        # a pre-flight: no checkpoint yet over a sink whose log holds batches (docs/model.md#sink-ownership)
        empty = LogListing(exists=False)
        q = QueryInspection(q.checkpoint, None, None, None, None, empty, empty, False, 1, (), (), None, (), None,
                            None, (foreign_finding(list(log.epoch_ids), log.epoch, None, preflight=True),))
        return replace(q, findings=q.findings + tuple(log.findings), sink=log)
    if known:  # derived from the checkpoint's positions only when they are known
        sink_findings, older = _repartition_sink_gaps(location, log, q)
        checkpoint_findings = q.findings + tuple(older)
        compared = _repartition_sink(log, compare_sink(log, q.planned, q.committed), checkpoint_findings)
        foreign = foreign_batches(storage, q, log) if storage is not None else []  # type: ignore[arg-type]
        if foreign:  # not this query's batches: never SINK_AHEAD (align would roll them back)
            compared = [f for f in compared if f.code != "SINK_AHEAD"] + [
                foreign_finding(foreign, int(log.epoch), q.committed)]  # type: ignore[arg-type]
    else:
        sink_findings, checkpoint_findings, compared = list(log.findings), q.findings, []
    findings = checkpoint_findings + tuple(sink_findings) + tuple(compared)
    reference = q.committed if q.committed is not None else q.planned
    extra = [Writer("sink", "sink_log", log.first_epoch, log.epoch, _status(log.first_epoch, log.epoch, reference))]
    for w in log.writers:
        broken = any(e < (w.last if w.last is not None else -1) for e in w.missing_in)
        extra.append(Writer(w.name, "sink_writer", w.first, w.last, _status(w.first, w.last, reference, broken)))
    writers = q.writers + tuple(extra)
    return replace(q, findings=findings, sink=log, writers=writers, common_window=_common_window(list(writers)))


def _repartition_sink(sink: SinkLog, found: list[Finding], checkpoint: tuple[Finding, ...]) -> list[Finding]:
    """A repartition batch reads no input and writes nothing to the sink. SINK_BEHIND by exactly
    the repartition batches is, for a file sink, SINK_REPARTITION_HOLE: its log has no entry for
    the batch, Spark's batch readers of the sink fail (BATCH_METADATA_NOT_FOUND) and the query
    dies at the log's next compaction. Delta (txn version per batch, no contiguity) and the
    coordinated sink (one commit record per epoch, no compaction) hold every record: no finding."""
    repartitions = {int(f.details["epoch"]) for f in checkpoint if f.code == "REPARTITION_BATCH"}
    out = []
    for f in found:
        missing = set(f.details.get("missing", ())) if f.code == "SINK_BEHIND" else set()
        if not missing or not missing <= repartitions:
            out.append(f)
        elif sink.kind == "file":
            out.append(_sink_hole_finding(sink, sorted(missing)))
    return out


def _sink_hole_finding(sink: SinkLog, epochs: list[int]) -> Finding:
    return Finding(
        "SINK_REPARTITION_HOLE",
        f"the file sink's log has no entry for repartition batch(es) {summarize([str(e) for e in epochs])}: "
        f"Spark's batch readers of the sink fail (BATCH_METADATA_NOT_FOUND) and the query dies at the log's "
        f"next compaction; `streamctl align` writes the empty entry (the batch read nothing)",
        details={"sink_epoch": sink.epoch, "missing": epochs})


def _repartition_sink_gaps(location: str, sink: SinkLog, q: QueryInspection) -> tuple[list[Finding], list[Finding]]:
    """A file sink's LOG_GAP (a batch missing after the log's newest compaction) whose missing
    batches are all committed repartition batches, however old: the query ran on past the
    repartition and the log kept the hole (it dies at the next compaction). Each listed batch is
    tested as Spark does, from offsets/<b> and offsets/<b-1> (cost follows the listed ids).
    Returns the sink's findings with such a LOG_GAP turned into SINK_REPARTITION_HOLE, and
    REPARTITION_BATCH for those batches the checkpoint's findings (the newest two) did not name."""
    known = {int(f.details["epoch"]) for f in q.findings if f.code == "REPARTITION_BATCH"}
    out: list[Finding] = []
    older: list[Finding] = []
    for f in sink.findings:
        missing = [int(b) for b in f.details.get("missing", ())] if f.code == "LOG_GAP" and sink.kind == "file" else []
        if (not missing or f.details.get("missing_count") != len(missing) or q.committed is None
                or max(missing) > q.committed):
            out.append(f)
            continue
        changes = _repartition_changes(location, missing)
        if changes is None:
            out.append(f)
            continue
        older += [_repartition_batch_finding(b, *changes[b]) for b in missing if b not in known]
        out.append(_sink_hole_finding(sink, missing))
    return out, older


def _repartition_changes(location: str, batches: list[int]) -> Optional[dict[int, tuple[int, int]]]:
    """{batch: (old, new) partition counts} when every batch is a repartition batch, else None."""
    try:
        st = Storage.open(location)
        changes = {}
        for b in batches:
            entry, older = (parse_offsets(st.read(f"offsets/{i}"), st.uri(f"offsets/{i}"), i) for i in (b, b - 1))
            change = repartition_change(entry, older)
            if change is None:
                return None
            changes[b] = change
        return changes
    except StreamctlError:  # an unreadable or missing offsets file: the gap stays LOG_GAP
        return None


def _repartition_batch_finding(b: int, old: int, new: int) -> Finding:
    return Finding(
        "REPARTITION_BATCH",
        f"batch {b} is Spark's offline state repartition from {old} to {new} partitions "
        f"(offsets/{b} conf {SHUFFLE_PARTITIONS}={new}, batch {b - 1} had {old}); it read no input "
        f"and a restart resumes with {new} state partitions",
        details={"epoch": b, "from_partitions": old, "to_partitions": new})


def _parse_commit_at(batch: int, data: bytes, path: str) -> CommitEntry:
    return parse_commit(data, path, batch)


class _Inspector:
    def __init__(self, storage: Storage, progress: Optional[Progress], quiet_period_s: Optional[float] = None,
                 now_ms: Optional[int] = None, deep: bool = False, target_spark: Optional[tuple[int, int]] = None) -> None:
        self.st = storage
        self.target_spark = target_spark
        self.chains = Chains(storage, deep)  # what each store restores; its chain's files judged
        self.read_ends = self.chains.read_ends  # torn state files: judged by their heads and tails
        self.findings: list[Finding] = []
        self.progress = progress or (lambda _msg: None)
        self.quiet_period_s = quiet_period_s
        self.now_ms = now_ms
        self.lease_record: Optional[dict[str, Any]] = None
        self.fetched: dict[str, Any] = {}  # rel -> bytes or the StreamctlError of its read
        self.prepared: dict[tuple[int, int, str], Any] = {}  # read_state's _prepare results
        self.judged: dict[tuple[int, int, str], Any] = {}  # _judge of the prepared statuses taken

    def unreadable(self, exc: StreamctlError) -> None:
        path = getattr(exc, "path", self.st.display)
        reason = getattr(exc, "reason", str(exc))
        self.findings.append(Finding("UNREADABLE", f"{path}: {reason}", details={"path": path, "reason": reason}))

    def read(self, rel: str, parse: Callable[[bytes, str], Any], quietly: bool = False) -> Any:
        """`parse` of `rel` (prefetched or read now); None when it cannot be read, recorded as
        UNREADABLE unless `quietly` (a file no restart reads: damage there is no finding)."""
        try:
            data = self.fetched.get(rel)
            if isinstance(data, StreamctlError):
                raise data
            if data is None:
                data = self.st.read(rel)
            return parse(data, self.st.uri(rel))
        except StreamctlError as exc:
            if not quietly:
                self.unreadable(exc)
            return None

    def _try_read(self, rel: str) -> Any:
        try:
            return self.st.read(rel)
        except StreamctlError as exc:
            return exc

    def concurrently(self, *calls: Callable[[], Any]) -> list[Any]:
        """Run `calls` and return their results in order. On object stores they run at once on a
        small thread pool (each request waits for a round trip); locally one after another, which
        is faster. An exception is raised when its result is taken, in order, as sequential
        calls would raise it."""
        if self.st.is_local or len(calls) < 2:
            return [call() for call in calls]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(READ_WORKERS, len(calls))) as pool:
            futures = [pool.submit(call) for call in calls]
            return [f.result() for f in futures]

    def prefetch(self, rels: list[str]) -> None:
        """On object stores, read the small files `rels` concurrently; `read` then parses them
        in the usual order (same findings, same order). A no-op locally."""
        todo = [r for r in dict.fromkeys(rels) if r not in self.fetched]
        if self.st.is_local or len(todo) < 2:
            return
        results = self.concurrently(*[lambda r=r: self._try_read(r) for r in todo])
        self.fetched.update(zip(todo, results, strict=True))

    def log_listing(self, rel: str) -> LogListing:
        return list_log(self.st, rel)

    # -----------------------------------------------------------------------------------
    def run(self) -> QueryInspection:
        st = self.st
        root = require_checkpoint(st)
        for name in ("offsets", "commits", "state", "sources"):
            if name in root and not root[name].is_dir:
                raise StorageError(st.uri(name), "is a file, expected a folder")

        self.progress("listing offsets/ and commits/")
        if "metadata" in root:
            self.fetched["metadata"], offsets, commits = self.concurrently(
                lambda: self._try_read("metadata"), lambda: self.log_listing("offsets"), lambda: self.log_listing("commits"))
        else:
            offsets, commits = self.concurrently(lambda: self.log_listing("offsets"), lambda: self.log_listing("commits"))
        query_id = None
        data = self.fetched.get("metadata")
        retired = None  # the tombstone names streamctl: anything else is Spark's (no lease module loaded)
        if "metadata" in root and isinstance(data, (bytes, bytearray)) and b"streamctl" in data:
            from streamctl.inspectors.lease import retired_record

            retired = retired_record(data)
        if retired is not None:  # drop-sink's tombstone: a retired checkpoint is a state, not damage
            archive = str(retired.get("archive") or "")
            self.findings.append(Finding(
                "RETIRED",
                f"retired by streamctl drop-sink ({retired.get('op_id')}): the query "
                f"{retired.get('query_id_was')} must not be restarted here; its logs, state and its sink's commit log "
                f"are in {archive or 'the archive'}" + (f"; undo: streamctl drop-sink --undo {archive}" if archive else ""),
                details={"op_id": retired.get("op_id"), "query_id_was": retired.get("query_id_was"), "archive": archive,
                         "undo": f"streamctl drop-sink --undo {archive}" if archive else None}))
        elif "metadata" in root:
            query_id = self.read("metadata", parse_query_metadata)
        else:
            self.findings.append(Finding(
                "UNREADABLE", f"{st.uri('metadata')}: missing (the query id is lost: Spark 4.2+ refuses to restart, "
                f"STREAMING_CHECKPOINT_MISSING_METADATA_FILE; older lines start a new query id; `streamctl align "
                f"--query-id ID` writes it back)",
                details={"path": st.uri("metadata"), "reason": "missing"}))
        planned, committed = offsets.latest, commits.latest
        wanted = [f"offsets/{b}" for b in (planned, None if planned is None else planned - 1, committed)
                  if b is not None and b in offsets.batch_ids]
        self.prefetch(wanted + ([f"commits/{committed}"] if committed is not None else []))

        latest_offsets: Optional[OffsetEntry] = None
        committed_offsets: Optional[OffsetEntry] = None
        prev: Optional[OffsetEntry] = None
        if planned is not None:
            latest_offsets = self.read(f"offsets/{planned}", lambda d, p: parse_offsets(d, p, planned))
            if planned - 1 in offsets.batch_ids:
                prev = self.read(f"offsets/{planned - 1}", lambda d, p: parse_offsets(d, p, planned - 1))
                if committed == planned - 1:
                    committed_offsets = prev
        if committed is not None and committed == planned:
            committed_offsets = latest_offsets
        elif committed is not None and committed in offsets.batch_ids and committed_offsets is None:
            committed_offsets = self.read(f"offsets/{committed}", lambda d, p: parse_offsets(d, p, committed))
        commit_entries: dict[int, CommitEntry] = {}
        if committed is not None:
            entry = self.read(f"commits/{committed}", lambda d, p: parse_commit(d, p, committed))
            if entry is not None:
                commit_entries[committed] = entry

        before_prev: Optional[OffsetEntry] = None
        if prev is not None and planned is not None and planned - 2 in offsets.batch_ids:
            # only to tell whether batch P-1 was a repartition: no restart reads it, so damage here
            # is no finding (a roll back that needs it reads it then)
            before_prev = self.read(f"offsets/{planned - 2}", lambda d, p: parse_offsets(d, p, planned - 2), quietly=True)
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
        prepare = functools.partial(self.chains.prepare, required_next, planned) if st.is_local else None
        state = read_state(st, prepare) if "state" in root else StateFiles(exists=False)
        self.prepared = state.prepared
        if self.target_spark is not None:
            self._line_findings(self.target_spark, latest_offsets, commit_entries.get(committed) if committed is not None else None,
                                state)
        # Spark refuses async progress tracking on stateful queries: state files rule it out
        async_by_logs = not state.operators and async_progress_pattern(offsets, commits)
        async_progress = async_by_conf or async_by_logs
        uses_ids = any(s.uses_unique_ids for op in state.operators.values() for s in op.stores())
        if uses_ids:
            self.prefetch([f"commits/{b}" for b in commits.batch_ids if b not in commit_entries])
            for b in commits.batch_ids:
                if b not in commit_entries:
                    entry = self.read(f"commits/{b}", functools.partial(_parse_commit_at, b))
                    if entry is not None:
                        commit_entries[b] = entry
        checkpoint_format = 2 if uses_ids or any(
            e.state_unique_ids is not None or e.version >= 2 for e in commit_entries.values()) else 1

        sources = []
        unread: set[SourceId] = set()
        if "sources" in root:
            for e in sorted(st.list_dir("sources") or [], key=lambda x: x.name):
                sid = source_id_of(e.name) if e.is_dir else None
                if sid is not None:
                    try:
                        sources.append(read_source(st, sid))
                    except StreamctlError as exc:
                        self.unreadable(exc)
                        unread.add(sid)
        moved: set[SourceId] = set()
        if latest_offsets is not None and any(s.kind == "file" for s in sources):
            moved = self._moved_input_finding(sources, prev, latest_offsets)
        if planned is not None and latest_offsets is not None and planned == (-1 if committed is None else committed) + 1 \
                and any(s.kind == "file" and s.source_id not in moved for s in sources):
            self._replay_finding([s for s in sources if s.source_id not in moved], committed_offsets, latest_offsets)
        for s in self._sources_behind_offsets(sources, latest_offsets, unread):
            if s.file_log_missing:
                gaps = list(s.file_log_missing)
                self.findings.append(Finding(
                    "LOG_GAP",
                    f"sources/{s.source_id}/: batch files of the file source's log missing where a restart reads it "
                    f"(the newest compaction and every batch after it): {ranges_text(gaps)}; the restart fails "
                    f"(\"sources/{s.source_id}/{gaps[0][0]} doesn't exist\")",
                    details={"log": f"sources/{s.source_id}", "missing": ids_of(gaps), "missing_count": count_of(gaps)}))

        self._log_findings(offsets, commits, async_progress, unfinished,
                           "offsets_conf" if async_by_conf else "log_pattern")
        lease = self._lease() if "_streamctl" in root else None
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
        writers, window = _writers(offsets, commits, stores, committed if committed is not None else planned)
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

    # -----------------------------------------------------------------------------------
    def _line_findings(self, target: tuple[int, int], offsets: Optional[OffsetEntry], commit: Optional[CommitEntry],
                       state: StateFiles) -> None:
        """SPARK_LINE_REFUSES / SPARK_LINE_CHECKED: the newest log files and the stream-stream joins'
        state schema files a restart on `target` reads, against what that line reads
        (docs/model.md#spark-lines)."""
        from streamctl.inspectors.lines import join_schema_refusals, line_text, log_refusals, written_at_least

        versions = {}
        if offsets is not None:
            versions["offsets"] = (f"offsets/{offsets.batch_id}", offsets.version)
        if commit is not None:
            versions["commits"] = (f"commits/{commit.batch_id}", commit.version)
        wrote = written_at_least(offsets.conf) if offsets is not None else None
        wrote_text = (f"written by Spark {line_text(wrote[0])}+ (its offsets conf holds {wrote[1]})" if wrote
                      else "the offsets conf shows no line newer than 3.5")
        schemas = self._join_schemas(state)
        refusals = log_refusals(target, versions) + join_schema_refusals(target, schemas)
        details = {"target": line_text(target), "written_at_least": line_text(wrote[0]) if wrote else None,
                   "logs": {k: v[1] for k, v in versions.items()}}
        if refusals:
            needs = [r.needs for r in refusals]
            errors = sorted({r.error for r in refusals if r.error})
            self.findings.append(Finding(
                "SPARK_LINE_REFUSES",
                f"a restart on Spark {line_text(target)} fails: " + "; ".join(r.why for r in refusals) + f"; {wrote_text}"
                + ("; restart on the line that wrote it" if errors else ""),
                details=dict(details, files=[self.st.uri(r.file) for r in refusals],
                             needs=line_text(max(n for n in needs if n is not None)) if None not in needs else None,
                             **({"restart_errors": errors} if errors else {}))))
        else:
            logs = ", ".join(f"{k} v{v[1]}" for k, v in sorted(versions.items())) or "no log files"
            if schemas:
                logs += f"; {len(schemas)} stream-stream join state schema file(s)"
            self.findings.append(Finding(
                "SPARK_LINE_CHECKED", f"Spark {line_text(target)} reads what a restart reads ({logs}); {wrote_text}",
                details=details))

    def _join_schemas(self, state: StateFiles) -> dict[str, tuple[list[tuple[str, str, bool]], list[tuple[str, str, bool]]]]:
        """Each stream-stream join's `keyWithIndexToValue` schema files (partition 0's, v1/v2: the
        ones a restart compares) with their key and value fields."""
        from streamctl.formats.state import SCHEMA_FILE, parse_state_schema, schema_fields
        from streamctl.inspectors.lines import JOIN_VALUE_STORES

        out = {}
        for op in state.operators.values():
            for name, store in sorted(op.partitions.get(0, {}).items()):
                if name not in JOIN_VALUE_STORES or not store.has_schema:
                    continue
                rel = f"{store.path}/{SCHEMA_FILE}"
                try:
                    parsed = parse_state_schema(self.st.read(rel), self.st.uri(rel))
                except StreamctlError as exc:
                    if self.st.kind(rel) != "missing":  # a missing one Spark writes anew
                        self.unreadable(exc)
                    continue
                if parsed is not None:  # v3 and newer: not a join of state format 1 or 2
                    out[rel] = (schema_fields(parsed[0]), schema_fields(parsed[1]))
        return out

    def _moved_input_finding(self, sources: list[SourceInfo], start: Optional[OffsetEntry], end: OffsetEntry) -> set[SourceId]:
        """SOURCE_MOVED: the newest batch's input folder moved with the checkpoint (docs/model.md#moved-input);
        returns the sources it names (their replay is judged at the new place, after align's rewrite)."""
        from streamctl.inspectors.replay import GoneInput, moved_input

        gone: list[GoneInput] = []
        try:
            found = moved_input(self.st, sources, start, end, gone)
        except StreamctlError as exc:
            self.unreadable(exc)
            return set()
        for g in gone:
            self.findings.append(Finding(
                "SOURCE_GONE", g.text(), details={"source": g.source_id, "epochs": [g.batch], "folder": g.folder}))
        for m in found:
            self.findings.append(Finding(
                "SOURCE_MOVED", f"{m.text()}; align rewrites the source's log to {m.new_base}",
                details={"source": m.source_id, "epochs": [m.batch], "old_folder": m.old_folder,
                         "new_folder": m.new_folder, "old_base": m.old_base, "new_base": m.new_base}))
        return {m.source_id for m in found} | {g.source_id for g in gone}

    @staticmethod
    def _sources_behind_offsets(sources: list[SourceInfo], latest: Optional[OffsetEntry],
                                unread: set[SourceId]) -> list[SourceInfo]:
        """`sources` with the file-source log files the newest offsets name and the log lacks
        added to their missing ones: the restart reads its log up to the newest batch's
        `logOffset` (`getBatch` of that batch), so a lost newest `sources/<n>/N` fails it as a
        lost middle one does. A file source whose log folder is gone counts from batch 0 when no
        source has a folder (`sources/` lost); one whose log could not be read (`unread`) is
        UNREADABLE already."""
        from streamctl.inspectors.replay import log_offset

        if latest is None:
            return sources
        by_id = {s.source_id: s for s in sources}
        out = []
        for src in latest.sources:
            hi = log_offset(latest, src.source_id)
            info = by_id.pop(src.source_id, None)
            if src.source_id in unread:  # UNREADABLE already names its log
                continue
            if info is None and sources:
                # no folder of its own while others exist: a source the plan names twice (a
                # self-join of one DataFrame) shares the first one's log (PySpark 3.5)
                continue
            if hi is None or hi < 0 or (info is not None and info.kind not in ("file", "empty")):
                if info is not None:
                    out.append(info)
                continue
            have = info.file_log_latest if info is not None and info.file_log_latest is not None else -1
            missing = list(info.file_log_missing) if info is not None else []
            if have < hi:
                missing.append((have + 1, hi))
            out.append(replace(info, file_log_missing=tuple(missing)) if info is not None
                       else SourceInfo(src.source_id, "file", file_log_missing=tuple(missing)))
        return out + list(by_id.values())

    def _state_without_logs(self, operators: list[int]) -> None:
        """STATE_WITHOUT_LOGS: state files of earlier batches but no offsets/ or commits/ batch (the
        logs deleted to reprocess from the start, state left behind)."""
        self.findings.append(Finding(
            "STATE_WITHOUT_LOGS",
            f"state/ holds files of operator(s) {', '.join(map(str, operators))} but offsets/ and commits/ hold no "
            "batch: a restart starts from batch 0 over the old state (Spark 4.1+ refuses to start: "
            "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY); put offsets/ and commits/ back from a copy, or reprocess "
            "on a new checkpoint and a new sink path (this sink skips the batch ids it holds)",
            details={"operators": operators}))

    def _replay_finding(self, sources: list[SourceInfo], start: Optional[OffsetEntry], end: OffsetEntry) -> None:
        """SOURCE_NOT_REPLAYABLE: the in-flight batch, which the restart replays, reads input
        files that are gone (docs/model.md#replayable-batches)."""
        from streamctl.inspectors.replay import unreplayable

        try:
            gone = unreplayable(self.st, sources, start, end)
        except StreamctlError as exc:
            self.unreadable(exc)
            return
        for u in gone:
            self.findings.append(Finding(
                "SOURCE_NOT_REPLAYABLE",
                f"batch {end.batch_id} is replayed on restart but {u.text()}: Spark skips them and their rows are lost",
                details={"epochs": [end.batch_id], "source": u.source_id, "missing": list(u.missing[:1000]),
                         "missing_count": len(u.missing)}))

    def _lease(self) -> Optional[dict[str, Any]]:
        """The agent's lease (streamctl.pipeline.agent): a live one is LIVE_QUERY, one left by a
        driver that died without releasing it is STALE_LEASE."""
        import time

        from streamctl.inspectors.lease import LEASE_FILE, lease_status, read_lease

        try:
            lease = read_lease(self.st)
        except StreamctlError as exc:
            self.unreadable(exc)
            return None
        if lease is None:
            return None
        now_ms = self.now_ms if self.now_ms is not None else int(time.time() * 1000)
        status = lease_status(lease, now_ms)
        record: dict[str, Any] = {"status": status, "state": lease.state, "query_id": lease.query_id, "run_id": lease.run_id,
                  "host": lease.host, "pid": lease.pid, "last_batch": lease.last_batch,
                  "heartbeat_age_s": round(max(now_ms - lease.heartbeat_ms, 0) / 1000.0, 3),
                  "expires_in_s": round((lease.expires_at_ms - now_ms) / 1000.0, 3)}
        self.lease_record = record
        where = f"run {lease.run_id} on {lease.host} (pid {lease.pid})"
        if status == "live":
            self.findings.append(Finding(
                "LIVE_QUERY",
                f"the query is running: {LEASE_FILE} is held by {where}, heartbeat {record['heartbeat_age_s']:g} s ago, "
                f"last batch {shown(lease.last_batch)}; mutating commands refuse",
                details={"lease": record, "last_change_age_s": None, "quiet_period_s": None}))
        elif status == "stale":
            self.findings.append(Finding(
                "STALE_LEASE",
                f"{LEASE_FILE} of {where} expired {-record['expires_in_s']:g} s ago without being released: "
                f"the driver died (last batch {shown(lease.last_batch)}); nothing holds the query",
                details={"lease": record}))
        return record

    def _liveness(self, planned: Optional[int], committed: Optional[int], latest: Optional[OffsetEntry],
                  prev: Optional[OffsetEntry]) -> None:
        """LIVE_QUERY when the newest log file changed within the quiet period. A negative quiet
        period is derived: three trigger intervals (from the two newest batchTimestampMs), at
        least 10 s and at most 10 min; 60 s when unknown."""
        import time

        quiet = float(self.quiet_period_s or 0)
        basis = ""  # how the quiet period was set, when not given
        if quiet < 0:
            interval = None
            if latest is not None and prev is not None:
                a, b = latest.timestamp_ms, prev.timestamp_ms
                if a is not None and b is not None and a > b:
                    interval = (a - b) / 1000.0
            quiet = 60.0 if interval is None else min(max(3 * interval, 10.0), 600.0)
            basis = (" (the default: the trigger interval is unknown)" if interval is None
                     else f" (three trigger intervals of {interval:g} s, within 10 s..10 min)")
        now_ms = self.now_ms if self.now_ms is not None else int(time.time() * 1000)
        entries = {}
        for rel in ([f"offsets/{planned}"] if planned is not None else []) + \
                   ([f"commits/{committed}"] if committed is not None else []):
            entry = self.st.lookup(rel)
            if entry is not None and entry.mtime_ns is not None:
                entries[rel] = entry

        def age_of(found: dict[str, Any]) -> Optional[float]:
            newest = max((e.mtime_ns for e in found.values()), default=None)
            return None if newest is None else max(now_ms - newest // 1_000_000, 0) / 1000.0

        age = age_of(entries)
        if age is not None and age < quiet:
            # files streamctl wrote itself (an align's commit) are no sign of a running query
            own = self._own_writes()
            entries = {rel: e for rel, e in entries.items() if own.get(rel) != [int(e.size or 0), int(e.mtime_ns or 0)]}
            age = age_of(entries)
        if age is not None and age < quiet:
            # on a tie the commit, written after its offsets
            newest = max(entries, key=lambda rel: (entries[rel].mtime_ns or 0, rel.startswith("commits")))
            self.findings.append(Finding(
                "LIVE_QUERY",
                f"the query looks alive: its newest log file {newest} changed {age:.1f} s ago, within the quiet period "
                f"of {quiet:g} s{basis}, and no agent lease is live; mutating commands refuse. This also follows a "
                "run that just ended or a hand edit: if the query is stopped, rerun with "
                "--quiet-period 0 or --assume-stopped where the command has it",
                details={"last_change_age_s": round(age, 3), "quiet_period_s": quiet, "lease": None,
                         "newest_file": newest}))

    def _own_writes(self) -> dict[str, list[int]]:
        """The checkpoint log files the last streamctl operation wrote: rel -> [size, mtime_ns]
        (`_streamctl/written.json`, operations/runner.py); {} when there is none or it is not that."""
        try:
            doc = load_json(self.st.read("_streamctl/written.json", 1 << 20))
        except (StreamctlError, ValueError):
            return {}
        files = doc.get("files") if isinstance(doc, dict) else None
        return {k: v for k, v in files.items() if isinstance(v, list)} if isinstance(files, dict) else {}

    def _repartition_findings(self, planned: Optional[int], committed: Optional[int],
                              newest: list[Optional[OffsetEntry]]) -> bool:
        """REPARTITION_BATCH / REPARTITION_UNFINISHED for the newest two batches; True when the
        newest batch is an unfinished repartition. Spark tells a repartition batch the way
        `OfflineStateRepartitionUtils.isRepartitionBatch` does: batch b > 0 whose offsets conf
        `spark.sql.shuffle.partitions` differs from batch b-1's (the runner copies the last
        committed batch's offsets with only that key changed, and commits it with a copy of the
        last commit; the batch reads no input)."""
        unfinished = False
        for i, entry in enumerate(newest[:2]):
            older = newest[i + 1] if i + 1 < len(newest) else None
            change = repartition_change(entry, older)
            if entry is None or change is None:
                continue
            b, (old, new) = entry.batch_id, change
            details = {"epoch": b, "from_partitions": old, "to_partitions": new}
            if committed is not None and b <= committed:
                self.findings.append(_repartition_batch_finding(b, old, new))
            elif b == planned:
                unfinished = True
                self.findings.append(Finding(
                    "REPARTITION_UNFINISHED",
                    f"offsets/{b} is an unfinished state repartition from {old} to {new} partitions (planned, no "
                    f"commits/{b}): Spark refuses to start (STREAMING_UNFINISHED_REPARTITION_DETECTED). "
                    f"`streamctl align` goes back to batch {committed}; or run the repartition again with "
                    f"spark._streamingCheckpointManager.repartition(checkpoint, {new})", details=details))
        return unfinished

    def _log_findings(self, offsets: LogListing, commits: LogListing, async_progress: bool,
                      unfinished_repartition: bool = False, async_evidence: str = "log_pattern") -> None:
        P, C = offsets.latest, commits.latest
        if P is None and C is None:
            return
        c = -1 if C is None else C
        if P is not None and P == c + 1 and not unfinished_repartition:
            self.findings.append(Finding(
                "IN_FLIGHT", f"batch {P} is planned in offsets/{P} but not committed; Spark replays it on restart",
                details={"epoch": P}))
        if C is not None and (P is None or C > P):
            self.findings.append(Finding(
                "COMMIT_AHEAD",
                f"commits/{C} names batch {C} but the newest offsets file is "
                f"{'missing' if P is None else f'offsets/{P}'}; the restart fails with a concurrent-update error",
                details={"committed": C, "planned": P}))
        if P is not None and P > c + 1:
            sev = WARNING if async_progress else ERROR
            what = "no commit log" if C is None else f"the newest commit is {C}"
            prior = max((b for b in offsets.batch_ids if b < P), default=None)
            self.findings.append(Finding(
                "WAL_AHEAD",
                f"offsets/{P} is planned but {what}: Spark reruns only batch {P}; batches {c + 1}..{P - 1} are never committed"
                + (f" (expected with async progress tracking: batch {P} reruns from "
                   f"{'the start' if prior is None else f'offsets/{prior}'} through offsets/{P}, covering their data)"
                   if async_progress else ""),
                severity=sev, details={"committed": C, "planned": P}))
        for name, log in (("offsets", offsets), ("commits", commits)):
            stale = log.stale_checksums()
            if stale:
                files = [crc_name(f"{name}/{b}") for b in stale]
                self.findings.append(Finding(
                    "STALE_CHECKSUM",
                    f"{summarize(files)} without {name}/{stale[0]}: a batch file was deleted without its hidden "
                    f"checksum; Spark's next write of batch {stale[0]} fails (\"Multiple streaming queries are "
                    f"concurrently using {name}\"). Delete the .crc file too",
                    details={"log": name, "files": [self.st.uri(f) for f in files]}))
        if async_progress:
            self._async_finding(offsets, commits, async_evidence)
            return
        for name, log in (("offsets", offsets), ("commits", commits)):
            gaps = log.gap_ranges()
            if gaps:
                self.findings.append(Finding(
                    "LOG_GAP",
                    f"{name}/: batch files missing inside the retained window "
                    f"{log.oldest}..{log.latest}: {ranges_text(gaps)}",
                    details={"log": name, "missing": ids_of(gaps), "missing_count": count_of(gaps)}))
        if P is not None and P > 0 and P - 1 not in offsets.batch_ids and P - 1 not in offsets.gaps():
            self.findings.append(Finding(
                "LOG_GAP",
                f"offsets/{P - 1} is missing: Spark needs two consecutive offsets files to restart",
                details={"log": "offsets", "missing": [P - 1]}))

    def _async_finding(self, offsets: LogListing, commits: LogListing, evidence: str) -> None:
        """ASYNC_PROGRESS: the gaps async progress tracking leaves, and what a restart does with
        them (docs/formats/checkpoint.md#async-progress-tracking)."""
        P, C = offsets.latest, commits.latest
        gaps = offsets.gap_ranges()
        prev_missing = P is not None and P > 0 and P - 1 not in offsets.batch_ids
        if not gaps and not commits.gap_ranges() and not prev_missing:
            return
        why = ("the offsets conf turns async progress tracking on" if evidence == "offsets_conf" else
               "offsets/ and commits/ skip the same batches and the query is stateless: Spark persists both logs "
               "only every asyncProgressTrackingCheckpointIntervalMs")
        resume = "nothing committed yet" if C is None else f"resumes after batch {C}"
        fails = (f"; a restart without it fails (\"batch {P - 1} doesn't exist\": Spark reads offsets/{P - 1})"
                 if prev_missing and P is not None else "")
        # The outcome hangs on a writer option Spark leaves no trace of: unless the offsets conf
        # proves it, take the failing outcome (docs/model.md#verdicts-and-exit-codes): an error, and align rolls
        # back to a restartable epoch unless told `--async-progress`.
        unproven = prev_missing and evidence != "offsets_conf"
        if unproven:
            fails += (". Nothing on disk proves the option is on, so streamctl takes the failing outcome: "
                      "`streamctl align` rolls back to a restartable epoch, or `streamctl align --async-progress` "
                      "keeps the gaps when the query runs with the option")
        self.findings.append(Finding(
            "ASYNC_PROGRESS",
            f"async progress tracking: batch files {ranges_text(gaps) if gaps else 'below ' + str(P)} were never "
            f"persisted ({why}). A restart with asyncProgressTrackingEnabled=true reads the newest files on disk "
            f"({resume}; at-least-once: batches after the newest persisted commit run again){fails}",
            severity=ERROR if unproven else INFO,
            details={"missing": ids_of(gaps), "missing_count": count_of(gaps), "evidence": evidence,
                     "restart_needs_async": prev_missing}))

    # -----------------------------------------------------------------------------------
    def _state_findings(self, state: StateFiles, conf: dict[str, str], required: Optional[int],
                        planned: Optional[int], commits: dict[int, CommitEntry]) -> list[OperatorReport]:
        st = self.st
        reports = []
        conf_parts = conf.get(SHUFFLE_PARTITIONS)
        for op_id in sorted(state.operators):
            op = state.operators[op_id]
            if op.metadata_error is not None:
                self.unreadable(op.metadata_error)
            layout = _layout_sources(op, conf_parts, commits)
            num, source = _layout_count(layout)
            names = op.store_names()
            valid = _valid_ids(op, commits)
            pending = [(op.partitions[part].get(name) or StoreFiles(op_id, part, name), valid.get((part, name), {}))
                       for part in sorted(op.partitions) for name in names]

            def status(fv: tuple[StoreFiles, dict[int, str]]) -> StoreStatus:
                files, ids = fv
                key = (files.operator_id, files.partition, files.store)
                pre = self.prepared.get(key)
                if pre is not None and not ids and pre[0] == (required, planned):
                    self.judged[key] = pre[2]
                    return pre[1] if pre[1].files is files else replace(pre[1], files=files)
                return self.chains.status_of(files, required, planned, ids)

            # one task per store on object stores (each judges its chain's ends with ranged reads)
            statuses: list[StoreStatus] = ([status(fv) for fv in pending] if st.is_local
                                           else parallel_map(status, pending, READ_WORKERS))
            report = OperatorReport(
                op_id, op.metadata.operator_name if op.metadata else None, num, source,
                op.metadata.version if op.metadata else None, tuple(names), tuple(sorted(op.partitions)), tuple(statuses))
            reports.append(report)

            if num is not None:
                gaps = missing_ranges(sorted(op.partitions), 0, num - 1)  # cost: the folders that exist
                if gaps:
                    self.findings.append(Finding(
                        "STATE_PARTITION_MISSING",
                        f"state/{op_id}: {count_of(gaps)} of {num} partition folders missing ({ranges_text(gaps)})",
                        details={"operator": op_id, "num_partitions": num, "missing_partitions": ids_of(gaps),
                                 "missing_count": count_of(gaps)}))
            self._schema_findings(op)
            bad = [s for s in statuses if not s.restorable_required]
            if bad:
                parts = [f"{s.path} (missing {', '.join(s.missing)})" for s in bad]
                self.findings.append(Finding(
                    "STATE_UNRESTORABLE",
                    f"operator {op_id}: {len(bad)} store(s) cannot restore version {required} "
                    f"(needed to resume after batch {None if required is None else required - 1}): {summarize(parts, 3)}",
                    details={"operator": op_id, "version": required,
                             "stores": [{"partition": s.partition, "store": s.store, "path": st.uri(s.path),
                                         "missing": list(s.missing)} for s in bad]}))
            self._corrupt_findings(op, statuses)
            orphan_files = [f"{s.path}/{n}" for s in statuses for n in s.orphans + s.temp_files]
            orphan_files += [f"state/{op_id}/{p}/{store.store + '/' if store.store != DEFAULT_STORE else ''}{n}"
                             for p, stores in op.partitions.items() for store in stores.values() for n in store.orphan_crc]
            orphan_files += [f"state/{op_id}/{n}" for n in op.temp_files]
            if num is not None:
                beyond = [p for p in sorted(op.partitions) if p >= num]
                contested = [p for p in beyond if any(p < n for n in layout.values())]
                orphan_files += [f"state/{op_id}/{p}" for p in beyond if p not in contested]
                if contested:
                    self._layout_conflict(op_id, layout, contested)
            if orphan_files:
                orphan_files.sort()
                self.findings.append(Finding(
                    "STATE_ORPHANS",
                    f"operator {op_id}: {len(orphan_files)} state file(s) no restart will use "
                    f"({'versions above ' + str(planned + 1) if planned is not None else 'any version: nothing is planned'}, "
                    "temp files, unnamed ids): "
                    f"{summarize(orphan_files, 3)}",
                    details={"operator": op_id, "files": [st.uri(f) for f in orphan_files]}))
        return reports


    def _corrupt_findings(self, op: OperatorFiles, statuses: list[StoreStatus]) -> None:
        """A file a restart reads that does not match its checksum companion. A corrupt delta or
        changelog fails the restart (observed 4.3.0: CANNOT_LOAD_STATE_STORE, "Stream is
        corrupted", with or without row checksums): error. A corrupt snapshot/zip does not when
        an older snapshot (or version 0) and intact incrementals up to the restart's version
        exist: Spark 4.1+'s auto snapshot repair loads those (observed 4.3.0): warning. Only the
        files of the restore chain (and, for a corrupt snapshot, of its fallback) are read; checksums
        only on the local file system, torn snapshots (their own format) everywhere."""
        if not self.read_ends:
            return
        local = self.st.is_local
        stores = {(s.partition, s.store): s for s in op.stores()}

        def judge(status: StoreStatus) -> Optional[tuple[list[str], bool]]:
            key = (status.operator_id, status.partition, status.store)
            if key in self.judged:  # judged as it was listed (_prepare)
                return self.judged[key]
            files = stores.get((status.partition, status.store))
            return None if files is None else self.chains.judge(status, files)

        fatal: list[str] = []
        repaired: list[str] = []
        for judged in ([judge(s) for s in statuses] if local else parallel_map(judge, statuses, READ_WORKERS)):
            if judged is not None:
                (repaired if judged[1] else fatal).extend(judged[0])
        # Spark 4.1+ loads around a bad snapshot (auto snapshot repair); older lines fail. The
        # line shows in the newest offsets conf: 4.1+ records the row checksum setting there. Not
        # shown: the failing outcome is taken (align moves the snapshot aside: every line restarts).
        line_41 = (ROW_CHECKSUM_CONF in getattr(self, "newest_conf", {}) if self.target_spark is None
                   else self.target_spark >= (4, 1))  # the line named to restart it decides
        auto_repair = str(getattr(self, "newest_conf", {}).get(AUTO_REPAIR_CONF, "true")).lower() != "false"
        around = line_41 and auto_repair
        for items, severity, effect in (
                (fatal, ERROR, "Spark's restart fails loading the store (CANNOT_LOAD_STATE_STORE); align and trim "
                               "refuse (exit 4)"),
                (repaired, WARNING if around else ERROR,
                 "an older snapshot and the changes above it are intact: "
                 + ("Spark 4.1+ restarts from them (auto snapshot repair, "
                    + ("the --target-spark line)" if self.target_spark is not None else "this checkpoint's line)")
                    if around else
                    "Spark 4.1+ restarts from them (auto snapshot repair), older lines fail and "
                    + ("the --target-spark line is older" if self.target_spark is not None and self.target_spark < (4, 1)
                       else "the restart does not have it (auto snapshot repair is off)" if line_41
                       else "the checkpoint does not show a 4.1+ line"))
                 + "; align moves the snapshot aside, after which every line restarts from them")):
            if items:
                self.findings.append(Finding(
                    "STATE_FILE_CORRUPT",
                    f"operator {op.operator_id}: {len(items)} state file(s) a restart reads are torn or do not match "
                    f"their checksum: {summarize(items, 3)}: {effect}",
                    severity=severity,
                    details={"operator": op.operator_id, "files": [self.st.uri(i.split(" (", 1)[0]) for i in items],
                             "restart": "auto_snapshot_repair" if items is repaired and around else "fails",
                             "snapshot_aside": items is repaired}))

    def _layout_conflict(self, op_id: int, layout: dict[str, int], contested: list[int]) -> None:
        sources = ", ".join(f"{k} says {v}" for k, v in layout.items())
        folders = [f"state/{op_id}/{p}" for p in contested]
        self.findings.append(Finding(
            "STATE_LAYOUT_CONFLICT",
            f"operator {op_id}: the sources of the partition count disagree ({sources}): "
            f"{summarize(folders, 3)} may be read by a restart; align and trim refuse (exit 4) rather than move them",
            details={"operator": op_id, "sources": layout, "partitions": contested,
                     "files": [self.st.uri(f) for f in folders]}))


    def _schema_findings(self, op: OperatorFiles) -> None:
        """State schema v3 (transformWithState, Spark 4.0+): a restart reads the newest
        `_metadata/v2/<batch>` and every schema file it names (OperatorStateMetadataV2Reader,
        StateSchemaCompatibilityChecker); without them it fails before loading any state."""
        rel = f"state/{op.operator_id}"
        if op.metadata_error is not None:
            return
        v3_schemas = [f for f in op.schema_files if f.count("/") >= 2]
        if v3_schemas and not op.v2_metadata_batches:
            self.findings.append(Finding(
                "STATE_METADATA_MISSING",
                f"{rel}: state schema files ({summarize(v3_schemas, 2)}) but no operator metadata "
                f"{rel}/_metadata/v2/<batch>: Spark's restart fails (STDS_FAILED_TO_READ_OPERATOR_METADATA)",
                details={"operator": op.operator_id, "path": self.st.uri(f"{rel}/_metadata/v2")}))
        if op.metadata is None or op.metadata.version < 2:
            return
        present = set(op.schema_files)
        missing = [p for p in op.metadata.schema_paths if p not in present]
        if missing:
            self.findings.append(Finding(
                "STATE_SCHEMA_MISSING",
                f"{op.metadata.path} names state schema file(s) that do not exist: "
                f"{summarize([f'{rel}/{m}' for m in missing], 2)}: Spark's restart fails (file does not exist)",
                details={"operator": op.operator_id, "files": [self.st.uri(f"{rel}/{m}") for m in missing]}))


def async_progress_pattern(offsets: LogListing, commits: LogListing) -> bool:
    """True when the gaps of `offsets/` are the ones async progress tracking leaves
    (docs/formats/checkpoint.md#async-progress-tracking). Spark writes nothing else that tells
    (the writer option is not in the offsets conf): `AsyncOffsetSeqLog.addAsync` persists
    `offsets/N` only when the checkpoint interval has passed, and
    `AsyncProgressTrackingMicroBatchExecution.markMicroBatchEnd` persists `commits/N` exactly for
    the batches whose offsets it persisted (and the first batch of a run). So: `offsets/` has a
    gap, every commit has its offsets file, and over the window both logs retain up to the newest
    commit they hold the same batch ids (offsets may hold newer, uncommitted batches). The caller
    also requires a stateless query (Spark refuses async progress tracking on stateful ones).
    Cost follows the files that exist."""
    O, K = offsets.batch_ids, commits.batch_ids
    if not K or not offsets.gap_ranges():
        return False
    present = set(O)
    if any(k not in present for k in K):
        return False
    lo, hi = max(O[0], K[0]), K[-1]
    return [b for b in O if lo <= b <= hi] == [k for k in K if k >= lo]


def repartition_change(entry: Optional[OffsetEntry], older: Optional[OffsetEntry]) -> Optional[tuple[int, int]]:
    """(old, new) partition counts when `entry` is a repartition batch against `older` (its
    predecessor), the test of Spark's `OfflineStateRepartitionUtils.isRepartitionBatch`."""
    if entry is None or older is None or entry.batch_id == 0 or older.batch_id != entry.batch_id - 1:
        return None
    new, old = _conf_count(entry.conf), _conf_count(older.conf)
    if new is None or old is None or new == old:
        return None
    return old, new


def _conf_count(conf: Any) -> Optional[int]:
    value = str(conf.get(SHUFFLE_PARTITIONS)) if conf and conf.get(SHUFFLE_PARTITIONS) is not None else ""
    # ASCII digits, at most a Long's 19 (a 5,000-digit value is no count: found by the fuzz suite; an
    # absurd but readable one is judged where it is used, tests/test_hostile.py)
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 19 else None


def _layout_sources(op: OperatorFiles, conf_parts: Any, commits: dict[int, CommitEntry]) -> dict[str, int]:
    """Every source of an operator's partition count a restart may follow, newest evidence:
    the newest offsets conf, the newest commit's stateUniqueIds (format 2) and the operator
    metadata (v1, or the newest v2 version)."""
    out: dict[str, int] = {}
    n = _conf_count({SHUFFLE_PARTITIONS: conf_parts})
    if n is not None:
        out["offsets_conf"] = n
    if commits:
        newest = commits[max(commits)]
        ids = (newest.state_unique_ids or {}).get(str(op.operator_id))
        if ids:
            out[f"commits/{newest.batch_id} stateUniqueIds"] = len(ids)
    if op.metadata is not None and op.metadata.stores:
        out["operator_metadata"] = max(n for _, n in op.metadata.stores)
    return out


def _layout_count(layout: dict[str, int]) -> tuple[Optional[int], Optional[str]]:
    """The partition count a restart uses: the newest offsets conf (Spark restores it into the
    session before planning), else the operator metadata; the label names operator_metadata
    whenever it agrees."""
    meta = layout.get("operator_metadata")
    num = layout.get("offsets_conf", meta)
    if num is None:
        return None, None
    return num, "operator_metadata" if meta == num else "offsets_conf"





def _valid_ids(op: OperatorFiles, commits: dict[int, CommitEntry]) -> dict[tuple[int, str], dict[int, str]]:
    """(partition, store) -> {version: unique id} from commits/<version-1>.stateUniqueIds."""
    out: dict[tuple[int, str], dict[int, str]] = {}
    key = str(op.operator_id)
    for batch, entry in commits.items():
        if not entry.state_unique_ids or key not in entry.state_unique_ids:
            continue
        for part, ids in enumerate(entry.state_unique_ids[key]):
            stores = op.partitions.get(part, {})
            names = sorted(stores) or [DEFAULT_STORE]
            for i, uid in enumerate(ids):
                name = _store_with_id(stores, batch + 1, uid)
                if name is None:
                    name = names[i] if i < len(names) else f"#{i}"
                out.setdefault((part, name), {})[batch + 1] = uid
    return out


def _store_with_id(stores: dict[str, StoreFiles], version: int, uid: str) -> Optional[str]:
    for name, s in stores.items():
        if uid in s.incr_ids.get(version, ()) or uid in s.full_ids.get(version, ()):
            return name
    return None


def _status(first: Optional[int], last: Optional[int], reference: Optional[int], broken: bool = False) -> str:
    if last is None:
        return "empty"
    if broken:
        return "broken"
    if reference is None or last == reference:
        return "ok"
    return "behind" if last < reference else "ahead"


def _common_window(writers: list[Writer]) -> Optional[tuple[int, int]]:
    """[max of firsts, min of lasts] over every writer; None when it is empty."""
    firsts = [w.first for w in writers if w.first is not None]
    lasts = [w.last for w in writers if w.last is not None]
    if not writers or len(firsts) < len(writers) or len(lasts) < len(writers):
        return None
    lo, hi = max(firsts), min(lasts)
    return (lo, hi) if lo <= hi else None


def _writers(offsets: LogListing, commits: LogListing, stores: list[StoreStatus],
             reference: Optional[int]) -> tuple[list[Writer], Optional[tuple[int, int]]]:
    """Every writer's restartable window and the common window."""
    writers: list[Writer] = []
    if offsets.exists or offsets.batch_ids:
        writers.append(Writer("offsets", "wal", offsets.oldest, offsets.latest,
                              _status(offsets.oldest, offsets.latest, reference, bool(offsets.gaps()))))
    if commits.exists or commits.batch_ids:
        writers.append(Writer("commits", "commit_log", commits.oldest, commits.latest,
                              _status(commits.oldest, commits.latest, reference, bool(commits.gaps()))))
    for s in stores:
        first = None if s.first_restorable is None else s.first_restorable - 1
        last = None if s.durable_version is None else s.durable_version - 1
        writers.append(Writer(s.path, "state_store", first, last, _status(first, last, reference, s.broken_at is not None)))
    return writers, _common_window(writers)


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

"""align's evidence (docs/model.md#align): the request, what the checkpoint and its sink say
(docs/model.md#positions), the file sink's log as a rollback needs it, and the facts every later
step of the planner shares (operations/align.py plan_align: evidence -> options -> choice -> steps)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from streamctl.formats.commits import parse_commit, serialize_commit
from streamctl.formats.compactible import compactible_file
from streamctl.formats.coordinated_log import COORD_COMMITS
from streamctl.formats.errors import StreamctlError
from streamctl.formats.file_sink_log import FILE_SINK_LOG, added_paths, added_sizes
from streamctl.formats.layout import COMMITS_DIR, METADATA_FILE, OFFSETS_DIR, SOURCES_DIR
from streamctl.formats.offsets import parse_offsets
from streamctl.inspectors.checkpoint import inspect_checkpoint
from streamctl.inspectors.masked import masked
from streamctl.inspectors.placement import Placement, place
from streamctl.inspectors.query_inspection import QueryInspection
from streamctl.inspectors.sinks import FileSinkLogFiles, SinkLog, list_file_sink_log
from streamctl.inspectors.storage import Storage
from streamctl.operations.damage import assess
from streamctl.operations.plan import CheckpointRequest, Refused, epochs_text, refuse_corrupt_state, refuse_unsafe

ROLLBACK_SINKS = ("file", "coordinated")


@dataclass
class AlignRequest(CheckpointRequest):
    to: str = "auto"  # auto | max | <epoch>
    allow_duplicates: bool = False
    allow_loss: bool = False
    discard_in_flight: bool = False
    async_progress: bool = False  # the operator says the query runs with asyncProgressTrackingEnabled=true
    query_id: Optional[str] = None  # the query id a lost `metadata` is written with
    sink_compact_interval: Optional[int] = None  # the file sink's compaction interval, when its log cannot show it
    source_archive: Optional[str] = None  # a file source's sourceArchiveDir (cleanSource=archive)
    kafka: Optional[Any] = None  # KafkaSettings of the broker a Kafka source reads (commands/kafka_options.py)


@dataclass
class FileSinkLog:
    """Everything needed to roll a file sink back: its log files and their entries."""

    present: dict[int, bool]  # batch id -> is .compact
    entries: dict[int, list[str]]  # batch id -> added paths (as written in the log)
    checksums: Mapping[int, str]  # batch id -> its `.N[.compact].crc` name
    interval: Optional[int]
    placement: Placement = Placement()  # where the files the entries name are (a moved sink)
    files: Optional[FileSinkLogFiles] = None  # the one listing it was read from
    unreadable: Mapping[int, str] = field(default_factory=dict)  # batch id -> why, below the newest compaction


class Planner:
    def __init__(self, req: AlignRequest) -> None:
        self.req = req
        # physical damage first: the plan works on the checkpoint as it is once torn files are
        # moved aside (operations/damage.py)
        self.damage = assess(req)
        self.st = masked(Storage.open(req.checkpoint), self.damage.absent)
        self.notes: list[str] = list(self.damage.notes)
        self._commits: dict[int, Any] = {}  # commit_entry's

    # -- evidence ----------------------------------------------------------------------------
    def inspect(self) -> QueryInspection:
        req, dmg = self.req, self.damage
        q = dmg.inspection if dmg.inspection is not None else inspect_checkpoint(
            req.checkpoint, sink=req.sink, sink_kind=req.sink_kind, app_id=req.app_id or dmg.query_id,
            quiet_period_s=req.quiet_period_s, absent=dmg.absent, sink_absent=dmg.sink_absent, deep=True)
        if dmg.query_id is not None:  # the plan writes metadata: its UNREADABLE is what it repairs
            meta = self.st.uri(METADATA_FILE)
            q = replace(q, query_id=dmg.query_id, findings=tuple(
                f for f in q.findings if not (f.code == "UNREADABLE" and f.details.get("path") == meta)))
        refuse_unsafe(q)
        if q.planned is None:
            raise Refused(f"{q.checkpoint}: nothing to align: offsets/ holds no batch")
        if req.kafka is not None:
            q = _refuse_source_moved(q, req.kafka)
        missing_parts = [f for f in q.findings if f.code == "STATE_PARTITION_MISSING"]
        if missing_parts:
            raise Refused(f"{q.checkpoint}: {missing_parts[0].message}: align cannot recreate a state partition")
        return q

    def offsets_entry(self, b: int) -> Any:
        return parse_offsets(self.st.read(f"{OFFSETS_DIR}/{b}"), self.st.uri(f"{OFFSETS_DIR}/{b}"), b)

    def commit_entry(self, b: int) -> Any:
        """`commits/b` parsed, read once per plan (the restart point's checks read it twice)."""
        if b not in self._commits:
            self._commits[b] = parse_commit(self.st.read(f"{COMMITS_DIR}/{b}"), self.st.uri(f"{COMMITS_DIR}/{b}"), b)
        return self._commits[b]

    def commit_content(self, j: int, offsets_ids: set[int]) -> bytes:
        """`commits/j` as Spark writes it (v1): the watermark of the next batch when its offsets
        file is known, else the watermark batch j ran with (a lower bound, never too high)."""
        source = j + 1 if j + 1 in offsets_ids else j
        wm = self.offsets_entry(source).watermark_ms or 0
        return serialize_commit(wm)

    # -- the file sink -----------------------------------------------------------------------
    def file_sink_log(self, sink: Storage) -> FileSinkLog:
        """The log's entries: the newest compaction and the batches after it (what every reader
        reads; a bad one raises), and the older files a roll back below that compaction reads
        (a bad one is only unreadable: no reader and no restart opens it)."""
        files = list_file_sink_log(sink)
        compacts = files.compactions
        parsed: dict[int, Any] = {}
        unreadable: dict[int, str] = {}
        for b in files.ids:
            try:
                parsed[b] = files.read(sink, b)
            except StreamctlError as exc:
                if not compacts or b >= compacts[-1]:
                    raise
                unreadable[b] = str(exc)
        entries = {b: list(added_paths(p)) for b, p in parsed.items()}
        named = {path: size for p in parsed.values() for path, size in added_sizes(p).items()}
        return FileSinkLog(dict(files.present), entries, files.checksums, files.interval,
                           place(sink, named, count_rows=False), files, unreadable)


@dataclass
class Evidence:
    """What the checkpoint and its sink say, in the names of docs/model.md#positions: offsets
    ids O, commit ids K, planned P, committed C, sink epoch S (after the repartition holes the
    plan fills), the stores, and what limits a realignment."""

    q: QueryInspection
    st: Storage
    O: set[int]  # noqa: E741 - the model's names
    K: set[int]
    P: Optional[int]
    C: Optional[int]
    stores: list[Any]
    sink: Optional[SinkLog]
    sink_st: Optional[Storage]
    file_log: Optional[FileSinkLog]
    S_before: Optional[int]
    S: Optional[int]
    rollbackable: bool
    lost_epochs: list[int]  # committed epochs the sink lacks (a writer or a coordinated commit record lost)
    unfinished: Optional[int]  # the planned batch of an unfinished state repartition
    sink_holes: list[int]  # repartition batches the file sink's log lacks (filled by the plan)
    fmt2: bool  # checkpoint format 2 with state: commits name state file ids
    async_ok: bool  # async progress tracking proven (offsets conf) or stated (--async-progress)
    table: Optional[dict[str, Any]] = None  # an Iceberg sink's metadata (inspectors/iceberg.py read_table)
    table_rollbacks: dict[int, Any] = field(default_factory=dict)  # x -> iceberg.rollback's answer

    @property
    def c_(self) -> int:
        return -1 if self.C is None else self.C

    @property
    def s_(self) -> int:
        return -1 if self.S is None else self.S

    def fillable(self, j: int) -> bool:
        """commits/j can be rebuilt: its offsets are known and it names no state file ids."""
        return not self.fmt2 and j in self.O


def _refuse_source_moved(q: QueryInspection, kafka: Any) -> QueryInspection:
    """`q` with the broker's word on its Kafka positions (inspect epochs --bootstrap); refused
    when the broker no longer holds what a restart reads (SOURCE_EXPIRED, SOURCE_RESET): its
    records or its topic's offsets are gone, which no epoch of the checkpoint brings back, and
    the restart fails on it while failOnDataLoss is on (Spark's default)."""
    from streamctl.inspectors.kafka import KafkaBroker, with_kafka

    with KafkaBroker(kafka.bootstrap, kafka.config, kafka.timeout) as broker:
        q = with_kafka(q, broker)[0]
    moved = [f for f in q.findings if f.code in ("SOURCE_EXPIRED", "SOURCE_RESET")]
    if moved:
        raise Refused(f"{q.checkpoint}: {moved[0].code}: {moved[0].message}; align moves the checkpoint's and the "
                      "sink's positions, not the broker's: restart with failOnDataLoss=false to accept the loss, or "
                      "start a new checkpoint where `streamctl kafka starting-offsets` says")
    return q


def gather_evidence(pl: Planner, req: AlignRequest) -> Evidence:
    q = pl.inspect()
    unfixable = [f for f in q.findings if f.code in ("STATE_SCHEMA_MISSING", "STATE_METADATA_MISSING")]
    if unfixable:  # every epoch's restart reads them: no choice of epoch brings them back
        raise Refused(f"{q.checkpoint}: {unfixable[0].code}: {unfixable[0].message}; no realignment restores "
                      "state schema or operator metadata files: put them back from a copy of the checkpoint")
    refuse_corrupt_state(q, snapshot_aside=True)
    foreign = [f for f in q.findings if f.code == "SINK_FOREIGN_BATCHES"]
    if foreign:  # never roll another query's batches back as this one's (docs/model.md#sink-ownership)
        raise Refused(f"{q.checkpoint}: SINK_FOREIGN_BATCHES: {foreign[0].message}")
    left = [f for f in q.findings if f.code == "STATE_WITHOUT_LOGS"]
    if left:  # no batch of the logs says which state version is whose: nothing to align to
        raise Refused(f"{q.checkpoint}: STATE_WITHOUT_LOGS: {left[0].message}")
    gone = [f for f in q.findings if f.code == "SOURCE_GONE"]
    if gone:  # where the input went is not on disk: no plan can point the source's log at it
        raise Refused(f"{q.checkpoint}: SOURCE_GONE: {gone[0].message}")
    rewound = [f for f in q.findings if f.code == "SOURCE_REWOUND"]
    if rewound and req.to in ("auto", "max"):  # which records the sink should get again is the operator's call
        n = rewound[0].details["epochs"][0]
        raise Refused(f"{q.checkpoint}: SOURCE_REWOUND: {rewound[0].message}; align does not decide whether the sink "
                      f"gets those records again: restart as is to read them again, or roll batch {n} back with "
                      f"--to {n - 1} --discard-in-flight (Spark plans it again from batch {n - 1}'s end; after a "
                      "recreated topic, check the broker with --bootstrap first)")
    lost = [f for f in q.findings if f.code == "LOG_GAP" and str(f.details.get("log", "")).startswith(f"{SOURCES_DIR}/")]
    if lost:  # every restart reads the source's log: no choice of epoch brings its files back
        raise Refused(f"{q.checkpoint}: LOG_GAP: {lost[0].message}; align does not rebuild the file source's log: "
                      "put the files back from a copy of the checkpoint")
    lost_sink = [f for f in q.findings if f.code == "LOG_GAP" and f.details.get("log") == FILE_SINK_LOG]
    if lost_sink:  # Spark's next compaction and every reader read these files (BATCH_METADATA_NOT_FOUND); which
        # data files they listed is known nowhere else (a repartition batch's hole is SINK_REPARTITION_HOLE)
        raise Refused(f"{q.checkpoint}: LOG_GAP: {lost_sink[0].message}; align does not rebuild the file sink's log "
                      "(the restart fails reading it): put the files back from a copy of the sink")
    stores = [s for op in q.operators for s in op.stores]
    sink = q.sink
    sink_st: Optional[Storage] = None
    file_log: Optional[FileSinkLog] = None
    S: Optional[int] = None
    lost_epochs: list[int] = []
    if sink is not None:
        sink_st = masked(Storage.open(req.sink), pl.damage.sink_absent)  # type: ignore[arg-type]
        S = sink.epoch
        if sink.kind in ("delta", "iceberg") and not sink.app_id:
            raise Refused(f"{sink.uri}: the app id the {sink.kind} sink keys its epochs on (the query id) is unknown; pass --app-id")
        for f in sink.findings:
            if f.code == "SINK_WRITER_MISSING":
                lost_epochs += list(f.details.get("epochs", []))
            if f.code == "LOG_GAP" and f.details.get("log") == COORD_COMMITS:  # lost records: replayed from below
                lost_epochs += list(f.details.get("missing", []))

        if sink.kind == "file":
            file_log = pl.file_sink_log(sink_st)
    S_before = S
    if file_log is not None:
        file_log.interval = _compact_interval(q, file_log, req.sink_compact_interval)
    sink_holes = _repartition_holes(q, file_log)
    if sink_holes:  # the repartition batches read nothing: their empty sink entries make the sink whole
        S = max(sink_holes + ([S] if S is not None else []))  # a hole below the newest entry keeps S
        pl.notes.append(f"{FILE_SINK_LOG}/ gets the empty entry of repartition batch(es) {epochs_text(sink_holes)} "
                        "(v1, no files): exactly-once, the batch read no input")
    table = None
    if sink is not None and sink.kind == "iceberg" and sink_st is not None:
        from streamctl.inspectors.iceberg import read_table

        table = read_table(sink_st, sink.app_id)
    return Evidence(q, pl.st, set(q.offsets.batch_ids), set(q.commits.batch_ids), q.planned, q.committed, stores,
                     sink, sink_st, file_log, S_before, S, sink is not None and sink.kind in ROLLBACK_SINKS,
                     lost_epochs, _unfinished_repartition(q), sink_holes,
                     q.checkpoint_format == 2 and bool(stores), async_ok(q, req.async_progress), table)


def table_rollback(ev: Evidence, x: int) -> tuple[Optional[list[tuple[str, str, bytes]]], str, Optional[int]]:
    """An Iceberg table rolled back to the query's epoch x (inspectors/iceberg.py rollback), memoised
    per x: (files to write, what it does, the table's epoch after it) or (None, why not, None)."""
    if ev.table is None or ev.sink_st is None:
        return None, "not an Iceberg table", None
    if x not in ev.table_rollbacks:
        import time

        from streamctl.inspectors.iceberg import rollback

        ev.table_rollbacks[x] = rollback(ev.sink_st, ev.table, x, int(time.time() * 1000))
    return ev.table_rollbacks[x]


def keeps_next(ev: Evidence, req: AlignRequest, x: int) -> bool:
    """Restarting from x keeps the planned batch x+1 (Spark replays it) unless told to discard it."""
    return (x + 1 in ev.O) and not req.discard_in_flight and x + 1 != ev.unfinished


def moved_inputs(q: QueryInspection) -> dict[Any, Any]:
    """SOURCE_MOVED findings as MovedInput, by source id (an ordinal's int, a name's str)."""
    from streamctl.inspectors.replay import MovedInput

    moved = [MovedInput.of_finding(f.details) for f in q.findings if f.code == "SOURCE_MOVED"]
    return {m.source_id: m for m in moved}


def _unfinished_repartition(q: QueryInspection) -> Optional[int]:
    found = [int(f.details["epoch"]) for f in q.findings if f.code == "REPARTITION_UNFINISHED"]
    return found[0] if found else None


def repartition_target(q: QueryInspection) -> Any:
    found = [f.details.get("to_partitions") for f in q.findings if f.code == "REPARTITION_UNFINISHED"]
    return found[0] if found else "N"


def _compact_interval(q: QueryInspection, log: FileSinkLog, given: Optional[int]) -> Optional[int]:
    """The file sink's compaction interval: what its `.compact` files show, or what the operator
    gives (`--sink-compact-interval`) when there is none yet; refused when the two disagree or
    the given one does not fit the log's files (a plain file where a compaction belongs)."""
    if given is None:
        return log.interval
    if log.interval is not None and log.interval != given:
        raise Refused(f"{q.checkpoint}: --sink-compact-interval {given} differs from the interval {log.interval} the "
                      f"{FILE_SINK_LOG}/ .compact files show")
    misfit = [b for b, compact in sorted(log.present.items()) if compact != ((b + 1) % given == 0)]
    if misfit:
        b = misfit[0]
        raise Refused(f"{q.checkpoint}: --sink-compact-interval {given} does not fit {FILE_SINK_LOG}/"
                      f"{compactible_file(b, log.present[b])} (with it, batch {b} "
                      f"{'would not be' if log.present[b] else 'would be'} a compaction)")
    return given


def _repartition_holes(q: QueryInspection, log: Optional[FileSinkLog]) -> list[int]:
    """Repartition batches the file sink's log lacks (SINK_REPARTITION_HOLE). A hole on a
    compaction batch would need a `.compact` file merging the earlier entries: refused."""
    holes = sorted({int(e) for f in q.findings if f.code == "SINK_REPARTITION_HOLE" for e in f.details.get("missing", [])})
    if not holes or log is None:
        return holes
    if log.interval is None:
        raise Refused(f"{q.checkpoint}: the compaction interval of {FILE_SINK_LOG}/ is unknown (no .compact file yet): "
                      f"streamctl cannot tell whether repartition batch {holes[0]} needs a plain or a .compact entry; "
                      "pass --sink-compact-interval N (the query's spark.sql.streaming.fileSink.log.compactInterval, "
                      "Spark's default 10)")
    compacting = [b for b in holes if (b + 1) % log.interval == 0]
    if compacting:
        raise Refused(f"{q.checkpoint}: repartition batch {compacting[0]} falls on a compaction of {FILE_SINK_LOG}/ "
                      f"(interval {log.interval}): streamctl does not write compact files")
    return holes


def async_ok(q: QueryInspection, stated: bool) -> bool:
    """Async progress tracking's gaps are Spark's own (align keeps them) when its pattern is on
    disk and nothing makes the restart hang on the option, or the offsets conf proves it, or the
    operator says so (`--async-progress`). An unproven ASYNC_PROGRESS error (`offsets/P-1` lost,
    nothing proving the option) is rolled back like any lost pair (docs/model.md#verdicts-and-exit-codes)."""
    if not q.async_progress:
        return False
    return stated or not any(f.code == "ASYNC_PROGRESS" and f.severity == "error" for f in q.findings)

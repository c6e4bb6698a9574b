"""`streamctl align`: choose the epoch every writer can continue from, and plan the moves and
writes that put the checkpoint (and the sink) there. docs/model.md#align.

A target epoch X means: after the plan, `commits/X` is the newest commit and `offsets/X` the
newest fully done batch; the planned batch X+1 is kept when `offsets/X+1` exists (Spark replays it
with the same offsets; `--discard-in-flight` drops it); every state store restores version X+1
and newer versions are moved away; the sink holds exactly epochs <= X (newer sink commits and the
data files they list are moved away, so the replay rewrites them once).

- X < C is a roll back: epochs X+1..C are replayed.
- X > C is a roll forward ("complete the commit", the max rule): commits C+1..X are written
  because the WAL, every state store and the sink already hold those epochs.
- X == C keeps the commit log and only repairs around it (sink ahead/behind, gaps, orphans).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from streamctl.formats.checksum import checksum_base, crc_companions, crc_name, hadoop_crc, visible_crc_name
from streamctl.formats.commits import serialize_commit
from streamctl.formats.compactible import compactible_file
from streamctl.formats.coordinated_log import (
    COORD_COMMITS,
    COORD_DATA,
    COORD_STAGING,
    commit_record_name,
    epoch_of_folder,
)
from streamctl.formats.file_sink_log import EMPTY_SINK_ENTRY, FILE_SINK_LOG, added_paths
from streamctl.formats.names import batch_id_of, is_temp_name
from streamctl.formats.offsets import parse_offsets
from streamctl.formats.state import state_versions
from streamctl.inspectors.checkpoint import inspect_checkpoint
from streamctl.inspectors.findings import verdict_of
from streamctl.inspectors.masked import masked
from streamctl.inspectors.placement import Placement, place, rewrite_paths
from streamctl.inspectors.query_inspection import QueryInspection
from streamctl.inspectors.sinks import FileSinkLogFiles, SinkLog, list_file_sink_log
from streamctl.inspectors.storage import Storage
from streamctl.operations.damage import assess
from streamctl.operations.damage import rel_of as _rel_of
from streamctl.operations.plan import (
    DUPLICATES,
    EXACTLY_ONCE,
    LOSS,
    CheckpointRequest,
    Option,
    Plan,
    Refused,
    Step,
    epochs_text,
    liveness_evidence,
    refuse_corrupt_state,
    refuse_unsafe,
)

ROLLBACK_SINKS = ("file", "coordinated")
MAX_NAMED_BATCHES = 10  # missing sink-log batches a refusal names; it counts the rest
MAX_EPOCH_SPAN = 1_000_000  # epochs between two writers past which a restart point is refused, not walked


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


@dataclass
class _FileSinkLog:
    """Everything needed to roll a file sink back: its log files and their entries."""

    present: dict[int, bool]  # batch id -> is .compact
    entries: dict[int, list[str]]  # batch id -> added paths (as written in the log)
    checksums: Mapping[int, str]  # batch id -> its `.N[.compact].crc` name
    interval: Optional[int]
    placement: Placement = Placement()  # where the files the entries name are (a moved sink)
    files: Optional[FileSinkLogFiles] = None  # the one listing it was read from


class _Planner:
    def __init__(self, req: AlignRequest) -> None:
        self.req = req
        # physical damage first: the plan works on the checkpoint as it is once torn files are
        # moved aside (operations/damage.py)
        self.damage = assess(req)
        self.st = masked(Storage.open(req.checkpoint), self.damage.absent)
        self.notes: list[str] = list(self.damage.notes)

    # -- evidence ----------------------------------------------------------------------------
    def inspect(self) -> QueryInspection:
        req, dmg = self.req, self.damage
        q = dmg.inspection if dmg.inspection is not None else inspect_checkpoint(
            req.checkpoint, sink=req.sink, sink_kind=req.sink_kind, app_id=req.app_id or dmg.query_id,
            quiet_period_s=req.quiet_period_s, absent=dmg.absent, sink_absent=dmg.sink_absent, deep=True)
        if dmg.query_id is not None:  # the plan writes metadata: its UNREADABLE is what it repairs
            meta = self.st.uri("metadata")
            q = replace(q, query_id=dmg.query_id, findings=tuple(
                f for f in q.findings if not (f.code == "UNREADABLE" and f.details.get("path") == meta)))
        refuse_unsafe(q)
        if q.planned is None:
            raise Refused(f"{q.checkpoint}: nothing to align: offsets/ holds no batch")
        missing_parts = [f for f in q.findings if f.code == "STATE_PARTITION_MISSING"]
        if missing_parts:
            raise Refused(f"{q.checkpoint}: {missing_parts[0].message}: align cannot recreate a state partition")
        return q

    def offsets_entry(self, b: int) -> Any:
        return parse_offsets(self.st.read(f"offsets/{b}"), self.st.uri(f"offsets/{b}"), b)

    def commit_content(self, j: int, offsets_ids: set[int]) -> bytes:
        """`commits/j` as Spark writes it (v1): the watermark of the next batch when its offsets
        file is known, else the watermark batch j ran with (a lower bound, never too high)."""
        source = j + 1 if j + 1 in offsets_ids else j
        wm = self.offsets_entry(source).watermark_ms or 0
        return serialize_commit(wm)

    # -- the file sink -----------------------------------------------------------------------
    def file_sink_log(self, sink: Storage) -> _FileSinkLog:
        files = list_file_sink_log(sink)
        parsed = {b: files.read(sink, b) for b in files.ids}
        entries = {b: list(added_paths(p)) for b, p in parsed.items()}
        named = {path: 0 for paths in entries.values() for path in paths}
        return _FileSinkLog(dict(files.present), entries, files.checksums, files.interval,
                            place(sink, named, count_rows=False), files)

    def file_sink_steps(self, sink: Storage, log: _FileSinkLog, x: int,
                        check_only: bool = False) -> tuple[list[Step], list[str]]:
        """Steps that leave the file sink's log at batch x, with the data files of later batches
        moved away. Returns (steps, reasons it cannot be done); `check_only` returns the reasons
        alone, without asking the storage anything (it runs once per candidate epoch)."""
        def is_compact(b: int) -> bool:
            return log.interval is not None and (b + 1) % log.interval == 0

        def first_of_chain(last: int) -> int:
            """A reader of the log at `last` reads the newest compaction at or below it and every
            batch after it (every batch from 0 without compaction)."""
            return 0 if log.interval is None else max(((last + 1) // log.interval) * log.interval - 1, 0)

        newest = max(log.present)
        if x >= newest:
            return [], []
        # cost follows the files that exist: the chain's batches present, never range(0, x)
        lo = first_of_chain(x)
        kept = [b for b in sorted(log.present) if lo <= b <= x and log.present[b] == is_compact(b)]
        missing_count = x - lo + 1 - len(kept)
        kept_ids = set(kept)
        missing: list[int] = []
        b = lo
        while len(missing) < min(missing_count, MAX_NAMED_BATCHES):
            if b not in kept_ids:
                missing.append(b)
            b += 1
        steps: list[Step] = []
        kept_files: set[str] = set()
        for b in kept:
            kept_files.update(log.entries[b])
        if missing:
            # The only other record of those batches is a later compaction K, which merges them
            # with batch K's own files: nothing tells the files of the kept batches from those of
            # K, so the log cannot be rebuilt at x.
            later = sorted(b for b, c in log.present.items() if c and b > x)
            names = ", ".join(compactible_file(b, is_compact(b)) for b in missing) \
                + (f" and {missing_count - len(missing)} more" if missing_count > len(missing) else "")
            return [], [f"{FILE_SINK_LOG}/ lacks {names} needed to stop at batch {x}"
                        + (f": Spark deleted them after {FILE_SINK_LOG}/{later[0]}.compact, which merges them with the "
                           f"batches to roll back, so their files cannot be told apart" if later else "")]
        all_now: set[str] = set()
        for b in log.present:
            if first_of_chain(newest) <= b:
                all_now.update(log.entries.get(b, []))
        for b, compact in sorted(log.present.items()):
            if b > x:
                name = compactible_file(b, compact)
                steps.append(Step("move", "sink", f"{FILE_SINK_LOG}/{name}", f"sink commit of batch {b} > {x}"))
                if b in log.checksums:
                    steps.append(Step("move", "sink", f"{FILE_SINK_LOG}/{log.checksums[b]}", "its checksum"))
        reasons = []
        root = sink.display.partition("?")[0].rstrip("/")
        for path in sorted(all_now - kept_files):
            rel = log.placement.rel(path, root, sink.is_local)  # a moved sink: where the file is now
            if rel is None:
                reasons.append(f"{FILE_SINK_LOG} lists {path}, outside the sink root {root}: streamctl never touches it")
                continue
            if check_only:
                continue
            steps.append(Step("move", "sink", rel, "data file of a rolled-back batch"))
            hid = crc_name(rel)
            if sink.lookup(hid) is not None:
                steps.append(Step("move", "sink", hid, "its checksum"))
        return steps, reasons

    def coordinated_steps(self, sink: Storage, log: SinkLog, x: int) -> list[Step]:
        steps = []
        for e in log.epoch_ids:
            if e > x:
                steps.append(Step("move", "sink", f"{COORD_COMMITS}/{commit_record_name(e)}", f"sink commit record of epoch {e} > {x}"))
        for d in sink.list_dir(COORD_DATA) or []:
            epoch = epoch_of_folder(d.name)
            if d.is_dir and epoch is not None and epoch > x:
                steps.append(Step("move", "sink", f"{COORD_DATA}/{d.name}", "data files of a rolled-back epoch"))
        for d in sink.list_dir(COORD_STAGING) or []:
            if d.is_dir and d.name.isdigit() and int(d.name) > x:
                steps.append(Step("move", "sink", f"{COORD_STAGING}/{d.name}", "staged files of an uncommitted epoch"))
        return steps


def _option_text(o: Option) -> str:
    if not o.feasible:
        return f"--to {o.target}: not possible ({o.why})"
    affected = o.loss or o.duplicates
    return (f"--to {o.target} ({o.strategy}, {o.classification}"
            + (f" of epochs {epochs_text(affected)}: {o.why}" if affected else "") + ")")


@dataclass
class _Evidence:
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
    file_log: Optional[_FileSinkLog]
    S_before: Optional[int]
    S: Optional[int]
    rollbackable: bool
    missing_writer_epochs: list[int]
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


def _evidence(pl: _Planner, req: AlignRequest) -> _Evidence:
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
    lost = [f for f in q.findings if f.code == "LOG_GAP" and str(f.details.get("log", "")).startswith("sources/")]
    if lost:  # every restart reads the source's log: no choice of epoch brings its files back
        raise Refused(f"{q.checkpoint}: LOG_GAP: {lost[0].message}; align does not rebuild the file source's log: "
                      "put the files back from a copy of the checkpoint")
    stores = [s for op in q.operators for s in op.stores]
    sink = q.sink
    sink_st: Optional[Storage] = None
    file_log: Optional[_FileSinkLog] = None
    S: Optional[int] = None
    missing_writer_epochs: list[int] = []
    if sink is not None:
        sink_st = masked(Storage.open(req.sink), pl.damage.sink_absent)  # type: ignore[arg-type]
        S = sink.epoch
        if sink.kind in ("delta", "iceberg") and not sink.app_id:
            raise Refused(f"{sink.uri}: the app id the {sink.kind} sink keys its epochs on (the query id) is unknown; pass --app-id")
        for f in sink.findings:
            if f.code == "SINK_WRITER_MISSING":
                missing_writer_epochs += list(f.details.get("epochs", []))
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
    return _Evidence(q, pl.st, set(q.offsets.batch_ids), set(q.commits.batch_ids), q.planned, q.committed, stores,
                     sink, sink_st, file_log, S_before, S, sink is not None and sink.kind in ROLLBACK_SINKS,
                     missing_writer_epochs, _unfinished_repartition(q), sink_holes,
                     q.checkpoint_format == 2 and bool(stores), async_ok(q, req.async_progress), table)


def _table_rollback(ev: _Evidence, x: int) -> tuple[Optional[list[tuple[str, str, bytes]]], str, Optional[int]]:
    """An Iceberg table rolled back to the query's epoch x (inspectors/iceberg.py rollback), memoised
    per x: (files to write, what it does, the table's epoch after it) or (None, why not, None)."""
    if ev.table is None or ev.sink_st is None:
        return None, "not an Iceberg table", None
    if x not in ev.table_rollbacks:
        import time

        from streamctl.inspectors.iceberg import rollback

        ev.table_rollbacks[x] = rollback(ev.sink_st, ev.table, x, int(time.time() * 1000))
    return ev.table_rollbacks[x]


def _missing_below(ids: set[int], x: int) -> Optional[int]:
    """The newest id missing between the smallest of `ids` and x (exclusive), None when there is
    no hole (cost follows the ids that exist, never the numeric gap)."""
    nxt = x
    for b in sorted((b for b in ids if b < x), reverse=True):
        if nxt - b > 1:
            return nxt - 1
        nxt = b
    return None


def _hard_reasons(ev: _Evidence, x: int) -> list[str]:
    """Why no restart can start from epoch x, whatever the sink."""
    r = []
    if ev.P is not None and x > ev.P:
        r.append(f"epoch {x} is above the newest planned epoch {ev.P}")
    if x not in ev.O:
        r.append(f"offsets/{x} is missing")
    if x > 0 and x - 1 not in ev.O and not ev.async_ok:  # async: the previous file on disk
        r.append(f"offsets/{x - 1} is missing (Spark reads the two newest offsets files)")
    if x <= ev.c_:
        if x not in ev.K and not ev.fillable(x):
            r.append(f"commits/{x} is missing and cannot be rebuilt")
    elif ev.fmt2:
        r.append("rolling forward needs commit entries naming state file ids (checkpoint format 2); streamctl does not invent them")
    elif sum(1 for j in ev.O if ev.c_ < j <= x) != x - ev.c_:
        r.append(f"offsets of epochs {ev.c_ + 1}..{x} are incomplete")
    bad = [s.path for s in ev.stores if x + 1 not in s.restorable_versions]
    if bad:
        r.append(f"{len(bad)} state store(s) cannot restore version {x + 1} ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})")
    return r


class _AbsurdSpan(Exception):
    pass


def _span(lo: int, hi: int) -> list[int]:
    """Epochs lo..hi as a list; _AbsurdSpan past MAX_EPOCH_SPAN (cost must follow the files that
    exist: such a gap between two writers is refused, never walked)."""
    if hi - lo + 1 > MAX_EPOCH_SPAN:
        raise _AbsurdSpan(f"epochs {lo}..{hi}")
    return list(range(lo, hi + 1))


def _classify(ev: _Evidence, x: int, keep_next: bool) -> Option:
    """What restarting from x does to the sink: exactly-once, duplicates or loss (which epochs)."""
    strategy = "roll_forward" if x > ev.c_ else "rollback" if (x < ev.c_ or ev.s_ > x) else "keep"
    try:
        return _classified(ev, x, keep_next, strategy)
    except _AbsurdSpan as exc:
        return Option(strategy, x, LOSS, [], [], f"{exc}: more than {MAX_EPOCH_SPAN:,} epochs between the writers; "
                      "streamctl does not plan across such a gap", feasible=False)


def _classified(ev: _Evidence, x: int, keep_next: bool, strategy: str) -> Option:
    dup: list[int] = []
    loss: list[int] = []
    why = []
    sink, c_, s_ = ev.sink, ev.c_, ev.s_
    if sink is None:
        dup = _span(x + 1, c_)
        loss = _span(c_ + 1, x)
        if dup:
            why.append("no --sink given: the sink receives the replayed epochs again unless it skips them")
        if loss:
            why.append("no --sink given: nothing shows the sink holds the epochs this commits")
    else:
        loss = _span(s_ + 1, x)
        if loss:
            held = f"the sink's newest epoch is {ev.S}" if ev.S is not None else "the sink holds no epoch"
            why.append(f"{held}: epochs {epochs_text(loss)} would be marked done without reaching it")
        loss += [e for e in ev.missing_writer_epochs if e <= x and e not in loss]
        if not ev.rollbackable and s_ > x and not (keep_next and s_ == x + 1):
            back, text, _after = _table_rollback(ev, x) if sink.kind == "iceberg" else (None, "", None)
            if back is not None:
                why.append(text)
            else:
                extra = [e for e in _span(x + 1, s_) if e not in loss]
                loss += extra
                why.append(f"the {sink.kind} sink cannot be rolled back: it skips replayed epochs "
                           f"{epochs_text(extra)} by batch id, whatever they now carry" + (f" ({text})" if text else ""))
    loss.sort()
    cls = LOSS if loss else DUPLICATES if dup else EXACTLY_ONCE
    return Option(strategy, x, cls, dup, loss, "; ".join(why))


def _keeps_next(ev: _Evidence, req: AlignRequest, x: int) -> bool:
    """Restarting from x keeps the planned batch x+1 (Spark replays it) unless told to discard it."""
    return (x + 1 in ev.O) and not req.discard_in_flight and x + 1 != ev.unfinished


def _options(pl: _Planner, ev: _Evidence, req: AlignRequest) -> list[Option]:
    """Every retained epoch as a restart point: feasible or why not, and its classification."""
    if ev.unfinished is not None:
        pl.notes.append(
            f"offsets/{ev.unfinished} is an unfinished state repartition: the plan goes back to batch {ev.unfinished - 1}, "
            f"the checkpoint Spark starts from, and moves the repartition's planned batch and what it wrote; "
            f"the other choice is to run the repartition again: "
            f"spark._streamingCheckpointManager.repartition({ev.q.checkpoint!r}, {_repartition_target(ev.q)})")
    options: list[Option] = []
    log = ev.file_log
    for x in sorted(b for b in ev.O if b != ev.unfinished):
        reasons = _hard_reasons(ev, x)
        if not reasons and log is not None and log.present and x < max(log.present):
            _, sink_reasons = pl.file_sink_steps(ev.sink_st, log, x, check_only=True)  # type: ignore[arg-type]
            reasons += sink_reasons
        opt = _classify(ev, x, _keeps_next(ev, req, x))
        if reasons:
            opt.feasible = False
            opt.why = "; ".join(reasons)
        options.append(opt)
    return options


def _choose(ev: _Evidence, options: list[Option], req: AlignRequest) -> Option:
    """The option `--to` asks for (auto: the newest exactly-once one), or Refused."""
    checkpoint = ev.q.checkpoint
    feasible = [o for o in options if o.feasible]
    allowed = {EXACTLY_ONCE} | ({DUPLICATES} if req.allow_duplicates else set()) | ({LOSS} if req.allow_loss else set())
    if req.to == "auto":
        exact = [o for o in feasible if o.classification == EXACTLY_ONCE]
        ok = [o for o in feasible if o.classification in allowed]
        chosen = exact[-1] if exact else ok[-1] if ok else None
        if chosen is None:
            shown = feasible[-4:] or options[-3:]
            unread = [o for o in options if not o.feasible and o.why.startswith("SOURCE_NOT_REPLAYABLE")]
            raise Refused(f"{checkpoint}: no exactly-once realignment exists"
                          + "".join(f" (--to {o.target} is not possible: {o.why})" for o in unread[-1:] if o not in shown)
                          + "; options: " + "; ".join(_option_text(o) for o in shown)
                          + (". Pass --allow-duplicates or --allow-loss to accept one" if feasible else ""), options)
        return chosen
    if req.to == "max":
        if not feasible:
            raise Refused(f"{checkpoint}: no epoch can be restarted from: {options[-1].why if options else 'no offsets'}", options)
        chosen = feasible[-1]
    else:
        x = int(req.to)
        match = [o for o in options if o.target == x]
        if not match:
            raise Refused(f"{checkpoint}: --to {x}: offsets/{x} is not in the retained window "
                          f"{ev.q.offsets.oldest}..{ev.q.offsets.latest}", options)
        chosen = match[0]
        if not chosen.feasible:
            raise Refused(f"{checkpoint}: --to {x} is not possible: {chosen.why}", options)
    if chosen.classification not in allowed:
        flag = "--allow-loss" if chosen.classification == LOSS else "--allow-duplicates"
        raise Refused(f"{checkpoint}: --to {chosen.target} is not exactly-once ({chosen.classification} of epochs "
                      f"{epochs_text(chosen.loss or chosen.duplicates)}: {chosen.why}); pass {flag} to accept it", options)
    return chosen


def _choose_replayable(pl: _Planner, ev: _Evidence, options: list[Option], req: AlignRequest) -> tuple[Option, list[Step], dict[str, str]]:
    """`_choose`, and never a restart point whose replayed batches cannot be read again: the files
    a file source's log lists for epochs X+1..C (and the kept in-flight batch) must be where it says (SOURCE_NOT_REPLAYABLE,
    inspectors/replay.py). When every missing file is in the archive the operator names
    (`--source-archive`), the plan puts them back first (`put_back` steps, roots `archive` and
    `input`) and the candidate stays; otherwise it is infeasible and the next one is chosen (or
    the refusal names the files). Checked for the chosen candidate only: cost follows the choice.
    Returns the choice, its put-back steps and their roots."""
    from streamctl.inspectors.replay import put_back_of, unreplayable

    while True:
        chosen = _choose(ev, options, req)
        x = int(chosen.target)  # type: ignore[arg-type]
        # the replayed batches whose offsets exist (above them Spark plans anew from the sources),
        # the kept in-flight batch x+1 among them
        top = max(ev.c_, x + 1 if _keeps_next(ev, req, x) else x)
        end = max((b for b in ev.O if b <= top), default=None)
        if end is None or x >= end or not any(s.kind == "file" for s in ev.q.sources):
            return chosen, [], {}
        gone = unreplayable(pl.st, ev.q.sources, pl.offsets_entry(x), pl.offsets_entry(end), req.source_archive,
                            _moved_inputs(ev.q))
        if not gone:
            return chosen, [], {}
        back = None
        if req.source_archive is not None and all(len(u.archived) == len(u.missing) for u in gone):
            back = put_back_of(req.source_archive, [p for u in gone for p in u.missing])
        if back is not None:
            steps = [Step("put_back", "archive", rel, f"input of replayed epochs {x + 1}..{end}, archived by cleanSource")
                     for rel in back.rels]
            pl.notes.append(f"puts {len(back.rels)} input file(s) of the replayed epochs {x + 1}..{end} back from the "
                            f"archive {back.archive_root} to {back.input_root}, where the file source's log names them "
                            "(Spark archives them again once their batches commit)")
            return chosen, steps, {"archive": back.archive_root, "input": back.input_root}
        chosen.feasible = False
        chosen.why = (f"SOURCE_NOT_REPLAYABLE: the replay of epochs {x + 1}..{end} cannot read its input again: "
                      + "; ".join(u.text() for u in gone))


def _log_steps(ev: _Evidence, name: str, ids: set[int], above: int, listing: Any) -> list[Step]:
    """offsets/ or commits/: entries above the target, stale checksums, temp files."""
    steps = []
    for b in sorted(ids):
        if b > above:
            steps.append(Step("move", "checkpoint", f"{name}/{b}", f"{name} entry {b} > {above}"))
    for b in sorted(set(listing.crc_only) | {b for b in ids if b > above}):
        if b > above or b in listing.crc_only:
            rel = crc_name(f"{name}/{b}")
            if ev.st.lookup(rel) is not None and not (name == "commits" and b <= above and b not in ids and ev.fillable(b)):
                steps.append(Step("move", "checkpoint", rel, "checksum of a moved entry" if b in ids else "stale checksum (its file is gone)"))
    for t in listing.temp_files:
        steps.append(Step("move", "checkpoint", f"{name}/{t}", "temp file of an interrupted write"))
    return steps


def _checkpoint_log_steps(pl: _Planner, ev: _Evidence, x: int, new_p: int) -> list[Step]:
    """offsets/ and commits/ left at planned new_p and committed x: entries above moved, missing
    commits at or below x rebuilt where their offsets are known; otherwise the retained window
    narrowed to start after the newest hole (Spark never reads below P-1)."""
    O, K, c_ = ev.O, ev.K, ev.c_
    steps = _log_steps(ev, "offsets", O, new_p, ev.q.offsets) + _log_steps(ev, "commits", K, x, ev.q.commits)
    low_k = min(K) if K else 0
    writes = sorted({j for j in O if low_k <= j <= x and j not in K and ev.fillable(j)}
                    | {j for j in O if c_ < j <= x})  # rolling forward: every j has offsets (_hard_reasons)
    for j in writes:
        content = pl.commit_content(j, O)
        steps.append(Step("write", "checkpoint", f"commits/{j}", "complete the commit" if j > c_ else "rebuild a missing commit", content))
        steps.append(Step("write", "checkpoint", crc_name(f"commits/{j}"), "its checksum", hadoop_crc(content)))
    hole_o = _missing_below(O, x)
    hole_k = _missing_below(K | set(writes), x) if K else None
    holes = [h for h in (hole_o, hole_k) if h is not None]
    if holes and ev.async_ok:  # Spark's own gaps (ASYNC_PROGRESS): its restart reads the files around them
        pl.notes.append("async progress tracking: the gaps in offsets/ and commits/ are Spark's own and stay; "
                        "restart the query with asyncProgressTrackingEnabled=true")
    elif holes:
        cut = max(holes)
        for name, ids in (("offsets", O), ("commits", K)):
            for b in sorted(ids):
                if b <= cut:
                    steps.append(Step("move", "checkpoint", f"{name}/{b}", f"below the hole at {cut}: the retained window starts after it"))
                    if ev.st.lookup(crc_name(f"{name}/{b}")) is not None:
                        steps.append(Step("move", "checkpoint", crc_name(f"{name}/{b}"), "its checksum"))
        pl.notes.append(f"the retained window now starts at {cut + 1}: batch files up to the hole at {cut} moved away")
    return steps


def _state_steps(ev: _Evidence, x: int) -> list[Step]:
    """State versions above x+1, operator metadata of later batches, and files no restart uses."""
    steps: list[Step] = []
    reasons: dict[Optional[int], str] = {}  # one text per version
    by_shape: dict[str, list[tuple[str, str]]] = {}  # a listing's (name, reason) to move, by its shape
    st = ev.st
    for op in ev.q.operators:
        op_rel = f"state/{op.operator_id}"
        for s in op.stores:
            # the folder as the inspection listed it (as trim plans: one listing), its names'
            # versions in one regex (a rollback of 50 epochs moves 66,000 files: a listing and a
            # parse per name were half the plan); once for the stores listed alike
            # (the same `shape`, inspectors/state_listing.py: the same names in the same order)
            shape = s.files.shape[0] if s.files is not None and s.files.shape is not None else None
            movers = by_shape.get(shape) if shape is not None else None
            if movers is None:
                files = s.listing if s.files is not None else st.list_names(s.path)[0]
                above = dict(state_versions(files, x + 1))
                joined = "\n".join(files)
                temps = "tmp" in joined or "temp-" in joined
                movers = []  # in the listing's order (`above` keeps it)
                for name, v in ([(n, above.get(n)) for n in files if n in above or is_temp_name(n)] if temps
                                else above.items()):
                    why = reasons.get(v)
                    if why is None:
                        why = reasons[v] = f"state version {v} > {x + 1}" if v is not None else "temp file"
                    movers.append((name, why))
                if shape is not None:
                    by_shape[shape] = movers
            base = s.path + "/"  # a property: once per store, not per file
            # a folder's names are distinct, and so are the stores' folders
            steps += [Step("move", "checkpoint", base + name, why) for name, why in movers]
        for e in st.list_dir(f"{op_rel}/_metadata/v2") or []:
            b = batch_id_of(checksum_base(e.name))
            if b is not None and b > x:
                steps.append(Step("move", "checkpoint", f"{op_rel}/_metadata/v2/{e.name}", f"operator metadata of batch {b} > {x}"))
    orphans = [f for f in ev.q.findings if f.code == "STATE_ORPHANS"]
    seen = {s.path for s in steps} if orphans else set()
    for f in orphans:
        for uri in f.details.get("files", []):
            orphan = _rel_of(uri, st.display)
            if orphan and orphan not in seen:
                seen.add(orphan)
                steps.append(Step("move", "checkpoint", orphan, "state file no restart uses"))
                for comp in crc_companions(orphan):
                    if comp not in seen and st.lookup(comp) is not None:
                        seen.add(comp)
                        steps.append(Step("move", "checkpoint", comp, "its checksum"))
    return steps


def _snapshot_aside_steps(pl: _Planner, ev: _Evidence) -> list[Step]:
    """A torn or corrupt snapshot/zip whose older snapshot and later deltas/changelogs are intact
    (STATE_FILE_CORRUPT with `snapshot_aside`): moved aside with its checksum companions, so every
    Spark line restores the version from the older chain (4.1+'s auto snapshot repair does the same)."""
    steps: list[Step] = []
    for f in ev.q.findings:
        if f.code != "STATE_FILE_CORRUPT" or not f.details.get("snapshot_aside"):
            continue
        if ev.fmt2:  # the commit log names each version's snapshot by id: no older chain to fall back on here
            raise Refused(f"{ev.q.checkpoint}: STATE_FILE_CORRUPT: {f.message.split(': an older', 1)[0]}; with checkpoint "
                          "format 2 the commits name the snapshot a restart loads: put it back from a copy")
        for uri in f.details.get("files", []):
            rel = _rel_of(uri, pl.st.display)
            if not rel:
                raise Refused(f"{ev.q.checkpoint}: STATE_FILE_CORRUPT names {uri}, which is not inside the checkpoint")
            steps.append(Step("move", "checkpoint", rel, "torn or corrupt snapshot: the restart loads the older "
                                                         "snapshot and replays the changes above it"))
            for companion in (crc_name(rel), visible_crc_name(rel)):
                if pl.st.lookup(companion) is not None:
                    steps.append(Step("move", "checkpoint", companion, "its checksum"))
    if steps:
        pl.notes.append("a torn or corrupt snapshot is moved aside: the store restores from its older snapshot and "
                        "the deltas/changelogs above it")
    return steps


def _sink_steps(pl: _Planner, ev: _Evidence, x: int, earlier: list[Step]) -> tuple[list[Step], Optional[int]]:
    """The sink at epoch x: empty entries of repartition holes, later epochs rolled back (file and
    coordinated sinks), files no commit names. Returns (steps, the sink epoch after them)."""
    steps: list[Step] = []
    new_s = ev.S
    for b in ev.sink_holes:
        rel = f"{FILE_SINK_LOG}/{b}"
        steps.append(Step("write", "sink", rel, f"the empty sink-log entry of repartition batch {b}", EMPTY_SINK_ENTRY))
        steps.append(Step("write", "sink", crc_name(rel), "its checksum", hadoop_crc(EMPTY_SINK_ENTRY)))
    sink, sink_st = ev.sink, ev.sink_st
    if sink is None or sink_st is None:
        return steps, new_s
    if ev.rollbackable and ev.s_ > x:
        if sink.kind == "file":
            steps += pl.file_sink_steps(sink_st, ev.file_log, x)[0]  # type: ignore[arg-type]
        else:
            steps += pl.coordinated_steps(sink_st, sink, x)
        new_s = x
    elif sink.kind == "iceberg" and ev.s_ > x and not (_keeps_next(ev, pl.req, x) and ev.s_ == x + 1):
        back, text, after = _table_rollback(ev, x)
        if back is not None:  # chosen as exactly-once by _classified: the table goes back to epoch x
            steps += [Step(action, "sink", rel, "Iceberg table rollback through its catalog" if action != "write" else
                           "Iceberg table rollback: the new current metadata version" if rel.endswith(".metadata.json")
                           else "Iceberg table rollback: the version hint", content)
                      for action, rel, content in back]
            pl.notes.append(text)
            new_s = after
    for f in sink.findings:
        if f.code == "SINK_ORPHANS":
            for uri in f.details.get("files", []):
                srel = _rel_of(uri, sink_st.display)
                if srel and not any(srel.startswith(s.path + "/") or srel == s.path
                                    for s in earlier + steps if s.root == "sink"):
                    steps.append(Step("move", "sink", srel, "sink file no commit names"))
    if ev.file_log is not None:
        steps += _stale_sink_checksums(ev.file_log, new_s, earlier + steps)
        steps += _relocation_steps(pl, ev, earlier + steps)
    return steps, new_s


def _stale_sink_checksums(log: _FileSinkLog, new_s: Optional[int], earlier: list[Step]) -> list[Step]:
    """Hadoop checksums of sink-log batches that are gone, above the sink epoch the plan leaves:
    Spark's write of those batches on restart would fail on them (STALE_CHECKSUM)."""
    if log.files is None:
        return []
    moved = {s.path for s in earlier if s.root == "sink"}
    return [Step("move", "sink", f"{FILE_SINK_LOG}/{name}", "checksum of a sink-log batch that is gone")
            for name in log.files.stale_checksums(-1 if new_s is None else new_s)
            if f"{FILE_SINK_LOG}/{name}" not in moved]


def _relocation_steps(pl: _Planner, ev: _Evidence, earlier: list[Step]) -> list[Step]:
    """A moved or copied file sink (docs/model.md#moved-and-copied-sinks): every log file that
    stays and names a file under an old root is rewritten to name it where it is now, with its
    Hadoop sidecar; refused when a file a kept entry names exists nowhere."""
    log, sink_st = ev.file_log, ev.sink_st
    assert log is not None and sink_st is not None
    where = log.placement
    gone = {s.path for s in earlier if s.root == "sink" and s.action == "move"}
    kept = [b for b in sorted(log.present) if f"{FILE_SINK_LOG}/{_log_name(log, b)}" not in gone]
    lost = sorted({p for b in kept for p in log.entries.get(b, []) if p in set(where.missing)})
    if lost:
        raise Refused(f"{sink_st.display}: SINK_FILES_MISSING: {FILE_SINK_LOG}/ names {len(lost)} data file(s) that exist "
                      f"nowhere (first: {lost[0]}); align cannot bring their rows back: put the files back (from a copy of "
                      "the sink), then align rewrites where the log says they are")
    if not where.moved:
        return []
    steps: list[Step] = []
    rewritten = 0
    for b in kept:
        if not any(p in where.moved for p in log.entries.get(b, [])):
            continue
        rel = f"{FILE_SINK_LOG}/{_log_name(log, b)}"
        content = sink_st.read(rel)
        new = rewrite_paths(content, where.moved, sink_st)
        if new == content:
            continue
        rewritten += 1
        steps.append(Step("write", "sink", rel, "its data files' paths at the sink's current location", new))
        if b in log.checksums:
            steps.append(Step("write", "sink", f"{FILE_SINK_LOG}/{log.checksums[b]}", "its checksum", hadoop_crc(new)))
    if rewritten:
        pl.notes.append(f"{FILE_SINK_LOG}/: {rewritten} log file(s) name {len(where.moved)} data file(s) under "
                        f"{', '.join(where.old_roots[:3])}, where the sink was: their paths are rewritten to the sink's "
                        "current location, so a batch read of the sink sees every file again")
    return steps


def _moved_inputs(q: QueryInspection) -> dict[Any, Any]:
    """SOURCE_MOVED findings as MovedInput, by source id (an ordinal's int, a name's str)."""
    from streamctl.inspectors.replay import MovedInput

    moved = [MovedInput.of_finding(f.details) for f in q.findings if f.code == "SOURCE_MOVED"]
    return {m.source_id: m for m in moved}


def _moved_source_steps(pl: _Planner, ev: _Evidence) -> list[Step]:
    """An input folder moved with the checkpoint (SOURCE_MOVED, docs/model.md#moved-input): every
    file of `sources/<n>/` that names paths under the old base is rewritten to the new one, with
    its Hadoop sidecar, so the restart's `getBatch` finds the newest batch's files under the
    query's new path and the seen-files map knows the moved files by their new names."""
    from streamctl.formats.compactible import compactible_name

    steps: list[Step] = []
    for sid, m in sorted(_moved_inputs(ev.q).items()):
        rel_dir = f"sources/{sid}"
        entries = ev.st.list_dir(rel_dir) or []
        names = {e.name for e in entries if not e.is_dir}
        count = 0
        for name in sorted(names, key=lambda n: (compactible_name(n) or (-1, False))[0]):
            if compactible_name(name) is None:
                continue
            content = ev.st.read(f"{rel_dir}/{name}")
            new = m.rewrite_log(content)
            if new == content:
                continue
            count += 1
            steps.append(Step("write", "checkpoint", f"{rel_dir}/{name}", f"its input paths under {m.new_base}", new))
            if crc_name(name) in names:
                steps.append(Step("write", "checkpoint", crc_name(f"{rel_dir}/{name}"), "its checksum", hadoop_crc(new)))
        if count:
            pl.notes.append(f"{rel_dir}/: {count} log file(s) name input files under {m.old_base}, moved with the "
                            f"checkpoint to {m.new_base}: rewritten, so the restart finds them under the query's new "
                            f"path (restart it reading {m.new_folder} or the folder it was under)")
    return steps


def _log_name(log: _FileSinkLog, b: int) -> str:
    return compactible_file(b, log.present[b])


def _unique(steps: list[Step]) -> list[Step]:
    """Each path once, in order (a file may be named twice: e.g. a stale crc above the target)."""
    if len({s.root for s in steps}) <= 1 and len({s.path for s in steps}) == len(steps):
        return steps  # the usual case: one root, nothing twice (sets of the steps' own strings, no key made per step)
    unique: list[Step] = []
    keys: set[tuple[str, str]] = set()
    for s in steps:
        if (s.root, s.path) not in keys:
            keys.add((s.root, s.path))
            unique.append(s)
    return unique


def plan_align(req: AlignRequest) -> tuple[Plan, QueryInspection]:
    """The plan for `req`, or Refused (with the options) / StorageError: evidence -> options ->
    choice -> steps."""
    pl = _Planner(req)
    ev = _evidence(pl, req)
    options = _options(pl, ev, req)
    chosen, put_back, input_roots = _choose_replayable(pl, ev, options, req)
    x = int(chosen.target)  # type: ignore[arg-type]
    keep_next = _keeps_next(ev, req, x)
    new_p = x + 1 if keep_next else x
    steps = (_checkpoint_log_steps(pl, ev, x, new_p) + _snapshot_aside_steps(pl, ev) + _state_steps(ev, x)
             + _moved_source_steps(pl, ev))
    sink_steps, new_s = _sink_steps(pl, ev, x, steps)
    steps = steps + sink_steps
    steps = _unique(pl.damage.first_steps(steps) + put_back + steps)

    exp_errors = []
    if ev.sink is not None:
        ns = -1 if new_s is None else new_s
        if ns < x:
            exp_errors.append("SINK_BEHIND")
        elif ns > x and not (ns == new_p and new_p == x + 1):
            exp_errors.append("SINK_AHEAD")
    expected = "misaligned" if exp_errors else ("recoverable" if keep_next else "aligned")
    q, sink = ev.q, ev.sink
    plan = Plan(
        command="align",
        roots={"checkpoint": ev.st.display, **({"sink": ev.sink_st.display} if ev.sink_st is not None else {}),
               **input_roots},
        strategy=chosen.strategy if steps else "none", target=x, classification=chosen.classification, steps=steps,
        expected_verdict=expected, duplicates=chosen.duplicates, loss=chosen.loss,
        before={"planned": ev.P, "committed": ev.C, "sink_epoch": ev.S_before, "state_epoch": q.state_epoch,
                "verdict": "unreadable" if pl.damage.torn else q.verdict,
                "findings": sorted({f.code for f in q.findings} | ({"UNREADABLE"} if pl.damage.torn else set()))},
        after={"planned": new_p, "committed": x, "sink_epoch": new_s, "expected_errors": exp_errors},
        options=options[-8:], notes=pl.notes,
        settings={"sink_kind": sink.kind if sink is not None else None, "app_id": req.app_id or (sink.app_id if sink else None),
                  **({"async_progress": True} if ev.async_ok and req.async_progress else {})},
    )
    if chosen.why and chosen.classification != EXACTLY_ONCE:
        plan.notes.append(chosen.why)
    plan.before["liveness"] = liveness_evidence(q, req.quiet_period_s)
    if pl.damage.torn:  # the positions an undo puts back: the files as they are, torn ones included
        plan.before.update(pl.damage.on_disk)
    return plan, q


def _unfinished_repartition(q: QueryInspection) -> Optional[int]:
    found = [int(f.details["epoch"]) for f in q.findings if f.code == "REPARTITION_UNFINISHED"]
    return found[0] if found else None


def _repartition_target(q: QueryInspection) -> Any:
    found = [f.details.get("to_partitions") for f in q.findings if f.code == "REPARTITION_UNFINISHED"]
    return found[0] if found else "N"


def _compact_interval(q: QueryInspection, log: _FileSinkLog, given: Optional[int]) -> Optional[int]:
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


def _repartition_holes(q: QueryInspection, log: Optional[_FileSinkLog]) -> list[int]:
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


def verify_align(plan: Plan) -> tuple[bool, dict[str, Any]]:
    """Inspect again: positions and verdict must be the promised ones."""
    q = inspect_checkpoint(plan.roots["checkpoint"], sink=plan.roots.get("sink"),
                           sink_kind=plan.settings.get("sink_kind") or "auto", app_id=plan.settings.get("app_id"),
                           quiet_period_s=0, deep=True)
    findings = q.findings
    if plan.settings.get("async_progress"):  # the operator said the option is on: its gaps are no error
        findings = tuple(f for f in findings if f.code != "ASYNC_PROGRESS")
    got = {"planned": q.planned, "committed": q.committed,
           "sink_epoch": q.sink.epoch if q.sink is not None else None, "verdict": verdict_of(findings),
           "findings": sorted({f.code for f in q.findings})}
    want = plan.after
    ok = (q.planned == want.get("planned") and q.committed == want.get("committed")
          and (q.sink is None or got["sink_epoch"] == want.get("sink_epoch")) and got["verdict"] == plan.expected_verdict)
    return ok, got


def _verify(plan: Plan, _roots: Any) -> tuple[bool, dict[str, Any]]:
    return verify_align(plan)


def operation() -> Any:
    """align, as the runner (operations/runner.py) runs, resumes and undoes it."""
    from streamctl.operations.runner import Operation

    return Operation("align", _verify)

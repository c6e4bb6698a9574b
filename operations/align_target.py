"""align's choice of target epoch (docs/model.md#align): every retained epoch as a restart point
(why not, when it is not feasible), what it does to the sink (exactly-once, duplicates or loss:
a roll back, a roll forward or a keep), the choice `--to` asks for, and never a restart point
whose replayed batches cannot read their input again."""
from __future__ import annotations

from typing import Any

from streamctl.operations.align_evidence import (
    AlignRequest,
    Evidence,
    Planner,
    keeps_next,
    moved_inputs,
    repartition_target,
    table_rollback,
)
from streamctl.operations.align_sink_steps import file_sink_steps
from streamctl.operations.plan import DUPLICATES, EXACTLY_ONCE, LOSS, Option, Refused, Step, epochs_text

MAX_EPOCH_SPAN = 1_000_000  # epochs between two writers past which a restart point is refused, not walked


def _hard_reasons(ev: Evidence, x: int) -> list[str]:
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


def _classify(ev: Evidence, x: int, keep_next: bool) -> Option:
    """What restarting from x does to the sink: exactly-once, duplicates or loss (which epochs)."""
    strategy = "roll_forward" if x > ev.c_ else "rollback" if (x < ev.c_ or ev.s_ > x) else "keep"
    try:
        return _classified(ev, x, keep_next, strategy)
    except _AbsurdSpan as exc:
        return Option(strategy, x, LOSS, [], [], f"{exc}: more than {MAX_EPOCH_SPAN:,} epochs between the writers; "
                      "streamctl does not plan across such a gap", feasible=False)


def _classified(ev: Evidence, x: int, keep_next: bool, strategy: str) -> Option:
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
        lacks = [e for e in ev.lost_epochs if e <= x and e not in loss]
        if lacks:
            why.append(f"the sink lacks committed epoch(s) {epochs_text(lacks)} (a writer or a commit record lost): "
                       f"a restart from {x} never writes them again")
        loss += lacks
        if not ev.rollbackable and s_ > x and not (keep_next and s_ == x + 1):
            back, text, _after = table_rollback(ev, x) if sink.kind == "iceberg" else (None, "", None)
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


def _skipped_replay_fails(ev: Evidence, x: int) -> str:
    """Why a restart from x fails on checkpoint format 2 over a Delta sink that holds a later batch:
    the writer skips it by its txn version without running the query, no state store commits, and
    Spark's commit of the batch names no store checkpoint (observed 4.3.0: "assertion failed:
    CheckpointInfo length: 0"). A Delta table is not rolled back to x (a restore keeps the txn)."""
    return (f"checkpoint format 2: the restart replays batch(es) {epochs_text(_span(x + 1, ev.s_))}, which the delta "
            f"sink holds and skips without running the query, and Spark's commit of a batch whose state stores never "
            f"ran fails (\"assertion failed: CheckpointInfo length: 0\"); the Delta table is not rolled back to "
            f"batch {x} (a restore keeps its txn version)")


def restart_options(pl: Planner, ev: Evidence, req: AlignRequest) -> list[Option]:
    """Every retained epoch as a restart point: feasible or why not, and its classification."""
    if ev.unfinished is not None:
        pl.notes.append(
            f"offsets/{ev.unfinished} is an unfinished state repartition: the plan goes back to batch {ev.unfinished - 1}, "
            f"the checkpoint Spark starts from, and moves the repartition's planned batch and what it wrote; "
            f"the other choice is to run the repartition again: "
            f"spark._streamingCheckpointManager.repartition({ev.q.checkpoint!r}, {repartition_target(ev.q)})")
    options: list[Option] = []
    log = ev.file_log
    for x in sorted(b for b in ev.O if b != ev.unfinished):
        reasons = _hard_reasons(ev, x)
        if not reasons and log is not None and log.present and x < max(log.present):
            _, sink_reasons = file_sink_steps(ev.sink_st, log, x, check_only=True)  # type: ignore[arg-type]
            reasons += sink_reasons
        if not reasons and ev.fmt2 and ev.sink is not None and ev.sink.kind == "delta" and ev.s_ > x:
            reasons.append(_skipped_replay_fails(ev, x))
        opt = _classify(ev, x, keeps_next(ev, req, x))
        if reasons:
            opt.feasible = False
            opt.why = "; ".join(reasons)
        options.append(opt)
    return options


def _option_text(o: Option) -> str:
    if not o.feasible:
        return f"--to {o.target}: not possible ({o.why})"
    affected = o.loss or o.duplicates
    return (f"--to {o.target} ({o.strategy}, {o.classification}"
            + (f" of epochs {epochs_text(affected)}: {o.why}" if affected else "") + ")")


def _choose(ev: Evidence, options: list[Option], req: AlignRequest) -> Option:
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


def _unreadable_restart_reads(pl: Planner, ev: Evidence, req: AlignRequest, x: int) -> str:
    """The log files a restart from x reads that cannot be read ("" when none): `commits/x`
    (below the newest commit: the inspection judged only that one) and the two newest offsets
    files the plan leaves. Checked for the chosen candidate only: cost follows the choice."""
    from streamctl.formats.errors import StreamctlError
    from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR

    top = x + 1 if keeps_next(ev, req, x) else x
    reads: list[tuple[str, Any, int]] = [(COMMITS_DIR, pl.commit_entry, x)] if 0 <= x < ev.c_ and x in ev.K else []
    reads += [(OFFSETS_DIR, pl.offsets_entry, b) for b in (top, top - 1) if b in ev.O]
    got: dict[tuple[str, int], Any] = {}
    for log, read, b in reads:
        try:
            got[(log, b)] = read(b)
        except StreamctlError as exc:
            return f"{log}/{b}, which cannot be read ({getattr(exc, 'reason', exc)})"
    if (OFFSETS_DIR, top) in got:
        from streamctl.formats.offsets import kafka_rewound, offsets_go_back

        why = offsets_go_back(got.get((OFFSETS_DIR, top - 1)), got[(OFFSETS_DIR, top)])
        if why is not None:
            return f"{OFFSETS_DIR}/{top}, which Spark cannot have written ({why})"
        back = kafka_rewound(got.get((OFFSETS_DIR, top - 1)), got[(OFFSETS_DIR, top)])
        if back:  # its replay fails on data loss, or the restart reads the records between again
            r = back[0]
            return (f"{OFFSETS_DIR}/{top}, which takes {r.topic}-{r.partition} back from batch {top - 1}'s offset "
                    f"{r.before} (SOURCE_REWOUND)")
    return ""


def _torn_state_chain(pl: Planner, ev: Evidence, x: int) -> str:
    """The first state file a restart from x reads to restore version x + 1 that is torn or does
    not match its checksum ("" when none): the inspection judged the chain of C + 1 only. A
    format-2 store loads the id `commits/x` names, by its lineage. Locally, and on object stores
    a ranged read or two per store, for the chosen candidate only."""
    if x >= ev.c_ or not ev.stores:
        return ""
    from streamctl.formats.errors import StreamctlError
    from streamctl.formats.layout import COMMITS_DIR
    from streamctl.inspectors.chains import Chains

    named: Any = None  # commits/x's stateUniqueIds (format 2), read once
    chains = Chains(pl.st, deep=True)
    top = max((b for b in ev.O if b <= x + 1), default=None)
    try:
        if top is not None:
            chains.set_codec(dict(pl.offsets_entry(top).conf))
    except StreamctlError:
        pass  # no conf: the codec is not judged (the offsets a restart reads are checked before)
    for s in ev.stores:
        files = getattr(s, "files", None)
        if files is None:
            continue
        valid: dict[int, str] = {}
        if files.uses_unique_ids:
            if named is None:
                try:
                    named = pl.commit_entry(x).state_unique_ids or {}
                except StreamctlError as exc:
                    return f"{COMMITS_DIR}/{x}, which cannot be read ({getattr(exc, 'reason', exc)})"
            ids = named.get(str(files.operator_id), ())
            have = files.incr_ids.get(x + 1, set()) | files.full_ids.get(x + 1, set())
            uid = next((u for u in (ids[files.partition] if files.partition < len(ids) else ()) if u in have), None)
            if uid is None:
                return f"{s.path}: version {x + 1} with an id commits/{x} names, which is not there"
            valid = {x + 1: uid}
        status = chains.status_of(files, x + 1, ev.P, valid)
        if not status.restorable_required:
            return f"{s.path}: version {x + 1}, which cannot be restored ({', '.join(status.missing[:2])})"
        judged = chains.judge(status, files)
        if judged:
            return (f"{judged[0][0]} to restore version {x + 1}"
                    + (" (Spark 4.1+'s auto snapshot repair may read an older chain around it; a roll back does not "
                       "count on it)" if judged[1] else ""))
    return ""


def choose_replayable(pl: Planner, ev: Evidence, options: list[Option], req: AlignRequest) -> tuple[Option, list[Step], dict[str, str]]:
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
        bad = _unreadable_restart_reads(pl, ev, req, x) or _torn_state_chain(pl, ev, x)
        if bad:
            chosen.feasible = False
            chosen.why = f"a restart from {x} reads {bad}"
            continue
        # the replayed batches whose offsets exist (above them Spark plans anew from the sources),
        # the kept in-flight batch x+1 among them
        top = max(ev.c_, x + 1 if keeps_next(ev, req, x) else x)
        end = max((b for b in ev.O if b <= top), default=None)
        if end is None or x >= end or not any(s.kind == "file" for s in ev.q.sources):
            return chosen, [], {}
        gone = unreplayable(pl.st, ev.q.sources, pl.offsets_entry(x), pl.offsets_entry(end), req.source_archive,
                            moved_inputs(ev.q))
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

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

from typing import Any

from streamctl.inspectors.checkpoint import inspect_checkpoint
from streamctl.inspectors.findings import verdict_of
from streamctl.inspectors.query_inspection import QueryInspection
from streamctl.operations.align_checkpoint_steps import (
    checkpoint_log_steps,
    moved_source_steps,
    snapshot_aside_steps,
    state_steps,
)
from streamctl.operations.align_evidence import AlignRequest, Planner, gather_evidence, keeps_next
from streamctl.operations.align_sink_steps import sink_steps
from streamctl.operations.align_target import choose_replayable, restart_options
from streamctl.operations.plan import EXACTLY_ONCE, Plan, Step, liveness_evidence


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
    from streamctl.operations.align_rewind import resolve_to, savepoints_lost, with_savepoint_sink

    req = with_savepoint_sink(req)
    pl = Planner(req)
    ev = gather_evidence(pl, req)
    req, rewind = resolve_to(ev.q, req, pl.notes)  # --to TIME / savepoint:NAME as the epoch it names
    options = restart_options(pl, ev, req)
    chosen, put_back, input_roots = choose_replayable(pl, ev, options, req)
    x = int(chosen.target)  # type: ignore[arg-type]
    keep_next = keeps_next(ev, req, x)
    new_p = x + 1 if keep_next else x
    steps = (checkpoint_log_steps(pl, ev, x, new_p) + snapshot_aside_steps(pl, ev) + state_steps(ev, x)
             + moved_source_steps(pl, ev))
    on_sink, new_s = sink_steps(pl, ev, x, steps)
    steps = steps + on_sink
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
    if rewind is not None:
        plan.after["rewind"] = rewind
    lost = savepoints_lost(q, x, plan.notes) if steps else []
    if lost:
        plan.after["savepoints_lost"] = lost
    if pl.damage.torn:  # the positions an undo puts back: the files as they are, torn ones included
        plan.before.update(pl.damage.on_disk)
    return plan, q


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


def fleet_planner(settings: dict[str, Any]) -> Any:
    """A fleet run's planner of one checkpoint, from the run's settings (kept in its run record)."""
    def plan(e: Any) -> Any:
        return plan_align(AlignRequest(e.checkpoint, e.sink, e.sink_kind, e.app_id, settings["quiet_period_s"],
                                       **{k: v for k, v in settings.items() if k != "quiet_period_s"}))[0]

    return plan

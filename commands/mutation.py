"""The execution path every mutating command shares (docs/model.md#the-mutation-path): lock,
plan again under the lock, write the plan, run the journaled steps, verify; and `--resume` /
`--undo` of an earlier operation from its backup folder. Commands supply the planner, the
verifier and how to print a plan."""
from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import typer

from streamctl.cli import render
from streamctl.cli.errors import fail
from streamctl.cli.exit_codes import ExitCode

API_VERSION = "streamctl/v1"

Planner = Callable[[], Any]  # -> Plan (raises Refused)
Verifier = Callable[[Any], tuple[bool, dict[str, Any]]]
Lines = Callable[[Any, bool], list[str]]


def front(name: str, checkpoint: Optional[str], sink: Optional[str], sink_kind: str, app_id: Optional[str],
          resume: Optional[str], undo: Optional[str], break_lock: bool, verify: Verifier, lines: Lines,
          as_json: bool) -> Optional[tuple[str, Optional[str], str, Optional[str], Any]]:
    """The common front of a mutating command: `--resume` / `--undo` are run here (None is
    returned); otherwise (checkpoint location, sink, sink kind, app id, config), a named
    pipeline's sink filling in what the flags leave out."""
    from streamctl.cli.config import load_config, resolve_checkpoint
    from streamctl.cli import context
    from streamctl.inspectors.errors import UsageError

    if resume and undo:
        raise UsageError("--resume and --undo cannot be combined")
    if (resume or undo) and checkpoint:
        raise UsageError("--resume/--undo take the operation's backup folder; do not also name a checkpoint")
    if resume or undo:
        resume_or_undo(name, (resume or undo), bool(undo), break_lock, verify, lines, as_json)  # type: ignore[arg-type]
        return None
    if not checkpoint:
        raise UsageError("name a CHECKPOINT (or use --resume / --undo)")
    config = load_config(context.CONFIG_PATH)
    location, pipeline = resolve_checkpoint(checkpoint, config)
    if sink is None and pipeline is not None:
        sink = pipeline.sink
        if sink_kind == "auto" and pipeline.sink_kind:
            sink_kind = pipeline.sink_kind
        app_id = app_id or pipeline.app_id
    return location, sink, sink_kind, app_id, config


def step_lines(plan: Any, backup_word: str = "backup") -> list[str]:
    """The numbered steps of a plan, every one of them (docs/model.md#the-mutation-path: plans are shown in full)."""
    lines = [f"  steps ({len(plan.steps)}):"]
    for i, s in enumerate(plan.steps, 1):
        lines.append(f"    {i:>4}. {s.describe().replace('to the backup', f'to the {backup_word}')}")
    return lines


def emit(doc: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        render.emit_json(doc)
    else:
        for line in lines:
            sys.stdout.write(line + "\n")


def refused(exc: Any, as_json: bool, kind: str) -> typer.Exit:
    if as_json:
        render.emit_json({"api_version": API_VERSION, "kind": kind, "reason": str(exc),
                          "options": [o.to_record() for o in getattr(exc, "options", [])]})
    return fail(str(exc), ExitCode.REFUSED)


def live_by_lease(location: str) -> Optional[str]:
    """The LIVE_QUERY message when the agent's lease is live (the quiet period is off: the
    operation itself has just written files)."""
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    q = inspect_checkpoint(location, quiet_period_s=0)
    live = [f for f in q.findings if f.code == "LIVE_QUERY"]
    return f"LIVE_QUERY: {live[0].message}" if live else None


def roots_of(plan: Any) -> dict[str, Any]:
    from streamctl.operations.files import Root

    return {name: Root(name, loc) for name, loc in plan.roots.items()}


def finish(plan: Any, backup: Any, executor: Any, lock: Any, as_json: bool, resumed: bool, verify: Verifier,
           lines: Lines, name: str) -> None:
    ok, got = verify(plan)
    executor.journal.append({"event": "verified", "ok": ok, "got": got})
    lock.release()
    doc = {"api_version": API_VERSION, "kind": f"{name.title()}Result", "executed": True, "resumed": resumed,
           "backup": backup.location, "journal": executor.journal.path(), "plan": plan.to_record(),
           "verified": ok, "after": got}
    out = lines(plan, True) + [
        f"backup and journal: {backup.location} (undo: streamctl {name} --undo {backup.location})",
        f"verified: {'yes' if ok else 'NO'} — now planned {got.get('planned')}, committed {got.get('committed')}, "
        f"sink epoch {got.get('sink_epoch')}, verdict {got.get('verdict')} (expected {plan.expected_verdict})"]
    emit(doc, as_json, out)
    if not ok:
        raise fail(f"{plan.roots['checkpoint']}: {name} ran but the checkpoint is {got.get('verdict')} "
                   f"({', '.join(got.get('findings') or [])}), not the promised {plan.expected_verdict}", ExitCode.NOT_VERIFIED)


def execute(name: str, location: str, planner: Planner, verify: Verifier, lines: Lines, backup_dir: Optional[str],
            break_lock: bool, as_json: bool) -> None:
    """Lock, plan again under the lock (what is executed is what was inspected), run, verify."""
    import secrets
    import time

    from streamctl.operations.plan import Refused
    from streamctl.operations.executor import Conflict, Executor
    from streamctl.operations.files import Root
    from streamctl.operations.lock import Lock, LockHeld
    from streamctl.operations.runner import check_backup_target, check_plan

    op_id = f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(2)}"
    ck_root = Root("checkpoint", location)
    try:  # validated before the lock: an early failure leaves no lock behind
        backup = check_backup_target(backup_dir or ck_root.uri(f"_streamctl/backups/{op_id}"))
        lock = Lock.acquire(ck_root, name, op_id, break_lock=break_lock)
    except (LockHeld, Refused) as exc:
        raise refused(exc, as_json, f"{name.title()}Refusal") from None
    try:  # until the first step runs, every failure releases the lock
        plan = planner()
        if plan.steps:
            plan.op_id = op_id
            check_plan(plan, roots_of(plan))
            Executor(plan, roots_of(plan), backup).write_plan()
    except (Refused, Conflict) as exc:
        lock.release()
        raise refused(exc, as_json, f"{name.title()}Refusal") from None
    except BaseException:
        lock.release()
        raise
    if not plan.steps:  # decided under the lock: not while another operation is half done
        lock.release()
        emit({"api_version": API_VERSION, "kind": f"{name.title()}Plan", "executed": False, "plan": plan.to_record()},
             as_json, [f"Nothing to do: {location} is {plan.before.get('verdict')}; no step is needed"])
        return
    try:
        with render.progress(not as_json) as tick:  # files, bytes, rate, eta on a terminal's stderr
            executor = Executor(plan, roots_of(plan), backup, meter=tick)
            executor.run()
    except Conflict as exc:
        raise fail(f"{exc}; resume with: streamctl {name} --resume {backup.location}", ExitCode.REFUSED) from None
    except KeyboardInterrupt:
        raise fail(f"interrupted; the lock is kept: resume with streamctl {name} --resume {backup.location} "
                   "or undo with --undo", ExitCode.INTERRUPTED) from None
    finish(plan, backup, executor, lock, as_json, False, verify, lines, name)


def resume_or_undo(name: str, backup_location: str, undo: bool, break_lock: bool, verify: Verifier, lines: Lines,
                   as_json: bool) -> None:
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.operations.plan import Refused
    from streamctl.operations.executor import Conflict, Executor, load
    from streamctl.operations.lock import Lock, LockHeld

    plan, backup = load(backup_location)
    if plan.command != name:
        raise fail(f"{backup.uri('plan.json')}: a plan of `streamctl {plan.command}`, not of {name}", ExitCode.USAGE)
    roots = roots_of(plan)
    journal = Executor(plan, roots, backup).journal.read()
    if journal.undo_finished or (journal.undone and not undo):  # a crashed undo is simply undone again
        raise refused(Refused(f"{backup.location}: this operation was undone; plan a new one instead of "
                              f"{'undoing' if undo else 'resuming'} it"), as_json, f"{name.title()}Refusal")
    try:
        lock = Lock.acquire(roots["checkpoint"], f"{name} --{'undo' if undo else 'resume'}", plan.op_id,
                            break_lock=break_lock, takeover_op=plan.op_id)
    except LockHeld as exc:
        raise refused(exc, as_json, f"{name.title()}Refusal") from None
    live = live_by_lease(plan.roots["checkpoint"])
    if live:
        lock.release()
        raise refused(Refused(f"{plan.roots['checkpoint']}: {live}"), as_json, f"{name.title()}Refusal")
    if not undo:
        try:
            with render.progress(not as_json) as tick:
                executor = Executor(plan, roots, backup, meter=tick)
                executor.run()
        except Conflict as exc:
            raise fail(str(exc), ExitCode.REFUSED) from None
        finish(plan, backup, executor, lock, as_json, True, verify, lines, name)
        return
    try:
        with render.progress(not as_json) as tick:
            restored = Executor(plan, roots, backup, meter=tick).undo()
    except Conflict as exc:
        lock.release()
        raise refused(exc, as_json, f"{name.title()}Refusal") from None
    lock.release()
    q = inspect_checkpoint(plan.roots["checkpoint"], sink=plan.roots.get("sink"),
                           sink_kind=plan.settings.get("sink_kind") or "auto", app_id=plan.settings.get("app_id"),
                           quiet_period_s=0)
    back = {"planned": q.planned, "committed": q.committed, "sink_epoch": q.sink.epoch if q.sink else None}
    ok = all(back[k] == plan.before.get(k) for k in back if k != "sink_epoch" or q.sink is not None)
    doc = {"api_version": API_VERSION, "kind": f"{name.title()}Undo", "backup": backup.location, "restored": len(restored),
           "after": dict(back, verdict=q.verdict), "before_operation": plan.before, "verified": ok}
    emit(doc, as_json, [f"Undone: {len(restored)} file(s) restored from {backup.location}",
                        f"now planned {back['planned']}, committed {back['committed']}, sink epoch {back['sink_epoch']}, "
                        f"verdict {q.verdict} (as before the operation: {'yes' if ok else 'NO'})"])
    if not ok:
        raise fail(f"{plan.roots['checkpoint']}: undo ran but the positions differ from before the operation",
                   ExitCode.NOT_VERIFIED)

"""`streamctl align`: plan, and with --execute carry out, a realignment of one checkpoint (and
its sink) that keeps delivery exactly-once. Also `--resume JOURNAL` and `--undo BACKUP`.
Thin: the planner is streamctl.operations.align, the executor streamctl.operations.executor."""
from __future__ import annotations

import sys
from typing import Any, Optional

import typer

from streamctl.cli import render
from streamctl.cli.errors import fail, handle_errors
from streamctl.cli.exit_codes import EXIT_CODES_HELP, ExitCode
from streamctl.commands.inspect_cmd import APP_ID_OPT, QUIET_HELP, SINK_KIND_HELP, _quiet, _settings

API_VERSION = "streamctl/v1"


def _emit(doc: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        render.emit_json(doc)
    else:
        for line in lines:
            sys.stdout.write(line + "\n")


def plan_lines(plan: Any, executed: bool = False) -> list[str]:
    from streamctl.operations.plan import epochs_text

    b, a = plan.before, plan.after
    head = "Executed" if executed else "Plan (nothing changed; add --execute to carry it out)"
    lines = [
        f"{head}: align {plan.roots['checkpoint']}" + (f" with sink {plan.roots['sink']}" if "sink" in plan.roots else ""),
        f"  before: planned {b.get('planned')}, committed {b.get('committed')}, sink epoch {b.get('sink_epoch')}, "
        f"verdict {b.get('verdict')} ({', '.join(b.get('findings') or []) or 'no findings'})",
        f"  strategy: {plan.strategy}, target epoch {plan.target} -> planned {a.get('planned')}, committed "
        f"{a.get('committed')}, sink epoch {a.get('sink_epoch')}; expected verdict {plan.expected_verdict}",
        f"  delivery: {plan.classification}"
        + (f" (duplicates: epochs {epochs_text(plan.duplicates)})" if plan.duplicates else "")
        + (f" (loss: epochs {epochs_text(plan.loss)})" if plan.loss else ""),
    ]
    for n in plan.notes:
        lines.append(f"  note: {n}")
    lines.append(f"  steps ({len(plan.steps)}):")
    for i, s in enumerate(plan.steps, 1):
        lines.append(f"    {i:>4}. {s.describe()}")
    return lines


def _refused(exc: Any, as_json: bool) -> typer.Exit:
    if as_json:
        render.emit_json({"api_version": API_VERSION, "kind": "AlignRefusal", "reason": str(exc),
                          "options": [o.to_record() for o in getattr(exc, "options", [])]})
    return fail(str(exc), ExitCode.REFUSED)


def _live_by_lease(location: str) -> Optional[str]:
    """The LIVE_QUERY message when the agent's lease is live (quiet period off: we just wrote)."""
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    q = inspect_checkpoint(location, quiet_period_s=0)
    live = [f for f in q.findings if f.code == "LIVE_QUERY"]
    return live[0].message if live else None


def _roots(plan: Any, backup_location: Optional[str] = None) -> dict[str, Any]:
    from streamctl.operations.files import Root

    return {name: Root(name, loc) for name, loc in plan.roots.items()}


def _finish(plan: Any, backup: Any, executor: Any, lock: Any, as_json: bool, resumed: bool) -> None:
    from streamctl.operations.align import verify_align

    ok, got = verify_align(plan)
    executor.journal.append({"event": "verified", "ok": ok, "got": got})
    lock.release()
    doc = {"api_version": API_VERSION, "kind": "AlignResult", "executed": True, "resumed": resumed,
           "backup": backup.location, "journal": executor.journal.path(), "plan": plan.to_record(),
           "verified": ok, "after": got}
    lines = plan_lines(plan, executed=True) + [
        f"backup and journal: {backup.location} (undo: streamctl align --undo {backup.location})",
        f"verified: {'yes' if ok else 'NO'} — now planned {got['planned']}, committed {got['committed']}, sink epoch "
        f"{got['sink_epoch']}, verdict {got['verdict']} (expected {plan.expected_verdict})"]
    _emit(doc, as_json, lines)
    if not ok:
        raise fail(f"{plan.roots['checkpoint']}: realignment ran but the checkpoint is {got['verdict']} "
                   f"({', '.join(got['findings'])}), not the promised {plan.expected_verdict}", ExitCode.NOT_VERIFIED)


@handle_errors
def align(
    checkpoint: Optional[str] = typer.Argument(None, help="A checkpoint path, URI or pipeline name."),
    sink: Optional[str] = typer.Option(None, "--sink", help="The sink this checkpoint writes to (path or URI)."),
    sink_kind: str = typer.Option("auto", "--sink-kind", help=SINK_KIND_HELP),
    app_id: Optional[str] = APP_ID_OPT,
    to: str = typer.Option("auto", "--to", help="auto (the newest exactly-once epoch), max (the newest epoch the WAL "
                                                  "and every state store hold) or an epoch number."),
    execute: bool = typer.Option(False, "--execute", help="Carry the plan out (default: print it, change nothing)."),
    backup_dir: Optional[str] = typer.Option(None, "--backup-dir", help="Where moved files, the plan and the journal go "
                                             "(default CHECKPOINT/_streamctl/backups/<operation id>)."),
    allow_duplicates: bool = typer.Option(False, "--allow-duplicates", help="Accept a plan that delivers some epochs twice."),
    allow_loss: bool = typer.Option(False, "--allow-loss", help="Accept a plan that loses some epochs."),
    discard_in_flight: bool = typer.Option(False, "--discard-in-flight", help="Also drop the planned-but-uncommitted "
                                           "batch after the target (Spark plans it anew)."),
    break_lock: bool = typer.Option(False, "--break-lock", help="Take over a lock left by a process that is gone."),
    quiet_period: Optional[float] = typer.Option(None, "--quiet-period", help=QUIET_HELP),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a crashed --execute from its journal "
                                         "(the backup folder or its journal.jsonl)."),
    undo: Optional[str] = typer.Option(None, "--undo", help="Restore the exact files an earlier align changed "
                                       "(its backup folder)."),
    as_json: bool = typer.Option(False, "--json", help="An AlignPlan / AlignResult JSON document."),
) -> None:
    """Realign a checkpoint and its sink so that a restart delivers every record exactly once.

    Picks the target epoch from evidence: roll back to the newest epoch every writer (WAL, commit
    log, each state store, the sink and its writers) can restart from, or roll forward when the
    sink and every state store already hold epochs the commit log lacks. Prints the plan (every
    file it moves or writes) and its delivery class: exactly-once, duplicates or loss (the last
    two need --allow-duplicates / --allow-loss). With --execute: takes the lock, refuses a live
    query, backs up every touched file, journals each step and inspects again.

    Examples:

    \b
      streamctl align /data/chk/orders --sink /data/out/orders
      streamctl align /data/chk/orders --sink /data/out/orders --execute
      streamctl align /data/chk/orders --sink /data/out/orders --to 41 --allow-loss --execute
      streamctl align --resume /data/chk/orders/_streamctl/backups/align-20261121T030000Z-1a2b
      streamctl align --undo /data/chk/orders/_streamctl/backups/align-20261121T030000Z-1a2b
    """
    from streamctl.inspectors.errors import UsageError
    from streamctl.operations.align import AlignRequest, Refused, plan_align
    from streamctl.operations.executor import Conflict, Executor, load
    from streamctl.operations.files import Root
    from streamctl.operations.lock import Lock, LockHeld

    modes = [m for m in (resume, undo) if m]
    if len(modes) > 1:
        raise UsageError("--resume and --undo cannot be combined")
    if modes and checkpoint:
        raise UsageError("--resume/--undo take the operation's backup folder; do not also name a checkpoint")
    if resume or undo:
        plan, backup = load(resume or undo)  # type: ignore[arg-type]
        roots = _roots(plan)
        try:
            lock = Lock.acquire(roots["checkpoint"], "align --undo" if undo else "align --resume", plan.op_id,
                                break_lock=break_lock, takeover_op=plan.op_id)
        except LockHeld as exc:
            raise _refused(exc, as_json) from None
        live = _live_by_lease(plan.roots["checkpoint"])
        if live:
            lock.release()
            raise _refused(Refused(f"{plan.roots['checkpoint']}: {live}"), as_json)
        executor = Executor(plan, roots, backup, progress=None)
        if resume:
            try:
                executor.run()
            except Conflict as exc:
                raise fail(str(exc), ExitCode.REFUSED) from None
            _finish(plan, backup, executor, lock, as_json, resumed=True)
            return
        try:
            restored = executor.undo()
        except Conflict as exc:
            lock.release()
            raise _refused(exc, as_json) from None
        lock.release()
        from streamctl.inspectors.checkpoint import inspect_checkpoint

        q = inspect_checkpoint(plan.roots["checkpoint"], sink=plan.roots.get("sink"),
                               sink_kind=plan.settings.get("sink_kind") or "auto", app_id=plan.settings.get("app_id"),
                               quiet_period_s=0)
        back = {"planned": q.planned, "committed": q.committed, "sink_epoch": q.sink.epoch if q.sink else None}
        ok = all(back[k] == plan.before.get(k) for k in back if k != "sink_epoch" or q.sink is not None)
        doc = {"api_version": API_VERSION, "kind": "AlignUndo", "backup": backup.location, "restored": len(restored),
               "after": dict(back, verdict=q.verdict), "before_operation": plan.before, "verified": ok}
        _emit(doc, as_json, [f"Undone: {len(restored)} file(s) restored from {backup.location}",
                             f"now planned {back['planned']}, committed {back['committed']}, sink epoch {back['sink_epoch']}, "
                             f"verdict {q.verdict} (as before the operation: {'yes' if ok else 'NO'})"])
        if not ok:
            raise fail(f"{plan.roots['checkpoint']}: undo ran but the positions differ from before the operation", ExitCode.NOT_VERIFIED)
        return

    if not checkpoint:
        raise UsageError("name a CHECKPOINT (or use --resume / --undo)")
    if to not in ("auto", "max") and not (to.isdigit()):
        raise UsageError(f"invalid value for --to: {to!r} (auto, max or an epoch number)")
    config = _settings()
    from streamctl.cli.config import resolve_checkpoint

    location, pipeline = resolve_checkpoint(checkpoint, config)
    if sink is None and pipeline is not None:
        sink = pipeline.sink
        if sink_kind == "auto" and pipeline.sink_kind:
            sink_kind = pipeline.sink_kind
        app_id = app_id or pipeline.app_id
    req = AlignRequest(location, sink, sink_kind, app_id, to, allow_duplicates, allow_loss, discard_in_flight,
                       _quiet(quiet_period, config))
    try:
        plan, _q = plan_align(req)
    except Refused as exc:
        raise _refused(exc, as_json) from None
    if not plan.steps:
        _emit({"api_version": API_VERSION, "kind": "AlignPlan", "executed": False, "plan": plan.to_record()}, as_json,
              [f"Nothing to do: {location} is {plan.before.get('verdict')} at epoch {plan.target}"
               f" (planned {plan.after.get('planned')}, sink epoch {plan.after.get('sink_epoch')})"])
        return
    if not execute:
        _emit({"api_version": API_VERSION, "kind": "AlignPlan", "executed": False, "plan": plan.to_record()}, as_json,
              plan_lines(plan))
        return

    import secrets
    import time

    op_id = f"align-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(2)}"
    ck_root = Root("checkpoint", location)
    try:
        lock = Lock.acquire(ck_root, "align", op_id, break_lock=break_lock)
    except LockHeld as exc:
        raise _refused(exc, as_json) from None
    try:
        plan, _q = plan_align(req)  # again, under the lock: what is executed is what was inspected
    except Refused as exc:
        lock.release()
        raise _refused(exc, as_json) from None
    except BaseException:
        lock.release()
        raise
    plan.op_id = op_id
    backup = Root("backup", backup_dir or ck_root.uri(f"_streamctl/backups/{op_id}"))
    roots = _roots(plan)
    executor = Executor(plan, roots, backup)
    try:
        executor.write_plan()
    except Conflict as exc:
        lock.release()
        raise _refused(exc, as_json) from None
    try:
        executor.run()
    except Conflict as exc:
        raise fail(f"{exc}; resume with: streamctl align --resume {backup.location}", ExitCode.REFUSED) from None
    except KeyboardInterrupt:
        raise fail(f"interrupted; the lock is kept: resume with streamctl align --resume {backup.location} "
                   f"or undo with --undo", ExitCode.INTERRUPTED) from None
    _finish(plan, backup, executor, lock, as_json, resumed=False)

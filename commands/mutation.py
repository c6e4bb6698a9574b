"""What the mutating commands (align, trim, drop-sink) share on the command side: resolving the
target from flags and config, calling the runner (streamctl.operations.runner: lock, plan under
the lock, journal, steps, verify, resume, undo; docs/model.md#the-mutation-path) and rendering its
outcome (console/plan_view.py). Exit codes come from console/errors.py's table: a refusal is
`Refused` (4), a failed verification `NotVerified` (5)."""
from __future__ import annotations

from typing import Any, Callable, Optional

from streamctl.console import render
from streamctl.console.plan_view import Lines, emit, refused, show_result, show_undo, title
from streamctl.inspectors.documents import document


def front(name: str, checkpoint: Optional[str], sink: Optional[str], sink_kind: str, app_id: Optional[str],
          resume: Optional[str], undo: Optional[str], break_lock: bool, operation: Callable[[], Any], lines: Lines,
          as_json: bool) -> Optional[tuple[str, Optional[str], str, Optional[str], Any]]:
    """The common front of a mutating command: `--resume` / `--undo` are run here (None is
    returned); otherwise (checkpoint location, sink, sink kind, app id, config), a named
    pipeline's sink filling in what the flags leave out."""
    from streamctl.console import context
    from streamctl.console.config import load_config, resolve_target
    from streamctl.formats.errors import UsageError

    if resume and undo:
        raise UsageError("--resume and --undo cannot be combined")
    if (resume or undo) and checkpoint:
        raise UsageError("--resume/--undo take the operation's backup folder; do not also name a checkpoint")
    if resume:
        show_result(name, call(name, as_json, lambda tick: runner().resume(operation(), resume, break_lock, meter=tick)),
                    as_json, lines)
        return None
    if undo:
        show_undo(name, call(name, as_json, lambda tick: runner().undo(operation(), undo, break_lock, meter=tick)), as_json)
        return None
    if not checkpoint:
        raise UsageError("name a CHECKPOINT (or use --resume / --undo)")
    config = load_config(context.CONFIG_PATH)
    t = resolve_target(checkpoint, sink, sink_kind, app_id, config)
    return t.checkpoint, t.sink, t.sink_kind, t.app_id, config


def runner() -> Any:
    from streamctl.operations import runner as module

    return module


def call(name: str, as_json: bool, action: Callable[[Callable[[str], None]], Any]) -> Any:
    """Run `action(tick)` (a runner call) with the terminal's progress line; a refusal is rendered
    (a `<Command>Refusal` document with --json) and leaves with its exit code."""
    from streamctl.operations.plan import Refused

    try:
        with render.progress(not as_json) as tick:  # files, bytes, rate, eta on a terminal's stderr
            return action(tick)
    except Refused as exc:
        raise refused(exc, as_json, f"{title(name)}Refusal") from None


def execute(name: str, request: Any, operation: Any, lines: Lines, as_json: bool) -> None:
    """`--execute` of align and trim through the runner, rendered."""
    outcome = call(name, as_json, lambda tick: runner().execute(operation, request, meter=tick))
    if not outcome.executed:
        plan = outcome.plan
        emit(document(f"{title(name)}Plan", {"executed": False, "plan": plan.to_record()}),
             as_json, [f"Nothing to do: {request.checkpoint} is {plan.before.get('verdict')}; no step is needed"])
        return
    show_result(name, outcome, as_json, lines)


def plan_or_execute(name: str, location: str, make_plan: Callable[[], Any], backup_dir: Optional[str],
                    break_lock: bool, execute_it: bool, operation: Any, lines: Lines, as_json: bool,
                    nothing_to_do: Optional[Callable[[Any], str]] = None) -> None:
    """The body of align and trim: with --execute, the runner (the plan is made under the lock);
    without, the plan printed (`nothing_to_do(plan)` when it has no step) or its refusal."""
    from streamctl.operations.plan import Refused
    from streamctl.operations.runner import Request

    if execute_it:
        from streamctl.inspectors.checkpoint import require_checkpoint
        from streamctl.inspectors.storage import Storage

        require_checkpoint(Storage.open(location))  # before the lock: nothing is created where no checkpoint is
        execute(name, Request(location, lambda _op, _backup: make_plan(), backup_dir, break_lock),
                operation, lines, as_json)
        return
    try:
        plan = make_plan()
    except Refused as exc:
        raise refused(exc, as_json, f"{title(name)}Refusal") from None
    doc = document(f"{title(name)}Plan", {"executed": False, "plan": plan.to_record()})
    emit(doc, as_json, [] if as_json else [nothing_to_do(plan)] if nothing_to_do is not None and not plan.steps
         else lines(plan))  # every step described: not for --json



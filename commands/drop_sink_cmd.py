"""`streamctl drop-sink SINK --checkpoint CHECKPOINT --safe`: retire a sink and its query in the
order docs/model.md#drop-sink gives. Also `--resume ARCHIVE` and `--undo ARCHIVE`.
Thin: the planner and the safety checks are streamctl.operations.teardown; --execute, --resume and
--undo run through streamctl.operations.runner."""
from __future__ import annotations

from typing import Any, Optional

import typer

from streamctl.commands import options
from streamctl.commands.options import APP_ID_OPT, BREAK_LOCK_OPT, EXECUTE_OPT, QUIET_OPT, SINK_KIND_OPT, SinkKind
from streamctl.console import plan_view, render
from streamctl.inspectors.documents import document
from streamctl.inspectors.findings import positions_text, shown


def _say(as_json: bool) -> Any:
    def say(line: str) -> None:
        if not as_json:
            render.note(line)
    return say


def plan_lines(plan: Any, executed: bool = False) -> list[str]:
    b = plan.before
    head = "Executed" if executed else "Plan (nothing changed; add --execute to carry it out)"
    lines = [
        f"{head}: drop-sink {plan.roots['sink']} of {plan.roots['checkpoint']}",
        f"  before: {positions_text(b, True)}, query {shown(b.get('query_id'))}",
        f"  final epoch {shown(plan.target)}" + (f", in-flight epoch {plan.after.get('discarded_epoch')} discarded"
                                          if plan.after.get("discarded_epoch") is not None else "")
        + f"; archive {plan.roots['archive']}" + (" (copies purged at the end)" if plan.settings.get("purge") else ""),
    ]
    return lines + [f"  note: {n}" for n in plan.notes] + plan_view.step_lines(plan, "archive")


def _show(outcome: Any, as_json: bool) -> None:
    """An executed or resumed teardown: the result document, then exit 5 when not verified."""
    from streamctl.operations import teardown
    from streamctl.operations.plan import NotVerified

    plan, archive, got, ok = outcome.plan, outcome.backup, outcome.got, outcome.verified
    doc = document("DropSinkResult", {"executed": True, "resumed": outcome.resumed,
           "archive": archive.location, "journal": outcome.journal, "handoff": archive.uri(teardown.HANDOFF_FILE),
           "final_epoch": plan.target, "plan": plan.to_record(), "verified": ok, "after": got})
    lines = plan_lines(plan, executed=True) + [
        f"archive and journal: {archive.location} (undo: streamctl drop-sink --undo {archive.location})",
        f"hand-off: {archive.uri(teardown.HANDOFF_FILE)} (final epoch {shown(plan.target)})",
        f"verified: {'yes' if ok else 'NO'}" + ("" if ok else " — " + "; ".join(got["problems"][:3]))]
    plan_view.emit(doc, as_json, lines)
    if not ok:
        raise NotVerified(f"{plan.roots['checkpoint']}: teardown ran but {got['problems'][0]}")


def drop_sink(
    sink: Optional[str] = typer.Argument(None, help="The sink to retire (path or URI), or a pipeline name."),
    checkpoint: Optional[str] = typer.Option(None, "--checkpoint", help="The checkpoint of the query writing to SINK."),
    safe: bool = typer.Option(False, "--safe", help="Stop the writer first (graceful stop through the agent's lease; "
                              "no lease: refused), then check it drained. Without it: refused unless --assume-stopped."),
    archive: Optional[str] = typer.Option(None, "--archive", help="Where retired files, the hand-off manifest, the "
                                          "plan and the journal go (default CHECKPOINT/_streamctl/retired/<operation id>)."),
    execute: bool = EXECUTE_OPT,
    purge: bool = typer.Option(False, "--purge", help="Delete the archived copies once every step is done."),
    purge_data: bool = typer.Option(False, "--purge-data", help="Also retire the data files the sink log lists "
                                    "inside the sink root (never files outside it)."),
    quiet_period: Optional[float] = QUIET_OPT,
    stop_timeout: float = typer.Option(60.0, "--stop-timeout", help="Seconds to wait for the agent to stop the query "
                                       "(then exit 4, request withdrawn). Default 60."),
    discard_in_flight: bool = typer.Option(False, "--discard-in-flight", help="Drop a planned-but-uncommitted epoch "
                                           "instead of refusing (its input goes to the successor)."),
    assume_stopped: bool = typer.Option(False, "--assume-stopped", help="The query is stopped (your word, without the "
                                        "agent): proceed when no lease is live and nothing changed within the quiet period."),
    sink_kind: SinkKind = SINK_KIND_OPT,
    app_id: Optional[str] = APP_ID_OPT,
    break_lock: bool = BREAK_LOCK_OPT,
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a crashed --execute from its journal "
                                         "(the archive folder or its journal.jsonl)."),
    undo: Optional[str] = typer.Option(None, "--undo", help="Restore the retired checkpoint and sink exactly (its archive "
                                       "folder; every archived file is checked against the manifest first)."),
    as_json: bool = typer.Option(False, "--json", help="A DropSinkPlan / DropSinkResult JSON document."),
) -> None:
    """Retire a sink and the query writing to it, leaving a hand-off for a successor.

    Order (each step journaled and checked before the next): lock; stop the writer (--safe: the
    agent's graceful stop, then a quiet period); confirm it drained (planned == committed == sink
    epoch); write ARCHIVE/handoff.json (final epoch, Kafka startingOffsets, processed files);
    tombstone CHECKPOINT/metadata so a restart of the old query fails loudly; retire the state
    stores, the checkpoint logs, the sink's commit log and, with --purge-data, its data files.
    "Retire" moves into the archive; --purge deletes the archived copies at the end. --undo
    puts back the exact bytes from the archive (not after --purge).

    Examples:

    \b
      streamctl drop-sink /data/out/orders --checkpoint /data/chk/orders --safe
      streamctl drop-sink /data/out/orders --checkpoint /data/chk/orders --safe --execute
      streamctl drop-sink /data/out/orders --checkpoint /data/chk/orders --assume-stopped --execute --purge
      streamctl drop-sink --resume /data/chk/orders/_streamctl/retired/drop-sink-20261121T030000Z-1a2b
      streamctl drop-sink --undo /data/chk/orders/_streamctl/retired/drop-sink-20261121T030000Z-1a2b
    """
    from streamctl.commands import mutation
    from streamctl.console.config import resolve_target
    from streamctl.formats.errors import UsageError
    from streamctl.operations import runner, teardown

    say = _say(as_json)
    kind = str(sink_kind.value if hasattr(sink_kind, "value") else sink_kind)
    if resume and undo:
        raise UsageError("--resume and --undo cannot be combined")
    if resume or undo:
        if sink or checkpoint:
            raise UsageError("--resume/--undo take the operation's archive folder; do not also name a sink or checkpoint")
        if resume:
            _show(mutation.call("drop-sink", as_json, lambda tick: runner.resume(teardown.operation(), resume, break_lock,
                                                                                say=say, meter=tick)), as_json)
        elif undo:
            plan_view.show_undo("drop-sink", mutation.call("drop-sink", as_json, lambda tick: runner.undo(
                teardown.operation(), undo, break_lock, meter=tick)), as_json)
        return

    config = options.settings()
    if sink and not checkpoint and sink in config.pipelines:  # SINK names a pipeline: its checkpoint and sink
        t = resolve_target(sink, None, kind, app_id, config)
        checkpoint, sink, kind, app_id = t.checkpoint, t.sink, t.sink_kind, t.app_id
    if not sink or not checkpoint:
        raise UsageError("name a SINK and its --checkpoint (or a pipeline name, or use --resume / --undo)")
    if sink.startswith("catalog:"):  # an Iceberg table named through its catalog: its location
        from streamctl.inspectors.iceberg import resolve_catalog_sink

        sink = resolve_catalog_sink(sink)
    if not 0 <= stop_timeout < float("inf"):
        raise UsageError("invalid value for --stop-timeout: must be a finite number >= 0")
    req = teardown.TeardownRequest(checkpoint, sink, kind, app_id, archive, discard_in_flight, purge, purge_data,
                                   safe, assume_stopped, options.quiet_period(quiet_period, config), stop_timeout)
    try:
        ck_root, sink_root = teardown.open_roots(req)
        if execute:
            request = teardown.execute_request(req, ck_root, sink_root, break_lock, say)
            _show(mutation.call("drop-sink", as_json, lambda tick: runner.execute(teardown.operation(), request,
                                                                                   say=say, meter=tick)), as_json)
            return
        plan = teardown.preview(req, ck_root, sink_root)
    except teardown.Refused as exc:
        raise plan_view.refused(exc, as_json, "DropSinkRefusal") from None
    plan_view.emit(document("DropSinkPlan", {"executed": False, "plan": plan.to_record()}),
                  as_json, plan_lines(plan))

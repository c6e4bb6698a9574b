"""`streamctl diagnose`: one command for the incident (docs/model.md#diagnose)."""
from __future__ import annotations

import shlex
from typing import Any, Optional

import typer

from streamctl.commands.options import APP_ID_OPT, ONE_SINK_OPT, QUIET_OPT, SINK_KIND_OPT, TARGET_SPARK_OPT, SinkKind
from streamctl.console import render
from streamctl.console.exit_codes import exit_for_verdict
from streamctl.inspectors.documents import document

_STRATEGY = {"rollback": "roll back to epoch {x}", "roll_forward": "roll forward to epoch {x}",
             "keep": "keep epoch {x} and repair around it"}


def _command(*words: Optional[str]) -> str:
    return " ".join(shlex.quote(w) for w in words if w)


def next_step(q: Any, checkpoint: str, sink: Optional[str], sink_kind: str, app_id: Optional[str]) -> dict[str, Any]:
    """What to do next, from the inspection `q`: restart as is, stop first, run the exact align
    command (its plan made here, nothing changed), or what align needs / cannot do."""
    from streamctl.formats.errors import StreamctlError
    from streamctl.operations.align import AlignRequest, plan_align
    from streamctl.operations.plan import Refused

    retired = [f for f in q.findings if f.code == "RETIRED"]
    if retired:
        undo = retired[0].details.get("undo")
        return {"action": "retired", "command": undo or None,
                "why": "the query was retired by streamctl drop-sink: do not restart it (its restart fails); start a "
                       "successor from the hand-off in the archive, or undo the retirement"
                       + (" with the command below" if undo else "")}
    not_a_checkpoint = [f for f in q.findings if f.code == "UNREADABLE" and f.details.get("not_a_checkpoint")]
    if not_a_checkpoint:
        return {"action": "manual", "command": None,
                "why": "nothing to repair here: the path is not a checkpoint; diagnose the folder the query's "
                       "checkpointLocation names (or the pipeline's name)"}
    if any(f.details.get("preflight") for f in q.findings):
        return {"action": "manual", "command": None,
                "why": "a pre-flight: the checkpoint does not exist yet, so there is nothing to repair; a query "
                       "started on it over this sink goes wrong as the finding says: start it on a new sink path, or "
                       "restart the query whose checkpoint wrote the sink"}
    live = [f for f in q.findings if f.code == "LIVE_QUERY"]
    if live and live[0].details.get("lease") is None:  # the quiet period's evidence: no agent to ask
        return {"action": "stop", "command": None,
                "why": "the query looks alive (its newest log file changed within the quiet period): streamctl repairs "
                       "nothing under a live query; stop it and diagnose again, or if it is already stopped (a run "
                       "that just ended, a hand edit) diagnose again with --quiet-period 0"}
    if live:
        return {"action": "stop", "command": _command("streamctl", "stop", checkpoint),
                "why": "the query is running: streamctl repairs nothing under a live query; if it is stuck, stop it "
                       "first and diagnose again"}
    if q.verdict in ("aligned", "recoverable"):
        why = ("a restart replays the planned batch exactly as Spark does" if q.verdict == "recoverable"
               else "the checkpoint and its writers agree")
        if sink is None:
            why += "; the sink was not checked (pass --sink to compare it with the checkpoint)"
        from streamctl.inspectors.kafka import kafka_sources

        if kafka_sources(q):
            why += ("; its Kafka positions were not checked against the broker (streamctl inspect epochs --bootstrap "
                    "checks them: a recreated topic or expired records fail the restart)")
        return {"action": "restart", "command": None, "why": f"restart the query as is: {why}"}
    sink_args = ["--sink", sink] if sink else []
    kind_args = ["--sink-kind", sink_kind] if sink and sink_kind != "auto" else []
    app_args = ["--app-id", app_id] if app_id else []
    req = AlignRequest(checkpoint, sink, sink_kind, app_id, 0.0)
    try:
        plan, _ = plan_align(req)
    except Refused as exc:
        return {"action": "manual", "command": None,
                "why": f"streamctl align cannot repair it as it stands: {exc}"}
    except StreamctlError as exc:
        return {"action": "manual", "command": None,
                "why": f"streamctl cannot read what a repair needs: {exc}; put the file back from a copy of the "
                       "checkpoint (or the sink) and diagnose again"}
    if not plan.steps:
        return {"action": "manual", "command": None,
                "why": "no realignment changes this: read the findings above"}
    command = _command("streamctl", "align", checkpoint, *sink_args, *kind_args, *app_args, "--execute")
    return {"action": "align", "command": command,
            "why": (f"{_STRATEGY.get(plan.strategy, plan.strategy).format(x=plan.target)}, {plan.classification}, "
                    f"{len(plan.steps)} step(s); run it without --execute first to read the plan"),
            "plan": {"strategy": plan.strategy, "target": plan.target, "classification": plan.classification,
                     "steps": len(plan.steps), "expected_verdict": plan.expected_verdict, "notes": list(plan.notes)}}


def diagnose(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    sink: Optional[str] = ONE_SINK_OPT,
    sink_kind: SinkKind = SINK_KIND_OPT,
    app_id: Optional[str] = APP_ID_OPT,
    quiet_period: Optional[float] = QUIET_OPT,
    target_spark: Optional[str] = TARGET_SPARK_OPT,
    as_json: bool = typer.Option(False, "--json", help="A Diagnosis JSON document (for runbooks)."),
) -> None:
    """One command for the incident: what is wrong, in plain words, and the exact next command.

    Inspects the checkpoint (and its sink), explains each finding, and ends with what to do: restart
    as is, stop the running query first, the exact `streamctl align ... --execute` whose plan it
    has just made (nothing is changed here), or what a repair needs that streamctl cannot know.
    Exits like `inspect epochs`: 0 aligned or recoverable, 1 misaligned, 3 unreadable.

    Examples:

    \b
      streamctl diagnose /data/chk/orders --sink /data/out/orders
      streamctl diagnose orders --json

    \b
      # before restarting on another Spark line
      streamctl diagnose /data/chk/orders --target-spark 3.5
    """
    from streamctl.commands import options
    from streamctl.console import context
    from streamctl.console.config import load_config, resolve_target
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.findings import Finding, finding_records, positions_text

    config = load_config(context.CONFIG_PATH)
    t = resolve_target(checkpoint, sink, str(sink_kind), app_id, config)
    q = inspect_checkpoint(t.checkpoint, sink=t.sink, sink_kind=t.sink_kind, app_id=t.app_id,
                           quiet_period_s=options.quiet_period(quiet_period, config), deep=True,
                           target_spark=options.target_spark(target_spark, config, t.pipeline))
    step = next_step(q, t.checkpoint, t.sink, t.sink_kind, t.app_id)
    doc = document("Diagnosis", {"checkpoint": q.checkpoint, "sink": t.sink,
           "verdict": q.verdict, "planned": q.planned, "committed": q.committed,
           "sink_epoch": q.sink.epoch if q.sink is not None else None,
           "findings": finding_records(q.findings), "next": step})
    if as_json:
        render.emit_json(doc)
    else:
        known = step["action"] != "manual" or not any(f.details.get("not_a_checkpoint") for f in q.findings)
        where = positions_text({"planned": q.planned, "committed": q.committed,
                                "sink_epoch": q.sink.epoch if q.sink is not None else None}, q.sink is not None)
        lines = [f"{q.checkpoint}: {q.verdict}" + (f" ({where})" if known else "")]
        for f in sorted(q.findings, key=Finding.sort_key):
            lines.append(f"  {f.severity} {f.code}: {f.message}")
        lines.append(f"next: {step['why']}")
        if step.get("command"):
            lines.append(f"  {step['command']}")
        render.emit_lines(lines, "plain")
    raise exit_for_verdict(q.verdict)

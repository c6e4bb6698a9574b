"""`streamctl inspect writers`: every parallel writer, its window, the common window, the chart."""
from __future__ import annotations

from typing import Any, Optional

import typer

from streamctl.commands import options
from streamctl.commands.options import APP_ID_OPT, FORMAT_OPT, JSON_OPT, QUIET_OPT, SINK_KIND_OPT, SINK_OPT, SinkKind
from streamctl.console import inspect_view as view
from streamctl.console import render
from streamctl.console.exit_codes import exit_for_verdict
from streamctl.inspectors.findings import shown


def _inspect_all(targets: list[tuple[str, Optional[str], str, Optional[str]]], output: str,
                 quiet_period: float = 0.0) -> list[Any]:
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    queries = []
    with render.progress(output != "json") as tick:
        for loc, sink, kind, app in targets:
            tick(f"inspecting {loc}")

            def progress(msg: str, loc: str = loc) -> None:
                tick(f"{loc}: {msg}")

            queries.append(inspect_checkpoint(loc, progress=progress, sink=sink, sink_kind=kind, app_id=app,
                                              quiet_period_s=quiet_period))
    return queries


def inspect_writers(
    checkpoints: list[str] = typer.Argument(..., help="Checkpoint paths, URIs or pipeline names."),
    sink: Optional[list[str]] = SINK_OPT,
    sink_kind: SinkKind = SINK_KIND_OPT,
    app_id: Optional[str] = APP_ID_OPT,
    quiet_period: Optional[float] = QUIET_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Show every parallel writer, its restartable window, the common window, and who is ahead,
    behind or broken.

    Writers are the WAL (offsets/), the commit log, every state store, the sink's log and every
    writer task of a coordinated sink. The common window is [max of firsts, min of lasts]: the
    epochs every writer can restart from — where a realignment can land.

    Examples:

    \b
      streamctl inspect writers /data/chk/orders --sink /data/tables/orders
      streamctl inspect writers orders --json
    """
    from streamctl.inspectors.report import writers_report

    config = options.settings()
    output = options.output_format(fmt, as_json, config)
    queries = _inspect_all(options.targets(checkpoints, sink, sink_kind, app_id, config), output, options.quiet_period(quiet_period, config))
    doc = writers_report(queries)
    if output == "json":
        render.emit_json(doc)
    else:
        for q in doc["queries"]:
            if output == "table":  # on a terminal: the picture first, the table below it
                render.emit_chart(q, f"{q['checkpoint']}  (query {shown(q['query_id'])}, committed {shown(q['committed'])})")
            rows = [[w["writer"], w["kind"], w["first"], w["last"], w["status"]] for w in q["writers"]]
            render.emit_table(["writer", "kind", "first", "last", "status"], rows, output,
                              title=f"{q['checkpoint']}  (query {shown(q['query_id'])}, committed {shown(q['committed'])})")
            lines = [f"common window: {view.window(q['common_window'])}"]
            for status in ("ahead", "behind", "broken", "empty"):
                if q[status]:
                    lines.append(f"{status}: {', '.join(q[status][:10])}{' ...' if len(q[status]) > 10 else ''}")
            render.emit_lines(lines, output)
            render.emit_lines([view.finding_line(f) for f in q["findings"]] or ["none"], output, title="Findings")
        render.emit_lines([view.finding_line(f) for f in doc["findings"]], output)
    raise exit_for_verdict(doc["verdict"])

"""`streamctl inspect sink`: a sink's commit log (file sink, Delta, coordinated, Iceberg)."""
from __future__ import annotations

from typing import Optional

import typer

from streamctl.commands import options
from streamctl.commands.options import FORMAT_OPT, JSON_OPT, SINK_KIND_OPT, SinkKind
from streamctl.console import inspect_view as view
from streamctl.console import render
from streamctl.console.exit_codes import exit_for_verdict


def inspect_sink(
    sink: str = typer.Argument(..., help="The sink's path or URI, or a pipeline name."),
    sink_kind: SinkKind = SINK_KIND_OPT,
    app_id: Optional[str] = typer.Option(None, "--app-id", help="Delta txn app id (a query id); needed for the txn version of a Delta sink."),
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Show a sink's commit log: kind, epochs present, files (and rows) per epoch, compactions.

    File sinks: `_spark_metadata/` batches and `.compact` points. Delta: the table version and the
    txn version for --app-id. Coordinated sinks: every epoch's commit record, its writers, and
    staging or files no commit record names.

    Examples:

    \b
      streamctl inspect sink /data/tables/orders
      streamctl inspect sink s3://bucket/tables/orders --sink-kind delta --app-id 26806544-709f-4745-a6e4-7641361fe94a
    """
    from streamctl.console.config import resolve_target
    from streamctl.inspectors.report import sink_report
    from streamctl.inspectors.sinks import read_sink

    config = options.settings()
    output = options.output_format(fmt, as_json, config)
    t = resolve_target(sink, None, sink_kind, app_id, config)  # SINK may name a pipeline: its sink
    location, kind, app = (t.sink or sink) if t.pipeline else t.checkpoint, t.sink_kind, t.app_id  # a catalog: its table
    with render.progress(output != "json") as tick:
        tick(f"reading {location}")
        log = read_sink(location, kind, app, detail=True)
    doc = sink_report(log)
    if output == "json":
        render.emit_json(doc)
    else:
        rec = doc["sink"]
        head = f"{rec['kind']} sink {rec['uri']}: newest epoch {rec['epoch'] if rec['epoch'] is not None else '-'}"
        if rec["kind"] == "delta":
            head += f", table version {rec['table_version']}, app id {rec['app_id'] or '- (give --app-id)'}"
        if rec["compactions"]:
            head += f", compactions at {', '.join(map(str, rec['compactions']))}"
        rows = [[e["epoch"], e["source"], len(e["files"]), len(e["deleted"]), e["rows"]] for e in rec["epochs"]]
        render.emit_lines([head], output)
        if rows:
            render.emit_table(["epoch", "log file", "files added", "files deleted", "rows"], rows, output)
        if rec["writers"]:
            render.emit_table(["writer", "partition", "first", "last", "epochs", "missing in"],
                              [[w["writer"], w["partition"], w["first"], w["last"], w["epochs"],
                                ", ".join(map(str, w["missing_in"])) or "-"] for w in rec["writers"]], output)
        render.emit_lines([view.finding_line(f) for f in doc["findings"]] or ["none"], output, title="Findings")
    raise exit_for_verdict(doc["verdict"])

"""`streamctl inspect ...`: read-only inspections. Thin: resolve inputs, call the inspectors,
render, return the exit code the verdict implies."""
from __future__ import annotations

from typing import Any, Optional

import typer

from streamctl.cli import context, render
from streamctl.cli.errors import handle_errors
from streamctl.cli.exit_codes import EXIT_CODES_HELP, ExitCode

app = typer.Typer(
    help="Read-only inspections of checkpoints, state and sinks.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
    rich_markup_mode=None,
)

FORMAT_HELP = "Output format: table (plain text when piped or NO_COLOR is set), plain, markdown or json. [env: STREAMCTL_FORMAT]"


def _settings() -> Any:
    from streamctl.cli.config import load_config

    return load_config(context.CONFIG_PATH)


def _format(flag: Optional[str], as_json: bool, config: Any) -> str:
    from streamctl.cli.config import setting

    if as_json:
        return "json"
    fmt = setting("format", flag, "STREAMCTL_FORMAT", config, "table", flag="--format")
    return render.effective_format(fmt)


def _resolve(args: list[str], config: Any) -> list[str]:
    from streamctl.cli.config import resolve_checkpoint

    return [resolve_checkpoint(a, config)[0] for a in args]


def exit_for_verdict(verdict: str) -> ExitCode:
    return {"unreadable": ExitCode.UNREADABLE, "misaligned": ExitCode.MISALIGNED}.get(verdict, ExitCode.OK)


def _finding_line(f: dict[str, Any], where: Optional[str] = None) -> str:
    prefix = f"{f['severity']:<7} {f['code']}"
    return f"{prefix}  {where + ': ' if where else ''}{f['message']}"


def _window(w: Optional[list[int]]) -> str:
    return "-" if not w else f"{w[0]}..{w[1]}"


@app.command("epochs")
@handle_errors
def inspect_epochs(
    checkpoints: list[str] = typer.Argument(..., help="Checkpoint paths, URIs (s3://, gs://, hdfs://, abfs://, file://) or pipeline names."),
    fmt: Optional[str] = typer.Option(None, "--format", "-o", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Show where every writer of each query stands and whether it is aligned.

    One row per query (query id, planned and committed epochs, state epoch, the common
    restartable window, verdict), then the findings. Several checkpoints at once also checks
    cross-query invariants such as QUERY_ID_CLASH.

    Examples:

      # one checkpoint, as a table
      streamctl inspect epochs /data/chk/orders

      # several checkpoints on S3, as JSON for a runbook
      streamctl inspect epochs s3://bucket/chk/orders s3://bucket/chk/payments --json
    """
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.report import epoch_report

    config = _settings()
    output = _format(fmt, as_json, config)
    locations = _resolve(checkpoints, config)
    with render.progress(output != "json") as tick:
        queries = []
        for loc in locations:
            tick(f"inspecting {loc}")
            queries.append(inspect_checkpoint(loc, progress=lambda msg, loc=loc: tick(f"{loc}: {msg}")))
    doc = epoch_report(queries)
    if output == "json":
        render.emit_json(doc)
    else:
        rows = []
        lines = []
        for q in doc["queries"]:
            rows.append([q["query_id"], q["checkpoint"], q["planned"], q["committed"],
                         q["state_epoch"] if q["stateful"] else "stateless", _window(q["common_window"]), q["verdict"]])
            lines += [_finding_line(f, q["checkpoint"] if len(doc["queries"]) > 1 else None) for f in q["findings"]]
        lines += [_finding_line(f) for f in doc["findings"]]
        render.emit_table(["query id", "checkpoint", "planned", "committed", "state epoch", "common window", "verdict"],
                          rows, output)
        render.emit_lines(lines or ["none"], output, title="Findings")
        render.emit_lines([f"verdict: {doc['verdict']}"], output)
    raise typer.Exit(int(exit_for_verdict(doc["verdict"])))


@app.command("state")
@handle_errors
def inspect_state(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    fmt: Optional[str] = typer.Option(None, "--format", "-o", help=FORMAT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
) -> None:
    """Show operator x partition x store: versions, snapshots, durable version, chain status.

    The chain is ok, broken (a version missing between restorable ones), unrestorable (the
    version the next run needs cannot be rebuilt), empty, or orphans (files no restart will use).
    One summary line per operator follows the table.

    Examples:

      # which store lost a file the restart needs
      streamctl inspect state /data/chk/orders

      streamctl inspect state orders --format markdown
    """
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.report import state_report

    config = _settings()
    output = _format(fmt, as_json, config)
    location = _resolve([checkpoint], config)[0]
    with render.progress(output != "json") as tick:
        q = inspect_checkpoint(location, progress=tick)
    doc = state_report(q)
    if output == "json":
        render.emit_json(doc)
    else:
        rows = []
        summary = []
        for op in doc["operators"]:
            for s in op["stores"]:
                chain = s["chain"]
                if chain == "broken":
                    chain = f"broken at {s['broken_at']}"
                elif chain == "unrestorable":
                    chain = f"unrestorable: missing {', '.join(s['missing'])}"
                elif chain == "orphans":
                    chain = f"orphans: {len(s['orphans']) + len(s['temp_files'])}"
                versions = "-" if not s["versions"] else f"{s['versions'][0]}..{s['versions'][1]} ({s['version_count']})"
                rows.append([op["operator"], s["partition"], s["store"], s["provider"], versions,
                             s["newest_snapshot"], s["durable_version"], chain])
            sm = op["summary"]
            chains = ", ".join(f"{k} {v}" for k, v in sm["chains"].items())
            summary.append(
                f"operator {op['operator']} ({op['name'] or 'unnamed'}, {op['provider']}): "
                f"{op['partitions_found']}/{op['num_partitions'] if op['num_partitions'] is not None else '?'} partitions, "
                f"{sm['stores']} stores, durable versions {sm['min_durable_version']}..{sm['max_durable_version']}; {chains or 'no stores'}")
        title = f"{doc['checkpoint']}  (committed {doc['committed']}, next run restores version {doc['required_version']})"
        if rows:
            render.emit_table(["op", "partition", "store", "provider", "versions", "newest snapshot", "durable", "chain"],
                              rows, output, title=title)
        else:
            render.emit_lines(["no state: the query is stateless"], output, title=title)
        render.emit_lines(summary, output, title="Operators" if summary else None)
        render.emit_lines([_finding_line(f) for f in doc["findings"]] or ["none"], output, title="Findings")
    raise typer.Exit(int(exit_for_verdict(doc["verdict"])))

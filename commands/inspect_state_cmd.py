"""`streamctl inspect state`: operator x partition x store, versions, the chain a restart needs."""
from __future__ import annotations

from typing import Optional

import typer

from streamctl.commands import options
from streamctl.commands.options import FORMAT_OPT, JSON_OPT, QUIET_OPT
from streamctl.console import context, render
from streamctl.console import inspect_view as view
from streamctl.console.exit_codes import exit_for_verdict
from streamctl.inspectors.findings import shown


def inspect_state(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    quiet_period: Optional[float] = QUIET_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Show operator x partition x store: versions, snapshots, durable version, chain status.

    The chain is ok, broken (a version missing between restorable ones), unrestorable (the
    version the next run needs cannot be rebuilt), empty, or orphans (files no restart will use).
    One summary line per operator follows the table.

    Examples:

    \b
      # which store lost a file the restart needs
      streamctl inspect state /data/chk/orders

    \b
      streamctl inspect state orders --format markdown
    """
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.report import state_report

    config = options.settings()
    output = options.output_format(fmt, as_json, config)
    location = options.checkpoints([checkpoint], config)[0]
    with render.progress(output != "json") as tick:
        q = inspect_checkpoint(location, progress=tick, quiet_period_s=options.quiet_period(quiet_period, config))
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
                row = [op["operator"], s["partition"], s["store"], s["provider"], versions,
                       s["newest_snapshot"], s["durable_version"], chain]
                if context.WIDE:  # -o wide: where the store is and what a restart needs of it
                    row += [s["path"], s["required_version"], s["first_restorable"],
                            len(s["orphans"]) + len(s["temp_files"]), "yes" if s["unique_ids"] else "no"]
                rows.append(row)
            sm = op["summary"]
            chains = ", ".join(f"{k} {v}" for k, v in sm["chains"].items())
            summary.append(
                f"operator {op['operator']} ({op['name'] or 'unnamed'}, {op['provider']}): "
                f"{op['partitions_found']}/{op['num_partitions'] if op['num_partitions'] is not None else '?'} partitions, "
                f"{sm['stores']} stores, durable versions {shown(sm['min_durable_version'])}..{shown(sm['max_durable_version'])}; "
                f"{chains or 'no stores'}")
        title = f"{doc['checkpoint']}  (committed {shown(doc['committed'])}" + (
            f", next run restores version {doc['required_version']})" if doc["required_version"] is not None else ")")
        if rows:
            render.emit_table(["op", "partition", "store", "provider", "versions", "newest snapshot", "durable", "chain"]
                              + (["path", "restores", "first restorable", "orphans", "unique ids"] if context.WIDE else []),
                              rows, output, title=title)
        else:
            render.emit_lines(["no state: the query is stateless"], output, title=title)
        render.emit_lines(summary, output, title="Operators" if summary else None)
        render.emit_lines([view.finding_line(f) for f in doc["findings"]] or ["none"], output, title="Findings")
    raise exit_for_verdict(doc["verdict"])

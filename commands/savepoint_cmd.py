"""`streamctl savepoint ...`: named rollback points beside a checkpoint. create and delete are
operations/savepoints.py's (under the lock, one file written or deleted atomically), list reads
inspectors/savepoints.py's judgement (intact, or broken naming what is missing)."""
from __future__ import annotations

from typing import Optional

import typer

from streamctl.commands import options
from streamctl.console import render
from streamctl.console.exit_codes import EXIT_CODES_HELP
from streamctl.inspectors.documents import document

app = typer.Typer(
    help="Pin an epoch as a named rollback point (trim keeps it, align --to savepoint:NAME rewinds to it).",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
    rich_markup_mode=None,
)

def _shown(location: str) -> str:
    """The checkpoint as every other command shows it (a local path made absolute)."""
    from streamctl.inspectors.storage import Storage

    return Storage.open(location).display


NAME_ARG = typer.Argument(..., help="The savepoint's name: 1 to 64 of A-Z a-z 0-9 . _ -")


def _location(checkpoint: str) -> tuple[str, Optional[str], str, Optional[str]]:
    """(checkpoint, sink, sink kind, app id) of a path, URI or pipeline name."""
    from streamctl.console import context
    from streamctl.console.config import load_config, resolve_target

    t = resolve_target(checkpoint, None, "auto", None, load_config(context.CONFIG_PATH))
    return t.checkpoint, t.sink, t.sink_kind, t.app_id


@app.command("create")
def create(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    name: str = NAME_ARG,
    sink: Optional[str] = options.ONE_SINK_OPT,
    sink_kind: options.SinkKind = options.SINK_KIND_OPT,
    app_id: Optional[str] = options.APP_ID_OPT,
    epoch: Optional[str] = typer.Option(None, "--epoch", help="The committed epoch to pin (default: the newest commit)."),
    at: Optional[str] = typer.Option(None, "--at", help="Pin the newest epoch whose batch started at or before this "
                                     "ISO-8601 time (with its zone: Z, +02:00)."),
    replace: bool = typer.Option(False, "--replace", help="Pin an existing name anew."),
    break_lock: bool = options.BREAK_LOCK_OPT,
    as_json: bool = typer.Option(False, "--json", help="A Savepoint JSON document."),
) -> None:
    """Pin the newest committed epoch (or --epoch N, or --at TIME) as a named rollback point.

    Records `_streamctl/savepoints/NAME.json` beside the checkpoint: the epoch, when its batch
    started, the sink's position there and the Kafka offsets a restart from it reads on from.
    trim keeps every savepoint's restore files; `align --to savepoint:NAME` rewinds to it.

    Examples:

    \b
      streamctl savepoint create /data/chk/orders before-deploy-42 --sink /data/out/orders
      streamctl savepoint create /data/chk/orders incident --at 2026-11-21T02:55:00Z
    """
    from streamctl.operations.savepoints import create as create_savepoint

    location, pipe_sink, pipe_kind, pipe_app = _location(checkpoint)
    sp, replaced = create_savepoint(location, name, sink or pipe_sink, str(sink_kind) if sink else pipe_kind,
                                    app_id or pipe_app, epoch, at, replace, break_lock)
    if as_json:
        render.emit_json(document("Savepoint", {"checkpoint": _shown(location), "action": "replaced" if replaced else "created",
                                                **sp.to_record()}))
        return
    at_pos = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (sp.sink or {}).get("position", {}).items() if v is not None)
    sink_text = f", {sp.sink['kind']} sink at {at_pos}" if sp.sink else ""
    kafka_text = f", Kafka offsets of {len(sp.kafka)} source(s)" if sp.kafka else ""
    render.emit_text(f"{'Replaced' if replaced else 'Created'} savepoint {sp.name}: epoch {sp.epoch} (batch started "
                     f"{sp.batch_time or 'at an unknown time'}){sink_text}{kafka_text}\n"
                     f"  rewind: streamctl align {location} --to savepoint:{sp.name}\n")


@app.command("list")
def list_(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    fmt: Optional[str] = typer.Option(None, "--format", "-o", help="table, plain, markdown or json."),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json: a SavepointList document."),
) -> None:
    """List the savepoints of a checkpoint: name, epoch, time, and whether their restore files
    still exist ("intact", or "broken: <what is missing>").

    Examples:

    \b
      streamctl savepoint list /data/chk/orders
    """
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.errors import raise_unreadable
    from streamctl.inspectors.savepoints import list_savepoints

    location = _location(checkpoint)[0]
    output = options.output_format(fmt, as_json, options.settings())
    q = inspect_checkpoint(location, quiet_period_s=0)
    raise_unreadable(q)
    found = list_savepoints(q)
    if output == "json":
        render.emit_json(document("SavepointList", {"checkpoint": q.checkpoint, "query_id": q.query_id,
                                                    "savepoints": [s.to_record() for s in found]}))
        return
    rows = [[s.name, s.savepoint.epoch if s.savepoint else "-", (s.savepoint.batch_time if s.savepoint else None) or "-",
             (s.savepoint.created if s.savepoint else None) or "-", s.status()] for s in found]
    if not rows:
        render.emit_lines([f"{q.checkpoint}: no savepoints"], output)
        return
    render.emit_table(["name", "epoch", "batch started (UTC)", "created (UTC)", "restore files"], rows, output,
                      title=f"{q.checkpoint}: savepoints")


@app.command("delete")
def delete(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    name: str = NAME_ARG,
    break_lock: bool = options.BREAK_LOCK_OPT,
    as_json: bool = typer.Option(False, "--json", help="A Savepoint JSON document."),
) -> None:
    """Delete a savepoint (trim no longer keeps its epoch). The checkpoint itself is not touched.

    Examples:

    \b
      streamctl savepoint delete /data/chk/orders before-deploy-42
    """
    from streamctl.operations.savepoints import delete as delete_savepoint

    location = _location(checkpoint)[0]
    sp = delete_savepoint(location, name, break_lock)
    if as_json:
        render.emit_json(document("Savepoint", {"checkpoint": _shown(location), "action": "deleted", **sp.to_record()}))
        return
    render.emit_text(f"Deleted savepoint {sp.name} (epoch {sp.epoch})\n")

"""`streamctl backups`: list a checkpoint's backups and drop old finished ones (operations/backups.py)."""
from __future__ import annotations

import time
from typing import Optional

import typer

from streamctl.commands import options
from streamctl.commands.options import CHECKPOINT_ARG, EXECUTE_OPT
from streamctl.console import render
from streamctl.inspectors.documents import document


def backups(
    checkpoint: Optional[str] = CHECKPOINT_ARG,
    drop_older_than: Optional[float] = typer.Option(None, "--drop-older-than", min=0,
                                                    help="Plan to drop the finished or undone align/trim backups older than "
                                                    "DAYS (their undo goes with them); never unfinished ones or drop-sink's archives."),
    execute: bool = EXECUTE_OPT,
    as_json: bool = typer.Option(False, "--json", help="A Backups JSON document."),
) -> None:
    """List the backups align and trim left in a checkpoint, and drop old finished ones.

    Each backup makes its operation undoable and stays in the checkpoint (under
    _streamctl/backups/) until dropped: name, command, when, state (verified, undone, unfinished),
    files and bytes, and its undo command; drop-sink's archives (_streamctl/retired/) are listed
    and never dropped here.

    Examples:

    \b
      streamctl backups /data/chk/orders
      streamctl backups /data/chk/orders --drop-older-than 14
      streamctl backups /data/chk/orders --drop-older-than 14 --execute
    """
    from streamctl.console import context
    from streamctl.console.config import load_config, resolve_checkpoint
    from streamctl.formats.errors import UsageError
    from streamctl.operations import backups as ops

    if checkpoint is None:
        raise UsageError("name a CHECKPOINT")
    if execute and drop_older_than is None:
        raise UsageError("--execute drops backups: give --drop-older-than DAYS")
    location, _ = resolve_checkpoint(checkpoint, load_config(context.CONFIG_PATH))
    found = ops.list_backups(location)
    chosen = ops.droppable(found, drop_older_than) if drop_older_than is not None else []
    if execute and chosen:
        ops.drop(location, chosen)
    doc = document("Backups", {"checkpoint": location,
           "backups": [b.to_record() for b in found],
           "drop": None if drop_older_than is None else {
               "older_than_days": drop_older_than, "executed": execute, "backups": [b.name for b in chosen],
               "files": sum(b.files for b in chosen), "bytes": sum(b.bytes for b in chosen)}})
    if as_json:
        render.emit_json(doc)
        return
    rows = [[b.name, b.kind, b.command, time.strftime("%Y-%m-%d %H:%M", time.gmtime(b.created_ms / 1000))
             if b.created_ms else "-", b.state, b.files, options.human_bytes(b.bytes)] for b in found]
    render.emit_table(["backup", "kind", "command", "created (UTC)", "state", "files", "size"], rows, "plain",
                      title=f"{location}: {len(found)} backup folder(s), "
                            f"{options.human_bytes(sum(b.bytes for b in found))}")
    if drop_older_than is not None:
        verb = "Dropped" if execute else "Plan (nothing changed; add --execute to carry it out): drop"
        render.emit_lines([f"{verb} {len(chosen)} backup(s) older than {drop_older_than:g} day(s), "
                           f"{sum(b.files for b in chosen)} file(s), {options.human_bytes(sum(b.bytes for b in chosen))}"
                           + ("; their undo goes with them" if chosen else "")]
                          + [f"  {b.location}" for b in chosen], "plain")

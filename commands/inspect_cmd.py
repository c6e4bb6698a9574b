"""`streamctl inspect ...`: read-only inspections."""
from __future__ import annotations

import typer

app = typer.Typer(help="Read-only inspections of checkpoints, state and sinks.", no_args_is_help=True)


@app.command("epochs")
def inspect_epochs(checkpoints: list[str] = typer.Argument(..., help="Checkpoint paths, URIs or pipeline names.")) -> None:
    """Show where every writer of each query stands and whether it is aligned."""
    raise NotImplementedError


@app.command("state")
def inspect_state(checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name.")) -> None:
    """Show operator x partition x store: versions, snapshots, durable version, chain status."""
    raise NotImplementedError

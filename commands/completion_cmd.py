"""`streamctl completion SHELL`: print the shell completion script shipped with streamctl."""
from __future__ import annotations

import typer

from streamctl.console import render
from streamctl.formats.errors import UsageError

SHELLS = ("bash", "zsh", "fish")


def completion(shell: str = typer.Argument(..., help="bash, zsh or fish")) -> None:
    """Print the completion script for SHELL.

    Examples:

    \b
      # bash: load for this shell, or install for your user
      source <(streamctl completion bash)
      streamctl completion bash > ~/.local/share/bash-completion/completions/streamctl
    """
    if shell not in SHELLS:
        raise UsageError(f"unknown shell {shell!r}: choose one of {', '.join(SHELLS)}")
    from importlib import resources

    text = resources.files("streamctl.completions").joinpath(f"streamctl.{shell}").read_text()
    render.emit_text(text)

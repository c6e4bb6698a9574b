"""docs/reference.md: every command's `--help`, generated from the app (`./dev reference`, or
`python -m streamctl.cli.reference > docs/reference.md`); tests/test_docs.py fails when the page
drifts from the code."""
from __future__ import annotations

from typing import Any

WIDTH = 100  # a fixed width: the page is the same on every terminal

HEADER = """# Command reference

Each command's `--help`, generated from the Typer app by `./dev reference` (do not edit by hand:
`tests/test_docs.py` fails when this page and the code differ). The behaviour behind the flags, with
more examples, is in [commands.md](commands.md); exit codes in the [README](../README.md#exit-codes).
"""


def render() -> str:
    import typer.main

    from streamctl.cli.app import app

    root = typer.main.get_command(app)
    out = [HEADER]

    def walk(cmd: Any, ctx: Any) -> None:
        text = cmd.get_help(ctx).replace("\b\n", "").rstrip()
        out.append(f"## `{ctx.command_path}`\n\n```text\n{text}\n```\n")
        for name in sorted(getattr(cmd, "commands", {})):
            sub = cmd.commands[name]
            if not sub.hidden:
                walk(sub, sub.context_class(sub, info_name=name, parent=ctx, terminal_width=WIDTH, max_content_width=WIDTH))

    walk(root, root.context_class(root, info_name="streamctl", terminal_width=WIDTH, max_content_width=WIDTH))
    return "\n".join(out)


if __name__ == "__main__":
    from streamctl.console.render import emit_text

    emit_text(render())

"""The root Typer app: global options and the wiring of every command group.

Keep this module cheap to import: `streamctl --help` and every TAB completion load it.
PySpark and kafka-python are imported only inside the commands that need them.
"""
from __future__ import annotations

from typing import Optional

import typer
from typer.completion import completion_init

from streamctl.console import context
from streamctl.console.errors import StreamctlGroup
from streamctl.console.exit_codes import EXIT_CODES_HELP

# The commands in the order `streamctl --help` falls back to; each is `commands/<name>_cmd.py`
# (`-` as `_`), a Typer app for the groups, else the function of the command's name.
COMMANDS = ("inspect", "kafka", "completion", "stop", "align", "drop-sink", "trim", "copy", "demo", "preflight", "diagnose",
            "backups", "savepoint")
GROUPS = ("inspect", "kafka", "savepoint")


class RootGroup(StreamctlGroup):
    # each command's module is imported when it is first used (console/lazy_group.py)
    LAZY_COMMANDS = {name: (f"streamctl.commands.{name.replace('-', '_')}_cmd", "app" if name in GROUPS
                            else name.replace("-", "_")) for name in COMMANDS}


app = typer.Typer(
    name="streamctl",
    cls=RootGroup,
    help="Inspect, align and retire Spark Structured Streaming checkpoints and their sinks.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# add_completion=False keeps --install/--show-completion out of --help, but also skips
# registering typer's shell classes; without this every TAB says "Shell bash not supported".
completion_init()


def _utf8_output() -> None:
    """Output stays valid UTF-8 for any path: a file name that is not UTF-8 (its bytes are
    surrogates in Python) is printed as `\\udcff` escapes instead of raw bytes or a crash."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(encoding="utf-8", errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # not a text stream that can be reconfigured
            pass


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"streamctl {version('streamctl')}")
        raise typer.Exit(0)


@app.callback()
def root(
    config: Optional[str] = typer.Option(
        None,
        "--config",
        envvar="STREAMCTL_CONFIG",
        help="TOML config naming pipelines (default: the user config dir's streamctl/config.toml).",
        show_envvar=True,
    ),
    traceback: bool = typer.Option(False, "--traceback", help="Show the Python traceback of an internal error."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Plans list every step (a plan of more than "
                                 "40 steps is otherwise summarized by kind and folder; --json always lists them)."),
    no_headers: bool = typer.Option(False, "--no-headers", help="Tables print their rows only: no title, no header "
                                    "(for awk and cut; as kubectl's)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Inspect, align and retire Spark Structured Streaming checkpoints and their sinks."""
    context.SHOW_TRACEBACK = traceback
    context.VERBOSE = verbose
    context.NO_HEADERS = no_headers
    context.WIDE = False  # set by -o wide (render.effective_format)
    _utf8_output()
    context.CONFIG_PATH = config


def main() -> None:
    app()


if __name__ == "__main__":
    main()

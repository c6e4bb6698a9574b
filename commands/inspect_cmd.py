"""`streamctl inspect ...`: read-only inspections, one module per subcommand
(commands/inspect_<name>_cmd.py); each resolves its inputs, calls the inspectors, renders and
exits with the code its verdict implies (console/exit_codes.py `exit_for_verdict`)."""
from __future__ import annotations

import typer

from streamctl.console.exit_codes import EXIT_CODES_HELP
from streamctl.console.lazy_group import LazyGroup


class InspectGroup(LazyGroup):
    # `inspect <name>` is commands/inspect_<name>_cmd.py's `inspect_<name>`, imported when it is
    # used (LazyGroup); in this order in --help
    LAZY_COMMANDS = {name: (f"streamctl.commands.inspect_{name}_cmd", f"inspect_{name}")
                     for name in ("epochs", "state", "sink", "writers", "kafka")}


app = typer.Typer(
    cls=InspectGroup,
    help="Read-only inspections of checkpoints, state and sinks.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
    rich_markup_mode=None,
)

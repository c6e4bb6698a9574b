"""`streamctl inspect ...`: read-only inspections, one module per subcommand
(commands/inspect_<name>_cmd.py); each resolves its inputs, calls the inspectors, renders and
returns the exit code the verdict implies (console/inspect_view.py)."""
from __future__ import annotations

import typer

from streamctl.console.errors import LazyGroup
from streamctl.console.exit_codes import EXIT_CODES_HELP


class InspectGroup(LazyGroup):
    # each subcommand's module is imported when it is used (LazyGroup), in this order in --help
    LAZY_COMMANDS = {
        "epochs": ("streamctl.commands.inspect_epochs_cmd", "inspect_epochs"),
        "state": ("streamctl.commands.inspect_state_cmd", "inspect_state"),
        "sink": ("streamctl.commands.inspect_sink_cmd", "inspect_sink"),
        "writers": ("streamctl.commands.inspect_writers_cmd", "inspect_writers"),
        "kafka": ("streamctl.commands.inspect_kafka_cmd", "inspect_kafka"),
    }


app = typer.Typer(
    cls=InspectGroup,
    help="Read-only inspections of checkpoints, state and sinks.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
    rich_markup_mode=None,
)

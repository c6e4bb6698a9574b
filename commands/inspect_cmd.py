"""`streamctl inspect ...`: read-only inspections, one module per subcommand
(commands/inspect_<name>_cmd.py); each resolves its inputs, calls the inspectors, renders and
returns the exit code the verdict implies (console/inspect_view.py)."""
from __future__ import annotations

import typer

from streamctl.commands import (
    inspect_epochs_cmd,
    inspect_kafka_cmd,
    inspect_sink_cmd,
    inspect_state_cmd,
    inspect_writers_cmd,
)
from streamctl.console.exit_codes import EXIT_CODES_HELP

app = typer.Typer(
    help="Read-only inspections of checkpoints, state and sinks.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
    rich_markup_mode=None,
)
app.command("epochs")(inspect_epochs_cmd.inspect_epochs)
app.command("state")(inspect_state_cmd.inspect_state)
app.command("sink")(inspect_sink_cmd.inspect_sink)
app.command("writers")(inspect_writers_cmd.inspect_writers)
app.command("kafka")(inspect_kafka_cmd.inspect_kafka)

"""What every command shares: the options with one meaning everywhere, the settings they fall
back to (flag, environment, config file), and the one way a command names its target."""
from __future__ import annotations

import enum
from typing import Any, Optional

import typer

from streamctl.console import context, render
from streamctl.inspectors.findings import human_bytes  # noqa: F401 - the commands' name for it

FORMAT_HELP = ("Output format: table (fitted to the terminal; plain text when piped), wide (table with more columns), "
               "plain, markdown or json. [env: STREAMCTL_FORMAT]")
QUIET_HELP = ("Seconds: a newest offsets/commits file younger than this reports LIVE_QUERY. Default: three "
              "trigger intervals (10 s..10 min); 0 turns the check off. [env: STREAMCTL_QUIET_PERIOD]")
SINK_HELP = "The sink this checkpoint writes to (a path or URI); once per checkpoint, in order."
SINK_KIND_HELP = ("auto (detected from _spark_metadata/, _delta_log/, _commits/ or an Iceberg metadata/), file, delta, "
                  "coordinated or iceberg.")
APP_ID_HELP = "Delta txn app id (default: the checkpoint's query id)."


class SinkKind(str, enum.Enum):
    """--sink-kind as a choice: typer rejects any other value (usage error, exit 2). The values
    are the readers' (inspectors/sinks.py SINK_KINDS; tests/test_sinks.py checks they match)."""

    auto = "auto"
    file = "file"
    delta = "delta"
    coordinated = "coordinated"
    iceberg = "iceberg"

    def __str__(self) -> str:
        return self.value


CHECKPOINT_ARG = typer.Argument(None, help="A checkpoint path, URI or pipeline name.")
SINK_OPT = typer.Option(None, "--sink", help=SINK_HELP)
ONE_SINK_OPT = typer.Option(None, "--sink", help="The sink this checkpoint writes to (path or URI).")
SINK_KIND_OPT = typer.Option(SinkKind.auto, "--sink-kind", help=SINK_KIND_HELP)
APP_ID_OPT = typer.Option(None, "--app-id", help=APP_ID_HELP)
ASYNC_PROGRESS_OPT = typer.Option(
    False, "--async-progress", help="The query runs with asyncProgressTrackingEnabled=true: its gaps in offsets/ and "
    "commits/ are Spark's own (Spark writes no trace of the option; without it a lost offsets/P-1 is damage).")
QUIET_OPT = typer.Option(None, "--quiet-period", help=QUIET_HELP)
TARGET_SPARK_OPT = typer.Option(None, "--target-spark", help="The Spark line that will restart the query (3.5, 4.3.0, "
                                "or installed: the PySpark beside streamctl): report what it refuses (SPARK_LINE_REFUSES). "
                                "Default: STREAMCTL_TARGET_SPARK, else the config's target_spark, else not checked.")
FORMAT_OPT = typer.Option(None, "--format", "-o", help=FORMAT_HELP)
JSON_OPT = typer.Option(False, "--json", help="Same as --format json.")
# ... and of every mutating command
EXECUTE_OPT = typer.Option(False, "--execute", help="Carry the plan out (default: print it, change nothing).")
BACKUP_DIR_OPT = typer.Option(None, "--backup-dir", help="Where moved files, the plan and the journal go "
                              "(default CHECKPOINT/_streamctl/backups/<operation id>).")
BREAK_LOCK_OPT = typer.Option(False, "--break-lock", help="Take over a lock left by a process that is gone.")


def settings() -> Any:
    """The config file (`--config`, STREAMCTL_CONFIG or the user config dir's)."""
    from streamctl.console.config import load_config

    return load_config(context.CONFIG_PATH)


def output_format(flag: Optional[str], as_json: bool, config: Any) -> str:
    from streamctl.console.config import format_setting

    return render.effective_format("json" if as_json else format_setting(flag, config))


def quiet_period(flag: Optional[float], config: Any) -> float:
    from streamctl.console.config import setting

    return float(setting("quiet_period", flag, "STREAMCTL_QUIET_PERIOD", config, -1.0, flag="--quiet-period"))


def target_spark(flag: Optional[str], config: Any, pipeline: Any = None) -> Optional[tuple[int, int]]:
    """The Spark line that restarts the query: --target-spark, else STREAMCTL_TARGET_SPARK, else
    the pipeline's `target_spark`, else [defaults] target_spark; None: not checked."""
    import os

    from streamctl.console.config import setting
    from streamctl.inspectors.lines import parse_line

    if flag is None and not os.environ.get("STREAMCTL_TARGET_SPARK") and getattr(pipeline, "target_spark", None):
        where = f"pipeline {pipeline.name}'s target_spark"
        return parse_line(pipeline.target_spark, flag=where)
    value = setting("target_spark", flag, "STREAMCTL_TARGET_SPARK", config, "", flag="--target-spark")
    return parse_line(value) if value else None


def checkpoints(args: list[str], config: Any) -> list[str]:
    from streamctl.console.config import resolve_checkpoint

    return [resolve_checkpoint(a, config)[0] for a in args]


def targets(args: list[str], sinks: Optional[list[str]], sink_kind: SinkKind, app_id: Optional[str],
            config: Any) -> list[tuple[str, Optional[str], str, Optional[str]]]:
    """(checkpoint, sink, sink kind, app id) per argument, by console/config.py resolve_target. --sink
    is given once per checkpoint, in order."""
    from streamctl.console.config import resolve_target
    from streamctl.formats.errors import UsageError

    if sinks and len(sinks) != len(args):
        raise UsageError(f"--sink was given {len(sinks)} time(s) for {len(args)} checkpoint(s): give one per checkpoint, in order")
    out = []
    for i, arg in enumerate(args):
        t = resolve_target(arg, sinks[i] if sinks else None, str(sink_kind), app_id, config)
        out.append((t.checkpoint, t.sink, t.sink_kind, t.app_id))
    return out


def check_query_id(query_id: Optional[str]) -> None:
    """UsageError unless `query_id` (--query-id) is absent or a UUID, as Spark's query ids are."""
    import uuid

    from streamctl.formats.errors import UsageError

    if query_id is not None:
        try:
            uuid.UUID(query_id)
        except ValueError:
            raise UsageError(f"invalid value for --query-id: {query_id[:60]!r} (a query id is a UUID)") from None

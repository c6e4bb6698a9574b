"""The command side of a fleet mutation (`streamctl trim '/data/chk/*' --sink-pattern ...`):
when a command takes the fleet path, the checkpoints and their sinks from the arguments (glob
patterns expand as in `inspect epochs`: inspectors/fleet.py), and one call of
operations/fleet_run.py (plan, execute, resume or undo the run), rendered by console/fleet_view.py.
One plain checkpoint without a fleet flag keeps the single-checkpoint path (commands/mutation.py)."""
from __future__ import annotations

from typing import Any, Callable, Optional

import typer

SINK_PATTERN_HELP = ("Each checkpoint's sink, relative to the checkpoint folder unless absolute: {name} is the "
                     "checkpoint folder's name, {checkpoint} its location ('../../out/{name}'). Default: the sink "
                     "of the configured pipeline whose checkpoint it is, else none.")
WORKERS_HELP = ("With several checkpoints: how many are planned or changed at once (default 4): threads, or with "
                "--engine spark the number of Spark tasks, each taking its share one checkpoint after another.")
ENGINE_HELP = ("With several checkpoints: local (default): threads of this process; spark: inside Spark tasks, each "
               "checkpoint's own operation against the shared storage, the run record written here (spark extra).")
RUN_DIR_HELP = ("With several checkpoints and --execute: the folder of the run record (default: the first "
                "checkpoint's _streamctl/fleet-runs/).")
# the options every fleet-capable mutation shares
CHECKPOINTS_ARG = typer.Argument(None, help="A checkpoint path, URI or pipeline name; several, or glob patterns "
                                 "('/data/chk/*', 's3://b/chk/*'), make a fleet run.")
SINK_PATTERN_OPT = typer.Option(None, "--sink-pattern", help=SINK_PATTERN_HELP)
WORKERS_OPT = typer.Option(None, "--workers", help=WORKERS_HELP)
ENGINE_OPT = typer.Option(None, "--engine", help=ENGINE_HELP)
MASTER_OPT = typer.Option(None, "--master", help="Spark master URL for --engine spark (default local[2]).")
RUN_DIR_OPT = typer.Option(None, "--run-dir", help=RUN_DIR_HELP)
RESUME_RUN_OPT = typer.Option(None, "--resume-run", help="Continue every checkpoint a fleet run left unfinished "
                              "(its run record).")
UNDO_RUN_OPT = typer.Option(None, "--undo-run", help="Put back every checkpoint a fleet run changed (its run record).")
OUTPUT_JSONL_OPT = typer.Option(None, "--output-jsonl", help="With several checkpoints: also write one JSON line per "
                                "checkpoint to this file.")
OUTPUT_PARQUET_OPT = typer.Option(None, "--output-parquet", help="With several checkpoints: also write one row per "
                                  "checkpoint to this Parquet file.")


def wanted(checkpoints: Optional[list[str]], *flags: Any) -> bool:
    """The fleet path: several checkpoints, a glob pattern, or a fleet-only flag given."""
    from streamctl.inspectors.fleet import is_pattern

    args = checkpoints or []
    return len(args) > 1 or any(is_pattern(a) for a in args) or any(f is not None for f in flags)


def _targets(checkpoints: list[str], sink_pattern: Optional[str], sink_kind: str, app_id: Optional[str],
             config: Any) -> list[tuple[str, Optional[str], str, Optional[str]]]:
    """(checkpoint, sink, sink kind, app id) of each checkpoint: the sink by --sink-pattern, else
    the pipeline's: named, or whose `checkpoint` is the location a pattern matched."""
    from streamctl.console.config import resolve_target
    from streamctl.inspectors.fleet import expand
    from streamctl.operations.fleet_run import inside, sink_for

    by_location = {p.checkpoint.rstrip("/"): name for name, p in config.pipelines.items() if p.checkpoint}
    out: list[tuple[str, Optional[str], str, Optional[str]]] = []
    args = []
    for pattern in checkpoints:
        matches = expand([pattern])
        if len(matches) > 1 or matches != [pattern]:
            inside(pattern, matches)
        args.extend(matches)
    for arg in args:
        t = resolve_target(by_location.get(arg.rstrip("/"), arg), None, sink_kind, app_id, config)
        if sink_pattern:
            out.append((t.checkpoint, sink_for(t.checkpoint, sink_pattern), sink_kind, app_id))
        else:
            out.append((t.checkpoint, t.sink, t.sink_kind, t.app_id))
    return out


def run(name: str, checkpoints: Optional[list[str]], *, sink: Optional[str], sink_pattern: Optional[str],
        sink_kind: str, app_id: Optional[str], settings: dict[str, Any],
        planner_of: Callable[[dict[str, Any]], Callable[[Any], Any]], operation: Any, execute: bool,
        workers: Optional[int], run_dir: Optional[str], resume_run: Optional[str], undo_run: Optional[str],
        output_jsonl: Optional[str], output_parquet: Optional[str], backup_dir: Optional[str], break_lock: bool,
        as_json: bool, engine: Optional[str] = None, master: Optional[str] = None) -> None:
    """Plan, execute, resume or undo a fleet run of `name`; exits with the fleet's exit code."""
    from streamctl.commands import options
    from streamctl.console import fleet_view, render
    from streamctl.console.errors import exit_code_for
    from streamctl.formats.errors import UsageError
    from streamctl.operations import fleet_record, fleet_run

    if sink:
        raise UsageError("--sink names one checkpoint's sink; with several checkpoints use --sink-pattern")
    if backup_dir:
        raise UsageError("--backup-dir names one checkpoint's backup; a fleet run backs up each checkpoint in its "
                         "own _streamctl/backups/")
    if resume_run and undo_run:
        raise UsageError("--resume-run and --undo-run cannot be combined")
    if (resume_run or undo_run) and (checkpoints or sink_pattern):
        raise UsageError("--resume-run/--undo-run take the run record (its checkpoints and sinks); do not also name "
                         "checkpoints or --sink-pattern")
    if workers is not None and workers < 1:
        raise UsageError(f"invalid value for --workers: {workers} (at least 1)")
    fleet_run.check_engine(engine, master)
    fleet_view.check_outputs(output_jsonl, output_parquet)
    threads = workers or fleet_run.DEFAULT_WORKERS
    config = options.settings()
    fmt = options.output_format(None, as_json, config)
    again = resume_run or undo_run
    if again:
        record = fleet_record.load(again, name)
        with fleet_run.engine(engine, master) as spark, render.progress(not as_json) as tick:
            if resume_run:
                rows = fleet_run.resume_fleet(record, operation, planner_of(record.settings), exit_code_for, threads,
                                              break_lock, tick, spark)
            else:
                rows = fleet_run.undo_fleet(record, operation, exit_code_for, threads, break_lock, tick, spark)
        kind = "Resumed" if resume_run else "Undo"
        done = fleet_view.emit(f"{options_title(name)}Fleet{kind}", rows, fmt, "resume" if resume_run else "undo",
                               record, name, f"{'Resumed' if resume_run else 'Undone'}: fleet run {record.run_id}")
        fleet_view.write_outputs(rows, output_jsonl, output_parquet)
        raise done
    if not checkpoints:
        raise UsageError("name a CHECKPOINT or a pattern (or use --resume-run / --undo-run)")
    entries = fleet_run.entries_of(_targets(checkpoints, sink_pattern, sink_kind, app_id, config))
    planner = planner_of(settings)
    if not execute:
        with fleet_run.engine(engine, master) as spark, render.progress(not as_json) as tick:
            rows = fleet_run.plan_fleet(entries, planner, exit_code_for, threads, tick, spark)
        done = fleet_view.emit(f"{options_title(name)}FleetPlan", rows, fmt, "plan", None, name,
                               "Plan (nothing changed; add --execute to carry it out)")
        fleet_view.write_outputs(rows, output_jsonl, output_parquet)
        raise done
    record = fleet_record.create(name, run_dir, entries, settings, operation.backup_under)
    with fleet_run.engine(engine, master) as spark, render.progress(not as_json) as tick:
        rows = fleet_run.execute_fleet(record, operation, planner, exit_code_for, threads, break_lock, tick, spark)
    done = fleet_view.emit(f"{options_title(name)}FleetResult", rows, fmt, "execute", record, name,
                           f"Executed: fleet run {record.run_id}")
    fleet_view.write_outputs(rows, output_jsonl, output_parquet)
    raise done


def options_title(name: str) -> str:
    from streamctl.console.plan_view import title

    return title(name)

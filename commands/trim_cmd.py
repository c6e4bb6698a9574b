"""`streamctl trim`: plan, and with --execute carry out, the removal of checkpoint and sink-log
files no restart and no kept rollback needs. Same lock, journal, backup and undo as align: one
runner, streamctl.operations.runner."""
from __future__ import annotations

from typing import Any, Optional

import typer

from streamctl.commands import fleet_mutation as fleet
from streamctl.commands import options


def plan_lines(plan: Any, executed: bool = False) -> list[str]:
    head = "Executed" if executed else "Plan (nothing changed; add --execute to carry it out)"
    sizes = plan.after.get("reclaimable") or {}
    total_f = sum(v["files"] for v in sizes.values())
    total_b = sum(v["bytes"] for v in sizes.values())
    lines = [f"{head}: trim {plan.roots['checkpoint']}" + (f" with sink {plan.roots['sink']}" if "sink" in plan.roots else ""),
             f"  keeps restart and rollback points {plan.after.get('oldest_rollback')}..{plan.before.get('committed')}",
             f"  reclaimable: {total_f} file(s), {options.human_bytes(total_b)}"]
    for cat, v in sizes.items():
        if v["files"]:
            lines.append(f"    {cat:<9} {v['files']:>7} file(s) {options.human_bytes(v['bytes']):>12}")
    from streamctl.console.plan_view import step_lines

    return lines + [f"  note: {n}" for n in plan.notes[1:]] + step_lines(plan)


def _planner(settings: dict[str, Any]) -> Any:
    """A fleet run's planner of one checkpoint, from the run's settings (kept in its run record)."""
    from streamctl.operations.trim import TrimRequest, plan_trim

    def plan(e: Any) -> Any:
        return plan_trim(TrimRequest(e.checkpoint, e.sink, e.sink_kind, e.app_id, settings["quiet_period_s"],
                                     keep_epochs=settings["keep_epochs"], keep_rollback_to=settings["keep_rollback_to"],
                                     purge=settings["purge"], async_progress=settings["async_progress"]))[0]

    return plan


def trim(
    checkpoints: Optional[list[str]] = fleet.CHECKPOINTS_ARG,
    sink: Optional[str] = options.ONE_SINK_OPT,
    sink_kind: options.SinkKind = options.SINK_KIND_OPT,
    app_id: Optional[str] = options.APP_ID_OPT,
    keep_epochs: int = typer.Option(10, "--keep-epochs", min=1, help="Keep this many newest epochs as restart/rollback points (default 10)."),
    keep_rollback_to: Optional[str] = typer.Option(None, "--keep-rollback-to", help="Keep `align --to EPOCH` possible: "
                                                   "an epoch, or an ISO-8601 time with its zone (the epoch "
                                                   "`align --to TIME` would rewind to)."),
    execute: bool = options.EXECUTE_OPT,
    purge: bool = typer.Option(False, "--purge", help="Delete instead of moving into the backup (no undo)."),
    backup_dir: Optional[str] = options.BACKUP_DIR_OPT,
    async_progress: bool = options.ASYNC_PROGRESS_OPT,
    break_lock: bool = options.BREAK_LOCK_OPT,
    quiet_period: Optional[float] = options.QUIET_OPT,
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a crashed --execute from its backup folder."),
    undo: Optional[str] = typer.Option(None, "--undo", help="Put back what an earlier trim moved (its backup folder)."),
    as_json: bool = typer.Option(False, "--json", help="A TrimPlan / TrimResult JSON document (a fleet: TrimFleetPlan / "
                                 "TrimFleetResult)."),
    sink_pattern: Optional[str] = fleet.SINK_PATTERN_OPT,
    workers: Optional[int] = fleet.WORKERS_OPT,
    engine: Optional[str] = fleet.ENGINE_OPT,
    master: Optional[str] = fleet.MASTER_OPT,
    run_dir: Optional[str] = fleet.RUN_DIR_OPT,
    resume_run: Optional[str] = fleet.RESUME_RUN_OPT,
    undo_run: Optional[str] = fleet.UNDO_RUN_OPT,
    output_jsonl: Optional[str] = fleet.OUTPUT_JSONL_OPT,
    output_parquet: Optional[str] = fleet.OUTPUT_PARQUET_OPT,
) -> None:
    """Reclaim checkpoint and sink-log space down to exactly what recovery needs.

    Keeps every restart and rollback point from the oldest kept epoch to the newest commit:
    offsets and commits entries, each state store's restore chains (snapshots/zips and the
    deltas/changelogs after them), the SST files the kept RocksDB zips name, and the file sink's
    log from the compaction at or below the oldest kept epoch. Plans the removal of everything
    older (bytes and files per category), refuses a live or misaligned query. Every intact
    savepoint (`streamctl savepoint`) is kept as --keep-rollback-to keeps its epoch.

    Examples:

    \b
      streamctl trim /data/chk/orders --keep-epochs 20
      streamctl trim /data/chk/orders --sink /data/out/orders --keep-rollback-to 1200 --execute
      streamctl trim /data/chk/orders --keep-rollback-to 2026-11-21T02:55:00Z
      streamctl trim --undo /data/chk/orders/_streamctl/backups/trim-20261121T030000Z-1a2b
      streamctl trim '/data/chk/*' --sink-pattern '../../out/{name}' --keep-epochs 20 --execute  # a fleet
      streamctl trim 's3://b/chk/*' --sink-pattern 's3://b/out/{name}' --engine spark --workers 8 --execute
      streamctl trim --resume-run /data/chk/a/_streamctl/fleet-runs/trim-fleet-20261121T030000Z-1a2b.json
    """
    from streamctl.commands import mutation
    from streamctl.inspectors.rewind_time import check_epoch_or_time
    from streamctl.operations.trim import TrimRequest, operation, plan_trim

    check_epoch_or_time(keep_rollback_to, "--keep-rollback-to")

    if fleet.wanted(checkpoints, sink_pattern, workers, engine, master, run_dir, resume_run, undo_run,
                    output_jsonl, output_parquet):
        config = options.settings()
        settings = {"keep_epochs": keep_epochs, "keep_rollback_to": keep_rollback_to, "purge": purge,
                    "async_progress": async_progress, "quiet_period_s": options.quiet_period(quiet_period, config)}
        fleet.run("trim", checkpoints, sink=sink, sink_pattern=sink_pattern, sink_kind=str(sink_kind), app_id=app_id,
                  settings=settings, planner_of=_planner, operation=operation(), execute=execute, workers=workers,
                  run_dir=run_dir, resume_run=resume_run, undo_run=undo_run, output_jsonl=output_jsonl,
                  output_parquet=output_parquet, backup_dir=backup_dir, break_lock=break_lock, as_json=as_json,
                  engine=engine, master=master)
        return
    checkpoint = checkpoints[0] if checkpoints else None
    target = mutation.front("trim", checkpoint, sink, str(sink_kind), app_id, resume, undo, break_lock, operation,
                            plan_lines, as_json)
    if target is None:
        return
    location, sink, kind, app_id, config = target
    req = TrimRequest(location, sink, kind, app_id, options.quiet_period(quiet_period, config),
                      keep_epochs=keep_epochs, keep_rollback_to=keep_rollback_to, purge=purge,
                      async_progress=async_progress)
    mutation.plan_or_execute("trim", location, lambda: plan_trim(req)[0], backup_dir, break_lock, execute, operation(),
                             plan_lines, as_json)

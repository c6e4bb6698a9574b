"""`streamctl align`: plan, and with --execute carry out, a realignment of one checkpoint (and
its sink) that keeps delivery exactly-once. Also `--resume JOURNAL` and `--undo BACKUP`.
Thin: the planner is streamctl.operations.align; --execute, --resume and --undo run through
streamctl.operations.runner."""
from __future__ import annotations

from typing import Any, Optional

import typer

from streamctl.commands import fleet_mutation as fleet
from streamctl.commands import kafka_options, options


def plan_lines(plan: Any, executed: bool = False) -> list[str]:
    from streamctl.inspectors.findings import positions_text, shown
    from streamctl.operations.plan import epochs_text

    b, a = plan.before, plan.after
    sink = "sink" in plan.roots
    head = "Executed" if executed else "Plan (nothing changed; add --execute to carry it out)"
    lines = [
        f"{head}: align {plan.roots['checkpoint']}" + (f" with sink {plan.roots['sink']}" if "sink" in plan.roots else ""),
        f"  before: {positions_text(b, sink)}, verdict {b.get('verdict')} "
        f"({', '.join(b.get('findings') or []) or 'no findings'})",
        f"  strategy: {plan.strategy}, target epoch {shown(plan.target)} -> {positions_text(a, sink)}; expected verdict "
        f"{plan.expected_verdict}",
        f"  delivery: {plan.classification}"
        + (f" (duplicates: epochs {epochs_text(plan.duplicates)})" if plan.duplicates else "")
        + (f" (loss: epochs {epochs_text(plan.loss)})" if plan.loss else ""),
    ]
    from streamctl.console.plan_view import step_lines

    return lines + [f"  note: {n}" for n in plan.notes] + step_lines(plan)


def align(
    checkpoints: Optional[list[str]] = fleet.CHECKPOINTS_ARG,
    sink: Optional[str] = options.ONE_SINK_OPT,
    sink_kind: options.SinkKind = options.SINK_KIND_OPT,
    app_id: Optional[str] = options.APP_ID_OPT,
    to: str = typer.Option("auto", "--to", help="auto (the newest exactly-once epoch), max (the newest epoch the WAL "
                                                  "and every state store hold), an epoch number, an ISO-8601 time with "
                                                  "its zone (the newest epoch whose batch started at or before it: "
                                                  "2026-11-21T02:55:00Z) or savepoint:NAME."),
    execute: bool = options.EXECUTE_OPT,
    backup_dir: Optional[str] = options.BACKUP_DIR_OPT,
    allow_duplicates: bool = typer.Option(False, "--allow-duplicates", help="Accept a plan that delivers some epochs twice."),
    allow_loss: bool = typer.Option(False, "--allow-loss", help="Accept a plan that loses some epochs."),
    discard_in_flight: bool = typer.Option(False, "--discard-in-flight", help="Also drop the planned-but-uncommitted "
                                           "batch after the target (Spark plans it anew)."),
    async_progress: bool = options.ASYNC_PROGRESS_OPT,
    sink_compact_interval: Optional[int] = typer.Option(None, "--sink-compact-interval", min=1, help="The file "
                                                        "sink's compaction interval (spark.sql.streaming.fileSink.log."
                                                        "compactInterval), when its log has no .compact file yet."),
    source_archive: Optional[str] = typer.Option(None, "--source-archive", help="The file source's sourceArchiveDir "
                                                 "(cleanSource=archive): input files a roll back replays are looked "
                                                 "for there and put back where the source's log names them."),
    query_id: Optional[str] = typer.Option(None, "--query-id", help="The query id to write into a lost or torn "
                                           "metadata file (when no lease proves it)."),
    break_lock: bool = options.BREAK_LOCK_OPT,
    quiet_period: Optional[float] = options.QUIET_OPT,
    bootstrap: Optional[str] = kafka_options.BOOTSTRAP_OPT,
    kafka_config: Optional[list[str]] = kafka_options.KAFKA_CONFIG_OPT,
    kafka_timeout: Optional[float] = kafka_options.KAFKA_TIMEOUT_OPT,
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a crashed --execute from its journal "
                                         "(the backup folder or its journal.jsonl)."),
    undo: Optional[str] = typer.Option(None, "--undo", help="Restore the exact files an earlier align changed "
                                       "(its backup folder)."),
    as_json: bool = typer.Option(False, "--json", help="An AlignPlan / AlignResult JSON document (a fleet: "
                                 "AlignFleetPlan / AlignFleetResult)."),
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
    """Realign a checkpoint and its sink so that a restart delivers every record exactly once.

    Picks the target epoch from evidence: roll back to the newest epoch every writer (WAL, commit
    log, each state store, the sink and its writers) can restart from, or roll forward when the
    sink and every state store already hold epochs the commit log lacks. Prints the plan (every
    file it moves or writes) and its delivery class: exactly-once, duplicates or loss (the last
    two need --allow-duplicates / --allow-loss). With --execute: takes the lock, refuses a live
    query, backs up every touched file, journals each step and inspects again.

    Examples:

    \b
      streamctl align /data/chk/orders --sink /data/out/orders
      streamctl align /data/chk/orders --sink /data/out/orders --execute
      streamctl align /data/chk/orders --sink /data/out/orders --to 41 --allow-loss --execute
      streamctl align /data/chk/orders --sink /data/out/orders --to 2026-11-21T02:55:00Z --allow-duplicates
      streamctl align /data/chk/orders --to savepoint:before-deploy-42 --execute
      streamctl align /data/chk/orders --query-id 4f1c0b7e-2d7a-4a8e-9a43-0d5c1e2b3a4f --execute  # lost metadata
      streamctl align /data/chk/clicks --sink /data/out/clicks --bootstrap kafka1:9092  # refused if the broker lost offsets
      streamctl align --resume /data/chk/orders/_streamctl/backups/align-20261121T030000Z-1a2b
      streamctl align --undo /data/chk/orders/_streamctl/backups/align-20261121T030000Z-1a2b
      streamctl align '/data/chk/*' --sink-pattern '../../out/{name}' --execute  # a fleet
    """
    from streamctl.commands import mutation
    from streamctl.formats.errors import UsageError
    from streamctl.inspectors.findings import positions_text, shown
    from streamctl.operations.align import AlignRequest, operation, plan_align
    from streamctl.operations.align_rewind import check_to

    check_to(to)
    options.check_query_id(query_id)
    if fleet.wanted(checkpoints, sink_pattern, workers, engine, master, run_dir, resume_run, undo_run,
                    output_jsonl, output_parquet):
        from streamctl.operations.align import fleet_planner

        if query_id or bootstrap or kafka_config:
            raise UsageError("--query-id and the Kafka options name one query's; they cannot be given to several checkpoints")
        settings = {"quiet_period_s": options.quiet_period(quiet_period, options.settings()), "to": to,
                    "allow_duplicates": allow_duplicates, "allow_loss": allow_loss, "discard_in_flight": discard_in_flight,
                    "async_progress": async_progress, "sink_compact_interval": sink_compact_interval,
                    "source_archive": source_archive}
        fleet.run("align", checkpoints, sink=sink, sink_pattern=sink_pattern, sink_kind=str(sink_kind), app_id=app_id,
                  settings=settings, planner_of=fleet_planner, operation=operation(), execute=execute, workers=workers,
                  run_dir=run_dir, resume_run=resume_run, undo_run=undo_run, output_jsonl=output_jsonl,
                  output_parquet=output_parquet, backup_dir=backup_dir, break_lock=break_lock, as_json=as_json,
                  engine=engine, master=master)
        return
    checkpoint = checkpoints[0] if checkpoints else None
    target = mutation.front("align", checkpoint, sink, str(sink_kind), app_id, resume, undo, break_lock, operation,
                            plan_lines, as_json)
    if target is None:
        return
    location, sink, kind, app_id, config = target
    from streamctl.console.config import resolve_checkpoint

    kafka = kafka_options.kafka_settings(bootstrap, kafka_config, kafka_timeout, resolve_checkpoint(str(checkpoint), config)[1],
                                         config, required=False)
    req = AlignRequest(location, sink, kind, app_id, options.quiet_period(quiet_period, config), to=to,
                       allow_duplicates=allow_duplicates, allow_loss=allow_loss, discard_in_flight=discard_in_flight,
                       async_progress=async_progress, query_id=query_id, sink_compact_interval=sink_compact_interval,
                       source_archive=source_archive, kafka=kafka)
    # with --execute the lock comes first: the plan is made (and an empty one reported) only under it
    mutation.plan_or_execute("align", location, lambda: plan_align(req)[0], backup_dir, break_lock, execute, operation(),
                             plan_lines, as_json, lambda plan: (
                                 f"Nothing to do: {location} is {plan.before.get('verdict')} at epoch "
                                 f"{shown(plan.target)} ({positions_text(plan.after, sink is not None)})"))

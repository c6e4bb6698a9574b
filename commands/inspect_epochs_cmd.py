"""`streamctl inspect epochs`: where every writer of each query stands; locally, on a thread pool
or in Spark tasks, with Kafka positions, the space trim would reclaim, --watch and metrics."""
from __future__ import annotations

import os
from typing import Any, Optional

import typer

from streamctl.commands import kafka_options, options
from streamctl.commands.options import (
    APP_ID_OPT,
    FORMAT_OPT,
    JSON_OPT,
    QUIET_OPT,
    SINK_KIND_OPT,
    SINK_OPT,
    TARGET_SPARK_OPT,
    SinkKind,
)
from streamctl.console import inspect_view as view
from streamctl.console import render
from streamctl.console.exit_codes import exit_for_verdict

ENGINE_HELP = ("local (default): inspect in this process (checkpoints on object stores on a thread pool); spark: "
               "one Spark task per checkpoint (needs the spark extra; reuses an active SparkSession).")
SPARK_TASKS_HELP = ("Spark tasks that share the checkpoints with --engine spark (default: two per core of the "
                    "cluster, at most 500 checkpoints per task).")
WORKERS_HELP = ("Threads of the local engine (default: min(32, 4 x CPUs) when a checkpoint is on an object store, "
                "else 1: one checkpoint after another).")
WATCH_HELP = "Redraw the table every --interval seconds until Ctrl-C (exit 130); with --metrics-file, rewrite it each time."


def inspect_epochs(
    checkpoints: list[str] = typer.Argument(..., help="Checkpoint paths, URIs (s3://, gs://, hdfs://, abfs://, file://), "
                                            "glob patterns of either ('/data/chk/*', 's3://b/chk/*') or pipeline names."),
    sink: Optional[list[str]] = SINK_OPT,
    sink_kind: SinkKind = SINK_KIND_OPT,
    app_id: Optional[str] = APP_ID_OPT,
    bootstrap: Optional[str] = kafka_options.BOOTSTRAP_OPT,
    kafka_config: Optional[list[str]] = kafka_options.KAFKA_CONFIG_OPT,
    kafka_timeout: Optional[float] = kafka_options.KAFKA_TIMEOUT_OPT,
    quiet_period: Optional[float] = QUIET_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
    engine: str = typer.Option("local", "--engine", help=ENGINE_HELP),
    master: str = typer.Option("local[2]", "--master", help="Spark master URL for --engine spark (default local[2])."),
    workers: Optional[int] = typer.Option(None, "--workers", help=WORKERS_HELP),
    spark_tasks: Optional[int] = typer.Option(None, "--spark-tasks", min=1, help=SPARK_TASKS_HELP),
    output_jsonl: Optional[str] = typer.Option(None, "--output-jsonl", help="Also write one JSON line per query (its queries[] record) to this file."),
    output_parquet: Optional[str] = typer.Option(None, "--output-parquet", help="Also write one row per query to this Parquet file (flat columns plus record_json)."),
    watch: bool = typer.Option(False, "--watch", help=WATCH_HELP),
    interval: float = typer.Option(5.0, "--interval", help="Seconds between refreshes of --watch (default 5)."),
    watch_count: Optional[int] = typer.Option(None, "--watch-count", hidden=True, help="Stop --watch after N refreshes."),
    metrics_file: Optional[str] = typer.Option(None, "--metrics-file", help="Write Prometheus text-format metrics to this file (atomically), for node-exporter's textfile collector."),
    reclaimable: bool = typer.Option(False, "--reclaimable", help="Add the space `streamctl trim` would reclaim per query "
                                     "(a column and the JSON field `reclaimable`; one more listing and a stat per reclaimable file)."),
    keep_epochs: int = typer.Option(10, "--keep-epochs", min=1, help="With --reclaimable: the newest epochs kept as restart/rollback points (as trim)."),
    deep: bool = typer.Option(False, "--deep", help="On object stores and HDFS, also read the head and tail of the state "
                              "files each store restores from (a ranged read or two per store) to find torn ones; local "
                              "checkpoints always are. align, trim and diagnose always do."),
    target_spark: Optional[str] = TARGET_SPARK_OPT,
) -> None:
    """Show where every writer of each query stands and whether it is aligned.

    One row per query (query id, planned and committed epochs, state epoch, the common
    restartable window, verdict), then the findings. Several checkpoints at once also checks
    cross-query invariants such as QUERY_ID_CLASH. Glob patterns scan a fleet.

    Examples:

    \b
      # one checkpoint, as a table
      streamctl inspect epochs /data/chk/orders

    \b
      # several checkpoints on S3, as JSON for a runbook
      streamctl inspect epochs s3://bucket/chk/orders s3://bucket/chk/payments --json

    \b
      # with the sink: is its commit log ahead of or behind the checkpoint?
      streamctl inspect epochs /data/chk/orders --sink /data/tables/orders

    \b
      # a fleet, inside Spark tasks, one row per query into Parquet
      streamctl inspect epochs 's3://bucket/chk/*' --engine spark --output-parquet fleet.parquet

    \b
      # before an upgrade (or a downgrade): what does Spark 4.3 refuse?
      streamctl inspect epochs /data/chk/orders --target-spark 4.3

    \b
      # live, with metrics for node-exporter
      streamctl inspect epochs '/data/chk/*' --watch --metrics-file /var/lib/node_exporter/streamctl.prom
    """
    import time

    from streamctl.inspectors import fleet
    from streamctl.inspectors.report import epoch_report_of_records

    config = options.settings()
    output = options.output_format(fmt, as_json, config)
    with_kafka = bool(bootstrap or kafka_config or kafka_timeout is not None or os.environ.get("STREAMCTL_KAFKA_BOOTSTRAP"))
    view.check_epochs_options(engine, workers, interval, watch_count, with_kafka)
    view.check_output_paths(output_jsonl, output_parquet, metrics_file)
    args = fleet.expand(checkpoints)
    lines = [options.target_spark(target_spark, config, config.pipelines.get(a)) for a in args]
    targets = [fleet.Target(*t, deep=deep, target_spark=line)
               for t, line in zip(options.targets(args, sink, sink_kind, app_id, config), lines, strict=True)]
    quiet = options.quiet_period(quiet_period, config)
    default_workers = fleet.default_workers(any(fleet.is_remote(t.checkpoint) for t in targets))
    runner = fleet.SparkRunner(master) if engine == "spark" else None
    if reclaimable:  # the trim planner (the write side) only for --reclaimable: a plain inspection never loads it
        from streamctl.operations import trim

    def inspect_once() -> dict[str, Any]:
        started = time.time()
        if runner is not None:
            records = runner.run(targets, quiet, tasks=spark_tasks)
            if reclaimable:
                records = [dict(r, reclaimable=trim.reclaimable(t.checkpoint, t.sink, t.sink_kind, t.app_id, keep_epochs, quiet)) for r, t in zip(records, targets, strict=True)]
        else:
            with render.progress(output != "json" and not watch) as tick:
                queries = fleet.run_local(targets, workers or default_workers, quiet, tick)
            if with_kafka:
                queries = kafka_options.with_kafka_each(queries, args, bootstrap, kafka_config, kafka_timeout, config)
            records = [q.to_record() for q in queries]
            if reclaimable:  # from the inspection just made: no second one
                records = [dict(r, reclaimable=trim.reclaimable(t.checkpoint, t.sink, t.sink_kind, t.app_id, keep_epochs, quiet, q))
                           for r, t, q in zip(records, targets, queries, strict=True)]
        doc = epoch_report_of_records(records)
        view.write_outputs(records, doc, started, time.time() - started, output_jsonl, output_parquet, metrics_file)
        return doc

    try:
        if watch:
            doc = view.watch_epochs(inspect_once, output, interval, watch_count)
        else:
            doc = inspect_once()
            view.emit_epochs(doc, output)
    finally:
        if runner is not None:
            runner.close()
    raise exit_for_verdict(doc["verdict"])

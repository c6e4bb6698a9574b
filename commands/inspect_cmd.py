"""`streamctl inspect ...`: read-only inspections. Thin: resolve inputs, call the inspectors,
render, return the exit code the verdict implies."""
from __future__ import annotations

import os
from typing import Any, Optional

import typer

from streamctl.console import context, render
from streamctl.console.errors import handle_errors
from streamctl.console.exit_codes import EXIT_CODES_HELP
from streamctl.commands import inspect_view as view
from streamctl.commands import kafka_cmd, options
from streamctl.commands.options import APP_ID_OPT, FORMAT_OPT, JSON_OPT, QUIET_OPT, SINK_KIND_OPT, TARGET_SPARK_OPT, SINK_OPT, SinkKind

app = typer.Typer(
    help="Read-only inspections of checkpoints, state and sinks.",
    no_args_is_help=True,
    epilog=EXIT_CODES_HELP,
    rich_markup_mode=None,
)




ENGINE_HELP = ("local (default): inspect in this process (checkpoints on object stores on a thread pool); spark: "
               "one Spark task per checkpoint (needs the spark extra; reuses an active SparkSession).")
SPARK_TASKS_HELP = ("Spark tasks that share the checkpoints with --engine spark (default: two per core of the "
                    "cluster, at most 500 checkpoints per task).")
WORKERS_HELP = ("Threads of the local engine (default: min(32, 4 x CPUs) when a checkpoint is on an object store, "
                "else 1: one checkpoint after another).")
WATCH_HELP = "Redraw the table every --interval seconds until Ctrl-C (exit 130); with --metrics-file, rewrite it each time."


@app.command("epochs")
@handle_errors
def inspect_epochs(
    checkpoints: list[str] = typer.Argument(..., help="Checkpoint paths, URIs (s3://, gs://, hdfs://, abfs://, file://), "
                                            "glob patterns of either ('/data/chk/*', 's3://b/chk/*') or pipeline names."),
    sink: Optional[list[str]] = SINK_OPT,
    sink_kind: SinkKind = SINK_KIND_OPT,
    app_id: Optional[str] = APP_ID_OPT,
    bootstrap: Optional[str] = typer.Option(None, "--bootstrap", help=kafka_cmd.BOOTSTRAP_HELP),
    kafka_config: Optional[list[str]] = typer.Option(None, "--kafka-config", help=kafka_cmd.KAFKA_CONFIG_HELP),
    kafka_timeout: Optional[float] = typer.Option(None, "--kafka-timeout", help=kafka_cmd.TIMEOUT_HELP),
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
    from streamctl.inspectors.errors import UsageError
    from streamctl.inspectors.report import epoch_report_of_records

    config = options.settings()
    output = options.output_format(fmt, as_json, config)
    if engine not in fleet.ENGINES:
        raise UsageError(f"invalid value for --engine: {engine!r} (choose from {', '.join(fleet.ENGINES)})")
    if workers is not None and workers < 1:
        raise UsageError("--workers must be at least 1")
    if not 0 < interval < float("inf") or (watch_count is not None and watch_count < 1):
        raise UsageError("--interval must be a positive finite number of seconds and --watch-count at least 1")
    for flag, path in (("--output-jsonl", output_jsonl), ("--output-parquet", output_parquet), ("--metrics-file", metrics_file)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(os.path.expanduser(path)))):
            raise UsageError(f"{flag} {path}: its folder does not exist")
    with_kafka = bool(bootstrap or kafka_config or kafka_timeout is not None or os.environ.get("STREAMCTL_KAFKA_BOOTSTRAP"))
    if engine == "spark" and with_kafka:
        raise UsageError("--engine spark does not ask Kafka brokers: drop --bootstrap/--kafka-config "
                         "(and STREAMCTL_KAFKA_BOOTSTRAP), or use --engine local")
    args = fleet.expand(checkpoints)
    lines = [options.target_spark(target_spark, config, config.pipelines.get(a)) for a in args]
    targets = [fleet.Target(*t, deep=deep, target_spark=line)
               for t, line in zip(options.targets(args, sink, sink_kind, app_id, config), lines, strict=True)]
    quiet = options.quiet_period(quiet_period, config)
    default_workers = fleet.default_workers(any(fleet.is_remote(t.checkpoint) for t in targets))
    runner = fleet.SparkRunner(master) if engine == "spark" else None

    def inspect_once() -> dict[str, Any]:
        started = time.time()
        if runner is not None:
            records = runner.run(targets, quiet, tasks=spark_tasks)
            if reclaimable:
                records = [dict(r, reclaimable=_reclaimable(t, keep_epochs, quiet)) for r, t in zip(records, targets, strict=True)]
        else:
            with render.progress(output != "json" and not watch) as tick:
                queries = fleet.run_local(targets, workers or default_workers, quiet, tick)
            if with_kafka:
                queries = _with_kafka(queries, args, bootstrap, kafka_config, kafka_timeout, config)
            records = [q.to_record() for q in queries]
            if reclaimable:  # from the inspection just made: no second one
                records = [dict(r, reclaimable=_reclaimable(t, keep_epochs, quiet, q))
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
    raise typer.Exit(int(view.exit_for_verdict(doc["verdict"])))


def _reclaimable(target: Any, keep_epochs: int, quiet: float, inspection: Any = None) -> dict[str, Any]:
    """What `streamctl trim --keep-epochs N` would reclaim (or why it would refuse)."""
    from streamctl.inspectors.errors import StreamctlError
    from streamctl.operations.trim import TrimRequest, plan_trim

    try:
        plan, sizes = plan_trim(TrimRequest(target.checkpoint, target.sink, target.sink_kind, target.app_id, quiet,
                                            keep_epochs=keep_epochs), inspection)
    except StreamctlError as exc:
        return {"keep_epochs": keep_epochs, "refused": str(exc)}
    return {"keep_epochs": keep_epochs, "oldest_kept_epoch": plan.target,
            "files": sum(v["files"] for v in sizes.values()), "bytes": sum(v["bytes"] for v in sizes.values()),
            "by_category": sizes}


@app.command("state")
@handle_errors
def inspect_state(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    quiet_period: Optional[float] = QUIET_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Show operator x partition x store: versions, snapshots, durable version, chain status.

    The chain is ok, broken (a version missing between restorable ones), unrestorable (the
    version the next run needs cannot be rebuilt), empty, or orphans (files no restart will use).
    One summary line per operator follows the table.

    Examples:

    \b
      # which store lost a file the restart needs
      streamctl inspect state /data/chk/orders

    \b
      streamctl inspect state orders --format markdown
    """
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.report import state_report

    config = options.settings()
    output = options.output_format(fmt, as_json, config)
    location = options.checkpoints([checkpoint], config)[0]
    with render.progress(output != "json") as tick:
        q = inspect_checkpoint(location, progress=tick, quiet_period_s=options.quiet_period(quiet_period, config))
    doc = state_report(q)
    if output == "json":
        render.emit_json(doc)
    else:
        rows = []
        summary = []
        for op in doc["operators"]:
            for s in op["stores"]:
                chain = s["chain"]
                if chain == "broken":
                    chain = f"broken at {s['broken_at']}"
                elif chain == "unrestorable":
                    chain = f"unrestorable: missing {', '.join(s['missing'])}"
                elif chain == "orphans":
                    chain = f"orphans: {len(s['orphans']) + len(s['temp_files'])}"
                versions = "-" if not s["versions"] else f"{s['versions'][0]}..{s['versions'][1]} ({s['version_count']})"
                row = [op["operator"], s["partition"], s["store"], s["provider"], versions,
                       s["newest_snapshot"], s["durable_version"], chain]
                if context.WIDE:  # -o wide: where the store is and what a restart needs of it
                    row += [s["path"], s["required_version"], s["first_restorable"],
                            len(s["orphans"]) + len(s["temp_files"]), "yes" if s["unique_ids"] else "no"]
                rows.append(row)
            sm = op["summary"]
            chains = ", ".join(f"{k} {v}" for k, v in sm["chains"].items())
            summary.append(
                f"operator {op['operator']} ({op['name'] or 'unnamed'}, {op['provider']}): "
                f"{op['partitions_found']}/{op['num_partitions'] if op['num_partitions'] is not None else '?'} partitions, "
                f"{sm['stores']} stores, durable versions {sm['min_durable_version']}..{sm['max_durable_version']}; {chains or 'no stores'}")
        title = f"{doc['checkpoint']}  (committed {doc['committed']}, next run restores version {doc['required_version']})"
        if rows:
            render.emit_table(["op", "partition", "store", "provider", "versions", "newest snapshot", "durable", "chain"]
                              + (["path", "restores", "first restorable", "orphans", "unique ids"] if context.WIDE else []),
                              rows, output, title=title)
        else:
            render.emit_lines(["no state: the query is stateless"], output, title=title)
        render.emit_lines(summary, output, title="Operators" if summary else None)
        render.emit_lines([view.finding_line(f) for f in doc["findings"]] or ["none"], output, title="Findings")
    raise typer.Exit(int(view.exit_for_verdict(doc["verdict"])))


def _inspect_all(targets: list[tuple[str, Optional[str], str, Optional[str]]], output: str,
                 quiet_period: float = 0.0) -> list[Any]:
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    queries = []
    with render.progress(output != "json") as tick:
        for loc, sink, kind, app in targets:
            tick(f"inspecting {loc}")

            def progress(msg: str, loc: str = loc) -> None:
                tick(f"{loc}: {msg}")

            queries.append(inspect_checkpoint(loc, progress=progress, sink=sink, sink_kind=kind, app_id=app,
                                              quiet_period_s=quiet_period))
    return queries


@app.command("sink")
@handle_errors
def inspect_sink(
    sink: str = typer.Argument(..., help="The sink's path or URI, or a pipeline name."),
    sink_kind: SinkKind = SINK_KIND_OPT,
    app_id: Optional[str] = typer.Option(None, "--app-id", help="Delta txn app id (a query id); needed for the txn version of a Delta sink."),
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Show a sink's commit log: kind, epochs present, files (and rows) per epoch, compactions.

    File sinks: `_spark_metadata/` batches and `.compact` points. Delta: the table version and the
    txn version for --app-id. Coordinated sinks: every epoch's commit record, its writers, and
    staging or files no commit record names.

    Examples:

    \b
      streamctl inspect sink /data/tables/orders
      streamctl inspect sink s3://bucket/tables/orders --sink-kind delta --app-id 26806544-709f-4745-a6e4-7641361fe94a
    """
    from streamctl.console.config import resolve_target
    from streamctl.inspectors.report import sink_report
    from streamctl.inspectors.sinks import read_sink

    config = options.settings()
    output = options.output_format(fmt, as_json, config)
    t = resolve_target(sink, None, sink_kind, app_id, config)  # SINK may name a pipeline: its sink
    location, kind, app = (t.sink or sink) if t.pipeline else t.checkpoint, t.sink_kind, t.app_id  # a catalog: its table
    with render.progress(output != "json") as tick:
        tick(f"reading {location}")
        log = read_sink(location, kind, app, detail=True)
    doc = sink_report(log)
    if output == "json":
        render.emit_json(doc)
    else:
        rec = doc["sink"]
        head = f"{rec['kind']} sink {rec['uri']}: newest epoch {rec['epoch'] if rec['epoch'] is not None else '-'}"
        if rec["kind"] == "delta":
            head += f", table version {rec['table_version']}, app id {rec['app_id'] or '- (give --app-id)'}"
        if rec["compactions"]:
            head += f", compactions at {', '.join(map(str, rec['compactions']))}"
        rows = [[e["epoch"], e["source"], len(e["files"]), len(e["deleted"]), e["rows"]] for e in rec["epochs"]]
        render.emit_lines([head], output)
        if rows:
            render.emit_table(["epoch", "log file", "files added", "files deleted", "rows"], rows, output)
        if rec["writers"]:
            render.emit_table(["writer", "partition", "first", "last", "epochs", "missing in"],
                              [[w["writer"], w["partition"], w["first"], w["last"], w["epochs"],
                                ", ".join(map(str, w["missing_in"])) or "-"] for w in rec["writers"]], output)
        render.emit_lines([view.finding_line(f) for f in doc["findings"]] or ["none"], output, title="Findings")
    raise typer.Exit(int(view.exit_for_verdict(doc["verdict"])))


@app.command("writers")
@handle_errors
def inspect_writers(
    checkpoints: list[str] = typer.Argument(..., help="Checkpoint paths, URIs or pipeline names."),
    sink: Optional[list[str]] = SINK_OPT,
    sink_kind: SinkKind = SINK_KIND_OPT,
    app_id: Optional[str] = APP_ID_OPT,
    quiet_period: Optional[float] = QUIET_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Show every parallel writer, its restartable window, the common window, and who is ahead,
    behind or broken.

    Writers are the WAL (offsets/), the commit log, every state store, the sink's log and every
    writer task of a coordinated sink. The common window is [max of firsts, min of lasts]: the
    epochs every writer can restart from — where a realignment can land.

    Examples:

    \b
      streamctl inspect writers /data/chk/orders --sink /data/tables/orders
      streamctl inspect writers orders --json
    """
    from streamctl.inspectors.report import writers_report

    config = options.settings()
    output = options.output_format(fmt, as_json, config)
    queries = _inspect_all(options.targets(checkpoints, sink, sink_kind, app_id, config), output, options.quiet_period(quiet_period, config))
    doc = writers_report(queries)
    if output == "json":
        render.emit_json(doc)
    else:
        for q in doc["queries"]:
            if output == "table":  # on a terminal: the picture first, the table below it
                render.emit_chart(q, f"{q['checkpoint']}  (query {q['query_id']}, committed {q['committed']})")
            rows = [[w["writer"], w["kind"], w["first"], w["last"], w["status"]] for w in q["writers"]]
            render.emit_table(["writer", "kind", "first", "last", "status"], rows, output,
                              title=f"{q['checkpoint']}  (query {q['query_id']}, committed {q['committed']})")
            lines = [f"common window: {view.window(q['common_window'])}"]
            for status in ("ahead", "behind", "broken", "empty"):
                if q[status]:
                    lines.append(f"{status}: {', '.join(q[status][:10])}{' ...' if len(q[status]) > 10 else ''}")
            render.emit_lines(lines, output)
            render.emit_lines([view.finding_line(f) for f in q["findings"]] or ["none"], output, title="Findings")
        render.emit_lines([view.finding_line(f) for f in doc["findings"]], output)
    raise typer.Exit(int(view.exit_for_verdict(doc["verdict"])))


def _with_kafka(queries: list[Any], args: list[str], bootstrap: Optional[str], kafka_config: Optional[list[str]],
                timeout: Optional[float], config: Any) -> list[Any]:
    """Add Kafka positions and SOURCE_* findings to each query (its pipeline's Kafka settings
    apply when the argument names one)."""
    from streamctl.console.config import resolve_checkpoint
    from streamctl.inspectors.kafka import KafkaBroker, with_kafka

    out = []
    for q, arg in zip(queries, args, strict=True):
        _loc, pipeline = resolve_checkpoint(arg, config)
        ks = kafka_cmd.kafka_settings(bootstrap, kafka_config, timeout, pipeline, config)
        assert ks is not None
        with KafkaBroker(ks.bootstrap, ks.config, ks.timeout) as broker:
            out.append(with_kafka(q, broker)[0])
    return out


@app.command("kafka")
@handle_errors
def inspect_kafka(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    bootstrap: Optional[str] = typer.Option(None, "--bootstrap", help=kafka_cmd.BOOTSTRAP_HELP),
    kafka_config: Optional[list[str]] = typer.Option(None, "--kafka-config", help=kafka_cmd.KAFKA_CONFIG_HELP),
    kafka_timeout: Optional[float] = typer.Option(None, "--kafka-timeout", help=kafka_cmd.TIMEOUT_HELP),
    group: Optional[str] = typer.Option(None, "--group", help="Also show this consumer group's offsets."),
    quiet_period: Optional[float] = QUIET_OPT,
    fmt: Optional[str] = FORMAT_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Show every Kafka topic-partition of the query: committed and planned offsets (from the
    checkpoint), earliest and latest (from the broker), lag and status, with totals per topic.

    Status: ok, expired (retention deleted records the query has not read: SOURCE_EXPIRED),
    reset (the topic was recreated or truncated: SOURCE_RESET), new (a partition the
    checkpoint does not track: SOURCE_NEW_PARTITION), unknown topic, unknown partition.

    Examples:

    \b
      streamctl inspect kafka /data/chk/orders --bootstrap broker:9092
      streamctl inspect kafka orders --kafka-config security.protocol=SASL_SSL --kafka-config sasl.mechanism=PLAIN
    """
    from streamctl.console.config import resolve_checkpoint
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.kafka import KafkaBroker, with_kafka
    from streamctl.inspectors.report import kafka_report

    config = options.settings()
    output = options.output_format(fmt, as_json, config)
    location, pipeline = resolve_checkpoint(checkpoint, config)
    ks = kafka_cmd.kafka_settings(bootstrap, kafka_config, kafka_timeout, pipeline, config)
    assert ks is not None
    with render.progress(output != "json") as tick:
        tick(f"inspecting {location}")
        q = inspect_checkpoint(location, quiet_period_s=options.quiet_period(quiet_period, config))
        tick(f"asking {ks.bootstrap}")
        with KafkaBroker(ks.bootstrap, ks.config, ks.timeout) as broker:
            q, rows = with_kafka(q, broker, group)
            group_offsets = broker.group_offsets(group) if group else {}
    doc = kafka_report(q, rows, ks.bootstrap, group, group_offsets)
    if output == "json":
        render.emit_json(doc)
    else:
        head = ["topic", "partition", "committed", "planned", "earliest", "latest", "lag", "status"]
        rows_out = []
        for r in doc["partitions"]:
            row = [r["topic"], r["partition"], r["committed"], r["planned"], r["earliest"], r["latest"], r["lag"], r["status"]]
            rows_out.append(row + [r["group_offset"]] if group else row)
        render.emit_table(head + (["group offset"] if group else []), rows_out, output,
                          title=f"{q.checkpoint}  (committed {q.committed}, planned {q.planned}) on {ks.bootstrap}")
        render.emit_lines([f"{t}: {v['partitions']} partitions, lag {v['lag']}, lost {v['lost']}, at risk {v['at_risk']}"
                           for t, v in doc["topics"].items()] or ["no Kafka source in this checkpoint"], output, title="Totals")
        render.emit_lines([view.finding_line(f) for f in doc["findings"]] or ["none"], output, title="Findings")
    raise typer.Exit(int(view.exit_for_verdict(doc["verdict"])))

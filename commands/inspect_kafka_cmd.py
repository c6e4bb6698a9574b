"""`streamctl inspect kafka`: every Kafka topic-partition of a query against the broker."""
from __future__ import annotations

from typing import Optional

import typer

from streamctl.commands import kafka_options, options
from streamctl.commands.options import FORMAT_OPT, JSON_OPT, QUIET_OPT
from streamctl.console import inspect_view as view
from streamctl.console import render
from streamctl.console.exit_codes import exit_for_verdict
from streamctl.inspectors.findings import shown


def inspect_kafka(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, URI or pipeline name."),
    bootstrap: Optional[str] = kafka_options.BOOTSTRAP_OPT,
    kafka_config: Optional[list[str]] = kafka_options.KAFKA_CONFIG_OPT,
    kafka_timeout: Optional[float] = kafka_options.KAFKA_TIMEOUT_OPT,
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
    ks = kafka_options.kafka_settings(bootstrap, kafka_config, kafka_timeout, pipeline, config)
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
                          title=f"{q.checkpoint}  (committed {shown(q.committed)}, planned {shown(q.planned)}) on {ks.bootstrap}")
        render.emit_lines([f"{t}: {v['partitions']} partitions, lag {v['lag']}, lost {v['lost']}, at risk {v['at_risk']}"
                           for t, v in doc["topics"].items()] or ["no Kafka source in this checkpoint"], output, title="Totals")
        render.emit_lines([view.finding_line(f) for f in doc["findings"]] or ["none"], output, title="Findings")
    raise exit_for_verdict(doc["verdict"])

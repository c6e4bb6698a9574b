"""`streamctl preflight`: does a new version of a query fit its checkpoint? (docs/model.md#preflight)"""
from __future__ import annotations

import typer

from streamctl.console import render
from streamctl.console.exit_codes import exit_for_verdict
from streamctl.inspectors.documents import document

_DOC = "docs/model.md#preflight"


def preflight(
    checkpoint: str = typer.Argument(..., help="The checkpoint the new version of the query will restart on."),
    query: str = typer.Option(..., "--query", help="module:function returning the new query's streaming DataFrame "
                                                   "(it is given a SparkSession); the module is imported from the "
                                                   "current folder or PYTHONPATH."),
    as_json: bool = typer.Option(False, "--json", help="A Preflight JSON document."),
) -> None:
    """Before a deploy: would the new version of a query restart on this checkpoint?

    Plans the new query (without starting it: its plan only, no data read, nothing written) and
    compares its stateful operators (ids and names, as Spark numbers them) with the checkpoint's
    operator metadata, as Spark's restart does, then the state key types of the deduplication and
    aggregation operators it keeps with the checkpoint's state schema files, as Spark's first batch
    does, its number of sources with the newest offsets' (SOURCES_CHANGED: the restart fails), the
    path each file source reads with the folder the checkpoint's source log names for
    its newest files (SOURCE_PATH_CHANGED: the restart fails or reads every file again), and the
    topics each Kafka source reads with those the newest offsets hold (SOURCE_TOPICS_CHANGED: a
    topic no longer read is data loss to the restart). Exit 0 when they fit, 1 when the restart
    would fail, read input again or drop a topic (STATEFUL_OPERATORS_CHANGED,
    STATE_KEY_SCHEMA_CHANGED, SOURCES_CHANGED, naming Spark's error; SOURCE_PATH_CHANGED;
    SOURCE_TOPICS_CHANGED), 2
    for a bad --query, 3 for an unreadable checkpoint. Value schemas, joins and transformWithState keys are not compared.

    Examples:

    \b
      streamctl preflight /data/chk/orders --query orders_job:build
      PYTHONPATH=deploy/v2 streamctl preflight /data/chk/orders --query orders_job:build --json
    """
    from streamctl.formats.errors import StorageError, UsageError
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.findings import finding_records, shown, verdict_of
    from streamctl.inspectors.preflight import (
        compare_kafka_topics,
        compare_keys,
        compare_operators,
        compare_source_paths,
        compare_sources,
    )
    from streamctl.pipeline.preflight import (
        VERIFIED,
        file_sources,
        kafka_sources,
        load_query,
        source_count,
        state_keys,
        stateful_operators,
    )

    try:
        build = load_query(query)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    q = inspect_checkpoint(checkpoint, quiet_period_s=0)
    bad = [f for f in q.findings if f.code == "UNREADABLE"]
    if bad:
        raise StorageError(str(bad[0].details.get("path", checkpoint)), str(bad[0].details.get("reason", "")))
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession.builder.master("local[1]").config(
        "spark.ui.enabled", "false").getOrCreate()
    try:
        df = build(spark)
        new = stateful_operators(df)
        keys = state_keys(df)
        paths = file_sources(df)
        topics = kafka_sources(df)
        count = source_count(df)
    except Exception as exc:  # the user's code: its own error, one line
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        raise UsageError(f"--query {query}: {type(exc).__name__}: {first_line}") from None
    old = {op.operator_id: op.name for op in q.operators}
    findings = compare_operators(q.committed, old, new, VERIFIED)
    if not findings and q.committed is not None:
        findings = compare_keys(q.checkpoint, old, new, keys)
    kinds = [(i, name, "file") for i, name, _p, _q in paths] + [(i, name, "kafka") for i, name, _o in topics]
    findings += compare_sources(q.checkpoint, q.planned, count, kinds)
    findings += compare_source_paths(q.checkpoint, q.planned, q.sources, paths)
    findings += compare_kafka_topics(q.checkpoint, q.planned, topics)
    verdict = verdict_of(findings)  # the findings are errors: misaligned when there are any
    doc = document("Preflight", {"checkpoint": q.checkpoint, "query": query,
           "committed": q.committed,
           "checkpoint_operators": [{"id": i, "name": n} for i, n in sorted(old.items())],
           "query_operators": [{"id": i, "operator": node, "name": name} for i, (node, name) in sorted(new.items())],
           "query_sources": count,
           "query_file_sources": [{"source": name if name is not None else i, "path": path} for i, name, path, _ in paths],
           "query_kafka_sources": [{"source": name if name is not None else i, "options": _topic_options(o)}
                                   for i, name, o in topics],
           "findings": finding_records(findings), "verdict": verdict})
    if as_json:
        render.emit_json(doc)
    else:
        lines = [f"checkpoint {q.checkpoint} (committed {shown(q.committed)})",
                 "  checkpoint operators: " + (", ".join(f"{i}: {n}" for i, n in sorted(old.items())) or "none"),
                 "  query operators:      " + (", ".join(f"{i}: {name} ({node})" for i, (node, name) in sorted(new.items()))
                                               or "none")]
        lines += [f"{f.severity}  {f.code}  {f.message}" for f in findings]
        fails = any(f.details.get("restart_error") for f in findings)
        drops = all(f.details.get("restart") == "drops" for f in findings)
        lines.append("verdict: " + ("the restart fails" if fails else "the restart drops a topic's records" if findings
                                    and drops else "the restart reads input again" if findings else
                                    "fits: the operators, their state keys, the sources, the file sources' paths and "
                                    "the Kafka sources' topics match"))
        render.emit_lines(lines, "plain")
    raise exit_for_verdict(verdict)


def _topic_options(options: dict[str, str]) -> dict[str, str]:
    """The options of a Kafka source that say what it reads (never its credentials)."""
    return {k: v for k, v in options.items() if k.lower() in ("subscribe", "subscribepattern", "assign", "failondataloss")}

"""The JSON documents of the inspect commands (a public contract: see README "JSON contract").

Only built-in types come out of here; the CLI serialises them with sorted keys.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from streamctl.inspectors.checkpoint import cross_query_findings
from streamctl.inspectors.documents import document
from streamctl.inspectors.findings import Finding, finding_records, verdict_of, worst_verdict
from streamctl.inspectors.query_inspection import QueryInspection

if TYPE_CHECKING:
    from streamctl.inspectors.sinks import SinkLog



def epoch_report(queries: list[QueryInspection]) -> dict[str, Any]:
    """`inspect epochs`: one record per query (sorted by checkpoint), cross-query findings,
    and the overall verdict (the worst of all)."""
    return epoch_report_of_records([q.to_record() for q in queries])


class _Position(NamedTuple):
    """What cross_query_findings needs of a query, taken from its record."""

    checkpoint: str
    query_id: Optional[str]


def epoch_report_of_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """`epoch_report` from `QueryInspection.to_record()` records (what a Spark task of a fleet
    scan sends back): the same document."""
    cross = cross_query_findings([_Position(r["checkpoint"], r["query_id"]) for r in records])  # type: ignore[misc]
    return _queries_document("EpochReport", sorted(records, key=lambda r: r["checkpoint"]), cross)


def _queries_document(kind: str, records: list[dict[str, Any]], cross: list[Finding]) -> dict[str, Any]:
    """A report over several queries: their records, the cross-query findings, and the overall
    verdict (the worst of every query's and of the cross-query findings')."""
    verdicts = [str(r["verdict"]) for r in records] + ([verdict_of(cross)] if cross else [])
    return document(kind, {
        "queries": records,
        "findings": finding_records(cross),
        "verdict": worst_verdict(verdicts)})


def state_report(q: QueryInspection) -> dict[str, Any]:
    """`inspect state`: operator x partition x store for one checkpoint."""
    required = None
    if q.committed is not None:
        required = q.committed + 1
    elif q.planned is not None:
        required = q.planned
    state_codes = {"STATE_UNRESTORABLE", "STATE_PARTITION_MISSING", "STATE_ORPHANS", "STATE_SCHEMA_MISSING",
                   "STATE_METADATA_MISSING", "STATE_FILE_CORRUPT", "UNREADABLE", "LIVE_QUERY", "STALE_LEASE"}
    findings = [f for f in q.findings if f.code in state_codes]
    return document("StateReport", {
        "checkpoint": q.checkpoint,
        "query_id": q.query_id,
        "planned": q.planned,
        "committed": q.committed,
        "required_version": required,
        "state_epoch": q.state_epoch,
        "checkpoint_format": q.checkpoint_format,
        "operators": [op.to_record() for op in q.operators],
        "findings": finding_records(findings),
        "verdict": verdict_of(findings)})


def sink_report(log: SinkLog) -> dict[str, Any]:
    """`inspect sink`: the sink's commit log on its own."""
    return document("SinkReport", {
        "sink": log.to_record(),
        "findings": finding_records(log.findings),
        "verdict": verdict_of(log.findings)})


def writers_report(queries: list[QueryInspection]) -> dict[str, Any]:
    """`inspect writers`: every parallel writer of each query, the common window, and who is
    ahead, behind or broken."""
    records: list[dict[str, Any]] = []
    for q in sorted(queries, key=lambda q: q.checkpoint):
        by_status: dict[str, list[str]] = {}
        for w in q.writers:
            by_status.setdefault(w.status, []).append(w.name)
        records.append({
            "checkpoint": q.checkpoint,
            "query_id": q.query_id,
            "planned": q.planned,
            "committed": q.committed,
            "sink": None if q.sink is None else q.sink.position(),
            "writers": [w.to_record() for w in q.writers],
            "common_window": None if q.common_window is None else list(q.common_window),
            "ahead": by_status.get("ahead", []),
            "behind": by_status.get("behind", []),
            "broken": by_status.get("broken", []),
            "empty": by_status.get("empty", []),
            "findings": finding_records(q.findings),
            "verdict": q.verdict,
        })
    return _queries_document("WriterReport", records, cross_query_findings(queries))


def kafka_report(q: QueryInspection, rows: list[Any], bootstrap: str, group: Optional[str],
                 group_offsets: dict[tuple[str, int], int]) -> dict[str, Any]:
    """`inspect kafka`: every topic-partition of the query's Kafka sources against the broker
    (`rows`: inspectors/kafka.py PartitionPosition), the group's offsets when a group is named, the
    source findings and their verdict."""
    from streamctl.inspectors.kafka import totals

    findings = [f for f in q.findings if f.code.startswith("SOURCE_") or f.code in ("UNREADABLE", "LIVE_QUERY")]
    return document("KafkaReport", {
        "checkpoint": q.checkpoint, "query_id": q.query_id,
        "committed": q.committed, "planned": q.planned, "bootstrap": bootstrap, "group": group,
        "partitions": [dict(r.to_record(), group_offset=group_offsets.get((r.topic, r.partition)) if group else None)
                       for r in rows],
        "topics": totals(rows),
        "findings": finding_records(findings),
        "verdict": verdict_of(findings)})

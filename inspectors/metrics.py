"""Prometheus text-format metrics of an EpochReport, for node-exporter's textfile collector
(`streamctl inspect epochs ... --metrics-file /var/lib/node_exporter/textfile/streamctl.prom`).

Pure: `format_metrics(report, timestamp)` returns the text; the CLI writes it atomically
(`outputs.write_text_atomic`: a temporary file in the same folder, then `os.replace`).

Every per-query series carries `checkpoint` and `query_id` labels. A position that is unknown
(no offsets, a stateless query, no sink) has no sample rather than a made-up value.
Cross-query findings (QUERY_ID_CLASH) are counted with empty `checkpoint` and `query_id`.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Optional

from streamctl.inspectors.findings import VERDICTS

PREFIX = "streamctl_"

# name -> (type, help)
METRICS: dict[str, tuple[str, str]] = {
    "epoch_planned": ("gauge", "Newest batch id in offsets/ (the planned epoch)."),
    "epoch_committed": ("gauge", "Newest batch id in commits/ (the committed epoch)."),
    "state_epoch": ("gauge", "Epoch every state store can restart from."),
    "sink_epoch": ("gauge", "Newest epoch in the sink's commit log."),
    "kafka_lag": ("gauge", "Kafka lag of the query: records between the committed offsets and the broker's latest."),
    "kafka_topic_lag": ("gauge", "Kafka lag of the query per topic."),
    "findings": ("gauge", "Findings of the inspection, by code and severity."),
    "verdict": ("gauge", "1 for the query's verdict, 0 for the others."),
    "checkpoints": ("gauge", "Checkpoints inspected."),
    "inspect_timestamp_seconds": ("gauge", "Unix time of the inspection."),
    "inspect_duration_seconds": ("gauge", "Wall time of the inspection."),
}


def escape_label(value: str) -> str:
    """A label value as the exposition format wants it: backslash, double quote and line feed
    escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(labels: dict[str, Optional[str]]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label("" if v is None else str(v))}"' for k, v in labels.items()) + "}"


Sample = tuple[dict[str, Optional[str]], float]


def _samples(report: dict[str, Any]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {name: [] for name in METRICS}
    seen: set[str] = set()
    for q in report.get("queries", []):
        if q["checkpoint"] in seen:  # the same checkpoint named twice: one series, not a duplicate
            continue
        seen.add(q["checkpoint"])
        base = {"checkpoint": q["checkpoint"], "query_id": q.get("query_id")}
        for name, value in (("epoch_planned", q.get("planned")), ("epoch_committed", q.get("committed")),
                            ("state_epoch", q.get("state_epoch") if q.get("stateful") else None),
                            ("sink_epoch", (q.get("sink") or {}).get("epoch"))):
            if value is not None:
                out[name].append((dict(base), value))
        kafka = q.get("kafka")
        if kafka and kafka.get("lag") is not None:
            out["kafka_lag"].append((dict(base), kafka["lag"]))
            for topic, totals in sorted((kafka.get("topics") or {}).items()):
                out["kafka_topic_lag"].append((dict(base, topic=topic), totals.get("lag") or 0))
        out["findings"] += _finding_counts(q.get("findings") or [], base)
        for verdict in VERDICTS:
            out["verdict"].append((dict(base, verdict=verdict), 1 if q.get("verdict") == verdict else 0))
    out["findings"] += _finding_counts(report.get("findings") or [], {"checkpoint": "", "query_id": ""})
    out["checkpoints"].append(({}, len(report.get("queries", []))))
    return out


def _finding_counts(findings: Iterable[dict[str, Any]], base: dict[str, Optional[str]]) -> list[Sample]:
    counts: dict[tuple[str, str], int] = {}
    for f in findings:
        key = (f["code"], f["severity"])
        counts[key] = counts.get(key, 0) + 1
    return [(dict(base, code=code, severity=sev), n) for (code, sev), n in sorted(counts.items())]


def format_metrics(report: dict[str, Any], timestamp: float, duration_s: Optional[float] = None) -> str:
    """The Prometheus text exposition (version 0.0.4) of an EpochReport document."""
    samples = _samples(report)
    samples["inspect_timestamp_seconds"].append(({}, timestamp))
    if duration_s is not None:
        samples["inspect_duration_seconds"].append(({}, duration_s))
    lines: list[str] = []
    for name, (kind, help_text) in METRICS.items():
        if not samples[name]:
            continue
        full = PREFIX + name
        lines.append(f"# HELP {full} {escape_help(help_text)}")
        lines.append(f"# TYPE {full} {kind}")
        for labels, value in samples[name]:
            lines.append(f"{full}{_labels(labels)} {format_value(value)}")
    return "\n".join(lines) + "\n"

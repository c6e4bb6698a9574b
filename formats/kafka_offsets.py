"""Spark's Kafka offset JSON, one source's line of `offsets/<n>` (docs/formats/checkpoint.md#kafka-offset-json):
`{"<topic>":{"<partition>":<offset>,...},...}` (JsonUtils.partitionOffsets), written by Spark's
Kafka connector and, in the same shape, by streamctl's Python Kafka source
(pipeline/kafka_source.py: topics and partitions sorted, compact JSON). The reading of a whole
query's Kafka positions is inspectors/kafka.py's.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from streamctl.formats.reader import load_json

Offsets = dict[str, dict[int, int]]  # topic -> partition -> offset
SparkOffsets = dict[str, dict[str, int]]  # the JSON shape: partitions as strings


def parse_kafka_offsets(raw: Optional[str]) -> Optional[Offsets]:
    """The topic -> partition -> offset map of a Kafka source's offset line, or None when the
    line is not Kafka-shaped (another source kind)."""
    if raw is None:
        return None
    try:
        obj = load_json(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not obj:
        return None
    out: Offsets = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict) or not parts:
            return None
        tp: dict[int, int] = {}
        for p, off in parts.items():
            if not (isinstance(p, str) and p.lstrip("-").isdigit() and len(p) <= 11) or not isinstance(off, int) \
                    or isinstance(off, bool):
                return None  # a partition is an Int (JsonUtils' toInt): never int() of 5,000 digits
            tp[int(p)] = off
        out[topic] = tp
    return out


def spark_shape(offsets: Mapping[tuple[str, int], int]) -> SparkOffsets:
    """{(topic, partition): offset} -> Spark's JSON shape, topics and partitions sorted."""
    out: SparkOffsets = {}
    for (topic, part) in sorted(offsets):
        out.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return out


def flat(offsets: Optional[Mapping[str, Mapping[str, Any]]]) -> dict[tuple[str, int], int]:
    """Spark's JSON shape (or the parsed map) -> {(topic, partition): offset}."""
    out: dict[tuple[str, int], int] = {}
    for topic, parts in (offsets or {}).items():
        for part, off in parts.items():
            out[(str(topic), int(part))] = int(off)
    return out


def offsets_text(offsets: Mapping[str, Mapping[int, int]]) -> str:
    """Compact JSON of a topic -> partition -> offset map, topics and partitions sorted: what a
    `startingOffsets` option takes."""
    return json.dumps(spark_shape({(t, p): o for t, parts in offsets.items() for p, o in parts.items()}),
                      separators=(",", ":"))

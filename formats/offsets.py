"""`offsets/<batch>`: OffsetSeq, the write-ahead log of what each batch reads (v1: one line per source
in order; v2, Spark 4.3+: `<sourceId>:<offset>` lines) and OffsetSeqMetadata
(docs/formats/checkpoint.md#offsets). Offset strings are kept byte-exact: Spark compares offsets
by their JSON text.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from streamctl.formats.errors import LogParseError
from streamctl.formats.kafka_offsets import parse_kafka_offsets
from streamctl.formats.reader import decode_text, json_object, load_json, parse_version_line, split_lines

OFFSETS_MAX_VERSION = 2  # v1 by default; v2 (`sourceId:offset` lines) from Spark 4.3.0

SourceId = Union[int, str]  # the source's ordinal, or its name (`DataStreamReader.name`, 4.2+)
_SOURCE_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")  # what `DataStreamReader.name` accepts


def source_id_of(text: str) -> Optional[SourceId]:
    """A source id as offsets v2 lines and `sources/<id>/` folders spell it: an ordinal (`0`) or,
    with source evolution (`spark.sql.streaming.queryEvolution.enableSourceEvolution`, 4.2+), the
    name given by `DataStreamReader.name`; None for anything else."""
    if text.isdigit():
        return int(text) if len(text) <= 10 else None  # an ordinal is an Int; never int() of 100,000 digits
    return text if _SOURCE_NAME_RE.match(text) else None


def source_sort_key(sid: SourceId) -> tuple[int, int, str]:
    """Ordinals first, in order, then names."""
    return (0, sid, "") if isinstance(sid, int) else (1, 0, sid)


@dataclass(frozen=True, slots=True)
class SourceOffset:
    """One source's line: `raw` is the exact text Spark wrote, None for `-` (no offset yet)."""

    source_id: SourceId
    raw: Optional[str]

    def parsed(self) -> Any:
        return None if self.raw is None else load_json(self.raw)


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    batch_id: int
    version: int
    metadata: Mapping[str, Any]  # OffsetSeqMetadata (empty when the line is empty)
    sources: tuple[SourceOffset, ...]

    @property
    def conf(self) -> Mapping[str, str]:
        conf = self.metadata.get("conf")
        return conf if isinstance(conf, dict) else {}

    @property
    def timestamp_ms(self) -> Optional[int]:
        """batchTimestampMs: when the batch was planned (ms since the epoch), None when not an integer."""
        value = self.metadata.get("batchTimestampMs")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def watermark_ms(self) -> Optional[int]:
        value = self.metadata.get("batchWatermarkMs")
        return value if isinstance(value, int) else None


def iso_time(ms: int) -> str:
    """A batchTimestampMs as an ISO-8601 UTC time with milliseconds: 2026-11-21T02:55:00.123Z."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_offsets(data: bytes, path: str, batch_id: int) -> OffsetEntry:
    """Parse `offsets/<batch_id>` (v1: one line per source in order; v2: `<id>:<json>` lines)."""
    lines = split_lines(decode_text(data, path))
    version = parse_version_line(lines[0], path, OFFSETS_MAX_VERSION)
    if len(lines) < 2:
        raise LogParseError(path, "truncated: no metadata line after the version line")
    meta_text = lines[1].strip()
    metadata = json_object(meta_text, path, "metadata line") if meta_text else {}
    sources: list[SourceOffset] = []
    for i, line in enumerate(lines[2:]):
        sid: Optional[SourceId]
        if version == 1:
            sid, text = i, line
        else:
            head, sep, text = line.partition(":")
            sid = source_id_of(head.strip()) if sep else None
            if sid is None:
                raise LogParseError(path, f"line {i + 3}: expected '<sourceId>:<offset>'")
        if text.strip() == "-":
            sources.append(SourceOffset(sid, None))
            continue
        try:
            load_json(text)
        except json.JSONDecodeError as exc:
            raise LogParseError(path, f"source {sid} offset is not valid JSON ({exc.msg})") from None
        sources.append(SourceOffset(sid, text))
    sources.sort(key=lambda s: source_sort_key(s.source_id))
    return OffsetEntry(batch_id, version, metadata, tuple(sources))


def offsets_go_back(prev: Optional[OffsetEntry], cur: OffsetEntry) -> Optional[str]:
    """What Spark never writes in `cur`'s source offsets after `prev`'s (None for nothing, and
    for offsets of a kind streamctl does not read): a file source's `logOffset` below -1 or below
    `prev`'s (FileStreamSource's log only grows), a Kafka partition's offset below 0 (offsets are
    resolved before they are logged). A Kafka offset below `prev`'s is not judged: the connector
    logs one when a topic was recreated, and runs it with failOnDataLoss=false."""
    before = {s.source_id: s for s in prev.sources} if prev is not None else {}
    for s in cur.sources:
        try:
            obj = s.parsed()
        except json.JSONDecodeError:
            continue  # unreadable: parse_offsets said so
        if isinstance(obj, dict) and list(obj) == ["logOffset"]:
            n, was = obj["logOffset"], _log_offset(before.get(s.source_id))
            if isinstance(n, int) and not isinstance(n, bool):
                if n < -1:
                    return f"source {s.source_id}'s logOffset {n} is below -1"
                if was is not None and n < was:
                    return f"source {s.source_id}'s logOffset {n} is below batch {prev.batch_id}'s {was}"  # type: ignore[union-attr]
            continue
        for topic, parts in (parse_kafka_offsets(s.raw) or {}).items():
            for part, off in sorted(parts.items()):
                if part < 0:
                    return f"source {s.source_id} names partition {part} of {topic}"
                if off < 0:
                    return f"source {s.source_id}'s offset {off} of {topic}-{part} is below 0"
    return None


def offset_kind(s: SourceOffset) -> Optional[str]:
    """`file` for a file source's offset (`{"logOffset": n}`), `kafka` for a Kafka source's
    (topic -> partition -> offset), None for no offset or another kind."""
    try:
        obj = s.parsed()
    except json.JSONDecodeError:
        return None
    if isinstance(obj, dict) and list(obj) == ["logOffset"]:
        return "file"
    return "kafka" if parse_kafka_offsets(s.raw) is not None else None


@dataclass(frozen=True, slots=True)
class Rewound:
    """A Kafka partition the newer offsets take back: `offset` below `before`, or None where the
    newer offsets no longer name the partition."""

    source_id: SourceId
    topic: str
    partition: int
    offset: Optional[int]
    before: int


def kafka_rewound(prev: Optional[OffsetEntry], cur: OffsetEntry) -> list[Rewound]:
    """The Kafka partitions whose offset in `cur` is below `prev`'s, or which `prev` names and
    `cur` does not. Spark's connector logs such offsets only when the broker's are lower (a topic
    recreated, a subscribed topic deleted), and then reports data loss planning the batch; by
    hand, they are an edit to read records again. Offsets below 0 are offsets_go_back's."""
    if prev is None:
        return []
    before = {s.source_id: parse_kafka_offsets(s.raw) for s in prev.sources}
    out: list[Rewound] = []
    for s in cur.sources:
        was, now = before.get(s.source_id), parse_kafka_offsets(s.raw)
        if not was or now is None:
            continue
        for topic, parts in sorted(was.items()):
            for part, off in sorted(parts.items()):
                got = now.get(topic, {}).get(part)
                if got is None or 0 <= got < off:
                    out.append(Rewound(s.source_id, topic, part, got, off))
    return out


def _log_offset(s: Optional[SourceOffset]) -> Optional[int]:
    try:
        obj = s.parsed() if s is not None else None
    except json.JSONDecodeError:
        return None
    n = obj.get("logOffset") if isinstance(obj, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None

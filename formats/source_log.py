"""`sources/<n>/` of a checkpoint: the Kafka source's initial-offset file, the rate source's start time
(docs/formats/checkpoint.md#sources); the file source's log is a compactible log
(formats/compactible.py) whose entries name each input file by its `path`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping, Optional

from streamctl.formats.compactible import CompactibleBatch
from streamctl.formats.errors import LogParseError
from streamctl.formats.reader import decode_text, json_object, parse_version_line

KAFKA_INITIAL_MAX_VERSION = 1
RATE_START_MAX_VERSION = 1  # RateStreamMicroBatchStream.VERSION


@dataclass(frozen=True, slots=True)
class KafkaInitialOffsets:
    """`sources/<n>/0` of a Kafka source: written once, first byte kept for Spark 2.1.0."""

    leading_byte: int
    version: Optional[int]  # None: the Spark 2.1.0 layout without a version line
    raw: str  # the offset JSON exactly as written
    offsets: Mapping[str, Mapping[str, int]]  # topic -> partition -> offset


def parse_kafka_initial_offsets(data: bytes, path: str) -> KafkaInitialOffsets:
    """Skip the leading byte; a `v<k>` line follows (k <= 1), or raw JSON (Spark 2.1.0)."""
    if len(data) < 2:
        raise LogParseError(path, "empty or truncated Kafka initial-offset file")
    lead = data[0]
    text = decode_text(data[1:], path)
    version: Optional[int] = None
    body = text
    if text.startswith("v"):
        first, _, body = text.partition("\n")
        version = parse_version_line(first, path, KAFKA_INITIAL_MAX_VERSION)
    obj = json_object(body.strip(), path, "Kafka initial offsets")
    offsets: dict[str, dict[str, int]] = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict) or not all(isinstance(v, int) for v in parts.values()):
            raise LogParseError(path, f"topic {topic!r}: expected partition -> offset numbers")
        offsets[topic] = dict(parts)
    return KafkaInitialOffsets(lead, version, body, offsets)


def parse_rate_start(data: bytes, path: str) -> Optional[int]:
    """The rate source's `sources/<n>/0` (`RateStreamMicroBatchStream`'s metadata log, batch 0):
    `v1`, a newline, the query's start time in ms as a `LongOffset` (a bare JSON number). None
    when the file does not have that shape (another source's log); LogParseError on a version
    above v1, as Spark's `validateVersion` refuses it."""
    text = decode_text(data, path)
    first, nl, body = text.partition("\n")
    if not nl or not first.startswith("v") or not body.strip().isascii() or not body.strip().isdigit() \
            or len(body.strip()) > 19:  # a LongOffset: never int() of 100,000 digits
        return None
    parse_version_line(first, path, RATE_START_MAX_VERSION)
    return int(body.strip())


def entry_paths(batch: CompactibleBatch, batch_ids: Optional[Collection[int]] = None) -> list[str]:
    """The input files the entries of a file-source log file name (FileEntry: `path`, `timestamp`,
    `batchId`), only those of `batch_ids` when given (a compaction merges many batches)."""
    return [str(e.get("path")) for e in batch.entries if batch_ids is None or e.get("batchId") in batch_ids]


def check_file_entries(batch: CompactibleBatch, path: str) -> Optional[str]:
    """A file-source log file's entries as a restart reads them (FileStreamSource.FileEntry):
    `path` a string, `timestamp` and `batchId` Java longs (LogParseError names the first bad
    entry). Returns what a batch file holds of another batch (None when every `batchId` is the
    file's own): FileStreamSourceLog.get keeps a batch file's entries of its own batch only, so
    a replay of that batch skips the other's input file (observed 4.3.0: its rows lost); a
    restart that replays nothing takes every entry as a seen file, whatever its `batchId`."""
    foreign = None
    for i, e in enumerate(batch.entries):
        where = f"entry {i + 1}"
        p, ts, b = e.get("path"), e.get("timestamp"), e.get("batchId")
        if not isinstance(p, str) or not p:
            raise LogParseError(path, f"{where}: no input file path")
        for key, v in (("timestamp", ts), ("batchId", b)):
            if isinstance(v, bool) or not isinstance(v, int):  # the Long range: formats/reader.py
                raise LogParseError(path, f"{where}: {key} {str(v)[:40]} is not a Java long")
        if foreign is None and b != batch.batch_id and not batch.compact:
            foreign = f"{where}: batchId {b} is not the file's batch {batch.batch_id}"
    return foreign

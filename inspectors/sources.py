"""`sources/<n>/`: the Kafka initial-offset file, the rate source's start time and the file-source
log, plus the compactible log format the last shares with the file sink's `_spark_metadata/`
(docs/formats/checkpoint.md#sources)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from streamctl.formats.errors import LogParseError, StorageError
from streamctl.formats.names import batch_id_of
from streamctl.formats.offsets import SourceId
from streamctl.formats.reader import decode_text, json_object, parse_version_line, split_lines
from streamctl.inspectors.findings import missing_ranges
from streamctl.inspectors.storage import Storage

COMPACTIBLE_MAX_VERSION = 1
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


@dataclass(frozen=True, slots=True)
class CompactibleBatch:
    """One file of a compactible log (`N` or `N.compact`)."""

    batch_id: int
    compact: bool
    entries: tuple[Mapping[str, Any], ...]


def parse_compactible(data: bytes, path: str, batch_id: int, compact: bool) -> CompactibleBatch:
    """`v1` then one JSON object per line (file sink: SinkFileStatus; file source: FileEntry)."""
    lines = split_lines(decode_text(data, path))
    parse_version_line(lines[0], path, COMPACTIBLE_MAX_VERSION)
    entries = []
    for i, line in enumerate(lines[1:]):
        if not line.strip():
            continue
        entries.append(json_object(line, path, f"line {i + 2}"))
    return CompactibleBatch(batch_id, compact, tuple(entries))


def compactible_name(name: str) -> Optional[tuple[int, bool]]:
    """(batch id, is compaction) for `N` / `N.compact`, else None."""
    stem, dot, ext = name.partition(".")
    batch = batch_id_of(stem)
    if batch is not None and (not dot or ext == "compact"):
        return batch, bool(dot)
    return None


def read_compactible_log(storage: Storage, rel: str = "") -> list[CompactibleBatch]:
    """Read every batch file of a compactible log folder, ordered by batch id."""
    entries = storage.list_dir(rel)
    if entries is None:
        return []
    out = []
    for e in entries:
        parsed = compactible_name(e.name)
        if parsed is None or e.is_dir:
            continue
        rel_file = f"{rel}/{e.name}" if rel else e.name
        out.append(parse_compactible(storage.read(rel_file), storage.uri(rel_file), *parsed))
    out.sort(key=lambda b: b.batch_id)
    return out


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What `sources/<n>/` holds."""

    source_id: SourceId
    kind: str  # "kafka" | "rate" | "file" | "empty" | "unknown"
    kafka_initial: Optional[KafkaInitialOffsets] = None
    rate_start_ms: Optional[int] = None
    file_log_latest: Optional[int] = None
    file_log_files: int = 0
    file_log_missing: tuple[tuple[int, int], ...] = ()  # batch files a restart reads that are gone (ranges)


def read_source(storage: Storage, source_id: SourceId) -> SourceInfo:
    """Classify and read `sources/<source_id>/`. LogParseError/StorageError on bad files."""
    rel = f"sources/{source_id}"
    entries = storage.list_dir(rel) or []
    for e in entries:
        if e.is_dir and compactible_name(e.name) is not None:  # no reader of the source log can read it
            raise StorageError(storage.uri(f"{rel}/{e.name}"), "is a folder, expected a file")
    names = {e.name for e in entries if not e.is_dir}
    batches = sorted(p for p in (compactible_name(n) for n in names) if p is not None)
    if not batches:
        return SourceInfo(source_id, "empty")
    first = storage.read(f"{rel}/{batches[0][0]}{'.compact' if batches[0][1] else ''}")
    if batches == [(0, False)] and first[:1] != b"v":
        return SourceInfo(source_id, "kafka", kafka_initial=parse_kafka_initial_offsets(first, storage.uri(f"{rel}/0")))
    if batches == [(0, False)]:
        start = parse_rate_start(first, storage.uri(f"{rel}/0"))
        if start is not None:
            return SourceInfo(source_id, "rate", rate_start_ms=start)
    # A file source: its restart reads the log the way CompactibleFileStreamLog.allFiles does, the
    # newest compaction and every batch file after it (every file from 0 before the first
    # compaction): a missing one fails it ("sources/0/4 doesn't exist"), a torn one too
    # ("Incomplete log file"). docs/formats/checkpoint.md#file-source-log
    latest_id = batches[-1][0]
    compacts = [b for b, c in batches if c]
    start = compacts[-1] if compacts else 0
    chain = [(b, c) for b, c in batches if b >= start]
    sizes = {e.name: e.size for e in entries}
    for b, c in chain:
        name = f"{b}{'.compact' if c else ''}"
        chain_rel = f"{rel}/{name}"
        if storage.is_local or c or b == latest_id:  # parsed whole; on object stores the others by size
            parse_compactible(storage.read(chain_rel), storage.uri(chain_rel), b, c)
        elif sizes.get(name) == 0:
            raise LogParseError(storage.uri(chain_rel), "empty file (incomplete log file)")
    missing = missing_ranges([b for b, _ in chain], start, latest_id)
    return SourceInfo(source_id, "file", file_log_latest=latest_id, file_log_files=len(batches),
                      file_log_missing=tuple(missing))


def rewrite_entry_paths(content: bytes, new_path: Callable[[str], Optional[str]]) -> bytes:
    """A compactible log file (`v1`, then one JSON object per line: the file sink's
    `_spark_metadata/` or the file source's `sources/<n>/`) with each entry's `path` replaced where
    `new_path` gives one; a rewritten line is compact JSON in the entry's own key order (as Spark
    writes it), every other line byte for byte."""
    import json

    out = []
    for line in content.split(b"\n"):
        if line.startswith(b"{"):
            try:
                entry = json.loads(line)
            except ValueError:
                entry = None
            path = entry.get("path") if isinstance(entry, dict) else None
            new = new_path(path) if isinstance(path, str) else None
            if new is not None and isinstance(entry, dict):
                entry["path"] = new
                line = json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        out.append(line)
    return b"\n".join(out)

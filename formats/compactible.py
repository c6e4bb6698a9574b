"""CompactibleFileStreamLog, the format the file sink's `_spark_metadata/` and the file source's
`sources/<n>/` share: files `N` and `N.compact`, each a `v1` line then one JSON object per line
(docs/formats/checkpoint.md#file-source-log, docs/formats/sinks.md#file-sink). The entries' own
keys are file_sink_log.py's and source_log.py's.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from streamctl.formats.names import batch_id_of
from streamctl.formats.reader import decode_text, json_object_line, parse_version_line, split_lines

COMPACTIBLE_MAX_VERSION = 1
EMPTY_ENTRY = b"v1"  # a batch file of a batch that logged no entry: the version line alone
COMPACT_SUFFIX = ".compact"  # the compaction files `N.compact`


def compactible_name(name: str) -> Optional[tuple[int, bool]]:
    """(batch id, is compaction) for `N` / `N.compact` of a compactible log, else None."""
    stem, dot, ext = name.partition(".")
    batch = batch_id_of(stem)
    if batch is not None and (not dot or ext == "compact"):
        return batch, bool(dot)
    return None


def compactible_file(batch: int, compact: bool) -> str:
    """The file name of a compactible log's batch: `N` or `N.compact`."""
    return f"{batch}{COMPACT_SUFFIX}" if compact else str(batch)


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
        entries.append(json_object_line(line, path, i + 2))
    return CompactibleBatch(batch_id, compact, tuple(entries))


def rewrite_entry_paths(content: bytes, new_path: Callable[[str], Optional[str]]) -> bytes:
    """A compactible log file (`v1`, then one JSON object per line: the file sink's
    `_spark_metadata/` or the file source's `sources/<n>/`) with each entry's `path` replaced where
    `new_path` gives one; a rewritten line is compact JSON in the entry's own key order (as Spark
    writes it), every other line byte for byte."""
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

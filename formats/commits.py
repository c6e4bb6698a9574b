"""`commits/<batch>`: CommitLog, a version line and a CommitMetadata JSON line
(`nextBatchWatermarkMs`; `stateUniqueIds` with checkpoint format 2, Spark 4.0+;
docs/formats/checkpoint.md#commits).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Optional

from streamctl.formats.errors import LogParseError
from streamctl.formats.reader import decode_text, json_object, parse_version_line, split_lines

COMMITS_MAX_VERSION = 2  # v1 in 3.x; v2 adds stateUniqueIds (4.0, checkpoint format 2)


@dataclass(frozen=True, slots=True)
class CommitEntry:
    batch_id: int
    version: int
    next_batch_watermark_ms: int = 0
    # operator id -> per partition -> one unique id per store (checkpoint format 2)
    state_unique_ids: Optional[Mapping[str, tuple[tuple[str, ...], ...]]] = field(default=None)


def parse_commit(data: bytes, path: str, batch_id: int) -> CommitEntry:
    """Parse `commits/<batch_id>`: a version line and an optional CommitMetadata JSON line."""
    lines = split_lines(decode_text(data, path))
    version = parse_version_line(lines[0], path, COMMITS_MAX_VERSION)
    body = lines[1].strip() if len(lines) > 1 else ""
    obj = json_object(body, path, "commit metadata") if body else {}
    wm = obj.get("nextBatchWatermarkMs", 0)
    if not isinstance(wm, int):
        raise LogParseError(path, "nextBatchWatermarkMs is not an integer")
    ids_obj = obj.get("stateUniqueIds")
    unique: Optional[dict[str, tuple[tuple[str, ...], ...]]] = None
    if ids_obj is not None:
        if not isinstance(ids_obj, dict):
            raise LogParseError(path, "stateUniqueIds is not a JSON object")
        unique = {}
        for op, parts in ids_obj.items():
            if not isinstance(parts, list) or not all(
                isinstance(p, list) and all(isinstance(x, str) for x in p) for p in parts
            ):
                raise LogParseError(path, f"stateUniqueIds[{op}] is not a list of lists of ids")
            unique[str(op)] = tuple(tuple(p) for p in parts)
    return CommitEntry(batch_id, version, wm, unique)


def serialize_commit(next_batch_watermark_ms: int) -> bytes:
    """A v1 commit file as Spark's CommitLog writes it: `v1`, a newline, compact CommitMetadata."""
    return ("v1\n" + json.dumps({"nextBatchWatermarkMs": next_batch_watermark_ms}, separators=(",", ":"))).encode()

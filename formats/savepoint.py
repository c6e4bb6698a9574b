"""`_streamctl/savepoints/<name>.json`: a named rollback point of one checkpoint
(docs/formats/streamctl.md#savepoints). Written by `streamctl savepoint create`
(operations/savepoints.py), read by `savepoint list`, `align --to savepoint:NAME` and `trim`
(inspectors/savepoints.py).

One JSON object: `format` (1), `name`, `query_id`, `epoch` (the batch id it pins), `batch_time` and
`batch_timestamp_ms` (its `batchTimestampMs`), `created` and `created_ms`, `sink` (`{kind, uri,
position}` or null: a file sink's `log_batch`, a Delta table's `txn_app_id`/`txn_version`/
`table_version`, a coordinated sink's `epoch` and `commit`) and `kafka` (per Kafka source the
offsets the epoch starts the next batch from, byte-exact as Spark logged them, or null).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from streamctl.formats.errors import LogParseError, UsageError
from streamctl.formats.jsontext import dumps_indented
from streamctl.formats.layout import SAVEPOINTS_DIR
from streamctl.formats.reader import decode_text, json_object

SAVEPOINT_FORMAT = 1
SAVEPOINT_EXT = ".json"
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def check_name(name: str) -> str:
    """A savepoint name: 1 to 64 of A-Z a-z 0-9 . _ - (a file name on every store), not `.`/`..`."""
    if not _NAME_RE.match(name) or name in (".", ".."):
        raise UsageError(f"invalid savepoint name {name[:80]!r}: 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', '-'")
    return name


def savepoint_file(name: str) -> str:
    """The path of savepoint `name` below the checkpoint."""
    return f"{SAVEPOINTS_DIR}/{check_name(name)}{SAVEPOINT_EXT}"


def name_of_file(file_name: str) -> Optional[str]:
    """The savepoint a file of `_streamctl/savepoints/` holds, or None (a temp file, a foreign one)."""
    if not file_name.endswith(SAVEPOINT_EXT):
        return None
    name = file_name[: -len(SAVEPOINT_EXT)]
    return name if _NAME_RE.match(name) and name not in (".", "..") else None


@dataclass(frozen=True)
class Savepoint:
    name: str
    query_id: Optional[str]
    epoch: int
    batch_time: Optional[str]
    batch_timestamp_ms: Optional[int]
    created: str
    created_ms: int
    sink: Optional[dict[str, Any]]
    kafka: Optional[list[dict[str, Any]]]

    def to_record(self) -> dict[str, Any]:
        return {"format": SAVEPOINT_FORMAT, "name": self.name, "query_id": self.query_id, "epoch": self.epoch,
                "batch_time": self.batch_time, "batch_timestamp_ms": self.batch_timestamp_ms, "created": self.created,
                "created_ms": self.created_ms, "sink": self.sink, "kafka": self.kafka}


def serialize_savepoint(sp: Savepoint) -> bytes:
    return (dumps_indented(sp.to_record()) + "\n").encode()


def _int(rec: dict[str, Any], key: str, path: str, optional: bool = False) -> Optional[int]:
    value = rec.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LogParseError(path, f"'{key}' is not a non-negative integer")
    return value


def parse_savepoint(data: bytes, path: str) -> Savepoint:
    rec = json_object(decode_text(data, path), path, "savepoint")
    if rec.get("format") != SAVEPOINT_FORMAT:
        raise LogParseError(path, f"unsupported savepoint format {rec.get('format')!r} (this streamctl reads {SAVEPOINT_FORMAT})")
    name = rec.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise LogParseError(path, "'name' is not a savepoint name")
    sink, kafka = rec.get("sink"), rec.get("kafka")
    if sink is not None and not isinstance(sink, dict):
        raise LogParseError(path, "'sink' is not an object")
    if kafka is not None and not (isinstance(kafka, list) and all(isinstance(k, dict) for k in kafka)):
        raise LogParseError(path, "'kafka' is not a list of objects")
    query_id, batch_time, created = rec.get("query_id"), rec.get("batch_time"), rec.get("created")
    return Savepoint(name, query_id if isinstance(query_id, str) else None, _int(rec, "epoch", path) or 0,
                     batch_time if isinstance(batch_time, str) else None,
                     _int(rec, "batch_timestamp_ms", path, optional=True), created if isinstance(created, str) else "",
                     _int(rec, "created_ms", path) or 0, sink, kafka)

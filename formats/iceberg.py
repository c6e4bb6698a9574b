"""An Iceberg table's metadata as a streaming sink writes it (docs/formats/sinks.md#iceberg): the
file names of `<table>/metadata/`, the table metadata JSON (its `snapshots`, `current-snapshot-id`
or `refs.main`, each snapshot's parent and `summary`), and the metadata of a rollback as Iceberg's
`rollback_to_snapshot` writes it. What the snapshots mean for a checkpoint (the sink epoch, rolled
back epochs, other writers) is inspectors/iceberg.py's; reading the files is Storage's.

Files: `metadata/` holds `vN.metadata.json` with `version-hint.text` (Hadoop tables) or
`NNNNN-<uuid>.metadata.json` (catalog tables, whose current file the catalog names: here the
highest number, refused when two files claim it).

Iceberg's Spark streaming sink (`SparkWrite`'s streaming commit) puts `spark.sql.streaming.queryId`
and `spark.sql.streaming.epochId` into the summary of every snapshot it commits.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from streamctl.formats.errors import StorageError
from streamctl.formats.reader import load_json

METADATA_DIR = "metadata"  # <table>/metadata/
VERSION_HINT = "version-hint.text"  # a Hadoop table's current version number
QUERY_ID = "spark.sql.streaming.queryId"
EPOCH_ID = "spark.sql.streaming.epochId"
MAX_METADATA_BYTES = 256 << 20  # a table metadata file beyond this is not read
MAX_HINT_BYTES = 1024
_NAME = re.compile(r"^(?:v(\d{1,18})|(\d{1,18})-[0-9A-Za-z-]{1,64})(?:\.gz)?\.metadata\.json$")
_HADOOP_NAME = re.compile(r"v(\d{1,18})\.metadata\.json")
_GZ = ".gz.metadata.json"
LONG = 2 ** 63


def is_metadata_name(name: str) -> bool:
    """A table metadata file's name (`vN.metadata.json`, `NNNNN-<uuid>.metadata.json`, gzipped too)."""
    return _NAME.match(name) is not None


def metadata_rel(name: str) -> str:
    """A file of the table's `metadata/` folder, relative to the table."""
    return f"{METADATA_DIR}/{name}"


def hadoop_name(version: int) -> str:
    """The metadata file of a Hadoop table's version."""
    return f"v{version}.metadata.json"


def hadoop_version(rel: str) -> Optional[int]:
    """The version of a Hadoop table's metadata file (`metadata/vN.metadata.json`), None for another name."""
    folder, _, name = rel.rpartition("/")
    m = _HADOOP_NAME.fullmatch(name)
    return int(m.group(1)) if m and folder == METADATA_DIR else None


def hinted_name(hint: bytes, names: list[str]) -> Optional[str]:
    """The metadata file `version-hint.text` names when it is among `names`, else None."""
    text = hint.decode("utf-8", "replace").strip()
    return hadoop_name(int(text)) if text.isdigit() and hadoop_name(int(text)) in names else None


def metadata_versions(names: list[str]) -> dict[int, list[str]]:
    """The table metadata files among `names` by version (gzipped ones left out: they are not read)."""
    versions: dict[int, list[str]] = {}
    for n in names:
        m = _NAME.match(n)
        if m and not n.endswith(_GZ):
            versions.setdefault(int(m.group(1) or m.group(2)), []).append(n)
    return versions


def long_value(v: Any) -> Optional[int]:
    """A Long of the metadata (a JSON integer or a digit string), None for anything else."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and -LONG <= v < LONG:
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d{1,19}", v):
        n = int(v)
        return n if -LONG <= n < LONG else None
    return None


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: int
    parent_id: Optional[int]
    timestamp_ms: Optional[int]
    operation: str  # the summary's `operation`, "" without one
    query: Any  # the summary's query id as written (None without one)
    epoch_value: Any  # the summary's epoch id as written (None without one)
    files: Optional[int]  # added data files
    rows: Optional[int]  # added records

    @property
    def epoch(self) -> Optional[int]:
        return long_value(self.epoch_value)


@dataclass(frozen=True)
class TableMetadata:
    snapshots: dict[int, Snapshot]
    current: Optional[int]  # the current snapshot id (None or -1: none)


def _snapshot(s: dict[str, Any], sid: int) -> Snapshot:
    summary: dict[str, Any] = s["summary"] if isinstance(s.get("summary"), dict) else {}
    return Snapshot(sid, long_value(s.get("parent-snapshot-id")), long_value(s.get("timestamp-ms")),
                    str(summary.get("operation", "")), summary.get(QUERY_ID), summary.get(EPOCH_ID),
                    long_value(summary.get("added-data-files")), long_value(summary.get("added-records")))


def _metadata_object(data: bytes, path: str) -> dict[str, Any]:
    try:
        meta = load_json(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise StorageError(path, f"table metadata is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("snapshots", []), list):
        raise StorageError(path, "not Iceberg table metadata (no snapshots list)")
    return meta


def parse_table_metadata(data: bytes, path: str) -> TableMetadata:
    """The snapshots and the current snapshot of a table metadata file (StorageError naming `path`
    for a file that is not table metadata)."""
    meta = _metadata_object(data, path)
    snapshots: dict[int, Snapshot] = {}
    for s in meta.get("snapshots") or []:
        sid = long_value(s.get("snapshot-id")) if isinstance(s, dict) else None
        if sid is None:
            raise StorageError(path, "a snapshot without a valid snapshot-id")
        snapshots[sid] = _snapshot(s, sid)
    refs: dict[str, Any] = meta["refs"] if isinstance(meta.get("refs"), dict) else {}
    main: dict[str, Any] = refs["main"] if isinstance(refs.get("main"), dict) else {}
    current = long_value(meta.get("current-snapshot-id"))
    if current is None or current == -1:
        current = long_value(main.get("snapshot-id"))
    return TableMetadata(snapshots, current)


def rolled_back_metadata(data: bytes, path: str, target: int, now_ms: int, folder_uri: str) -> bytes:
    """The next metadata version of a table rolled back to snapshot `target`, as Iceberg's
    `rollback_to_snapshot` writes it: `target` current (and the `main` ref's), the snapshot log and
    the metadata log (naming `path`, in the folder of its last entry, else `folder_uri`) extended."""
    meta = _metadata_object(data, path)
    previous_ms = long_value(meta.get("last-updated-ms")) or now_ms
    meta["current-snapshot-id"] = target
    refs: dict[str, Any] = meta["refs"] if isinstance(meta.get("refs"), dict) else {}
    main = dict(refs["main"] if isinstance(refs.get("main"), dict) else {}, **{"snapshot-id": target, "type": "branch"})
    meta["refs"] = dict(refs, main=main)
    meta["last-updated-ms"] = max(now_ms, previous_ms)
    snapshot_log = meta["snapshot-log"] if isinstance(meta.get("snapshot-log"), list) else []
    meta["snapshot-log"] = snapshot_log + [{"timestamp-ms": meta["last-updated-ms"], "snapshot-id": target}]
    log = meta["metadata-log"] if isinstance(meta.get("metadata-log"), list) else []
    prefix = str(log[-1]["metadata-file"]).rsplit("/", 1)[0] if log and isinstance(log[-1], dict) and \
        log[-1].get("metadata-file") else folder_uri
    meta["metadata-log"] = log + [{"timestamp-ms": previous_ms, "metadata-file": f"{prefix}/{path.rsplit('/', 1)[-1]}"}]
    return json.dumps(meta, ensure_ascii=False).encode("utf-8")


def version_hint(version: int) -> bytes:
    """`version-hint.text` naming a Hadoop table's version."""
    return str(version).encode("ascii")

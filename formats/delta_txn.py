"""A Delta table's `txn` action, the idempotent-write marker of a streaming writer
(docs/formats/sinks.md#delta): `{"txn":{"appId":<query id>,"version":<epoch>,"lastUpdated":<ms>}}`
in a commit `_delta_log/<version, 20 digits>.json`. Reading a table's log (checkpoints, multi-part
checkpoints, log compaction, the newest `txn` of an app id) is the `deltalake` package's
(`DeltaTable.transaction_version`, inspectors/delta_sink.py); streamctl writes no Delta file, so this
module names the log folder and its files, and reads the app ids of its `txn` actions (which
deltalake cannot list: a pre-flight names the streaming writers a new query id would not be).
"""
from __future__ import annotations

import re
from typing import Any, Optional

DELTA_LOG = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?(\.[^.]+)?\.parquet$")


def log_file_version(name: str) -> Optional[tuple[int, bool]]:
    """(version, is a checkpoint) of a Delta log file name: `<v>.json`, `<v>.checkpoint.parquet`
    and its multi-part and v2 spellings; None for any other name."""
    m = _COMMIT.match(name)
    if m:
        return int(m.group(1)), False
    m = _CHECKPOINT.match(name)
    return (int(m.group(1)), True) if m else None


def checkpoint_part(name: str) -> Optional[tuple[int, int]]:
    """(part, parts) of a multi-part checkpoint's file name `<v>.checkpoint.<part>.<parts>.parquet`;
    None for any other name. Readers take a multi-part checkpoint only when every part is there."""
    m = _CHECKPOINT.match(name)
    if not m or not m.group(2):
        return None
    part, parts = m.group(2)[1:].split(".")
    return int(part), int(parts)


def commit_file(version: int) -> str:
    """The name of the commit of `version` in `_delta_log/`: 20 digits, `.json`."""
    return f"{version:020d}.json"


def commit_txn_app_ids(data: bytes) -> set[str]:
    """The app ids of the `txn` actions in a commit (one JSON action per line). A line that is
    not JSON is skipped: the table was loaded by deltalake first, which judges the commits."""
    return set(commit_txn_versions(data))


def commit_txn_versions(data: bytes) -> dict[str, Any]:
    """app id -> the `version` of its `txn` action in a commit (as written: a number, or whatever
    an edit left). A line that is not JSON is skipped, as in commit_txn_app_ids."""
    import json

    out: dict[str, Any] = {}
    for line in data.splitlines():
        if b'"txn"' not in line:
            continue
        try:
            txn = json.loads(line).get("txn")
        except (ValueError, AttributeError):
            continue
        if isinstance(txn, dict) and isinstance(txn.get("appId"), str):
            out[txn["appId"]] = txn.get("version")
    return out


def commit_files(data: bytes) -> list[tuple[str, str, Any]]:
    """The `add` and `remove` actions of a commit, in order: (kind, the file's path as written,
    unescaped from its URI form; `add`'s logged `size`). Lines that are not JSON are skipped."""
    import json
    from urllib.parse import unquote

    out: list[tuple[str, str, Any]] = []
    for line in data.splitlines():
        if b'"add"' not in line and b'"remove"' not in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        for kind in ("add", "remove"):
            action = obj.get(kind) if isinstance(obj, dict) else None
            if isinstance(action, dict) and isinstance(action.get("path"), str):
                out.append((kind, unquote(action["path"]), action.get("size")))
    return out


def checkpoint_txn_app_ids(fh: Any, name: str) -> set[str]:
    """The app ids of the `txn` actions in a checkpoint file, given as a seekable binary file:
    a parquet's `txn` column only (classic, multi-part and V2 checkpoints; ranged reads), or a V2
    checkpoint's JSON lines."""
    if name.endswith(".json"):
        return commit_txn_app_ids(fh.read())
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(fh)
    if "txn" not in pf.schema_arrow.names:
        return set()
    rows = pf.read(columns=["txn"]).column("txn").to_pylist()
    return {r["appId"] for r in rows if isinstance(r, dict) and isinstance(r.get("appId"), str)}

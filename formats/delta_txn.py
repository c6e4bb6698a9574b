"""A Delta table's `txn` action, the idempotent-write marker of a streaming writer
(docs/formats/sinks.md#delta): `{"txn":{"appId":<query id>,"version":<epoch>,"lastUpdated":<ms>}}`
in a commit `_delta_log/<version, 20 digits>.json`. Reading a table's log (checkpoints, multi-part
checkpoints, log compaction, the newest `txn` of an app id) is the `deltalake` package's
(`DeltaTable.transaction_version`, inspectors/sinks.py); streamctl writes no Delta file, so this
module names the log folder and its files.
"""
from __future__ import annotations

import re
from typing import Optional

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


def commit_file(version: int) -> str:
    """The name of the commit of `version` in `_delta_log/`: 20 digits, `.json`."""
    return f"{version:020d}.json"

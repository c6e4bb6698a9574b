"""A Delta table's `txn` action, the idempotent-write marker of a streaming writer
(docs/formats/sinks.md#delta): `{"txn":{"appId":<query id>,"version":<epoch>,"lastUpdated":<ms>}}`
in a commit `_delta_log/<version>.json`. Reading a table's log (checkpoints, multi-part
checkpoints, log compaction) is the `deltalake` package's; streamctl only names the folder and
writes the action into hand-built example tables.
"""
from __future__ import annotations

import json

DELTA_LOG = "_delta_log"


def commit_file(version: int) -> str:
    """The name of a Delta commit file: the version, zero-padded to 20 digits, `.json`."""
    return f"{version:020d}.json"


def txn_action(app_id: str, version: int, last_updated_ms: int) -> str:
    """One `txn` action line (compact JSON, no newline)."""
    return json.dumps({"txn": {"appId": app_id, "version": version, "lastUpdated": last_updated_ms}}, separators=(",", ":"))

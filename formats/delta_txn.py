"""A Delta table's `txn` action, the idempotent-write marker of a streaming writer
(docs/formats/sinks.md#delta): `{"txn":{"appId":<query id>,"version":<epoch>,"lastUpdated":<ms>}}`
in a commit `_delta_log/<version, 20 digits>.json`. Reading a table's log (checkpoints, multi-part
checkpoints, log compaction, the newest `txn` of an app id) is the `deltalake` package's
(`DeltaTable.transaction_version`, inspectors/sinks.py); streamctl writes no Delta file, so this
module names the log folder only.
"""
from __future__ import annotations

DELTA_LOG = "_delta_log"

"""A file sink's commit log `_spark_metadata/` (FileStreamSinkLog; docs/formats/sinks.md#file-sink):
a compactible log (formats/compactible.py) whose entries are SinkFileStatus objects, `path`,
`size`, `isDir`, `modificationTime`, `blockReplication`, `blockSize` and `action` (`add`, or
`delete` in logs of old Spark lines).
"""
from __future__ import annotations

from typing import Iterable

from streamctl.formats.compactible import EMPTY_ENTRY, CompactibleBatch

FILE_SINK_LOG = "_spark_metadata"
EMPTY_SINK_ENTRY = EMPTY_ENTRY  # the log file of a batch that wrote no file


def added_paths(batch: CompactibleBatch) -> tuple[str, ...]:
    return tuple(str(e.get("path")) for e in batch.entries if e.get("action", "add") == "add")


def deleted_paths(batch: CompactibleBatch) -> tuple[str, ...]:
    return tuple(str(e.get("path")) for e in batch.entries if e.get("action") == "delete")


def live_paths(batches: Iterable[CompactibleBatch]) -> list[str]:
    """The files a reader of the table sees, from the newest compaction and the batch files after
    it, in order: each entry adds its path, a `delete` entry takes it out again."""
    live: dict[str, bool] = {}
    for batch in batches:
        for entry in batch.entries:
            path = str(entry.get("path"))
            if entry.get("action") == "delete":
                live.pop(path, None)
            else:
                live[path] = True
    return list(live)

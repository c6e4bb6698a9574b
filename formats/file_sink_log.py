"""A file sink's commit log `_spark_metadata/` (FileStreamSinkLog; docs/formats/sinks.md#file-sink):
a compactible log (formats/compactible.py) whose entries are SinkFileStatus objects, `path`,
`size`, `isDir`, `modificationTime`, `blockReplication`, `blockSize` and `action` (`add`, or
`delete` in logs of old Spark lines).
"""
from __future__ import annotations

from typing import Iterable, Mapping

from streamctl.formats.compactible import EMPTY_ENTRY, CompactibleBatch

FILE_SINK_LOG = "_spark_metadata"
EMPTY_SINK_ENTRY = EMPTY_ENTRY  # the log file of a batch that wrote no file


def added_paths(batch: CompactibleBatch) -> tuple[str, ...]:
    return tuple(str(e.get("path")) for e in batch.entries if e.get("action", "add") == "add")


def logged_size(entry: Mapping[str, object]) -> int:
    """An entry's `size` as logged; -1 when it is not a size (unknown: counted as holding rows)."""
    size = entry.get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else -1


def added_sizes(batch: CompactibleBatch) -> dict[str, int]:
    """path -> logged size (logged_size) of the files a log file adds."""
    return {str(e.get("path")): logged_size(e) for e in batch.entries if e.get("action", "add") == "add"}


def deleted_paths(batch: CompactibleBatch) -> tuple[str, ...]:
    return tuple(str(e.get("path")) for e in batch.entries if e.get("action") == "delete")


def live_files(batches: Iterable[Iterable[Mapping[str, object]]]) -> dict[str, int]:
    """The files a reader of the log sees (path -> logged size, logged_size): the adds of the newest
    compaction and every batch after it, less their deletes, in log order."""
    live: dict[str, int] = {}
    for entries in batches:
        for e in entries:
            path = e.get("path")
            if not isinstance(path, str):
                continue
            if e.get("action", "add") == "delete":
                live.pop(path, None)
            else:
                live[path] = logged_size(e)
    return live

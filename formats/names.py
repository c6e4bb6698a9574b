"""The names inside Spark's log folders (`offsets/`, `commits/`, `sources/<n>/`, `_spark_metadata/`,
`state/.../_metadata/`): which name is a batch file, a compaction, a temp file or a Hadoop checksum
sidecar (docs/formats/checkpoint.md#log-folders). Every reader of a log folder's listing asks here.
"""
from __future__ import annotations

from typing import Optional

MAX_BATCH_ID = (1 << 63) - 1  # Spark's batch ids are Longs: a longer number is no batch file to Spark


def batch_id_of(name: str) -> Optional[int]:
    """The batch id a log file name stands for, or None. Spark accepts names that parse as a
    Long (a 20-digit name does not: Spark ignores the file, and so does streamctl); hidden
    `.N.crc` sidecars and `.N.<uuid>.tmp` temp files never do."""
    if name.isascii() and name.isdigit() and len(name) <= 19 and int(name) <= MAX_BATCH_ID:
        return int(name)
    return None


def is_temp_name(name: str) -> bool:
    """Temp files of CheckpointFileManager (`.<name>.<uuid>[.TID<n>].tmp`) and of old HDFS state
    stores (`temp-<random>`)."""
    return name.endswith(".tmp") or name.startswith("temp-")


def is_hadoop_crc(name: str) -> bool:
    """Hadoop's hidden checksum sidecar `.<name>.crc` (local file system)."""
    return name.startswith(".") and name.endswith(".crc")


def crc_name(name: str) -> str:
    """The Hadoop checksum sidecar of a file name: `.<name>.crc`."""
    return f".{name}.crc"


COMPACT_SUFFIX = ".compact"  # CompactibleFileStreamLog's compaction files `N.compact`


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

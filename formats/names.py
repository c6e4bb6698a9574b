"""The names inside Spark's log folders (`offsets/`, `commits/`, `sources/<n>/`, `_spark_metadata/`,
`state/.../_metadata/`): which name is a batch file and which a temp file
(docs/formats/checkpoint.md#batch-files, docs/formats/checkpoint.md#atomic-writes-and-temp-files).
Compactions are compactible.py's names, checksum sidecars checksum.py's.
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

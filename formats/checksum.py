"""Checksum sidecars (docs/formats/state.md#checksum-companions, docs/formats/checkpoint.md#two-kinds-of-crc): Hadoop's hidden `.<name>.crc`
(ChecksumFileSystem on local disks: magic `crc\\0`, the bytes per checksum as a big-endian int,
then one big-endian CRC32 per chunk) and Spark 4.1+'s visible `<name>.crc` of state files (JSON
whose `mainFileSize` is the file's size; its CRC32C `value` is not recomputed).
"""
from __future__ import annotations

import struct
import zlib
from typing import Any, Optional

HADOOP_CRC_MAGIC = b"crc\0"
CHECKSUM_SUFFIX = ".crc"
BYTES_PER_CHECKSUM = 512  # Hadoop's default (file.bytes-per-checksum)


def crc_name(rel: str) -> str:
    """The hidden Hadoop sidecar of a path: `offsets/3` -> `offsets/.3.crc`."""
    head, _, name = rel.rpartition("/")
    return f"{head}/.{name}.crc" if head else f".{name}.crc"


def is_hadoop_crc(name: str) -> bool:
    """Hadoop's hidden checksum sidecar `.<name>.crc` (local file system)."""
    return name.startswith(".") and name.endswith(CHECKSUM_SUFFIX)


def is_checksum_name(name: str) -> bool:
    """A checksum companion of either kind (hidden `.<name>.crc` or visible `<name>.crc`)."""
    return name.endswith(CHECKSUM_SUFFIX)


def crc_target(name: str) -> Optional[str]:
    """The file name a hidden sidecar `.<name>.crc` checks, None for any other name."""
    return name[1:-len(CHECKSUM_SUFFIX)] if is_hadoop_crc(name) else None


def checksum_base(name: str) -> str:
    """A name without its checksum decoration: `.5.crc` and `5.crc` -> `5`."""
    return name.lstrip(".").removesuffix(CHECKSUM_SUFFIX)


def crc_companions(rel: str) -> tuple[str, str, str]:
    """Every checksum companion a state file may have: Hadoop's hidden sidecar, Spark 4.1+'s
    visible one, and the hidden sidecar of the visible one (`.5.delta.crc`, `5.delta.crc`,
    `.5.delta.crc.crc`)."""
    return crc_name(rel), visible_crc_name(rel), crc_name(visible_crc_name(rel))


def hadoop_crc(data: bytes, bytes_per_checksum: int = BYTES_PER_CHECKSUM) -> bytes:
    """The content of Hadoop's `.<name>.crc` sidecar for a file holding `data`."""
    out = [HADOOP_CRC_MAGIC, struct.pack(">i", bytes_per_checksum)]
    for i in range(0, len(data), bytes_per_checksum):
        out.append(struct.pack(">I", zlib.crc32(data[i:i + bytes_per_checksum]) & 0xFFFFFFFF))
    return b"".join(out)


def hadoop_crc_mismatch(sums: bytes, data: bytes) -> Optional[int]:
    """The offset of the first chunk of `data` its sidecar `sums` does not match; None when they
    match or the sidecar is not one streamctl reads (no magic, a chunk size below 1)."""
    if len(sums) < 8 or sums[:4] != HADOOP_CRC_MAGIC:
        return None
    chunk = int.from_bytes(sums[4:8], "big")
    if chunk <= 0 or chunk >= 1 << 31:
        return None
    expected = [sums[i:i + 4] for i in range(8, len(sums) - 3, 4)]
    actual = [zlib.crc32(data[i:i + chunk]).to_bytes(4, "big") for i in range(0, len(data), chunk)]
    if expected == actual:
        return None
    bad = next((i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b), min(len(expected), len(actual)))
    return bad * chunk


def visible_crc_name(rel: str) -> str:
    """Spark 4.1+'s visible checksum file of a state file: `<name>.crc`."""
    return rel + CHECKSUM_SUFFIX


def main_file_size(meta: Any) -> Optional[int]:
    """The size a visible `<name>.crc` (already parsed JSON) records, else None."""
    want = meta.get("mainFileSize") if isinstance(meta, dict) else None
    return want if isinstance(want, int) and not isinstance(want, bool) else None

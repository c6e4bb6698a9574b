"""Checks of the state files a restart reads, by their own bytes: torn deltas, changelogs,
snapshots and zips (their heads and tails: docs/formats/state.md#torn-files), a mismatch with a
checksum companion, and the SST files a RocksDB checkpoint zip names."""
from __future__ import annotations

from typing import Callable, Optional

from streamctl.formats.checksum import crc_name, hadoop_crc_mismatch, main_file_size, visible_crc_name
from streamctl.formats.errors import StorageError
from streamctl.formats.reader import load_json
from streamctl.formats.state import (
    LZ4_END,
    LZ4_MAGIC,
    MAX_ZIP_METADATA,
    ZIP_HEAD,
    ZIP_METADATA,
    ZIP_TAIL,
    is_zip_file,
    lz4_corrupt,
    lz4_torn,
    parse_zip_metadata,
    zip_stream_corrupt,
    zip_torn,
)
from streamctl.inspectors.storage import Storage


def _ends(storage: Storage, rel: str, head: int, tail: int,
          data: Optional[bytes] = None) -> Optional[tuple[bytes, bytes, int] | str]:
    """A file's head and tail for the torn checks (from `data`, its bytes, when read already);
    "empty file" for an empty one, "a folder, not a file" for a folder, "not a regular file" for a
    named pipe or a device where the file belongs (the restart blocks or fails opening it); None when it cannot be judged
    (unreadable)."""
    if data is not None:
        return (data[:head], data[max(len(data) - tail, 0):], len(data)) if data else "empty file"
    try:
        ends = storage.read_ends(rel, head, tail)
    except StorageError:
        return None
    if ends is None:  # a folder fails the restart's read at once; a named pipe blocks it
        return "a folder, not a file" if storage.kind(rel) == "dir" else "not a regular file"
    if ends[2] == 0:
        return "empty file"
    return ends


def torn_reason(storage: Storage, rel: str, data: Optional[bytes] = None) -> Optional[str]:
    """Why the delta or changelog `rel` is torn by its own format, None when it looks whole or
    cannot be judged (docs/formats/state.md#torn-files). Spark writes both through its
    CompressionCodec; with lz4 (the default) the stream is lz4-java's LZ4Block framing, which
    ends with an empty end block: a file cut short (a crash, a full disk) has none. Two small
    reads, head and tail (ranged requests on object stores); other codecs are not judged."""
    ends = _ends(storage, rel, len(LZ4_MAGIC), LZ4_END, data)
    if isinstance(ends, str) or ends is None:
        return ends
    head, tail, _size = ends
    return lz4_torn(head, tail)


def torn_full_reason(storage: Storage, rel: str, data: Optional[bytes] = None) -> Optional[str]:
    """Why the snapshot `rel` is torn by its own format, None when it looks whole or cannot be
    judged (docs/formats/state.md#torn-files): an HDFS `.snapshot` is LZ4Block framed like a
    delta (its end mark); a RocksDB `.zip` ends with the zip's end of central directory record
    (`PK\x05\x06`, within its last 64 KiB + 22 bytes). Head and tail reads only."""
    if not is_zip_file(rel):
        return torn_reason(storage, rel, data)
    ends = _ends(storage, rel, 4, ZIP_TAIL, data)
    if isinstance(ends, str) or ends is None:
        return ends
    head, tail, _size = ends
    return zip_torn(head, tail)


def zip_ssts(storage: Storage, rel: str) -> set[str]:
    """The SST file names a RocksDB checkpoint zip names (zip_sst_sizes without the sizes)."""
    return set(zip_sst_sizes(storage, rel))


def zip_sst_sizes(storage: Storage, rel: str) -> dict[str, Optional[int]]:
    """The SST files a RocksDB checkpoint zip names with their recorded sizes (its `metadata`
    entry: `v1` or `v2`, then JSON whose `sstFiles[]` give `dfsSstFileName`, in the store's
    `SSTs/`, and `sizeBytes`; docs/formats/state.md#rocksdb-provider).
    Read in parts: the zip's central directory from its end, then that one entry (ranged reads on
    object stores). StorageError when it is not such a zip."""
    import zipfile


    try:
        with storage.open_random(rel) as fh, zipfile.ZipFile(fh) as zf:
            info = zf.getinfo(ZIP_METADATA)
            if info.file_size > MAX_ZIP_METADATA:
                raise StorageError(storage.uri(rel), f"its metadata entry is larger than {MAX_ZIP_METADATA} bytes")
            text = zf.read(info).decode("utf-8")
    except StorageError:
        raise
    except (KeyError, zipfile.BadZipFile, UnicodeDecodeError, EOFError, OSError, ValueError) as exc:
        raise StorageError(storage.uri(rel), f"not a RocksDB checkpoint zip ({type(exc).__name__})") from None
    try:
        return parse_zip_metadata(text)
    except ValueError:
        raise StorageError(storage.uri(rel), "zip metadata is not valid JSON") from None


def checksum_mismatch(storage: Storage, folder: str, name: str, lists: Callable[[str], bool],
                      data: Optional[bytes] = None) -> Optional[str]:
    """Why state file `folder/name` does not match its checksum companion, None when it does
    (or has none). Two companions (docs/formats/state.md): Hadoop's hidden `.<name>.crc`
    (`ChecksumFileSystem`: `crc\0`, the bytes per checksum as a big-endian int, then one
    big-endian CRC32 per chunk), and Spark 4.1+'s visible `<name>.crc` (JSON whose
    `mainFileSize` is the file's size; its CRC32C `value` is not recomputed). Files larger than
    DEFAULT_MAX_READ are not read. `data`: the file's bytes when read already."""
    rel = f"{folder}/{name}"
    if lists(visible_crc_name(name)):
        try:
            meta = load_json(storage.read(visible_crc_name(rel), 1 << 16))
            size = storage.stat(rel).size
        except (StorageError, ValueError):
            meta, size = None, None
        want = main_file_size(meta)
        if want is not None and size is not None and size != want:
            return f"{size} bytes, its {visible_crc_name(name)} says {want}"
    hidden = crc_name(name)
    if not lists(hidden):
        return None
    try:
        sums = storage.read(f"{folder}/{hidden}", 1 << 24)
        if data is None:
            data = storage.read(rel)
    except StorageError:
        return None  # too large or unreadable here: what Spark reads is not judged
    bad = hadoop_crc_mismatch(sums, data)
    return None if bad is None else f"bytes {bad}.. do not match its {hidden}"


def content_mismatch(storage: Storage, folder: str, name: str, lists: Callable[[str], bool],
                     data: Optional[bytes] = None, lz4: bool = False) -> Optional[str]:
    """Why state file `folder/name` is corrupt, None when it is not seen to be: checksum_mismatch
    with its companions, then, for a delta, changelog or HDFS snapshot, the checksums its own
    LZ4Block framing carries (lz4_corrupt: bytes changed in place where no companion is there to
    disagree, as HDFS, object stores and a hand copy without the sidecars leave it). `lz4`: the
    checkpoint's conf names lz4 as the state codec, so a file without the LZ4Block magic (its
    first bytes changed, or zeros where a crash left no data) fails the restart's read too. The
    file is read once, whole, up to DEFAULT_MAX_READ bytes; a RocksDB zip too, its entries read as
    Spark's unzip reads them (zip_stream_corrupt; its SSTs are judged by size: Chains.missing_ssts)."""
    if data is None:
        try:
            data = storage.read(f"{folder}/{name}")
        except StorageError:
            data = None  # too large, unreadable or not a regular file: judged where it is listed
    why = checksum_mismatch(storage, folder, name, lists, data)
    if is_zip_file(name):
        return why if why is not None or not data or data[:4] != ZIP_HEAD else zip_stream_corrupt(data)
    if why is None and data and lz4 and not is_zip_file(name) and data[:len(LZ4_MAGIC)] != LZ4_MAGIC:
        return "no LZ4Block magic at byte 0, and the checkpoint's state codec is lz4"
    if why is None and data is not None:
        why = lz4_corrupt(data)
    return why

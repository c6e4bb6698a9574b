"""State store files under `state/` (docs/formats/state.md): the names of versions (HDFS
`<v>.delta`/`<v>.snapshot`, RocksDB `<v>.changelog`/`<v>.zip`, checkpoint format 2's
`<v>_<uniqueId>.<ext>`), operator metadata (`_metadata/metadata` v1, `_metadata/v2/<batch>`),
state schema files, the end marks that tell a torn file (LZ4Block, zip), and the SST manifest of
a RocksDB zip. Which files a store has is inspectors/state_listing.py's, which versions restore
inspectors/state_restore.py's.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Optional

from streamctl.formats.checksum import CHECKSUM_SUFFIX
from streamctl.formats.errors import LogParseError
from streamctl.formats.layout import STATE_DIR
from streamctl.formats.reader import decode_text, load_json, parse_version_line, split_lines

DEFAULT_STORE = "default"
SST_DIR = "SSTs"  # a RocksDB store's SST files, shared by its zips (<store>/SSTs/<name>.sst)
ROCKSDB_LOG_DIR = "logs"  # a RocksDB store's info logs
SHARED_DIRS = (SST_DIR, ROCKSDB_LOG_DIR)
OPERATOR_METADATA_DIR = "_metadata"  # state/<op>/_metadata/: the operator metadata
OPERATOR_METADATA_V1 = "metadata"  # _metadata/metadata (v1)
OPERATOR_METADATA_V2 = "v2"  # _metadata/v2/<batch> (v2)
ZIP_METADATA = "metadata"  # the entry of a RocksDB zip that lists its SST files (parse_zip_metadata)
FULL_EXT = {"snapshot": "hdfs", "zip": "rocksdb"}
INCR_EXT = {"delta": "hdfs", "changelog": "rocksdb"}
OPERATOR_METADATA_MAX_VERSION = 2
STATE_FILE_RE = re.compile(r"([0-9]+)(?:_([^.\n]+))?\.(delta|snapshot|zip|changelog)\Z")
_CRC = re.escape(CHECKSUM_SUFFIX)
CRC_NAMES_RE = re.compile(rf"^[^\n]*{_CRC}$", re.M)
VISIBLE_CRC_RE = re.compile(rf"^([^.\n][^\n]*){_CRC}$", re.M)
STATE_ID_FILES_RE = re.compile(r"^([0-9]+)_([^.\n]+)\.(delta|snapshot|zip|changelog)$", re.M)
EXT_PATTERNS = tuple((ext, re.compile(rf"^([0-9]+)\.{ext}$", re.M)) for ext in ("delta", "snapshot", "zip", "changelog"))


@dataclass(frozen=True, slots=True)
class OperatorMetadata:
    """`state/<op>/_metadata/metadata` (v1) or the newest `_metadata/v2/<batch>` (v2)."""

    version: int
    operator_name: Optional[str]
    stores: tuple[tuple[str, int], ...]  # (storeName, numPartitions)
    path: str
    schema_paths: tuple[str, ...] = ()  # v2: stateSchemaFilePaths, as `_stateSchema/...` of the operator


def parse_operator_metadata(data: bytes, path: str) -> OperatorMetadata:
    lines = split_lines(decode_text(data, path))
    version = parse_version_line(lines[0], path, OPERATOR_METADATA_MAX_VERSION)
    body = "\n".join(lines[1:]).strip()
    try:
        obj = load_json(body)
    except json.JSONDecodeError as exc:
        raise LogParseError(path, f"operator metadata is not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise LogParseError(path, "operator metadata is not a JSON object")
    info = obj.get("operatorInfo") or {}
    stores_obj = obj.get("stateStoreInfo") or []
    if not isinstance(stores_obj, list):
        raise LogParseError(path, "stateStoreInfo is not a list")
    stores = []
    for s in stores_obj:
        if not isinstance(s, dict) or not isinstance(s.get("numPartitions"), int):
            raise LogParseError(path, "stateStoreInfo entry without numPartitions")
        stores.append((str(s.get("storeName", DEFAULT_STORE)), int(s["numPartitions"])))
    name = info.get("operatorName") if isinstance(info, dict) else None
    schema_paths = tuple(_schema_rel(str(p)) for s in stores_obj for p in _schema_values(s))
    return OperatorMetadata(version, name if isinstance(name, str) else None, tuple(stores), path, schema_paths)


def is_operator_metadata_v2(rel: str) -> bool:
    """Whether `rel` (relative to the checkpoint) is an operator metadata v2 file,
    `state/<op>/_metadata/v2/<batch>`."""
    parts = rel.split("/")
    return (len(parts) == 5 and parts[0] == STATE_DIR and parts[1].isdigit() and parts[2] == OPERATOR_METADATA_DIR
            and parts[3] == OPERATOR_METADATA_V2 and parts[4].isdigit())


def rewrite_schema_paths(data: bytes, path: str, new_path: Callable[[str], Optional[str]]) -> tuple[bytes, int, list[str]]:
    """An operator metadata v2 file (`v2`, a newline, then the JSON Spark's json4s writes) with
    each `stateStoreInfo[].stateSchemaFilePaths` entry (Spark 4.0: the one `stateSchemaFilePath`)
    replaced where `new_path` gives one: (the
    new bytes, how many paths changed, the paths `new_path` left alone). The version line is kept
    as written; a changed body is compact JSON in Spark's own key order (json4s `Serialization.write`
    writes it so); an unchanged file comes back byte for byte."""
    head, sep, body = data.partition(b"\n")
    version = parse_version_line(decode_text(head, path), path, OPERATOR_METADATA_MAX_VERSION)
    if version != 2 or not sep:
        raise LogParseError(path, f"operator metadata v{version}: only v2 names state schema files")
    try:
        obj = load_json(decode_text(body, path))
    except json.JSONDecodeError as exc:
        raise LogParseError(path, f"operator metadata is not valid JSON ({exc.msg})") from None
    stores = obj.get("stateStoreInfo") if isinstance(obj, dict) else None
    if not isinstance(stores, list):
        raise LogParseError(path, "operator metadata without a stateStoreInfo list")
    count, kept = 0, []
    for store in stores:
        if not isinstance(store, dict):
            continue
        paths = store.get(SCHEMA_PATHS_KEY)
        one = store.get(SCHEMA_PATH_KEY)
        slots: list[tuple[Any, Any]] = [(paths, i) for i in range(len(paths))] if isinstance(paths, list) else []
        slots += [(store, SCHEMA_PATH_KEY)] if isinstance(one, str) else []
        for holder, key in slots:
            raw = holder[key]
            new = new_path(raw) if isinstance(raw, str) else None
            if new is None:
                kept.append(str(raw))
            elif new != raw:
                holder[key] = new
                count += 1
    if not count:
        return data, 0, kept
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    trailing = body[len(body.rstrip()):]  # Spark writes none; whatever was there stays
    return head + sep + text.encode("utf-8") + trailing, count, kept


# a store's state schema files in operator metadata v2: a list since Spark 4.1 (schema evolution
# keeps every version), one path in Spark 4.0's `StateStoreMetadataV2(..., stateSchemaFilePath)`
SCHEMA_PATHS_KEY, SCHEMA_PATH_KEY = "stateSchemaFilePaths", "stateSchemaFilePath"


def _schema_values(store: object) -> list[object]:
    """The schema file paths one `stateStoreInfo` entry names, in either shape."""
    if not isinstance(store, dict):
        return []
    many, one = store.get(SCHEMA_PATHS_KEY), store.get(SCHEMA_PATH_KEY)
    return [*(many if isinstance(many, list) else []), *([one] if isinstance(one, str) else [])]


def _schema_rel(uri: str) -> str:
    """`file:/…/state/0/_stateSchema/default/0_<uuid>` -> `_stateSchema/default/0_<uuid>`: the
    metadata names the file by absolute URI; streamctl looks for it in the inspected checkpoint."""
    head, sep, tail = uri.rpartition("/_stateSchema/")
    return f"_stateSchema/{tail}" if sep else uri


class StateFileName(NamedTuple):
    """What a state file's name says (docs/formats/state.md)."""

    version: int
    unique_id: Optional[str]  # checkpoint format 2: `<version>_<uuid>.<ext>`
    ext: str  # "delta" | "snapshot" | "changelog" | "zip"
    companion: bool  # a checksum companion (`5.delta.crc`, `.5.delta.crc`, `.5.delta.crc.crc`)


def state_file(name: str) -> Optional[StateFileName]:
    """What the name of a state file, or of one of its checksum companions, says; None for any
    other name."""
    base = name
    while base.endswith(CHECKSUM_SUFFIX):
        base = base[:-len(CHECKSUM_SUFFIX)]
    companion = base != name
    if base.startswith(".") and companion:
        base = base[1:]
    m = STATE_FILE_RE.match(base)
    if m is None:
        return None
    return StateFileName(int(m.group(1)), m.group(2), m.group(3), companion)


STATE_FILES_RE = re.compile(rf"^((\.?)([0-9]+)(?:_([^.\n]+))?\.(delta|snapshot|zip|changelog)((?:{_CRC})*))$", re.M)
_tuple = tuple.__new__


def state_files(names: list[str] | tuple[str, ...]) -> list[tuple[str, StateFileName]]:
    """[(name, state_file(name))] for the names that are state files or their checksum companions,
    in order: one regex over the joined names (a trim plan parses 130,000 of them)."""
    joined = "\n".join(names)
    if joined.count("\n") != max(len(names) - 1, 0):  # a name with a line break: one at a time
        return [(n, f) for n, f in ((n, state_file(n)) for n in names) if f is not None]
    return [(name, _tuple(StateFileName, (int(version), uid or None, ext, bool(crcs))))
            for name, dot, version, uid, ext, crcs in STATE_FILES_RE.findall(joined)
            if crcs or not dot]  # `.5.delta`: hidden, but no checksum companion


def state_versions(names: list[str] | tuple[str, ...], above: int = -1) -> list[tuple[str, int]]:
    """[(name, version)] of `state_files(names)` whose version is above `above`, in order, without
    the rest of what each name says (an align roll back of 50 epochs asks this of 132,000 names
    for the 66,000 it moves: no tuple of four per name). With `above` >= 0 the regex
    itself matches only the versions above it (`_above_re`): the names below cost no tuple and no
    int (half of them in that roll back: 0.13 s to 0.06 s)."""
    joined = "\n".join(names)
    if joined.count("\n") != max(len(names) - 1, 0):  # a name with a line break: one at a time
        return [(n, f.version) for n, f in state_files(names) if f.version > above]
    if above >= 0:
        return [(name, int(version)) for name, dot, version, crcs in _above_re(above).findall(joined) if crcs or not dot]
    return [(name, v) for name, v in ((name, int(version)) for name, dot, version, _uid, _ext, crcs
                                      in STATE_FILES_RE.findall(joined) if crcs or not dot) if v > above]


def _greater_than(n: int) -> str:
    """A regex of the decimal numbers greater than `n` >= 0 (leading zeros allowed, as int()
    reads them): more digits than n, or as many with a greater digit after a common prefix."""
    text = str(n)
    width = len(text)
    alternatives = [f"[1-9][0-9]{{{width},}}"]
    for i, digit in enumerate(text):
        if digit != "9":
            alternatives.append(f"{text[:i]}[{int(digit) + 1}-9][0-9]{{{width - i - 1}}}")
    return f"0*(?:{'|'.join(alternatives)})"


@functools.lru_cache(maxsize=8)
def _above_re(above: int) -> re.Pattern[str]:
    """STATE_FILES_RE for the versions above `above` only: (name, dot, version, checksum
    suffixes) of each such line."""
    return re.compile(rf"^((\.?)({_greater_than(above)})(?:_[^.\n]+)?\.(?:delta|snapshot|zip|changelog)((?:{_CRC})*))$",
                      re.M)


ZIP_EXT = ".zip"


def is_zip_file(name: str) -> bool:
    """A RocksDB checkpoint zip (`<v>.zip`, `<v>_<uniqueId>.zip`)."""
    return name.endswith(ZIP_EXT)


def is_full_file(name: str) -> bool:
    """A snapshot (HDFS `.snapshot`, RocksDB `.zip`), not a delta or changelog."""
    return name.endswith(tuple(f".{ext}" for ext in FULL_EXT))


LZ4_MAGIC = b"LZ4Block"
LZ4_END = 21  # lz4-java LZ4BlockOutputStream.finish(): magic, token, compressed 0, original 0, checksum 0


def lz4_torn(head: bytes, tail: bytes) -> Optional[str]:
    """Why an LZ4Block-framed file (a delta, a changelog, an HDFS snapshot) with this head and tail
    is torn: lz4-java's stream ends with an empty end block, a file cut short has none. None when
    it looks whole, or is another codec's (zstd, snappy, lzf: not judged)."""
    if head != LZ4_MAGIC:
        return None
    if len(tail) < LZ4_END or tail[:8] != LZ4_MAGIC or tail[9:] != bytes(12):
        return "truncated: no LZ4Block end mark"
    return None


STATE_CODEC_CONF = "spark.sql.streaming.stateStore.compression.codec"  # deltas, snapshots, changelogs (OffsetSeqMetadata)
LZ4_HEADER = 21  # lz4-java LZ4BlockOutputStream: magic, token, compressed length, original length, checksum
LZ4_SEED = 0x9747B28C  # lz4-java LZ4BlockOutputStream.DEFAULT_SEED (XXHash32 of each block's original bytes)
LZ4_METHOD_RAW, LZ4_METHOD_LZ4 = 0x10, 0x20


def lz4_stream(raw: bytes, level: int = 5) -> bytes:
    """`raw` in lz4-java's LZ4Block framing as one uncompressed (raw-method) block and the end
    mark, as LZ4BlockInputStream reads it back (level 5: Spark's 32 KiB blocks; `raw` fits one)."""
    import xxhash

    if len(raw) > 1 << (10 + level):
        raise ValueError(f"{len(raw)} bytes do not fit one block of level {level}")
    token = bytes([LZ4_METHOD_RAW | level])
    check = xxhash.xxh32_intdigest(raw, seed=LZ4_SEED) & 0xFFFFFFF
    head = LZ4_MAGIC + token + b"".join(n.to_bytes(4, "little") for n in (len(raw), len(raw), check))
    return (head + raw if raw else b"") + LZ4_MAGIC + token + bytes(12)


def lz4_corrupt(data: bytes) -> Optional[str]:
    """Why the LZ4Block stream `data` (a whole file) fails the checks lz4-java's
    LZ4BlockInputStream makes as a restart reads it ("Stream is corrupted"), None when every
    block up to the end mark passes them or it is another codec's. Per block: the magic; the
    method (raw or LZ4) and the lengths its level allows; the LZ4 payload decompressing to
    exactly its original length; the XXHash32 (seed LZ4_SEED, masked to 28 bits as lz4-java's
    `asChecksum()` does) of the original bytes equal to the recorded checksum. A stream cut short
    is lz4_torn's; bytes after the end mark are not read by a restart and not judged here."""
    if data[:8] != LZ4_MAGIC:
        return None
    import xxhash

    pos, size = 0, len(data)
    while pos + LZ4_HEADER <= size:
        head = data[pos:pos + LZ4_HEADER]
        if head[:8] != LZ4_MAGIC:
            return f"no LZ4Block magic at byte {pos}"
        token = head[8]
        method, level = token & 0xF0, 10 + (token & 0x0F)
        comp, orig, check = (int.from_bytes(head[i:i + 4], "little", signed=True) for i in (9, 13, 17))
        if (method not in (LZ4_METHOD_RAW, LZ4_METHOD_LZ4) or orig > 1 << level or orig < 0 or comp < 0
                or (orig == 0) != (comp == 0) or (method == LZ4_METHOD_RAW and orig != comp)):
            return f"the LZ4Block header at byte {pos} is not valid"
        if orig == 0:
            return None if check == 0 else f"the LZ4Block end mark at byte {pos} has a checksum"
        body = data[pos + LZ4_HEADER:pos + LZ4_HEADER + comp]
        if len(body) < comp:
            return None  # cut short: lz4_torn's (no end mark)
        if method == LZ4_METHOD_LZ4:
            try:
                body = _lz4_raw().decompress(body, decompressed_size=orig, asbytes=True)
            except Exception:  # pyarrow's error for a malformed block
                return f"the LZ4 block at byte {pos} does not decompress"
            if len(body) != orig:
                return f"the LZ4 block at byte {pos} does not decompress to its length"
        if xxhash.xxh32_intdigest(body, seed=LZ4_SEED) & 0xFFFFFFF != check & 0xFFFFFFFF:
            return f"the LZ4 block at byte {pos} fails its checksum"
        pos += LZ4_HEADER + comp
    return None


LINEAGE_HEAD = 64 << 10  # bytes of a changelog read for its lineage (Spark writes it first, in the first blocks)
LINEAGE_VERSIONS = ("v3", "v4")  # StateStoreChangelogWriterV3/V4: a lineage after the version line


def changelog_with_lineage(lineage: list[tuple[int, str]], version: str = "v3") -> bytes:
    """A changelog without records as Spark's writer v3/v4 starts one, in one LZ4Block block:
    `writeUTF(version)`, `writeUTF` of the lineage JSON, then the end of records (int -1; the
    v4 reader reads its record type byte instead, also ending it). What changelog_lineage reads
    (the tests' hand-built format-2 stores)."""
    text = json.dumps([{"version": v, "checkpointUniqueId": u} for v, u in lineage]).encode()
    head = len(version).to_bytes(2, "big") + version.encode()
    return lz4_stream(head + len(text).to_bytes(2, "big") + text + (-1).to_bytes(4, "big", signed=True))


def changelog_lineage(head: bytes) -> Optional[list[tuple[int, str]]]:
    """The lineage a checkpoint-format-2 changelog records (`StateStoreChangelogReaderV3/V4`):
    `writeUTF("v3"|"v4")` then `writeUTF(JSON [{"version", "checkpointUniqueId"}, ...])` at the
    start of its LZ4Block stream, listing the versions below its own back to the snapshot its
    writer loaded from (or 1). `head`: the file's first bytes (LINEAGE_HEAD). [] for a changelog
    without one (v1/v2: a restart then finds no lineage); None when it cannot be told (another
    codec, a stream that does not decode, a lineage longer than `head`)."""
    if head[:8] != LZ4_MAGIC:
        return None
    out = bytearray()
    pos, ended = 0, False
    while pos + LZ4_HEADER <= len(head) and len(out) < 4 + 0x20000:
        token = head[pos + 8]
        comp, orig = (int.from_bytes(head[pos + i:pos + i + 4], "little", signed=True) for i in (9, 13))
        if head[pos:pos + 8] != LZ4_MAGIC or comp < 0 or orig < 0:
            return None
        if orig == 0:
            ended = True  # the end mark: the whole stream is `out`
            break
        body = head[pos + LZ4_HEADER:pos + LZ4_HEADER + comp]
        if len(body) < comp:
            break  # the rest lies beyond `head`
        if token & 0xF0 == LZ4_METHOD_LZ4:
            try:
                body = _lz4_raw().decompress(body, decompressed_size=orig, asbytes=True)
            except Exception:  # pyarrow's error for a malformed block
                return None
        out += body
        pos += LZ4_HEADER + comp

    def utf(at: int) -> Optional[tuple[str, int]]:
        if at + 2 > len(out):
            return None
        n = int.from_bytes(out[at:at + 2], "big")
        if at + 2 + n > len(out):
            return None
        return bytes(out[at + 2:at + 2 + n]).decode("utf-8", "replace"), at + 2 + n

    first = utf(0)
    if first is None:
        return [] if ended else None  # an empty changelog, or one whose first line lies beyond `head`
    if first[0] not in LINEAGE_VERSIONS:
        return []  # a v1 changelog (records from the first byte) or v2: no lineage
    text = utf(first[1])
    if text is None:
        return None
    try:
        items = json.loads(text[0])
        return sorted((int(i["version"]), str(i["checkpointUniqueId"])) for i in items)
    except (ValueError, TypeError, KeyError):
        return None


def _lz4_raw() -> Any:
    """pyarrow's raw LZ4 block codec (LZ4_decompress_safe), loaded on first use."""
    import pyarrow

    return pyarrow.Codec("lz4_raw")


ZIP_EOCD = b"PK\x05\x06"
ZIP_EOCD_SIZE = 22  # the end of central directory record without a comment
ZIP_TAIL = ZIP_EOCD_SIZE + 0xFFFF  # ... with the longest comment


ZIP_HEAD = b"PK\x03\x04"  # a local file header: what a zip begins with


def zip_torn(head: bytes, tail: bytes) -> Optional[str]:
    """Why a RocksDB checkpoint zip with this head (4 bytes) and tail (ZIP_TAIL bytes) is torn: it
    ends with the end of central directory record, within its last 64 KiB + 22 bytes."""
    if head != ZIP_HEAD:
        return "not a zip file (no local file header)"
    if tail[-ZIP_EOCD_SIZE:][:4] == ZIP_EOCD or ZIP_EOCD in tail:
        return None
    return "truncated: no zip end of central directory record"


def zip_stream_corrupt(data: bytes) -> Optional[str]:
    """Why a RocksDB checkpoint zip fails the read a restart makes of it, None when it passes:
    Spark unzips it with java.util.zip.ZipInputStream (`Utils.unzipFilesFromFile`), which walks
    the local entries from the first byte, inflates each and checks its CRC-32 and size (from the
    data descriptor Spark's ZipOutputStream writes after it), and stops at the first bytes that
    are no local header: the entries after them are not unzipped, and without the `metadata`
    entry the load fails. Stored and deflated entries are judged; another method is not."""
    import struct
    import zlib

    pos, seen = 0, set()
    while data[pos:pos + 4] == ZIP_HEAD:
        if pos + 30 > len(data):
            return f"the zip entry at byte {pos} is cut short"
        _v, flag, method, _t, _d, crc, csize, usize, nlen, elen = struct.unpack("<HHHHHIIIHH", data[pos + 4:pos + 30])
        name = data[pos + 30:pos + 30 + nlen].decode("utf-8", "replace")
        at = pos + 30 + nlen + elen
        if method == 8:
            inflater = zlib.decompressobj(-15)
            try:
                out = inflater.decompress(data[at:])
            except zlib.error:
                return f"the zip entry {name} does not inflate"
            if not inflater.eof:
                return f"the zip entry {name} is cut short"
            at = len(data) - len(inflater.unused_data)
        elif method == 0 and not flag & 8:
            out = data[at:at + csize]
            at += csize
        else:
            return None  # a method or layout ZipOutputStream does not write here: not judged
        if flag & 8:  # the data descriptor: an optional signature, then CRC-32 and both sizes
            if data[at:at + 4] == b"PK\x07\x08":
                at += 4
            if at + 12 > len(data):
                return f"the zip entry {name} is cut short"
            crc, csize, usize = struct.unpack("<III", data[at:at + 12])
            at += 12
        if zlib.crc32(out) != crc or len(out) != usize:
            return f"the zip entry {name} fails its CRC-32"
        seen.add(name)
        pos = at
    if ZIP_METADATA not in seen:
        return f"no {ZIP_METADATA} entry before byte {pos} (no local header there)"
    return None


MAX_ZIP_METADATA = 64 << 20  # a RocksDB zip's `metadata` entry larger than this is not read

def parse_zip_metadata(text: str) -> dict[str, Optional[int]]:
    """The SST files the `metadata` entry of a RocksDB checkpoint zip names, with their recorded
    sizes: `v1` or `v2`, then JSON whose `sstFiles[]` give `dfsSstFileName` (in the store's
    `SSTs/`) and `sizeBytes` (docs/formats/state.md#rocksdb-provider). ValueError on bad JSON."""
    body = text.split("\n", 1)[1] if "\n" in text else "{}"
    meta = load_json(body)
    files = meta.get("sstFiles") if isinstance(meta, dict) else None
    out: dict[str, Optional[int]] = {}
    for f in files or []:
        if isinstance(f, dict) and f.get("dfsSstFileName"):
            size = f.get("sizeBytes")
            out[str(f["dfsSstFileName"])] = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None
    return out


MAX_SCHEMA_FILE = 16 << 20  # a state schema file larger than this is not read
STATE_SCHEMA_DIR = "_stateSchema"  # state/<op>/_stateSchema/<storeName>/<batch>_<uuid> (schema v3)
SCHEMA_DIR = "_metadata"  # a store folder's <store>/_metadata/: its state schema (schema v1/v2)
SCHEMA_FILE = f"{SCHEMA_DIR}/schema"  # under partition 0's store folder (docs/formats/state.md#state-schema-files)


def parse_state_schema(data: bytes, path: str) -> Optional[tuple[Any, Any]]:
    """(key schema, value schema) as Spark's StructType JSON of a state schema file v1 or v2
    (`DataOutputStream`: `writeUTF` of the version, then v1 two `writeUTF` JSON strings, v2 two
    chunked ones: an int32 count, then that many `writeUTF` chunks). None for v3 (transformWithState:
    per column family) and newer. LogParseError (naming the file) for anything else."""
    if len(data) > MAX_SCHEMA_FILE:
        raise LogParseError(path, f"larger than {MAX_SCHEMA_FILE} bytes: not a state schema file")
    pos = 0

    def utf() -> str:
        nonlocal pos
        if pos + 2 > len(data):
            raise LogParseError(path, "truncated state schema file")
        n = int.from_bytes(data[pos:pos + 2], "big")
        if pos + 2 + n > len(data):
            raise LogParseError(path, "truncated state schema file")
        raw = data[pos + 2:pos + 2 + n]
        pos += 2 + n
        try:  # Java's modified UTF-8 differs from UTF-8 only for NUL and characters past U+FFFF
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise LogParseError(path, "state schema text is not UTF-8") from None

    def chunked() -> str:
        nonlocal pos
        if pos + 4 > len(data):
            raise LogParseError(path, "truncated state schema file")
        count = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        pos += 4
        if not 0 <= count <= len(data):
            raise LogParseError(path, f"bad chunk count {count} in a state schema file")
        return "".join(utf() for _ in range(count))

    version = utf()
    if version not in ("v1", "v2"):
        if re.fullmatch(r"v[0-9]{1,4}", version):
            return None
        raise LogParseError(path, f"not a state schema file (version {version[:20]!r})")
    texts = (utf(), utf()) if version == "v1" else (chunked(), chunked())
    try:
        key, value = (json.loads(t) for t in texts)
    except ValueError:
        raise LogParseError(path, "state schema is not valid JSON") from None
    if not (isinstance(key, dict) and isinstance(value, dict)):
        raise LogParseError(path, "state schema is not a struct")
    return key, value


def schema_fields(schema: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """The top-level fields of a StructType JSON: (name, data type as compact JSON, nullable)."""
    return [(str(f.get("name")), json.dumps(f.get("type"), sort_keys=True, separators=(",", ":")), f.get("nullable") is not False)
            for f in schema.get("fields") or [] if isinstance(f, dict)]


def schema_field_types(schema: Mapping[str, Any]) -> list[str]:
    """The fields' data types of a StructType JSON, each as compact JSON (names and nullability
    left out: Spark's check ignores them, `equalsIgnoreNameAndCompatibleNullability`)."""
    return [json.dumps(f.get("type"), sort_keys=True, separators=(",", ":")) for f in schema.get("fields") or []
            if isinstance(f, dict)]

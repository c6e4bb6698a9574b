"""State stores under `state/`: which files each store has, and which versions can be restored.

Layout (docs/formats/state.md): `state/<op>/<partition>[/<storeName>]/` holding
- HDFS provider: `<v>.delta`, `<v>.snapshot`;
- RocksDB provider: `<v>.zip` (full), `<v>.changelog` (incremental), `SSTs/`, `logs/`;
- checkpoint format 2: `<v>_<uniqueId>.zip|.changelog` — only the ids the commit log names count;
- 4.1+ visible checksum companions `<file>.crc`, Hadoop hidden `.<file>.crc`, temp files;
- `state/<op>/_metadata/metadata` (operator metadata v1), `_metadata/v2/<batch>` (v2, written at
  the first batch of every run; `stateStoreInfo[].stateSchemaFilePaths` name the schema files by
  absolute URI), `state/<op>/_stateSchema/<storeName>/<batch>_<uuid>` (state schema v3: one
  schema per column family), `<partition>/[<store>/]_metadata/schema`.
- transformWithState keeps every state variable (value, list, map state, their `$ttl_*` indexes,
  `$procTimers_*`/`$eventTimers_*` timers) as a virtual column family of the one RocksDB store
  `default`: a version is one `<v>.changelog`/`<v>.zip` for all of them (Spark 4.3).

Version v holds the state after epoch v-1; version 0 is the empty store and has no file.
Restoring v needs a full file at some s <= v and every incremental file s+1..v.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Optional

from streamctl.formats.errors import LogParseError, StorageError
from streamctl.formats.names import is_hadoop_crc, is_temp_name
from streamctl.formats.reader import decode_text, load_json, parse_version_line, split_lines
from streamctl.inspectors.storage import Storage

DEFAULT_STORE = "default"
SHARED_DIRS = ("SSTs", "logs")
FULL_EXT = {"snapshot": "hdfs", "zip": "rocksdb"}
INCR_EXT = {"delta": "hdfs", "changelog": "rocksdb"}
OPERATOR_METADATA_MAX_VERSION = 2
_STATE_FILE_RE = re.compile(r"([0-9]+)(?:_([^.\n]+))?\.(delta|snapshot|zip|changelog)\Z")
_CRC_NAMES_RE = re.compile(r"^[^\n]*\.crc$", re.M)
_VISIBLE_CRC_RE = re.compile(r"^([^.\n][^\n]*)\.crc$", re.M)
_STATE_ID_FILES_RE = re.compile(r"^([0-9]+)_([^.\n]+)\.(delta|snapshot|zip|changelog)$", re.M)
_EXT_PATTERNS = tuple((ext, re.compile(rf"^([0-9]+)\.{ext}$", re.M)) for ext in ("delta", "snapshot", "zip", "changelog"))


@dataclass(slots=True)
class StoreFiles:
    """The files of one store (operator x partition x store name), as listed."""

    operator_id: int
    partition: int
    store: str
    providers: set[str] = field(default_factory=set)
    full: set[int] = field(default_factory=set)  # format 1 snapshot/zip versions
    incr: set[int] = field(default_factory=set)  # format 1 delta/changelog versions
    full_ids: dict[int, set[str]] = field(default_factory=dict)  # format 2: version -> ids
    incr_ids: dict[int, set[str]] = field(default_factory=dict)
    exts: dict[bool, str] = field(default_factory=dict)  # full? -> extension seen
    temp_files: list[str] = field(default_factory=list)
    orphan_crc: list[str] = field(default_factory=list)
    crc_names: set[str] = field(default_factory=set)  # checksum companions present (hidden and visible)
    other_files: list[str] = field(default_factory=list)
    has_ssts: bool = False
    has_schema: bool = False
    names: tuple[str, ...] = ()  # the folder's file names as listed (trim plans from them: one listing)

    @property
    def path(self) -> str:
        base = f"state/{self.operator_id}/{self.partition}"
        return base if self.store == DEFAULT_STORE else f"{base}/{self.store}"

    @property
    def provider(self) -> str:
        if len(self.providers) == 1:
            return next(iter(self.providers))
        return "mixed" if self.providers else "unknown"

    @property
    def uses_unique_ids(self) -> bool:
        return bool(self.full_ids or self.incr_ids)

    def all_versions(self) -> set[int]:
        return self.full | self.incr | set(self.full_ids) | set(self.incr_ids)

    def file_name(self, version: int, uid: Optional[str], full: bool) -> str:
        """The name of a state file this store has (rebuilt, not stored: stores hold 100s)."""
        ext = self.exts.get(full)
        if ext is None:
            rocks = self.provider == "rocksdb"
            ext = ("zip" if rocks else "snapshot") if full else ("changelog" if rocks else "delta")
        return f"{version}_{uid}.{ext}" if uid is not None else f"{version}.{ext}"

    def add_names(self, names: list[str]) -> None:
        """Classify one folder's file names. Bulk regex over the joined names: a 200-file store
        folder costs one C call instead of 200 Python ones."""
        self.names += tuple(names)
        joined = "\n".join(names)
        for ext, pattern in _EXT_PATTERNS:
            if ext not in joined:
                continue
            full = ext in FULL_EXT
            found = pattern.findall(joined)
            if found:
                self.providers.add(FULL_EXT[ext] if full else INCR_EXT[ext])
                self.exts[full] = ext
                (self.full if full else self.incr).update(map(int, found))
        if "_" in joined:  # checkpoint format 2: <version>_<uniqueId>.<ext>
            for v_text, uid, ext in _STATE_ID_FILES_RE.findall(joined):
                full = ext in FULL_EXT
                self.providers.add(FULL_EXT[ext] if full else INCR_EXT[ext])
                self.exts[full] = ext
                (self.full_ids if full else self.incr_ids).setdefault(int(v_text), set()).add(uid)
        if "tmp" in joined or "temp-" in joined:
            self.temp_files.extend(n for n in names if is_temp_name(n))
        crc_targets = _VISIBLE_CRC_RE.findall(joined) if ".crc" in joined else []
        if ".crc" in joined:
            self.crc_names = set(_CRC_NAMES_RE.findall(joined))
        if crc_targets:
            present = set(names)
            # 4.1+ visible checksum companions are fine unless their file is gone.
            self.orphan_crc = sorted(f"{t}.crc" for t in crc_targets if t not in present)
        hidden = joined.count("\n.") + (1 if joined.startswith(".") else 0)
        counted = (len(self.full) + len(self.incr) + sum(map(len, self.full_ids.values()))
                   + sum(map(len, self.incr_ids.values())))
        visible_temp = sum(1 for t in self.temp_files if not t.startswith("."))
        if counted + visible_temp + len(crc_targets) < len(names) - hidden:
            self.other_files = sorted(
                n for n in names if not n.startswith(".") and not _STATE_FILE_RE.match(n)
                and not is_temp_name(n) and not n.endswith(".crc"))


@dataclass(frozen=True, slots=True)
class OperatorMetadata:
    """`state/<op>/_metadata/metadata` (v1) or the newest `_metadata/v2/<batch>` (v2)."""

    version: int
    operator_name: Optional[str]
    stores: tuple[tuple[str, int], ...]  # (storeName, numPartitions)
    path: str
    schema_paths: tuple[str, ...] = ()  # v2: stateSchemaFilePaths, as `_stateSchema/...` of the operator


@dataclass(slots=True)
class OperatorFiles:
    operator_id: int
    partitions: dict[int, dict[str, StoreFiles]] = field(default_factory=dict)
    metadata: Optional[OperatorMetadata] = None
    metadata_error: Optional[LogParseError] = None
    v2_metadata_batches: list[int] = field(default_factory=list)
    schema_files: list[str] = field(default_factory=list)
    temp_files: list[str] = field(default_factory=list)
    stray_entries: list[str] = field(default_factory=list)

    def stores(self) -> list[StoreFiles]:
        return [s for p in sorted(self.partitions) for _, s in sorted(self.partitions[p].items())]

    def store_names(self) -> list[str]:
        if self.metadata and self.metadata.stores:
            return sorted({name for name, _ in self.metadata.stores})
        names = {n for p in self.partitions.values() for n in p}
        return sorted(names) or [DEFAULT_STORE]


@dataclass(slots=True)
class StateFiles:
    exists: bool
    operators: dict[int, OperatorFiles] = field(default_factory=dict)
    stray_entries: list[str] = field(default_factory=list)


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
    schema_paths = tuple(_schema_rel(str(p)) for s in stores_obj for p in s.get("stateSchemaFilePaths") or [])
    return OperatorMetadata(version, name if isinstance(name, str) else None, tuple(stores), path, schema_paths)


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
    while base.endswith(".crc"):
        base = base[:-4]
    companion = base != name
    if base.startswith(".") and companion:
        base = base[1:]
    m = _STATE_FILE_RE.match(base)
    if m is None:
        return None
    return StateFileName(int(m.group(1)), m.group(2), m.group(3), companion)


_STATE_FILES_RE = re.compile(r"^((\.?)([0-9]+)(?:_([^.\n]+))?\.(delta|snapshot|zip|changelog)((?:\.crc)*))$", re.M)
_tuple = tuple.__new__


def state_files(names: list[str] | tuple[str, ...]) -> list[tuple[str, StateFileName]]:
    """[(name, state_file(name))] for the names that are state files or their checksum companions,
    in order: one regex over the joined names (a trim plan parses 130,000 of them)."""
    joined = "\n".join(names)
    if joined.count("\n") != max(len(names) - 1, 0):  # a name with a line break: one at a time
        return [(n, f) for n, f in ((n, state_file(n)) for n in names) if f is not None]
    return [(name, _tuple(StateFileName, (int(version), uid or None, ext, bool(crcs))))
            for name, dot, version, uid, ext, crcs in _STATE_FILES_RE.findall(joined)
            if crcs or not dot]  # `.5.delta`: hidden, but no checksum companion


def _digits(name: str) -> Optional[int]:
    return int(name) if name.isascii() and name.isdigit() else None


def _scan_store_dir(storage: Storage, rel: str, store: StoreFiles) -> list[tuple[str, StoreFiles]]:
    """Fill `store` from the listing of folder `rel`; return named-store sub-folders to list next.
    StorageError (UNREADABLE) for a folder named like a state file: what Spark would read there
    is not a file."""
    files, dirs = storage.list_names(rel)
    subdirs: list[tuple[str, StoreFiles]] = []
    for name in dirs:
        if state_file(name) is not None:
            raise StorageError(storage.uri(f"{rel}/{name}"), "is a folder, expected a state file")
        if name in SHARED_DIRS:
            store.has_ssts = store.has_ssts or name == "SSTs"
        elif name == "_metadata":
            store.has_schema = True
        elif store.store == DEFAULT_STORE and not name.startswith("."):
            subdirs.append((name, StoreFiles(store.operator_id, store.partition, name)))
    store.add_names(files)
    return subdirs


def read_state(storage: Storage) -> StateFiles:
    """List `state/` one folder at a time (SSTs/ and logs/ folders are noted, not listed).

    Raises StorageError when a folder exists but cannot be listed. Operator metadata files that
    fail to parse are recorded on the operator (`metadata_error`), not raised.
    """
    storage.prefetch("state")  # object stores: one recursive listing instead of one per folder
    top = storage.list_dir("state")
    result = StateFiles(exists=top is not None)
    if top is None:
        return result
    for e in top:
        op_id = _digits(e.name)
        if op_id is None or not e.is_dir:
            if not is_hadoop_crc(e.name):
                result.stray_entries.append(e.name)
            continue
        op = OperatorFiles(op_id)
        result.operators[op_id] = op
        op_rel = f"state/{op_id}"
        for pe in storage.list_dir(op_rel) or []:
            part = _digits(pe.name)
            if pe.name == "_metadata" and pe.is_dir:
                _read_operator_metadata(storage, op_rel, op)
            elif pe.name == "_stateSchema" and pe.is_dir:
                for se in storage.list_dir(f"{op_rel}/_stateSchema") or []:
                    if not se.is_dir:  # state schema v3: one folder per store name
                        op.schema_files.append(f"_stateSchema/{se.name}")
                        continue
                    for fe in storage.list_dir(f"{op_rel}/_stateSchema/{se.name}") or []:
                        if not fe.is_dir and not is_hadoop_crc(fe.name):
                            op.schema_files.append(f"_stateSchema/{se.name}/{fe.name}")
            elif part is not None and pe.is_dir:
                part_rel = f"{op_rel}/{part}"
                default = StoreFiles(op_id, part, DEFAULT_STORE)
                stores: dict[str, StoreFiles] = {}
                named = _scan_store_dir(storage, part_rel, default)
                for name, store in named:
                    _scan_store_dir(storage, f"{part_rel}/{name}", store)
                    stores[name] = store
                if default.all_versions() or default.temp_files or default.other_files or not stores:
                    stores[DEFAULT_STORE] = default
                op.partitions[part] = stores
            elif is_temp_name(pe.name):
                op.temp_files.append(pe.name)
            elif not is_hadoop_crc(pe.name):
                op.stray_entries.append(pe.name)
    return result


def _read_operator_metadata(storage: Storage, op_rel: str, op: OperatorFiles) -> None:
    meta_rel = f"{op_rel}/_metadata"
    entries = storage.list_dir(meta_rel) or []
    names = {e.name: e for e in entries}
    rel = None
    v2 = names.get("v2")
    if v2 is not None and v2.is_dir:
        batches = sorted(b for b in (_digits(x.name) for x in storage.list_dir(f"{meta_rel}/v2") or []) if b is not None)
        op.v2_metadata_batches = batches
        if batches:
            rel = f"{meta_rel}/v2/{batches[-1]}"
    if rel is None and "metadata" in names:
        rel = f"{meta_rel}/metadata"
    if rel is None:
        return
    try:
        op.metadata = parse_operator_metadata(storage.read(rel), storage.uri(rel))
    except LogParseError as exc:
        op.metadata_error = exc


# --- restore analysis -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """What one store can restore, relative to the version the next run needs."""

    operator_id: int
    partition: int
    store: str
    path: str
    provider: str
    unique_ids: bool
    min_version: Optional[int]
    max_version: Optional[int]
    version_count: int
    newest_snapshot: Optional[int]
    first_restorable: Optional[int]
    durable_version: Optional[int]
    broken_at: Optional[int]
    required_version: Optional[int]
    restorable_required: bool
    missing: tuple[str, ...]  # files that would restore `required_version`
    orphans: tuple[str, ...]
    temp_files: tuple[str, ...]
    restorable_versions: frozenset[int] = frozenset()  # every version <= planned + 1 that can be restored
    restore_files: tuple[str, ...] = ()  # what Spark reads to restore `required_version`, oldest first
    listing: tuple[str, ...] = field(default=(), compare=False, repr=False)  # the store folder's file names
    fallback_files: tuple[str, ...] = ()  # what Spark 4.1+'s auto snapshot repair reads instead (older snapshot)

    @property
    def chain(self) -> str:
        if self.required_version is not None and not self.restorable_required:
            return "unrestorable"
        if self.broken_at is not None:
            return "broken"
        if self.orphans or self.temp_files:
            return "orphans"
        if self.durable_version is None and self.required_version not in (None, 0):
            return "empty"
        return "ok"

    def to_record(self) -> dict[str, Any]:
        return {
            "operator": self.operator_id,
            "partition": self.partition,
            "store": self.store,
            "path": self.path,
            "provider": self.provider,
            "unique_ids": self.unique_ids,
            "versions": None if self.min_version is None else [self.min_version, self.max_version],
            "version_count": self.version_count,
            "newest_snapshot": self.newest_snapshot,
            "first_restorable": self.first_restorable,
            "durable_version": self.durable_version,
            "required_version": self.required_version,
            "chain": self.chain,
            "broken_at": self.broken_at,
            "missing": list(self.missing),
            "orphans": list(self.orphans),
            "temp_files": list(self.temp_files),
        }


def store_status(
    store: StoreFiles,
    required: Optional[int],
    planned: Optional[int],
    valid_ids: Mapping[int, str],
) -> StoreStatus:
    """Decide which versions of `store` can be restored.

    required: the version the next run loads (committed + 1), None if unknown.
    planned: the newest epoch in offsets/; versions above planned + 1 are orphans.
    valid_ids: for checkpoint format 2, version -> the unique id the commit log names for this
      store. Files of a named version with another id are orphans; versions the commit log does
      not cover accept any id.
    """
    versions = store.all_versions()
    orphans: list[str] = []
    limit = None if planned is None else planned + 1
    if limit is not None and versions and max(versions) > limit:
        for v in sorted(versions):
            if v > limit:
                orphans += [store.file_name(v, None, True)] if v in store.full else []
                orphans += [store.file_name(v, None, False)] if v in store.incr else []
                orphans += [store.file_name(v, u, True) for u in sorted(store.full_ids.get(v, ()))]
                orphans += [store.file_name(v, u, False) for u in sorted(store.incr_ids.get(v, ()))]
    use_ids = store.uses_unique_ids
    # With unique ids only what the commit log names counts: versions above the newest named
    # one (an uncommitted attempt) are not durable; versions below the oldest retained commit
    # accept any id (their commits were purged).
    max_named = max(valid_ids) if valid_ids else None

    def id_file_at(v: int, table: dict[int, set[str]]) -> bool:
        ids = table.get(v)
        if not ids:
            return False
        want = valid_ids.get(v)
        if want is not None:
            return want in ids
        return max_named is None or v < max_named

    def full_at(v: int) -> bool:
        return v in store.full or (use_ids and id_file_at(v, store.full_ids))

    def incr_at(v: int) -> bool:
        return v in store.incr or (use_ids and id_file_at(v, store.incr_ids))

    if use_ids:
        for table, full in ((store.full_ids, True), (store.incr_ids, False)):
            for v, uids in table.items():
                want = valid_ids.get(v)
                if want is None or (limit is not None and v > limit):
                    continue
                orphans += [store.file_name(v, u, full) for u in uids if u != want]

    top = max(versions) if versions else 0
    if limit is not None:
        top = min(top, limit) if versions else 0
    restorable: dict[int, bool] = {0: True}
    first = None
    last = None
    broken_at = None
    low = min(versions) if versions else 1
    # Versions below the lowest file can only be restored from the empty store (version 0).
    prev_ok = low <= 1
    full_set, incr_set = store.full, store.incr
    start = max(low, 1)
    prev_v = start - 1
    for v in sorted(x for x in set(versions) if start <= x <= top):  # cost: the files, never the gap
        if v != prev_v + 1:
            prev_ok = False  # a version without any file lies between: not restorable
        prev_v = v
        if use_ids:
            ok = full_at(v) or (prev_ok and incr_at(v))
        else:
            ok = v in full_set or (prev_ok and v in incr_set)
        restorable[v] = ok
        prev_ok = ok
        if ok:
            if first is None:
                first = v
            elif last is not None and last < v - 1 and broken_at is None:
                broken_at = last + 1
            last = v
    missing: list[str] = []
    req_ok = True
    if required is not None and required > 0:
        req_ok = restorable.get(required, False)
        if not req_ok:
            missing = _missing_for(store, required, full_at, incr_at, valid_ids)
    snapshots = sorted(set(store.full) | {v for v in store.full_ids if full_at(v)})
    chain = _restore_files(store, required, full_at, incr_at, valid_ids) if req_ok and required else None
    fallback = None
    if chain and required is not None and is_full_file(chain[0]) and store.crc_names:  # only a checksum can call the snapshot corrupt
        base = state_file(chain[0])
        fallback = _restore_files(store, required, full_at, incr_at, valid_ids, below=base.version if base else None)
    return StoreStatus(
        operator_id=store.operator_id,
        partition=store.partition,
        store=store.store,
        path=store.path,
        provider=store.provider,
        unique_ids=use_ids,
        min_version=min(versions) if versions else None,
        max_version=max(versions) if versions else None,
        version_count=len(versions),
        newest_snapshot=snapshots[-1] if snapshots else None,
        first_restorable=first,
        durable_version=last,
        broken_at=broken_at,
        required_version=required,
        restorable_required=req_ok,
        missing=tuple(missing),
        orphans=tuple(sorted(orphans, key=_version_sort_key)),
        temp_files=tuple(sorted(store.temp_files)),
        restorable_versions=frozenset(v for v, ok in restorable.items() if ok),
        restore_files=tuple(chain or ()),
        fallback_files=tuple(fallback or ()),
        listing=store.names,
    )


def _version_sort_key(name: str) -> tuple[int, str]:
    head = name.split(".", 1)[0].split("_", 1)[0]
    return (int(head) if head.isdigit() else -1, name)


MAX_CHANGE_FILE_REPLAY = 500  # spark.sql.streaming.stateStore.autoSnapshotRepair.maxChangeFileReplay (4.1+)


def _restore_files(store: StoreFiles, required: int, full_at: Any, incr_at: Any, valid_ids: Mapping[int, str],
                   below: Optional[int] = None) -> Optional[list[str]]:
    """The files a restart reads to restore `required`: the newest full version at or below it
    (below `below` when given), then every incremental file above it; None when an incremental
    is missing. Cost: the chain (at most MAX_CHANGE_FILE_REPLAY incrementals past `below`)."""
    top = required if below is None else below - 1
    known = set(store.full) | set(store.full_ids)
    base = max((v for v in known if 0 < v <= top and full_at(v)), default=0)
    if below is not None and required - base > MAX_CHANGE_FILE_REPLAY:
        return None

    def name(v: int, full: bool) -> str:
        if v in (store.full if full else store.incr):
            return store.file_name(v, None, full)
        ids = (store.full_ids if full else store.incr_ids).get(v, set())
        uid = valid_ids.get(v) if valid_ids.get(v) in ids else min(ids)
        return store.file_name(v, uid, full)

    files = [name(base, True)] if base else []
    for v in range(base + 1, required + 1):
        if not incr_at(v):
            return None
        files.append(name(v, False))
    return files


def is_full_file(name: str) -> bool:
    """A snapshot (HDFS `.snapshot`, RocksDB `.zip`), not a delta or changelog."""
    return name.endswith(tuple(f".{ext}" for ext in FULL_EXT))


LZ4_MAGIC = b"LZ4Block"
LZ4_END = 21  # lz4-java LZ4BlockOutputStream.finish(): magic, token, compressed 0, original 0, checksum 0


def _ends(storage: Storage, rel: str, head: int, tail: int) -> Optional[tuple[bytes, bytes, int] | str]:
    """A file's head and tail for the torn checks; "empty file" for an empty one; None when it
    cannot be judged (unreadable, not a regular file)."""
    try:
        ends = storage.read_ends(rel, head, tail)
    except StorageError:
        return None
    if ends is not None and ends[2] == 0:
        return "empty file"
    return ends


def torn_reason(storage: Storage, rel: str) -> Optional[str]:
    """Why the delta or changelog `rel` is torn by its own format, None when it looks whole or
    cannot be judged (docs/formats/state.md#torn-files). Spark writes both through its
    CompressionCodec; with lz4 (the default) the stream is lz4-java's LZ4Block framing, which
    ends with an empty end block: a file cut short (a crash, a full disk) has none. Two small
    reads, head and tail (ranged requests on object stores); other codecs are not judged."""
    ends = _ends(storage, rel, len(LZ4_MAGIC), LZ4_END)
    if isinstance(ends, str) or ends is None:
        return ends
    head, tail, _size = ends
    if head != LZ4_MAGIC:
        return None  # another codec (zstd, snappy, lzf): its end is not checked
    if len(tail) < LZ4_END or tail[:8] != LZ4_MAGIC or tail[9:] != bytes(12):
        return "truncated: no LZ4Block end mark"
    return None


ZIP_EOCD = b"PK\x05\x06"
ZIP_EOCD_SIZE = 22  # the end of central directory record without a comment
ZIP_TAIL = ZIP_EOCD_SIZE + 0xFFFF  # ... with the longest comment


def torn_full_reason(storage: Storage, rel: str) -> Optional[str]:
    """Why the snapshot `rel` is torn by its own format, None when it looks whole or cannot be
    judged (docs/formats/state.md#torn-files): an HDFS `.snapshot` is LZ4Block framed like a
    delta (its end mark); a RocksDB `.zip` ends with the zip's end of central directory record
    (`PK\x05\x06`, within its last 64 KiB + 22 bytes). Head and tail reads only."""
    if not rel.endswith(".zip"):
        return torn_reason(storage, rel)
    ends = _ends(storage, rel, 4, ZIP_TAIL)
    if isinstance(ends, str) or ends is None:
        return ends
    head, tail, _size = ends
    if head != b"PK\x03\x04":
        return "not a zip file (no local file header)"
    if tail[-ZIP_EOCD_SIZE:][:4] == ZIP_EOCD or ZIP_EOCD in tail:
        return None
    return "truncated: no zip end of central directory record"


MAX_ZIP_METADATA = 64 << 20  # a RocksDB zip's `metadata` entry larger than this is not read


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

    from streamctl.formats.reader import load_json

    try:
        with storage.open_random(rel) as fh, zipfile.ZipFile(fh) as zf:
            info = zf.getinfo("metadata")
            if info.file_size > MAX_ZIP_METADATA:
                raise StorageError(storage.uri(rel), f"its metadata entry is larger than {MAX_ZIP_METADATA} bytes")
            text = zf.read(info).decode("utf-8")
    except StorageError:
        raise
    except (KeyError, zipfile.BadZipFile, UnicodeDecodeError, EOFError, OSError, ValueError) as exc:
        raise StorageError(storage.uri(rel), f"not a RocksDB checkpoint zip ({type(exc).__name__})") from None
    body = text.split("\n", 1)[1] if "\n" in text else "{}"
    try:
        meta = load_json(body)
    except ValueError:
        raise StorageError(storage.uri(rel), "zip metadata is not valid JSON") from None
    files = meta.get("sstFiles") if isinstance(meta, dict) else None
    out: dict[str, Optional[int]] = {}
    for f in files or []:
        if isinstance(f, dict) and f.get("dfsSstFileName"):
            size = f.get("sizeBytes")
            out[str(f["dfsSstFileName"])] = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None
    return out


MAX_SCHEMA_FILE = 16 << 20  # a state schema file larger than this is not read
SCHEMA_FILE = "_metadata/schema"  # under partition 0's store folder (docs/formats/state.md#state-schema-files)


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


def schema_field_types(schema: Mapping[str, Any]) -> list[str]:
    """The fields' data types of a StructType JSON, each as compact JSON (names and nullability
    left out: Spark's check ignores them, `equalsIgnoreNameAndCompatibleNullability`)."""
    return [json.dumps(f.get("type"), sort_keys=True, separators=(",", ":")) for f in schema.get("fields") or []
            if isinstance(f, dict)]


def without_file(store: StoreFiles, version: int, uid: Optional[str], full: bool) -> StoreFiles:
    """`store` as if one file were gone (a torn file: no restart can read it)."""
    from dataclasses import replace

    if uid is None:
        if full:
            return replace(store, full=set(store.full) - {version})
        return replace(store, incr=set(store.incr) - {version})
    table = {v: set(ids) for v, ids in (store.full_ids if full else store.incr_ids).items()}
    table[version] = table.get(version, set()) - {uid}
    if not table[version]:
        del table[version]
    return replace(store, full_ids=table) if full else replace(store, incr_ids=table)


HADOOP_CRC_MAGIC = b"crc\0"


def checksum_mismatch(storage: Storage, folder: str, name: str, crc_names: set[str]) -> Optional[str]:
    """Why state file `folder/name` does not match its checksum companion, None when it does
    (or has none). Two companions (docs/formats/state.md): Hadoop's hidden `.<name>.crc`
    (`ChecksumFileSystem`: `crc\0`, the bytes per checksum as a big-endian int, then one
    big-endian CRC32 per chunk), and Spark 4.1+'s visible `<name>.crc` (JSON whose
    `mainFileSize` is the file's size; its CRC32C `value` is not recomputed). Files larger than
    DEFAULT_MAX_READ are not read."""
    import zlib

    rel = f"{folder}/{name}"
    if f"{name}.crc" in crc_names:
        try:
            meta = load_json(storage.read(f"{rel}.crc", 1 << 16))
            size = storage.stat(rel).size
        except (StorageError, ValueError):
            meta, size = None, None
        want = meta.get("mainFileSize") if isinstance(meta, dict) else None
        if isinstance(want, int) and size is not None and size != want:
            return f"{size} bytes, its {name}.crc says {want}"
    if f".{name}.crc" not in crc_names:
        return None
    try:
        sums = storage.read(f"{folder}/.{name}.crc", 1 << 24)
        data = storage.read(rel)
    except StorageError:
        return None  # too large or unreadable here: what Spark reads is not judged
    if len(sums) < 8 or sums[:4] != HADOOP_CRC_MAGIC:
        return None
    chunk = int.from_bytes(sums[4:8], "big")
    if chunk <= 0:
        return None
    expected = [sums[i:i + 4] for i in range(8, len(sums) - 3, 4)]
    actual = [zlib.crc32(data[i:i + chunk]).to_bytes(4, "big") for i in range(0, len(data), chunk)]
    if expected != actual:
        bad = next((i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b), min(len(expected), len(actual)))
        return f"bytes {bad * chunk}.. do not match its .{name}.crc"
    return None


def _missing_for(store: StoreFiles, required: int, full_at: Any, incr_at: Any, valid_ids: Mapping[int, str]) -> list[str]:
    """Name the files that would make `required` restorable from the newest full file below it.
    Cost follows the files and commit ids that exist: a gap is one `a..b.ext` entry."""
    known = set(store.full) | set(store.incr) | set(store.full_ids) | set(store.incr_ids)
    base = max((v for v in known if 0 < v <= required and full_at(v)), default=0)
    hdfs = store.provider != "rocksdb"
    ext = "delta" if hdfs else "changelog"
    missing: list[str] = []
    run: list[int] = []  # [first, last] of consecutive missing versions without ids

    def flush() -> None:
        if run:
            missing.append(f"{run[0]}.{ext}" if run[0] == run[1] else f"{run[0]}..{run[1]}.{ext}")
            run.clear()

    def extend(a: int, b: int) -> None:
        if run and run[1] == a - 1:
            run[1] = b
        else:
            flush()
            run.extend([a, b])

    points = sorted(v for v in known | set(valid_ids) if base < v <= required)
    cur = base + 1
    for v in points + [required + 1]:
        if v > cur:
            extend(cur, v - 1)
        cur = v + 1
        if v > required:
            break
        if incr_at(v):
            flush()
            continue
        uid = valid_ids.get(v)
        if uid:
            flush()
            missing.append(f"{v}_{uid}.{ext}")
        else:
            extend(v, v)
    flush()
    if not missing:  # pragma: no cover - defensive: nothing missing means it was restorable
        missing.append(f"{required}.{'snapshot' if hdfs else 'zip'}")
    return missing

"""State stores under `state/`: which files each store has, and which versions can be restored.

Layout (FORMATS.md §5): `state/<op>/<partition>[/<storeName>]/` holding
- HDFS provider: `<v>.delta`, `<v>.snapshot`;
- RocksDB provider: `<v>.zip` (full), `<v>.changelog` (incremental), `SSTs/`, `logs/`;
- checkpoint format 2: `<v>_<uniqueId>.zip|.changelog` — only the ids the commit log names count;
- 4.1+ visible checksum companions `<file>.crc`, Hadoop hidden `.<file>.crc`, temp files;
- `state/<op>/_metadata/metadata` (operator metadata v1), `_metadata/v2/<batch>` (v2),
  `state/<op>/_stateSchema/...`, `<partition>/[<store>/]_metadata/schema`.

Version v holds the state after epoch v-1; version 0 is the empty store and has no file.
Restoring v needs a full file at some s <= v and every incremental file s+1..v.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from streamctl.inspectors.logs import LogParseError, _decode, _lines, is_hadoop_crc, is_temp_name, parse_version_line
from streamctl.inspectors.storage import Entry, Storage

DEFAULT_STORE = "default"
SHARED_DIRS = ("SSTs", "logs")
FULL_EXT = {"snapshot": "hdfs", "zip": "rocksdb"}
INCR_EXT = {"delta": "hdfs", "changelog": "rocksdb"}
OPERATOR_METADATA_MAX_VERSION = 2


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
    file_names: dict[tuple[int, Optional[str], bool], str] = field(default_factory=dict)
    temp_files: list[str] = field(default_factory=list)
    orphan_crc: list[str] = field(default_factory=list)
    other_files: list[str] = field(default_factory=list)
    has_ssts: bool = False
    has_schema: bool = False

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

    def add_file(self, name: str, visible_crc_targets: set[str]) -> None:
        if name.startswith("."):
            if is_temp_name(name):
                self.temp_files.append(name)
            return  # Hadoop .crc sidecars and other hidden files
        if is_temp_name(name):
            self.temp_files.append(name)
            return
        stem, dot, ext = name.rpartition(".")
        if not dot:
            self.other_files.append(name)
            return
        if ext == "crc":
            # 4.1+ visible checksum companion of a state file: fine unless its file is gone.
            visible_crc_targets.add(stem)
            return
        kind_full = ext in FULL_EXT
        if not kind_full and ext not in INCR_EXT:
            self.other_files.append(name)
            return
        version_text, underscore, uid = stem.partition("_")
        if not (version_text.isascii() and version_text.isdigit()) or (underscore and not uid):
            self.other_files.append(name)
            return
        version = int(version_text)
        self.providers.add(FULL_EXT[ext] if kind_full else INCR_EXT[ext])
        if underscore:
            target = self.full_ids if kind_full else self.incr_ids
            target.setdefault(version, set()).add(uid)
            self.file_names[(version, uid, kind_full)] = name
        else:
            (self.full if kind_full else self.incr).add(version)
            self.file_names[(version, None, kind_full)] = name


@dataclass(frozen=True, slots=True)
class OperatorMetadata:
    """`state/<op>/_metadata/metadata` (v1) or the newest `_metadata/v2/<batch>` (v2)."""

    version: int
    operator_name: Optional[str]
    stores: tuple[tuple[str, int], ...]  # (storeName, numPartitions)
    path: str


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
    lines = _lines(_decode(data, path))
    version = parse_version_line(lines[0], path, OPERATOR_METADATA_MAX_VERSION)
    body = "\n".join(lines[1:]).strip()
    try:
        obj = json.loads(body)
    except ValueError as exc:
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
    return OperatorMetadata(version, name if isinstance(name, str) else None, tuple(stores), path)


def _digits(name: str) -> Optional[int]:
    return int(name) if name.isascii() and name.isdigit() else None


def _scan_store_dir(storage: Storage, rel: str, store: StoreFiles, entries: list[Entry]) -> list[tuple[str, StoreFiles]]:
    """Fill `store` from one folder listing; return named-store sub-folders to list next."""
    crc_targets: set[str] = set()
    names: set[str] = set()
    subdirs: list[tuple[str, StoreFiles]] = []
    for e in entries:
        if e.is_dir:
            if e.name in SHARED_DIRS:
                store.has_ssts = store.has_ssts or e.name == "SSTs"
            elif e.name == "_metadata":
                store.has_schema = True
            elif store.store == DEFAULT_STORE and not e.name.startswith("."):
                subdirs.append((e.name, StoreFiles(store.operator_id, store.partition, e.name)))
            continue
        names.add(e.name)
        store.add_file(e.name, crc_targets)
    store.orphan_crc = sorted(f"{t}.crc" for t in crc_targets if t not in names)
    return subdirs


def read_state(storage: Storage) -> StateFiles:
    """List `state/` one folder at a time (SSTs/ and logs/ folders are noted, not listed).

    Raises StorageError when a folder exists but cannot be listed. Operator metadata files that
    fail to parse are recorded on the operator (`metadata_error`), not raised.
    """
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
                    op.schema_files.append(f"_stateSchema/{se.name}")
            elif part is not None and pe.is_dir:
                part_rel = f"{op_rel}/{part}"
                default = StoreFiles(op_id, part, DEFAULT_STORE)
                stores: dict[str, StoreFiles] = {}
                named = _scan_store_dir(storage, part_rel, default, storage.list_dir(part_rel) or [])
                for name, store in named:
                    _scan_store_dir(storage, f"{part_rel}/{name}", store, storage.list_dir(f"{part_rel}/{name}") or [])
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
    if limit is not None:
        for key, name in store.file_names.items():
            if key[0] > limit:
                orphans.append(name)
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
        for (v, uid, _full), name in store.file_names.items():
            want = valid_ids.get(v)
            if uid is not None and want is not None and uid != want and name not in orphans:
                orphans.append(name)

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
    for v in range(max(low, 1), top + 1):
        ok = full_at(v) or (incr_at(v) and prev_ok)
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
    )


def _version_sort_key(name: str) -> tuple[int, str]:
    head = name.split(".", 1)[0].split("_", 1)[0]
    return (int(head) if head.isdigit() else -1, name)


def _missing_for(store: StoreFiles, required: int, full_at: Any, incr_at: Any, valid_ids: Mapping[int, str]) -> list[str]:
    """Name the files that would make `required` restorable from the newest full file below it."""
    base = 0
    for v in range(required, 0, -1):
        if full_at(v):
            base = v
            break
    hdfs = store.provider != "rocksdb"
    ext = "delta" if hdfs else "changelog"
    missing: list[str] = []
    run: list[int] = []  # consecutive missing versions without ids collapse to `a..b.ext`

    def flush() -> None:
        if run:
            missing.append(f"{run[0]}.{ext}" if len(run) == 1 else f"{run[0]}..{run[-1]}.{ext}")
            run.clear()

    for v in range(base + 1, required + 1):
        if incr_at(v):
            flush()
            continue
        uid = valid_ids.get(v)
        if uid:
            flush()
            missing.append(f"{v}_{uid}.{ext}")
        elif run and run[-1] == v - 1:
            run.append(v)
        else:
            flush()
            run.append(v)
    flush()
    if not missing:  # pragma: no cover - defensive: nothing missing means it was restorable
        missing.append(f"{required}.{'snapshot' if hdfs else 'zip'}")
    return missing

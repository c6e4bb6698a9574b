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

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from streamctl.formats.checksum import (
    CHECKSUM_SUFFIX,
    crc_name,
    hadoop_crc_mismatch,
    is_checksum_name,
    is_hadoop_crc,
    main_file_size,
    visible_crc_name,
)
from streamctl.formats.errors import LogParseError, StorageError
from streamctl.formats.names import is_temp_name
from streamctl.formats.reader import load_json
from streamctl.formats.state import (
    DEFAULT_STORE,
    EXT_PATTERNS,
    FULL_EXT,
    INCR_EXT,
    LZ4_END,
    LZ4_MAGIC,
    MAX_ZIP_METADATA,
    SHARED_DIRS,
    STATE_FILE_RE,
    STATE_ID_FILES_RE,
    STATE_SCHEMA_DIR,
    VISIBLE_CRC_RE,
    ZIP_TAIL,
    OperatorMetadata,
    is_full_file,
    is_zip_file,
    lz4_torn,
    parse_operator_metadata,
    parse_zip_metadata,
    state_file,
    zip_torn,
)
from streamctl.inspectors.storage import Storage


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
    has_crc: bool = False  # a checksum companion (hidden or visible) is in the folder
    other_files: list[str] = field(default_factory=list)
    has_ssts: bool = False
    has_schema: bool = False
    # the folder's file names as listed, held in two forms (not compared: one listing)
    listed_names: tuple[str, ...] = field(default=(), compare=False, repr=False)  # read them as `names`
    listed: str = field(default="", compare=False, repr=False)  # "\n" + each name + "\n": `lists` makes it
    # when nothing but one listing went into the fields (`add_names` on a new store): that
    # listing's classification, its joined names first (`_CLASSIFIED`): store_status's memo key; a
    # copy by `replace` has none. Classified fields are never
    # changed in place (without_file replaces them).
    shape: Optional[tuple[Any, ...]] = field(default=None, init=False, compare=False, repr=False)

    @property
    def names(self) -> tuple[str, ...]:
        """The folder's file names as listed (trim plans from them: one listing)."""
        return self.listed_names

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
        folder costs one C call instead of 200 Python ones. The version patterns run over the
        visible names only: the hidden `.<name>.crc` companions are half the names and most of
        the text.

        A new store's classification is a function of its listing alone, and the partitions of
        one operator mostly list the same names in the same order (each batch writes a version
        in every partition): it is remembered by the joined listing (`_CLASSIFIED`; when no name
        holds a newline, so that the joined text is that listing's alone) and copied from there,
        and becomes the store's `shape`."""
        joined = "\n".join(names)
        fresh = bool(names) and joined.count("\n") == len(names) - 1 and not (
            self.listed_names or self.shape or self.providers or self.full or self.incr
            or self.full_ids or self.incr_ids or self.exts or self.temp_files or self.orphan_crc
            or self.has_crc or self.other_files)
        self.shape = None
        if fresh:
            known = _CLASSIFIED.get(joined)
            if known is not None:
                self._copy_classified(known)
                self.listed_names, self.listed = tuple(names), ""
                return
        self.listed_names = self.names + tuple(names)
        self.listed = ""  # `lists` makes it again from `names`
        visible = [n for n in names if n[:1] != "."]
        shown = "\n".join(visible)
        for ext, pattern in EXT_PATTERNS:
            if ext not in shown:
                continue
            full = ext in FULL_EXT
            found = pattern.findall(shown)
            if found:
                self.providers.add(FULL_EXT[ext] if full else INCR_EXT[ext])
                self.exts[full] = ext
                (self.full if full else self.incr).update(map(int, found))
        if "_" in shown:  # checkpoint format 2: <version>_<uniqueId>.<ext>
            for v_text, uid, ext in STATE_ID_FILES_RE.findall(shown):
                full = ext in FULL_EXT
                self.providers.add(FULL_EXT[ext] if full else INCR_EXT[ext])
                self.exts[full] = ext
                (self.full_ids if full else self.incr_ids).setdefault(int(v_text), set()).add(uid)
        if "tmp" in joined or "temp-" in joined:
            self.temp_files.extend(n for n in names if is_temp_name(n))
        self.has_crc = self.has_crc or CHECKSUM_SUFFIX in joined
        crc_targets = VISIBLE_CRC_RE.findall(shown) if CHECKSUM_SUFFIX in shown else []
        if crc_targets:
            present = set(names)
            # 4.1+ visible checksum companions are fine unless their file is gone.
            self.orphan_crc = sorted(visible_crc_name(t) for t in crc_targets if t not in present)
        hidden = len(names) - len(visible)
        counted = (len(self.full) + len(self.incr) + sum(map(len, self.full_ids.values()))
                   + sum(map(len, self.incr_ids.values())))
        visible_temp = sum(1 for t in self.temp_files if not t.startswith("."))
        if counted + visible_temp + len(crc_targets) < len(names) - hidden:
            self.other_files = sorted(
                n for n in visible if not STATE_FILE_RE.match(n) and not is_temp_name(n) and not is_checksum_name(n))
        if fresh:
            self.shape = (
                joined, frozenset(self.providers), frozenset(self.full), frozenset(self.incr),
                tuple((v, frozenset(ids)) for v, ids in self.full_ids.items()),
                tuple((v, frozenset(ids)) for v, ids in self.incr_ids.items()),
                tuple(self.exts.items()), tuple(self.temp_files), tuple(self.orphan_crc), self.has_crc,
                tuple(self.other_files))
            _remember(_CLASSIFIED, joined, self.shape)

    def _copy_classified(self, known: tuple[Any, ...]) -> None:
        """The fields `add_names` gave the listing `known` was made from (fresh copies: a store's
        fields are its own)."""
        self.shape = known
        _, providers, full, incr, full_ids, incr_ids, exts, temp_files, orphan_crc, self.has_crc, other_files = known
        self.providers, self.full, self.incr = set(providers), set(full), set(incr)
        self.full_ids = {v: set(ids) for v, ids in full_ids}
        self.incr_ids = {v: set(ids) for v, ids in incr_ids}
        self.exts, self.temp_files = dict(exts), list(temp_files)
        self.orphan_crc, self.other_files = list(orphan_crc), list(other_files)

    def lists(self, name: str) -> bool:
        """Whether the folder's listing holds file `name` (a substring search of the joined
        listing, made once: no set of hundreds of names per store)."""
        if not self.listed:
            if self.shape is not None:
                self.listed = "\n" + self.shape[0] + "\n"
            else:
                self.listed = "\n" + "\n".join(self.names) + "\n" if self.names else "\n"
        return f"\n{name}\n" in self.listed


#: Memos of pure functions of a listing: add_names' classification by the joined
#: listing, store_status's answer by (shape, required, planned). Bounded: emptied when full.
MEMO_SIZE = 4096
_CLASSIFIED: dict[str, tuple[Any, ...]] = {}
_STATUSES: dict[tuple[str, Optional[int], Optional[int]], tuple[Any, ...]] = {}


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memo) >= MEMO_SIZE:
        memo.clear()
    memo[key] = value


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
    prepared: dict[tuple[int, int, str], Any] = field(default_factory=dict)  # read_state's `prepare` results


def _digits(name: str) -> Optional[int]:
    return int(name) if name.isascii() and name.isdigit() else None


def _scan_store_dir(storage: Storage, rel: str, store: StoreFiles) -> list[tuple[str, StoreFiles]]:
    """Fill `store` from the listing of folder `rel`; return named-store sub-folders to list next.
    A folder named like a state file counts as that version locally, as Spark's listing counts it
    (by name): the restore chain's files are each judged there (not a regular file: torn), so a
    restart that reads it is predicted to fail and one that does not is not. Elsewhere it is
    StorageError (UNREADABLE): only the newest of a chain's files is judged on object stores."""
    files, dirs = storage.list_names(rel)
    subdirs: list[tuple[str, StoreFiles]] = []
    for name in dirs:
        if state_file(name) is not None:
            if storage.is_local:
                files = [*files, name]
                continue
            raise StorageError(storage.uri(f"{rel}/{name}"), "is a folder, expected a state file")
        if name in SHARED_DIRS:
            store.has_ssts = store.has_ssts or name == "SSTs"
        elif name == "_metadata":
            store.has_schema = True
        elif store.store == DEFAULT_STORE and not name.startswith("."):
            subdirs.append((name, StoreFiles(store.operator_id, store.partition, name)))
    store.add_names(files)
    return subdirs


Prepare = Callable[[StoreFiles], Any]


def _scan_partition(storage: Storage, op_id: int, part: int,
                    prepare: Optional[Prepare]) -> tuple[dict[str, StoreFiles], dict[str, Any]]:
    """The stores of one partition folder (its default store, then its named stores' folders),
    and `prepare(store)` of each."""
    part_rel = f"state/{op_id}/{part}"
    default = StoreFiles(op_id, part, DEFAULT_STORE)
    stores: dict[str, StoreFiles] = {}
    named = _scan_store_dir(storage, part_rel, default)
    for name, store in named:
        _scan_store_dir(storage, f"{part_rel}/{name}", store)
        stores[name] = store
    if default.all_versions() or default.temp_files or default.other_files or not stores:
        stores[DEFAULT_STORE] = default
    return stores, ({name: prepare(store) for name, store in stores.items()} if prepare is not None else {})


def read_state(storage: Storage, prepare: Optional[Prepare] = None) -> StateFiles:
    """List `state/` one folder at a time (SSTs/ and logs/ folders are noted, not listed).

    `prepare(store)`, when given, is run on every store as it is listed; its results are in
    `StateFiles.prepared` by (operator, partition, store).

    Raises StorageError when a folder exists but cannot be listed. Operator metadata files that
    fail to parse are recorded on the operator (`metadata_error`), not raised.
    """
    storage.prefetch("state")  # object stores: one recursive listing instead of one per folder
    result = StateFiles(exists=False)
    for op_id, part in _list_operators(storage, result):
        stores, prepared = _scan_partition(storage, op_id, part, prepare)
        result.operators[op_id].partitions[part] = stores
        for name, value in prepared.items():
            result.prepared[(op_id, part, name)] = value
    return result


def _list_operators(storage: Storage, result: StateFiles) -> list[tuple[int, int]]:
    """Fill `result` from `state/` and its operator folders (metadata, schemas, strays, one
    empty entry per partition folder); the (operator, partition) folders to list, in order."""
    top = storage.list_dir("state")
    result.exists = top is not None
    units: list[tuple[int, int]] = []
    for e in top or []:
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
            elif pe.name == STATE_SCHEMA_DIR and pe.is_dir:
                for se in storage.list_dir(f"{op_rel}/{STATE_SCHEMA_DIR}") or []:
                    if not se.is_dir:  # state schema v3: one folder per store name
                        op.schema_files.append(f"{STATE_SCHEMA_DIR}/{se.name}")
                        continue
                    for fe in storage.list_dir(f"{op_rel}/{STATE_SCHEMA_DIR}/{se.name}") or []:
                        if not fe.is_dir and not is_hadoop_crc(fe.name):
                            op.schema_files.append(f"{STATE_SCHEMA_DIR}/{se.name}/{fe.name}")
            elif part is not None and pe.is_dir:
                op.partitions[part] = {}  # filled below, in this order
                units.append((op_id, part))
            elif is_temp_name(pe.name):
                op.temp_files.append(pe.name)
            elif not is_hadoop_crc(pe.name):
                op.stray_entries.append(pe.name)
    return units


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
    files: Optional[StoreFiles] = field(default=None, compare=False, repr=False)  # what it was judged from
    fallback_files: tuple[str, ...] = ()  # what Spark 4.1+'s auto snapshot repair reads instead (older snapshot)

    @property
    def listing(self) -> tuple[str, ...]:
        """The store folder's file names as listed."""
        return self.files.names if self.files is not None else ()

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


_STATUS_FIELDS = tuple(StoreStatus.__dataclass_fields__)
_FILES = _STATUS_FIELDS.index("files")
assert _STATUS_FIELDS[:4] == ("operator_id", "partition", "store", "path")  # store_status's memo sets them


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

    A store classified from a listing alone (its `shape`) and judged without ids answers as
    the last store of the same shape did, with its own place (`_STATUSES`).
    """
    key = None if store.shape is None or valid_ids else (store.shape[0], required, planned)
    if key is not None:
        known = _STATUSES.get(key)
        if known is not None:
            values = list(known)
            values[:4] = store.operator_id, store.partition, store.store, store.path
            values[_FILES] = store
            return StoreStatus(*values)
    status = _store_status(store, required, planned, valid_ids)
    if key is not None:
        _remember(_STATUSES, key, tuple(getattr(status, f) for f in _STATUS_FIELDS))
    return status


def _store_status(store: StoreFiles, required: Optional[int], planned: Optional[int],
                  valid_ids: Mapping[int, str]) -> StoreStatus:
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
    contiguous = (not use_ids and versions and low == start and top == max(versions)
                  and top - low + 1 == len(versions))
    if contiguous:
        # One run of versions without a hole, every one with a file of its own (ids aside): the
        # chain is restorable from the first version the loop below would accept (the lowest
        # when the store starts at version 1, else its lowest snapshot) to the top, never broken
        # (the loop's answer, in C: a store holds 100s of versions, a checkpoint 1000s of stores).
        first = low if prev_ok else min(full_set, default=None)
        if first is not None:
            last = top
            restorable.update(dict.fromkeys(range(first, top + 1), True))
        versions_in_range: list[int] = []
    else:
        versions_in_range = sorted(x for x in set(versions) if start <= x <= top)  # cost: the files, never the gap
    for v in versions_in_range:
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
    newest_snapshot = max([*store.full, *(v for v in store.full_ids if full_at(v))], default=None)
    chain = _restore_files(store, required, full_at, incr_at, valid_ids) if req_ok and required else None
    fallback = None
    if chain and required is not None and is_full_file(chain[0]) and store.has_crc:  # only a checksum can call the snapshot corrupt
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
        newest_snapshot=newest_snapshot,
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
        files=store,
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


def _ends(storage: Storage, rel: str, head: int, tail: int,
          data: Optional[bytes] = None) -> Optional[tuple[bytes, bytes, int] | str]:
    """A file's head and tail for the torn checks (from `data`, its bytes, when read already);
    "empty file" for an empty one, "not a regular file" for a named pipe or a device where the
    file belongs (the restart blocks or fails opening it); None when it cannot be judged
    (unreadable)."""
    if data is not None:
        return (data[:head], data[max(len(data) - tail, 0):], len(data)) if data else "empty file"
    try:
        ends = storage.read_ends(rel, head, tail)
    except StorageError:
        return None
    if ends is None:
        return "not a regular file"
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
            info = zf.getinfo("metadata")
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

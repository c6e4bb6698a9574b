"""State stores under `state/`, as listed: which files each store has (`StoreFiles`), each
operator's metadata, schema files and partition folders (`OperatorFiles`), and `read_state`, which
lists them one folder at a time. What a store can restore is inspectors/state_restore.py's.

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
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from streamctl.formats.checksum import CHECKSUM_SUFFIX, is_checksum_name, is_hadoop_crc, visible_crc_name
from streamctl.formats.errors import LogParseError, StorageError
from streamctl.formats.layout import STATE_DIR
from streamctl.formats.names import is_temp_name
from streamctl.formats.state import (
    DEFAULT_STORE,
    EXT_PATTERNS,
    FULL_EXT,
    INCR_EXT,
    OPERATOR_METADATA_DIR,
    OPERATOR_METADATA_V1,
    OPERATOR_METADATA_V2,
    SCHEMA_DIR,
    SHARED_DIRS,
    SST_DIR,
    STATE_FILE_RE,
    STATE_ID_FILES_RE,
    STATE_SCHEMA_DIR,
    VISIBLE_CRC_RE,
    OperatorMetadata,
    parse_operator_metadata,
    state_file,
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
        base = f"{STATE_DIR}/{self.operator_id}/{self.partition}"
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
            remember(_CLASSIFIED, joined, self.shape)

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



#: Memos of pure functions of a listing: add_names' classification by the joined listing (here),
#: store_status's answer by (shape, required, planned) (inspectors/state_restore.py). Bounded:
#: emptied when full.
MEMO_SIZE = 4096
_CLASSIFIED: dict[str, tuple[Any, ...]] = {}


def remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
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
            store.has_ssts = store.has_ssts or name == SST_DIR
        elif name == SCHEMA_DIR:
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
    part_rel = f"{STATE_DIR}/{op_id}/{part}"
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
    storage.prefetch(STATE_DIR)  # object stores: one recursive listing instead of one per folder
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
    top = storage.list_dir(STATE_DIR)
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
        op_rel = f"{STATE_DIR}/{op_id}"
        for pe in storage.list_dir(op_rel) or []:
            part = _digits(pe.name)
            if pe.name == OPERATOR_METADATA_DIR and pe.is_dir:
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
    meta_rel = f"{op_rel}/{OPERATOR_METADATA_DIR}"
    entries = storage.list_dir(meta_rel) or []
    names = {e.name: e for e in entries}
    rel = None
    v2 = names.get(OPERATOR_METADATA_V2)
    if v2 is not None and v2.is_dir:
        v2_rel = f"{meta_rel}/{OPERATOR_METADATA_V2}"
        batches = sorted(b for b in (_digits(x.name) for x in storage.list_dir(v2_rel) or []) if b is not None)
        op.v2_metadata_batches = batches
        if batches:
            rel = f"{v2_rel}/{batches[-1]}"
    if rel is None and OPERATOR_METADATA_V1 in names:
        rel = f"{meta_rel}/{OPERATOR_METADATA_V1}"
    if rel is None:
        return
    try:
        op.metadata = parse_operator_metadata(storage.read(rel), storage.uri(rel))
    except LogParseError as exc:
        op.metadata_error = exc


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


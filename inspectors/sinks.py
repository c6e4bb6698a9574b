"""Sink commit logs behind one small interface: what each sink kind has durably committed.

A reader turns a sink location into a `SinkLog`: the newest committed epoch (the sink epoch `S`
of docs/model.md#positions), the epochs present, per epoch the files (and rows where known), compaction points,
the sink's parallel writers (coordinated sink) and findings about the sink alone. The analysis
against a checkpoint (SINK_AHEAD, SINK_BEHIND) lives in `compare_sink`, which never looks at a
sink kind: a new kind is a new reader in `READERS`, nothing else.

Kinds:
- `file`: Spark's file sink, `<path>/_spark_metadata/` (docs/formats/sinks.md#file-sink);
- `delta`: a Delta table's `txn` version for an app id, read with the `deltalake` package
  (checkpoints, multi-part checkpoints and log compaction are the library's business);
- `coordinated`: streamctl's coordinated sink (`streamctl.pipeline.coordinated_sink`), whose
  `_commits/<epoch>.json` records name every writer of the epoch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from streamctl.formats.checksum import crc_target
from streamctl.formats.compactible import CompactibleBatch, compactible_file, compactible_name, parse_compactible
from streamctl.formats.coordinated_log import (
    COORD_COMMITS,
    COORD_DATA,
    COORD_STAGING,
    commit_record_name,
    epoch_of_folder,
    epoch_of_record_name,
    parse_commit_record,
    record_rows,
    record_writers,
    writer_count,
)
from streamctl.formats.delta_txn import DELTA_LOG
from streamctl.formats.errors import StorageError, StreamctlError
from streamctl.formats.file_sink_log import FILE_SINK_LOG, added_paths, deleted_paths, live_files
from streamctl.formats.iceberg import METADATA_DIR as ICEBERG_METADATA
from streamctl.formats.names import is_temp_name
from streamctl.inspectors.findings import (
    MAX_LISTED,
    WARNING,
    Finding,
    count_of,
    ids_of,
    missing_ranges,
    ranges_text,
    summarize,
)
from streamctl.inspectors.storage import Storage

SINK_KINDS = ("auto", "file", "delta", "coordinated", "iceberg")
MAX_RECORDS = 1000  # newest coordinated-sink commit records read per inspection


@dataclass(frozen=True, slots=True)
class SinkEpoch:
    """One committed epoch: the files it added (and removed), rows where the sink records them."""

    epoch: int
    files: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    rows: Optional[int] = None
    source: str = ""  # the log file this was read from

    def to_record(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "files": list(self.files), "deleted": list(self.deleted),
                "rows": self.rows, "source": self.source}


@dataclass(frozen=True, slots=True)
class SinkWriter:
    """One parallel writer of a coordinated sink (a write task partition)."""

    name: str
    partition: int
    first: Optional[int]
    last: Optional[int]
    epochs: int
    missing_in: tuple[int, ...]  # committed epochs whose record or files lack this writer


@dataclass(frozen=True)
class SinkLog:
    kind: str
    uri: str
    epoch: Optional[int]  # newest committed epoch S (None: nothing committed)
    first_epoch: Optional[int] = None  # oldest epoch still in the log (the sink's window)
    epochs: tuple[SinkEpoch, ...] = ()  # per-epoch detail, when read
    epoch_ids: tuple[int, ...] = ()  # epochs present in the log
    compactions: tuple[int, ...] = ()
    writers: tuple[SinkWriter, ...] = ()
    app_id: Optional[str] = None
    table_version: Optional[int] = None
    findings: tuple[Finding, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def position(self) -> dict[str, Any]:
        """The `sink` object of a query in the EpochReport JSON."""
        return {"kind": self.kind, "uri": self.uri, "epoch": self.epoch}

    def to_record(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "uri": self.uri,
            "epoch": self.epoch,
            "first_epoch": self.first_epoch,
            "epoch_ids": list(self.epoch_ids),
            "compactions": list(self.compactions),
            "app_id": self.app_id,
            "table_version": self.table_version,
            "epochs": [e.to_record() for e in self.epochs],
            "writers": [{"writer": w.name, "partition": w.partition, "first": w.first, "last": w.last,
                         "epochs": w.epochs, "missing_in": list(w.missing_in)} for w in self.writers],
            **dict(self.extra),
        }


def _unreadable(path: str, reason: str) -> Finding:
    return Finding("UNREADABLE", f"{path}: {reason}", details={"path": path, "reason": reason})


# --- file sink ------------------------------------------------------------------------------


MAX_COMPACT_INTERVAL = 100_000  # spark.sql.streaming.fileSink.log.compactInterval beyond this is not guessed


@dataclass(frozen=True, slots=True)
class FileSinkLogFiles:
    """The files of a file sink's log `_spark_metadata/`, from one listing: the one reader of that
    folder's layout (docs/formats/sinks.md#file-sink), used by inspection, align and trim."""

    present: Mapping[int, bool]  # batch id -> is `N.compact`
    checksums: Mapping[int, str]  # batch id -> the name of its Hadoop checksum `.N[.compact].crc`
    # batch id -> a Hadoop checksum whose batch file is gone (deleted by hand without it): Spark's
    # next write of that batch fails ("Multiple streaming queries are concurrently using ...")
    orphan_checksums: Mapping[int, str] = field(default_factory=dict)

    def stale_checksums(self, above: int) -> list[str]:
        """The orphan checksums of batches above `above`: the ones a next write trips on."""
        return [self.orphan_checksums[b] for b in sorted(self.orphan_checksums) if b > above]

    def name(self, batch: int) -> str:
        return compactible_file(batch, self.present[batch])

    def rel(self, batch: int) -> str:
        return f"{FILE_SINK_LOG}/{self.name(batch)}"

    @property
    def ids(self) -> list[int]:
        return sorted(self.present)

    @property
    def compactions(self) -> list[int]:
        return sorted(b for b, c in self.present.items() if c)

    @property
    def interval(self) -> Optional[int]:
        """The compaction interval the files show (Spark compacts batch b when (b + 1) % interval
        == 0): the smallest d every `.compact` fits and no plain batch file does; None before the
        first compaction."""
        compacts = self.compactions
        if not compacts:
            return None
        plain = [b for b, c in self.present.items() if not c]
        for d in range(2, min(compacts[0] + 2, MAX_COMPACT_INTERVAL + 1)):  # none found: refuse, never guess
            if all((c + 1) % d == 0 for c in compacts) and not any((b + 1) % d == 0 for b in plain):
                return d
        return None

    def read(self, st: Storage, batch: int) -> CompactibleBatch:
        """The entries of one batch file (LogParseError/StorageError on a bad one)."""
        rel = self.rel(batch)
        return parse_compactible(st.read(rel), st.uri(rel), batch, self.present[batch])


def list_file_sink_log(st: Storage) -> FileSinkLogFiles:
    """List `_spark_metadata/` of the sink at `st` (empty when there is none)."""
    present: dict[int, bool] = {}
    crcs: dict[str, str] = {}
    for e in st.list_dir(FILE_SINK_LOG) or []:
        parsed = compactible_name(e.name)
        if e.is_dir and parsed is None:
            continue
        # a folder under a batch file's name is that batch, as Spark lists it (never a gap): a
        # reader that opens it fails, and only the newest compaction and the batches after it
        # are opened (reading it says "is a folder, not a regular file")
        if parsed is not None:
            present[parsed[0]] = parsed[1]
        elif (target := crc_target(e.name)) is not None:
            crcs[target] = e.name
    checksums = {b: crcs[compactible_file(b, c)] for b, c in present.items() if compactible_file(b, c) in crcs}
    named = set(checksums.values())
    orphans = {parsed[0]: crc for target, crc in crcs.items()
               if crc not in named and (parsed := compactible_name(target)) is not None and parsed[0] not in present}
    return FileSinkLogFiles(present, checksums, orphans)


def _read_file_sink(st: Storage, app_id: Optional[str], detail: bool) -> SinkLog:
    log = list_file_sink_log(st)
    findings: list[Finding] = []
    if not log.present:
        return SinkLog("file", st.display, None, findings=tuple(findings))
    ids = log.ids
    compactions = log.compactions
    latest_compact = compactions[-1] if compactions else None
    # Spark's readers use the newest compaction file plus every batch after it: a batch file
    # missing there hides its data files from every reader of the table.
    after = [b for b in ids if latest_compact is None or b >= latest_compact]
    start = latest_compact if latest_compact is not None else ids[0]
    gaps = missing_ranges(after, start, ids[-1])
    if gaps:
        findings.append(Finding(
            "LOG_GAP", f"{FILE_SINK_LOG}/: batch files missing after the newest compaction: "
                       f"{ranges_text(gaps)}; their data files are invisible to readers",
            details={"log": FILE_SINK_LOG, "missing": ids_of(gaps), "missing_count": count_of(gaps),
                     "missing_ranges": [list(g) for g in gaps[:MAX_LISTED]]}))
    stale = log.stale_checksums(ids[-1])
    if stale:
        findings.append(Finding(
            "STALE_CHECKSUM", f"{FILE_SINK_LOG}/{stale[0]} without its batch file"
            + (f" (and {len(stale) - 1} more)" if len(stale) > 1 else "") + ": a batch file was deleted without its "
            "hidden checksum; Spark's next write of that batch fails (\"Multiple streaming queries are concurrently "
            "using ...\"). Delete the .crc file too; align moves it aside",
            details={"log": FILE_SINK_LOG, "files": stale[:MAX_LISTED]}))
    epochs = []
    live: list[tuple[Mapping[str, Any], ...]] = []
    after_ids = set(after)
    for b in (ids if detail else after):
        try:
            parsed = log.read(st, b)
        except StreamctlError as exc:
            findings.append(_unreadable(getattr(exc, "path", st.uri(log.rel(b))), getattr(exc, "reason", str(exc))))
            continue
        epochs.append(SinkEpoch(b, added_paths(parsed), deleted_paths(parsed), None, log.rel(b)))
        if b in after_ids:
            live.append(parsed.entries)
    if not any(f.code == "UNREADABLE" for f in findings):
        # the files readers see must be where the log says (a moved or copied sink folder)
        from streamctl.inspectors.placement import describe, place

        where = place(st, live_files(live))
        for code, message, details in describe(where, FILE_SINK_LOG):
            findings.append(Finding(code, message, details=details))
        if not gaps:  # a lost batch file's data files would read as orphans: never judged then
            findings += _file_sink_orphans(st, log, where)
    return SinkLog("file", st.display, ids[-1], first_epoch=ids[0], epochs=tuple(epochs), epoch_ids=tuple(ids),
                   compactions=tuple(compactions), findings=tuple(findings))


def _file_sink_orphans(st: Storage, log: FileSinkLogFiles, where: Any) -> list[Finding]:
    """SINK_ORPHANS of a file sink: data files beside the logged ones that no entry names and that
    are older than the log's newest batch file (docs/formats/sinks.md#orphan-files)."""
    from streamctl.inspectors.findings import human_bytes
    from streamctl.inspectors.placement import orphans

    if not where.unlisted:
        return []
    try:
        newest = st.lookup(log.rel(log.ids[-1]))
    except StorageError:
        return []
    found = orphans(st, where, newest.mtime_ns if newest is not None else None)
    if not found:
        return []
    total = sum(size for _, size, _ in found)
    return [Finding(
        "SINK_ORPHANS",
        f"{len(found)} data file(s) ({human_bytes(total)}) in the file sink that {FILE_SINK_LOG}/ does not list, written "
        f"before its newest batch (a failed or aborted batch's): readers of the log never see them, a reader of the "
        f"plain folder does: {summarize([rel for rel, _, _ in found], 3)}; align moves them to the backup",
        severity=WARNING, details={"files": [st.uri(rel) for rel, _, _ in found], "count": len(found), "bytes": total,
                                   "newest_mtime_ms": max(m for _, _, m in found) // 1_000_000})]


# --- Delta ----------------------------------------------------------------------------------


def _read_delta(st: Storage, app_id: Optional[str], detail: bool) -> SinkLog:
    from streamctl.inspectors.delta_sink import read_delta  # deltalake's reader: loaded for a Delta sink only

    return read_delta(st, app_id, detail)


# --- coordinated sink -----------------------------------------------------------------------


def _read_coordinated(st: Storage, app_id: Optional[str], detail: bool) -> SinkLog:
    findings: list[Finding] = []
    # a folder where a commit record belongs is read as one (it fails: UNREADABLE): listed past,
    # the epoch looked uncommitted and align replayed it into a sink that can never take it
    names = [e.name for e in st.list_dir(COORD_COMMITS) or [] if not e.is_dir or epoch_of_record_name(e.name) is not None]
    temp = sorted(n for n in names if is_temp_name(n))
    ids = sorted(e for e in map(epoch_of_record_name, names) if e is not None)
    records: dict[int, dict[str, Any]] = {}
    for e in ids[-MAX_RECORDS:]:
        rel = f"{COORD_COMMITS}/{commit_record_name(e)}"
        try:
            rec = parse_commit_record(st.read(rel), st.uri(rel), e)
        except StreamctlError as exc:
            findings.append(_unreadable(getattr(exc, "path", st.uri(rel)), getattr(exc, "reason", str(exc))))
            continue
        records[e] = rec
    # Which published files exist, per epoch folder: one listing of data/ and one per epoch.
    data_dirs = {e.name for e in st.list_dir(COORD_DATA) or [] if e.is_dir}
    published: dict[int, set[str]] = {}
    for d in data_dirs:
        epoch_id = epoch_of_folder(d)
        if epoch_id is not None:
            published[epoch_id] = {f"{COORD_DATA}/{d}/{e.name}" for e in st.list_dir(f"{COORD_DATA}/{d}") or []
                                     if not e.is_dir and not e.name.startswith(".")}
    findings += _lost_records(ids, published)
    epochs: list[SinkEpoch] = []
    num_writers = 0
    presence: dict[int, list[int]] = {}  # partition -> epochs it committed (with its files present)
    missing: dict[int, list[int]] = {}
    for e in sorted(records):
        rec = records[e]
        rec_writers = record_writers(rec)
        n = writer_count(rec)
        num_writers = max(num_writers, n)
        files = tuple(f for w in rec_writers for f in w.files)
        epochs.append(SinkEpoch(e, files, (), record_rows(rec), f"{COORD_COMMITS}/{commit_record_name(e)}"))
        by_part = {w.partition: w for w in rec_writers}
        present = published.get(e, set())
        for p in range(n):
            w = by_part.get(p)
            if w is None or any(f not in present for f in w.files):
                missing.setdefault(p, []).append(e)
            else:
                presence.setdefault(p, []).append(e)
    for p in sorted(missing):
        lost = missing[p]
        findings.append(Finding(
            "SINK_WRITER_MISSING",
            f"writer {p} is missing from committed epoch(s) {summarize([str(x) for x in lost])} "
            "(absent from the commit record, or its data files are gone)",
            details={"partition": p, "epochs": lost}))
    orphans: list[str] = [f"{COORD_COMMITS}/{n}" for n in temp]
    staged_epochs = []
    for entry in st.list_dir(COORD_STAGING) or []:
        if entry.is_dir:
            staged = sorted(x.name for x in st.list_dir(f"{COORD_STAGING}/{entry.name}") or [])
            if staged:
                staged_epochs.append(entry.name)
                orphans += [f"{COORD_STAGING}/{entry.name}/{f}" for f in staged]
    named = {f for rec in records.values() for w in record_writers(rec) for f in w.files}
    for epoch_id, present_files in sorted(published.items()):
        if epoch_id in records or (epoch_id not in ids and not (ids and epoch_id < ids[-1])):  # else a lost record's
            orphans += sorted(f for f in present_files if f not in named)
    if orphans:
        uncommitted = sorted(s for s in staged_epochs if not (s.isdigit() and int(s) in records))
        findings.append(Finding(
            "SINK_ORPHANS",
            f"{len(orphans)} sink file(s) no commit record names"
            + (f" (staging of uncommitted epoch(s) {', '.join(uncommitted)}: Spark rewrites them on replay)" if uncommitted else "")
            + f": {summarize(orphans, 3)}",
            severity=WARNING, details={"files": [st.uri(f) for f in orphans]}))
    writers = []
    for p in range(num_writers):
        got = presence.get(p, [])
        writers.append(SinkWriter(f"sink/writer-{p}", p, min(got) if got else None, max(got) if got else None,
                                  len(got), tuple(missing.get(p, []))))
    epoch = ids[-1] if ids else None
    return SinkLog("coordinated", st.display, epoch, first_epoch=ids[0] if ids else None, epochs=tuple(epochs),
                   epoch_ids=tuple(ids), writers=tuple(writers), findings=tuple(findings))


def _lost_records(ids: list[int], published: dict[int, set[str]]) -> list[Finding]:
    """Commit records missing below the newest: an epoch runs only once the one before it is
    committed, and the checkpoint commits an epoch only after its record is written, so a hole
    between records, or published files of an older epoch without its record, is a lost record:
    readers never see those rows and no restart writes them again."""
    if not ids:
        return []
    held = set(ids)
    gaps = missing_ranges(ids, ids[0], ids[-1])
    below = sorted(e for e, files in published.items() if e < ids[0] and files and e not in held)
    gaps = sorted(gaps + [(e, e) for e in below])
    if not gaps:
        return []
    rows = sorted(e for e in published if e not in held and e < ids[-1] and published[e])
    return [Finding(
        "LOG_GAP", f"{COORD_COMMITS}/: the commit record(s) of epoch(s) {ranges_text(gaps)} are missing below the "
                   f"newest ({ids[-1]})" + (f", their published files still under {COORD_DATA}/ (epoch(s) "
                                            f"{summarize([str(e) for e in rows], 3)})" if rows else "")
                   + ": readers of the sink never see those rows, and no restart writes them again (the checkpoint "
                     "committed them); align replays them from before the first one when the checkpoint still holds it",
        details={"log": COORD_COMMITS, "missing": ids_of(gaps), "missing_count": count_of(gaps),
                 "missing_ranges": [list(g) for g in gaps[:MAX_LISTED]]})]


# --- Iceberg ---------------------------------------------------------------------------------


def _read_iceberg(st: Storage, app_id: Optional[str], detail: bool) -> SinkLog:
    """An Iceberg table (inspectors/iceberg.py): the query's newest epoch along the current
    snapshot's ancestry is the sink epoch; the table's snapshot id stands where Delta's version does."""
    from streamctl.inspectors import iceberg

    table = iceberg.read_table(st, app_id)
    epochs = sorted(e["epoch"] for e in table["epochs"])
    extra: dict[str, Any] = {"snapshot_id": table["snapshot_id"], "metadata": table["metadata"],
                             "streaming_queries": table["queries"],
                             "rolled_back_epochs": table["rolled_back"], "other_snapshots_after": table["others"],
                             "iceberg_epochs": table["epochs"] if detail else table["epochs"][:1]}
    if not app_id:
        extra["note"] = "no app id given: the query's epochs need --app-id or a checkpoint (its query id)"
    return SinkLog("iceberg", st.display, table["epoch"], first_epoch=epochs[0] if epochs else None,
                   epochs=tuple(SinkEpoch(e["epoch"], (), (), e["rows"], f"snapshot {e['snapshot_id']}")
                                for e in sorted(table["epochs"], key=lambda e: e["epoch"])) if detail else (),
                   epoch_ids=tuple(epochs), app_id=app_id, table_version=table["snapshot_id"],
                   findings=tuple(iceberg.findings_of(table, app_id)), extra=extra)


# --- detection and the interface --------------------------------------------------------------

Reader = Callable[[Storage, Optional[str], bool], SinkLog]
READERS: dict[str, Reader] = {"file": _read_file_sink, "delta": _read_delta, "coordinated": _read_coordinated,
                              "iceberg": _read_iceberg}
MARKERS = {"file": FILE_SINK_LOG, "delta": DELTA_LOG, "coordinated": COORD_COMMITS}


def detect_kind(st: Storage) -> Optional[str]:
    """The sink kind from the folders at the sink root, or None."""
    names = {e.name for e in st.list_dir("") or [] if e.is_dir}
    found = [k for k, marker in MARKERS.items() if marker in names]
    if not found and ICEBERG_METADATA in names:
        from streamctl.inspectors.iceberg import is_table

        found = ["iceberg"] if is_table(st) else []
    return found[0] if len(found) == 1 else None


def read_sink(location: str, kind: str = "auto", app_id: Optional[str] = None, detail: bool = False,
              absent: frozenset[str] = frozenset()) -> SinkLog:
    """Read the sink at `location`. Never raises for bad input: an unreadable or unknown sink is a
    SinkLog with an UNREADABLE finding. `detail` reads every log file (for `inspect sink`);
    `absent` files are taken as moved aside (inspectors/masked.py)."""
    from streamctl.inspectors.masked import masked

    try:
        st = masked(Storage.open(location), absent)
        what = st.kind("")
        if what != "dir":
            reason = "does not exist" if what == "missing" else "is a file, expected a sink folder"
            return SinkLog(kind if kind != "auto" else "unknown", st.display, None,
                           findings=(_unreadable(st.display, reason),))
        if kind == "auto":
            detected = detect_kind(st)
            if detected is None:
                return SinkLog("unknown", st.display, None, findings=(_unreadable(
                    st.display, "unknown sink layout: no _spark_metadata/ (file sink), _delta_log/ (Delta), "
                                "_commits/ (coordinated sink) or metadata/*.metadata.json (Iceberg); pass --sink-kind"),))
            kind = detected
        return READERS[kind](st, app_id, detail)
    except StorageError as exc:
        return SinkLog(kind if kind != "auto" else "unknown", location, None, findings=(_unreadable(exc.path, exc.reason),))


def compare_sink(sink: SinkLog, planned: Optional[int], committed: Optional[int]) -> list[Finding]:
    """SINK_AHEAD / SINK_BEHIND (docs/model.md#findings): S > C is an error except the in-flight case
    S == P == C + 1 (Spark replays P and the sink skips it as already written); S < C means
    epochs S+1..C are committed in the checkpoint but missing from the sink."""
    if any(f.code == "UNREADABLE" for f in sink.findings):
        return []
    if sink.kind in ("delta", "iceberg") and not sink.app_id:
        return []
    s = -1 if sink.epoch is None else sink.epoch
    c = -1 if committed is None else committed
    if committed is None and planned is None and sink.epoch is None:
        return []
    out = []
    if s > c and not (s == planned and planned == c + 1):
        out.append(Finding(
            "SINK_AHEAD",
            f"the {sink.kind} sink has committed epoch {s} but the checkpoint's "
            + (f"newest commit is {committed}" if committed is not None else "commit log holds none")
            + f": an idempotent sink will silently skip the next {s - c} batch(es) ({c + 1}..{s})",
            details={"sink_epoch": sink.epoch, "committed": committed, "planned": planned,
                     "skipped": ids_of([(c + 1, s)]), "skipped_range": [c + 1, s], "skipped_count": s - c}))
    elif s < c:
        out.append(Finding(
            "SINK_BEHIND",
            f"epochs {s + 1}..{c} are committed in the checkpoint but missing from the {sink.kind} sink "
            + (f"(its newest epoch is {sink.epoch})" if sink.epoch is not None else "(it holds no epoch)"),
            details={"sink_epoch": sink.epoch, "committed": committed, "missing": ids_of([(s + 1, c)]),
                     "missing_range": [s + 1, c], "missing_count": c - s}))
    return out


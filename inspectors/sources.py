"""`sources/<n>/` read from a checkpoint: which source it is (Kafka initial offsets, rate start, a
file-source log) and whether a restart can read its log (docs/formats/checkpoint.md#sources). The
bytes are formats/source_log.py's and formats/compactible.py's."""
from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import unquote, urlparse

from streamctl.formats.checksum import crc_name, hadoop_crc_mismatch
from streamctl.formats.compactible import CompactibleBatch, compactible_file, compactible_name, parse_compactible
from streamctl.formats.errors import LogParseError, StorageError, StreamctlError
from streamctl.formats.layout import SOURCES_DIR
from streamctl.formats.offsets import SourceId
from streamctl.formats.source_log import (
    KafkaInitialOffsets,
    check_file_entries,
    parse_kafka_initial_offsets,
    parse_rate_start,
)
from streamctl.inspectors.findings import missing_ranges
from streamctl.inspectors.storage import Storage


def read_compactible_log(storage: Storage, rel: str = "") -> list[CompactibleBatch]:
    """Read every batch file of a compactible log folder, ordered by batch id."""
    entries = storage.list_dir(rel)
    if entries is None:
        return []
    out = []
    for e in entries:
        parsed = compactible_name(e.name)
        if parsed is None or e.is_dir:
            continue
        rel_file = f"{rel}/{e.name}" if rel else e.name
        out.append(parse_compactible(storage.read(rel_file), storage.uri(rel_file), *parsed))
    out.sort(key=lambda b: b.batch_id)
    return out


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What `sources/<n>/` holds."""

    source_id: SourceId
    kind: str  # "kafka" | "rate" | "file" | "empty" | "unknown"
    kafka_initial: Optional[KafkaInitialOffsets] = None
    rate_start_ms: Optional[int] = None
    file_log_latest: Optional[int] = None
    file_log_files: int = 0
    file_log_missing: tuple[tuple[int, int], ...] = ()  # batch files a restart reads that are gone (ranges)
    # entries of the newest log file's own batch that lie outside the folder every other entry of
    # the chain lies in (`file_log_base`): the restart's getBatch of that batch fails on them
    file_log_outside: tuple[str, ...] = ()
    file_log_base: Optional[str] = None
    # batch files of the chain holding an entry of another batch: (batch id, file, what), which a
    # replay of that batch skips (check_file_entries)
    file_log_foreign: tuple[tuple[int, str, str], ...] = ()


def read_source(storage: Storage, source_id: SourceId) -> SourceInfo:
    """Classify and read `sources/<source_id>/`. LogParseError/StorageError on bad files."""
    rel = f"{SOURCES_DIR}/{source_id}"
    entries = storage.list_dir(rel) or []
    folders = {e.name for e in entries if e.is_dir and compactible_name(e.name) is not None}
    names = {e.name for e in entries if not e.is_dir} | folders
    batches = sorted(p for p in (compactible_name(n) for n in names) if p is not None)
    if not batches:
        return SourceInfo(source_id, "empty")
    if batches == [(0, False)]:  # the Kafka and rate sources write `0` alone; a file source may too
        first = storage.read(f"{rel}/0")
        if first[:1] != b"v":
            return SourceInfo(source_id, "kafka", kafka_initial=parse_kafka_initial_offsets(first, storage.uri(f"{rel}/0")))
        start_ms = parse_rate_start(first, storage.uri(f"{rel}/0"))
        if start_ms is not None:
            return SourceInfo(source_id, "rate", rate_start_ms=start_ms)
    # A file source: its restart reads the log the way CompactibleFileStreamLog.allFiles does, the
    # newest compaction and every batch file after it (every file from 0 before the first
    # compaction): a missing one fails it ("sources/0/4 doesn't exist"), a torn one too
    # ("Incomplete log file"). docs/formats/checkpoint.md#file-source-log
    latest_id = batches[-1][0]
    compacts = [b for b, c in batches if c]
    start = compacts[-1] if compacts else 0
    chain = [(b, c) for b, c in batches if b >= start]
    sizes = {e.name: e.size for e in entries}
    read: list[tuple[str, CompactibleBatch]] = []
    changed: list[str] = []  # files that do not match their Hadoop sidecar
    foreign: list[tuple[int, str, str]] = []
    for b, c in chain:
        name = compactible_file(b, c)
        chain_rel = f"{rel}/{name}"
        if name in folders:  # a restart reads it: it fails (files below the chain are never read)
            raise StorageError(storage.uri(chain_rel), "is a folder, expected a file")
        if storage.is_local or c or b == latest_id:  # parsed whole; on object stores the others by size
            data = storage.read(chain_rel)
            batch = parse_compactible(data, storage.uri(chain_rel), b, c)
            other = check_file_entries(batch, storage.uri(chain_rel))
            if other is not None:
                foreign.append((b, storage.uri(chain_rel), other))
            read.append((chain_rel, batch))
            if storage.is_local and crc_name(name) in names and _sidecar_differs(storage, chain_rel, data):
                changed.append(chain_rel)
        elif sizes.get(name) == 0:
            raise LogParseError(storage.uri(chain_rel), "empty file (incomplete log file)")
    if len(read) == len(chain):
        _check_last_entry(storage, read)
    _check_ahead(storage, read)
    if storage.is_local:
        _check_renamed(storage, read, changed)
        _check_purged(storage, read, changed)
    base, outside = _outside_base(read, latest_id)
    missing = missing_ranges([b for b, _ in chain], start, latest_id)
    return SourceInfo(source_id, "file", file_log_latest=latest_id, file_log_files=len(batches),
                      file_log_missing=tuple(missing), file_log_outside=outside, file_log_base=base,
                      file_log_foreign=tuple(foreign))


def _check_last_entry(storage: Storage, read: list[tuple[str, CompactibleBatch]]) -> None:
    """The chain's last entry carries a `batchId` of 0 or more: a restart's restore of the log
    takes the newest compaction from it (`getAllValidBatches` asserts it; observed 4.3.0: -7
    fails the restart, "assertion failed")."""
    for rel, batch in reversed(read):
        if batch.entries:
            b = batch.entries[-1].get("batchId")
            if isinstance(b, int) and b < 0:
                raise LogParseError(storage.uri(rel), f"entry {len(batch.entries)}: batchId {b} is below 0, and a "
                                    "restart's restore of the log asserts the last entry's (\"assertion failed\")")
            return


MAX_FILE_AGE_MS = 7 * 24 * 3600 * 1000  # FileStreamSource's default maxFileAge; the option is not on disk


def _check_ahead(storage: Storage, read: list[tuple[str, CompactibleBatch]]) -> None:
    """An entry whose `timestamp` lies more than maxFileAge ahead of this machine's clock: the
    restart's restore takes the newest entry's timestamp as the latest file's, forgets files more
    than maxFileAge below it, and its listing takes no file modified below that as new
    (`SeenFilesMap.isNewFile`): every input file written from now until then is skipped, its
    rows lost without an error. Spark logs each file's modification time, so only a changed
    entry, or a file stamped by a clock far ahead, does this."""
    now = int(time.time() * 1000)
    ahead = [(ts, rel, i) for rel, batch in read for i, e in enumerate(batch.entries, 1)
             if isinstance(ts := e.get("timestamp"), int) and ts - MAX_FILE_AGE_MS > now]
    if ahead:
        ts, rel, i = max(ahead)
        raise LogParseError(storage.uri(rel), f"entry {i}: timestamp {ts} lies more than maxFileAge (7 days by default) "
                            f"ahead of this machine's clock ({now}), so a restart takes no input file modified "
                            f"before {ts - MAX_FILE_AGE_MS} as new: new files are skipped and their rows lost")


def _check_purged(storage: Storage, read: list[tuple[str, CompactibleBatch]], changed: list[str]) -> None:
    """An entry whose `timestamp` lies more than maxFileAge below the newest entry's while its
    input file is there with a newer modification time: the restart's restore forgets it as
    purged (SeenFilesMap.purge) and its listing takes the file as new, its rows read again
    (observed 4.3.0: a stateless query's rows twice). Spark logs the file's own modification
    time, so only an entry changed, or a file changed after Spark read it, does this. Judged
    for the batch files after the newest compaction, a file its sidecar says changed, and an
    entry below zero anywhere: a stat each; a compaction's other entries are not (a stat per
    file ever read)."""
    stamps = [t for _rel, batch in read for e in batch.entries if isinstance(t := e.get("timestamp"), int)]
    if not stamps:
        return
    purge = max(stamps) - MAX_FILE_AGE_MS
    for rel, batch in read:
        judged = not batch.compact or rel in changed
        for e in batch.entries:
            ts = e.get("timestamp")
            if not isinstance(ts, int) or ts >= purge or not (judged or ts < 0):
                continue
            p = _local(str(e.get("path")))
            try:
                mtime = os.stat(p).st_mtime_ns // 1_000_000 if p is not None else None
            except OSError:
                continue  # gone (archived, cleaned up): nothing to read again
            if mtime is not None and mtime >= purge:
                raise LogParseError(storage.uri(rel), f"a restart reads {p} again as a new file: its entry's timestamp "
                                    f"{ts} lies more than maxFileAge (7 days by default) below the newest entry's, "
                                    f"so the restart forgets it as purged, and the file was modified at {mtime} (the "
                                    "entry, or the file, changed after Spark read it)")


def _sidecar_differs(storage: Storage, rel: str, data: bytes) -> bool:
    """Whether a file-source log file no longer matches its Hadoop sidecar (Spark does not check
    it, observed 4.3.0): changed after Spark wrote it. The change is judged by what it does
    (`_check_renamed`): a changed `path` whose input file is still there is read again."""
    try:
        sums = storage.read(crc_name(rel))
    except StorageError:
        return False  # unreadable sidecar: Spark never reads it either
    return hadoop_crc_mismatch(sums, data) is not None


def _outside_base(read: list[tuple[str, CompactibleBatch]], latest_id: int) -> tuple[Optional[str], tuple[str, ...]]:
    """(the folder every entry of the chain but the newest batch's lies in, the newest batch's
    entries outside it). On restart Spark's getBatch of the newest batch builds a file index over
    its logged paths with the query's path as `basePath`, and fails on a file outside it (`Wrong
    basePath`, observed 4.3.0 after eight bytes of its path changed)."""
    newest: list[str] = []
    others: list[str] = []
    for _rel, batch in read:
        for e in batch.entries:
            (newest if e.get("batchId") == latest_id else others).append(str(e.get("path")))
    parts = [_uri_parts(p) for p in others]
    if not newest or not parts or None in parts:
        return None, ()
    roots = {(sch, auth) for sch, auth, _d in parts}  # type: ignore[misc]
    if len(roots) != 1:
        return None, ()
    folder = posixpath.commonpath([d for _s, _a, d in parts])  # type: ignore[misc]
    if folder == "/":
        return None, ()
    (sch, auth), = roots
    out = []
    for p in newest:
        got = _uri_parts(p)
        if got is None or (got[0], got[1]) != (sch, auth) or not (got[2] + "/").startswith(folder.rstrip("/") + "/"):
            out.append(p)
    return f"{sch}://{auth}{folder}" if sch else folder, tuple(out)


def _split(uri: str) -> tuple[str, str, str]:
    """(scheme, authority, unquoted path) of a logged path; a plain `file:` URI (what Spark logs
    for a local file) without a word urlparse would read is split by hand: a compaction holds
    every input file ever read, and urlparse costs more than parsing its entry."""
    if uri.startswith("file:") and not any(c in uri for c in "%?#;\t\r\n") and uri == uri.rstrip():
        rest = uri[5:]
        if rest.startswith("///"):
            return "file", "", rest[2:]
        if rest.startswith("/") and not rest.startswith("//"):
            return "file", "", rest
    parsed = urlparse(uri)
    return parsed.scheme, parsed.netloc, unquote(parsed.path)


def _uri_parts(uri: str) -> Optional[tuple[str, str, str]]:
    """(scheme, authority, folder) of a logged path as Spark's `new Path(new URI(path))` sees it."""
    scheme, netloc, path = _split(uri)
    if not path.startswith("/"):
        return None
    return scheme, netloc, posixpath.dirname(path)


def _local(uri: str) -> Optional[str]:
    scheme, netloc, path = _split(uri)
    if scheme not in ("", "file") or netloc not in ("", "localhost"):
        return None
    return path or None


LISTED_OVER = 32  # a folder named by more entries is listed once instead of a stat per entry
RENAMED_JUDGED = 8  # more entries naming nothing than a few changed bytes make: a clean-up (see below)


def _check_renamed(storage: Storage, read: list[tuple[str, CompactibleBatch]], changed: list[str]) -> None:
    """An entry whose path does not exist while a file in a folder the entries name, which no
    entry names, carries its `timestamp` (the mtime Spark logged, in ms): the entry's path was
    changed after Spark wrote it. The restart takes the changed path as a file it has seen and
    reads the real one again as new: its rows twice (observed 4.3.0, a windowed count counted
    twice; a stateless query's rows written twice). Judged for every entry of the chain a restart
    reads (the newest compaction and the batch files after it): where a file's Hadoop sidecar says
    it changed (`changed`), by the twin of any entry of it; without that word, only when every
    entry that names nothing has its twin: a clean-up (cleanSource, retention) removes the files
    of committed batches, and a new file may share a millisecond with one of them. Cost: a
    listing of each folder more than LISTED_OVER entries name, a stat per entry of the others;
    only when one to RENAMED_JUDGED name nothing (or the sidecar spoke), a listing of the folders
    the entries name."""
    entries = [(rel, e, _local(str(e.get("path")))) for rel, batch in read for e in batch.entries]
    existing = _existing({p for _rel, _e, p in entries if p is not None})
    gone = [(rel, e, p) for rel, e, p in entries if p is not None and p not in existing]
    if not gone or (len(gone) > RENAMED_JUDGED and not any(g[0] in changed for g in gone)):
        return  # many gone without a sidecar's word: a clean-up, whose twins need not be looked for
    named = {p for _rel, batch in read for p in (_local(str(e.get("path"))) for e in batch.entries) if p}
    unnamed: dict[object, str] = {}
    for folder in sorted({os.path.dirname(p) for _r, _e, p in entries if p is not None}):
        try:
            there = Storage.open(folder)
            for f in there.list_dir("") or []:
                path = os.path.join(folder, f.name)
                if not f.is_dir and path not in named and not f.name.startswith((".", "_")):
                    got = there.lookup(f.name)
                    if got is not None and got.mtime_ns is not None:
                        unnamed.setdefault(got.mtime_ns // 1_000_000, path)
        except StreamctlError:
            continue
    twins = [unnamed.get(e.get("timestamp")) for _r, e, _p in gone]
    known = [(g, t) for g, t in zip(gone, twins, strict=True) if t is not None and g[0] in changed]
    if known:  # its file changed after Spark wrote it: that is the change
        _renamed(storage, known[0][0], known[0][1])
    if twins and None not in twins:
        _renamed(storage, gone[0], twins[0])  # type: ignore[arg-type]


def _existing(paths: set[str]) -> set[str]:
    """Those of `paths` that exist (a name a listing holds counts, a dangling link too: no path was
    changed there): a folder named by many of them is listed once (a compaction holds every input
    file ever read: a stat each costs as much as parsing it), the others are stat'ed."""
    by_folder: dict[str, list[str]] = {}
    for p in paths:
        by_folder.setdefault(os.path.dirname(p), []).append(p)
    out: set[str] = set()
    for folder, ps in by_folder.items():
        if len(ps) > LISTED_OVER:
            try:
                names = set(os.listdir(folder))
            except OSError:
                names = set()
            out.update(p for p in ps if os.path.basename(p) in names)
        else:
            out.update(p for p in ps if os.path.exists(p))
    return out


def _renamed(storage: Storage, suspect: tuple[str, Any, Optional[str]], twin: str) -> None:
    rel, _e, p = suspect
    raise LogParseError(storage.uri(rel), f"an entry names {p}, which does not exist, while {twin}, which no entry "
                        "names, has its timestamp: the entry was changed after Spark wrote it, and a restart reads "
                        f"{twin} again as a new file (a stateless query writes its rows twice)")

"""Can a batch be read again? The file source's replay (docs/model.md#replayable-batches).

A restart replays a batch from its offsets: for a file source, `FileStreamSource.getBatch(start,
end)` reads the files the source's log (`sources/<n>/`) lists for log offsets `start+1..end`
(the `logOffset` of `offsets/<b-1>` and `offsets/<b>`), at the paths the log names. With
`cleanSource=archive` Spark moves each file of a committed batch under `sourceArchiveDir`, the
archive mirroring the file's absolute path (`SourceFileArchiver`: archive dir + the path of the
file's URI); with `cleanSource=delete` it deletes it; a retention job or a hand clean-up does the
same. A replay of such a batch reads nothing for those files: its rows are lost, silently.

Read-only: lists the folders that hold the files (one listing per folder, never one request per
file) and the source's log files that cover the range."""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional
from urllib.parse import unquote, urlparse

from streamctl.formats.compactible import compactible_name, parse_compactible
from streamctl.formats.errors import StreamctlError
from streamctl.formats.layout import SOURCES_DIR
from streamctl.formats.offsets import OffsetEntry, SourceId
from streamctl.formats.source_log import entry_paths
from streamctl.inspectors.sources import SourceInfo
from streamctl.inspectors.storage import Storage

MAX_NAMED = 5  # files a message names; it counts the rest


@dataclass(frozen=True)
class Unreplayable:
    """Files a replay reads that are not where the source's log says."""

    source_id: SourceId
    missing: tuple[str, ...]  # as the log names them (URIs)
    archived: tuple[str, ...]  # the subset found under the given archive
    archive: Optional[str] = None

    def text(self) -> str:
        shown = ", ".join(self.missing[:MAX_NAMED]) + (
            f" and {len(self.missing) - MAX_NAMED} more" if len(self.missing) > MAX_NAMED else "")
        out = f"sources/{self.source_id}/ lists {len(self.missing)} input file(s) a replay reads that are gone: {shown}"
        if self.archive is not None:
            gone = len(self.missing) - len(self.archived)
            out += (f"; {len(self.archived)} of them are in the archive {self.archive}"
                    + (f", {gone} nowhere" if gone else " (align puts archived files back only when they and the archive are "
                                                 "on a local file system: move them back where the log names them, "
                                                 "then align again)"))
        else:
            out += " (cleanSource=archive moves them under sourceArchiveDir: pass --source-archive DIR to look there)"
        return out


def log_offset(entry: Optional[OffsetEntry], source_id: SourceId) -> Optional[int]:
    """The file source's `logOffset` in an offsets entry; None when absent or not a file source's."""
    if entry is None:
        return None
    for s in entry.sources:
        if s.source_id == source_id:
            try:
                obj = s.parsed()
            except StreamctlError:
                return None
            value = obj.get("logOffset") if isinstance(obj, dict) else None
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None


def listed_files(st: Storage, source_id: SourceId, lo: int, hi: int) -> list[str]:
    """The paths `sources/<id>/` lists for log offsets lo+1..hi: the batch files that exist, and
    for offsets whose file Spark deleted after a compaction, the entries of the newest compaction
    at or above them with that `batchId`. Cost follows the files that exist."""
    if hi <= lo:
        return []
    rel = f"{SOURCES_DIR}/{source_id}"
    names: dict[int, tuple[str, bool]] = {}
    for e in st.list_dir(rel) or []:
        parsed = compactible_name(e.name)
        if parsed is not None and not e.is_dir:
            names[parsed[0]] = (e.name, parsed[1])
    paths: list[str] = []
    covered: set[int] = set()
    for k in sorted(b for b in names if lo < b <= hi):
        name, compact = names[k]
        batch = parse_compactible(st.read(f"{rel}/{name}"), st.uri(f"{rel}/{name}"), k, compact)
        paths += entry_paths(batch, {k} if compact else None)
        covered.add(k)
    gone = [k for k in range(lo + 1, hi + 1) if k not in covered] if hi - lo <= 100_000 else []
    if gone:  # merged into a later compaction
        later = sorted(b for b in names if b >= gone[0] and names[b][1])
        if later:
            c = later[0]
            name = names[c][0]
            batch = parse_compactible(st.read(f"{rel}/{name}"), st.uri(f"{rel}/{name}"), c, True)
            paths += entry_paths(batch, set(gone))
    return paths


def _folder_names(folders: Iterable[str]) -> dict[str, Optional[set[str]]]:
    """For each folder URI, the names it holds (None when it cannot be listed)."""
    out: dict[str, Optional[set[str]]] = {}
    for folder in folders:
        try:
            entries = Storage.open(folder).list_dir("")
        except StreamctlError:
            out[folder] = None
            continue
        out[folder] = None if entries is None else {e.name for e in entries if not e.is_dir}
    return out


def _split(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path)
        return posixpath.dirname(path), posixpath.basename(path)
    head, _, name = uri.rstrip("/").rpartition("/")
    return head, name


LOOKUP_MAX = 32  # files of one folder asked one by one; more: the folder is listed once


def missing_files(paths: list[str]) -> list[str]:
    """The paths (as the log names them) that are not where it says: a few files of a folder are
    looked up one by one (an input folder may hold millions), more are checked by one listing."""
    by_folder: dict[str, list[tuple[str, str]]] = {}
    for p in paths:
        folder, name = _split(p)
        by_folder.setdefault(folder, []).append((name, p))
    gone: list[str] = []
    for folder, items in by_folder.items():
        try:
            st = Storage.open(folder)
            if len(items) <= LOOKUP_MAX:
                gone += [p for name, p in items if st.lookup(name) is None]
                continue
            names = _folder_names([folder])[folder]
        except StreamctlError:
            names = None
        gone += [p for name, p in items if names is None or name not in names]
    return gone


def archived_path(archive: str, uri: str) -> str:
    """Where `cleanSource=archive` put the file `uri`: the archive dir + the path of its URI."""
    return archive.rstrip("/") + unquote(urlparse(uri).path)


@dataclass(frozen=True)
class PutBack:
    """Archived input files a plan moves back where the source's log names them: `rels` relative
    to both roots (the archive mirrors the input's absolute paths, so one relative path names a
    file in each)."""

    input_root: str  # the folder the log's paths share
    archive_root: str  # the same folder under the archive
    rels: tuple[str, ...]


def put_back_of(archive: str, uris: Iterable[str]) -> Optional[PutBack]:
    """Where archived files go back: the folder their log paths share and its mirror under
    `archive`. Local files and a local archive only (a URI's query, an object store's endpoint,
    has no place in a mirrored path); None otherwise."""
    paths = _local_paths(list(uris))
    if not paths or "://" in archive or "?" in archive or not all(p.startswith("/") for p in paths):
        return None
    common = posixpath.commonpath([posixpath.dirname(p) for p in paths])
    if common == "/":
        return None  # the file system's root is no folder a plan names
    rels = tuple(posixpath.relpath(p, common) for p in paths)
    return PutBack(common, archive.rstrip("/") + common, rels)


def unreplayable(st: Storage, sources: Iterable[SourceInfo], start: Optional[OffsetEntry], end: Optional[OffsetEntry],
                 archive: Optional[str] = None, moved: Optional[Mapping[SourceId, MovedInput]] = None) -> list[Unreplayable]:
    """For each file source, the files a replay of the batches after `start` through `end` reads
    that are gone (`start` None: from the beginning); a source in `moved` is judged with its
    paths at the new base (what they are once align rewrote its log)."""
    out = []
    for s in sources:
        if s.kind != "file":
            continue
        hi = log_offset(end, s.source_id)
        if hi is None:
            continue
        lo = log_offset(start, s.source_id) if start is not None else -1
        if lo is None:
            continue
        listed = listed_files(st, s.source_id, lo, hi)
        m = (moved or {}).get(s.source_id)
        if m is not None:
            listed = [m.rewrite(p) or p for p in listed]
        gone = missing_files(listed)
        if not gone:
            continue
        archived: list[str] = []
        if archive is not None:
            found = set(missing_files([archived_path(archive, p) for p in gone]))
            archived = [p for p in gone if archived_path(archive, p) not in found]
        out.append(Unreplayable(s.source_id, tuple(gone), tuple(archived), archive))
    return out


# -- an input folder moved with the checkpoint ---------------------------------------------------

MAX_STRIP = 4  # trailing components of the logged folder tried as the part that moved along
MAX_UP = 4  # ancestors of the checkpoint tried as the new base
PROBE_FILES = 8  # logged names that must all be found in the candidate folder


@dataclass(frozen=True)
class MovedInput:
    """A file source whose newest batch's input folder is gone from where the log names it, and
    whose files are found at the same place relative to the checkpoint's new location."""

    source_id: SourceId
    old_folder: str  # local paths
    new_folder: str
    old_base: str  # the prefix that moved: every logged path under it is rewritten to new_base
    new_base: str
    batch: int

    def text(self) -> str:
        return (f"sources/{self.source_id}/ names the input of batch {self.batch} under {self.old_folder}, which no "
                f"longer exists; its files are in {self.new_folder} (moved with the checkpoint): a restart whose query "
                f"reads the new folder fails (`Wrong basePath`: Spark checks the newest batch's logged files lie under "
                f"the query's path), and one that read them under new paths would take every moved file for a new one")

    @classmethod
    def of_finding(cls, details: Mapping[str, object]) -> MovedInput:
        """From a SOURCE_MOVED finding's details."""
        epochs = details.get("epochs") or [0]
        source = details["source"]
        return cls(source if isinstance(source, (int, str)) else str(source), str(details["old_folder"]),
                   str(details["new_folder"]),
                   str(details["old_base"]), str(details["new_base"]), int(epochs[0]))  # type: ignore[index,call-overload]

    def rewrite_log(self, content: bytes) -> bytes:
        """A `sources/<n>/` log file with every path under the old base at the new one."""
        from streamctl.formats.compactible import rewrite_entry_paths

        return rewrite_entry_paths(content, self.rewrite)

    def rewrite(self, uri: str) -> Optional[str]:
        """The logged `uri` under the new base, spelled as Spark spells it; None when not under the old base."""
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            return None
        path = unquote(parsed.path)
        if not path.startswith(self.old_base.rstrip("/") + "/"):
            return None
        old_q, new_q = quote_path(self.old_base), quote_path(self.new_base)
        head = uri.split(old_q, 1)
        if len(head) != 2:
            return None
        return head[0] + new_q + head[1]


def quote_path(path: str) -> str:
    """A local path as Hadoop's `Path.toUri` spells it in a log entry (`file:///a%20b/...`)."""
    from urllib.parse import quote

    return quote(path, safe="/:=@!$&'()*+,;-._~")


def _local_paths(uris: list[str]) -> Optional[list[str]]:
    out = []
    for uri in uris:
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file") or parsed.netloc not in ("", "localhost"):
            return None
        out.append(unquote(parsed.path))
    return out


@dataclass(frozen=True)
class GoneInput:
    """A file source whose newest logged input folder no longer exists and is found nowhere
    beside the checkpoint (SOURCE_GONE)."""

    source_id: SourceId
    folder: str
    batch: int

    def text(self) -> str:
        return (f"sources/{self.source_id}/ names the input of batch {self.batch} under {self.folder}, which no longer "
                "exists: a restart whose query reads another folder fails (`Wrong basePath`: Spark checks the newest "
                "batch's logged files lie under the query's path) or, after a no-data batch, reads every file there "
                "again, and one reading this path fails to start (`Path does not exist`); put the folder back (or "
                "move it with the whole pipeline folder, which align then follows)")


def moved_input(st: Storage, sources: Iterable[SourceInfo], start: Optional[OffsetEntry],
                end: Optional[OffsetEntry], gone: Optional[list[GoneInput]] = None) -> list[MovedInput]:
    """For each file source of a local checkpoint, the input folder of the newest batch that read
    files (offsets `start` -> `end`, or the source log's newest entry when `end` read none) when it
    no longer exists and the very files the log names are at the same
    place relative to one of the checkpoint's ancestors: the evidence of a tree moved as a whole
    (docs/model.md#moved-input). On restart Spark calls `getBatch` for that batch even when it is
    committed (MicroBatchExecution.populateStartOffsets) and its file index refuses logged files
    outside the query's path. A folder that is gone and found nowhere beside the checkpoint is
    added to `gone` (SOURCE_GONE)."""
    gone = gone if gone is not None else []
    if end is None or not st.is_local:
        return []
    ck = os.path.abspath(st.uri(""))
    ups: list[str] = []
    here = posixpath.dirname(ck)
    while len(ups) < MAX_UP and here not in ("", "/"):
        ups.append(here)
        here = posixpath.dirname(here)
    out = []
    for s in sources:
        if s.kind != "file":
            continue
        hi = log_offset(end, s.source_id)
        lo = log_offset(start, s.source_id) if start is not None else -1
        if hi is None or lo is None or hi < 0:
            continue
        # a no-data batch (the end of a watermarked query) read nothing: the source log's newest
        # entry, the files of the newest batch that read some, are the ones the restart knows
        paths = _local_paths(listed_files(st, s.source_id, min(lo, hi - 1), hi))
        if not paths or not all(p.startswith("/") for p in paths):
            continue
        folder = posixpath.commonpath([posixpath.dirname(p) for p in paths])
        if folder == "/" or Storage.open(posixpath.dirname(folder)).lookup(posixpath.basename(folder)) is not None:
            continue
        names = [posixpath.relpath(p, folder) for p in paths[:PROBE_FILES]]
        parts = folder.split("/")
        found = None
        for i in range(1, min(MAX_STRIP, len(parts) - 2) + 1):
            old_base, rel = "/".join(parts[:-i]), "/".join(parts[-i:])
            for new_base in ups:
                if new_base == old_base:
                    continue
                cand = f"{new_base}/{rel}"
                there = Storage.open(cand)  # the shared reader: one lookup per probed name
                if all((e := there.lookup(n)) is not None and not e.is_dir for n in names):
                    found = MovedInput(s.source_id, folder, cand, old_base, new_base, end.batch_id)
                    break
            if found:
                break
        if found:
            out.append(found)
        else:
            gone.append(GoneInput(s.source_id, folder, end.batch_id))
    return out

"""Where the data files a file sink's log names really are (docs/formats/sinks.md#moved-and-copied-sinks).

Spark's file sink records every data file by its absolute, qualified path
(`file:///data/out/part-...json`, `s3a://bucket/out/...`). Move or copy the sink folder and its
log still names the old place. Spark's batch reader of the sink (`MetadataLogFileIndex`, through
`PartitioningAwareFileIndex.allFiles`) keeps only the logged files below the sink's own path and
silently skips the rest, whether or not they still exist (PySpark 4.3: 0 of 20 rows after a move,
and after a copy while the original is still there; no error); a partitioned sink's read fails
instead (`File file:/old/out/key=k0/part-… does not exist`, reading the footers).

This module is the one owner of that question, for inspection (SINK_FILES_MISSING) and for align (which rewrites the log's paths to the sink's current
location, and takes a rolled-back batch's data files from where they are now):

* `sink_rel(path, root, local)`: a logged path relative to the sink root, None outside it;
* `place(storage, {path: size})`: for every named file, inside and present; outside with the
  same relative path present under the sink (moved or copied: `moved[path] = rel`); or missing
  (gone, or outside the sink with no copy under it: no reader of the sink sees it);
* `rewrite_paths(content, moved, new_root)`: a log file's bytes with those paths rewritten, every
  other byte of each line kept as Spark's JSON writer wrote it.

Cost follows the files: one listing per folder that holds named files, one `stat` per path
outside the root (local), rows counted only for moved files up to ROW_COUNT_BUDGET bytes.
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional
from urllib.parse import quote, unquote, urlparse

from streamctl.formats.checksum import is_checksum_name
from streamctl.formats.errors import StorageError
from streamctl.inspectors.storage import Storage

MAX_DEPTH = 16  # partition folders a relative path may have (`a=1/b=2/part-...`)
ROW_COUNT_BUDGET = 64 << 20  # bytes of moved files whose rows are counted; beyond: rows unknown
MAX_EXAMPLES = 5


def holds_rows(logged_size: int) -> bool:
    """Whether a logged data file that no reader finds loses rows: not when the log records size
    0, as no reader of the sink opens it (a scan drops 0-length files, `FileSourceScanExec`:
    `files.filter(_.getLen > 0)`, the length the log gives; JSON's schema inference lists the
    logged paths as roots and skips a missing one). Observed 4.3.0: a size-0 entry renamed to a
    file that does not exist, and `spark.read.json` of the sink counts every row, with and
    without a schema."""
    return logged_size != 0  # -1: not a size in the log, unknown


def norm_uri(uri: str) -> str:
    """One spelling per object store scheme (s3a/s3n -> s3, gcs -> gs), lower-case scheme, and
    on S3 and GCS the bucket without user info (`s3://anonymous@b/...` is pyarrow's way to ask
    for no credentials, `key:secret@` credentials: neither is part of the location)."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    scheme = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}.get(scheme.lower(), scheme.lower())
    if scheme in ("s3", "gs"):
        rest = _bucket_path(rest)
    return f"{scheme}://{rest}"


def _bucket_path(rest: str) -> str:
    """`user@bucket/key` (after `s3://` or `gs://`) as `bucket/key`."""
    authority, slash, path = rest.partition("/")
    return authority.rpartition("@")[2] + slash + path


def target_of(path: str, local_root: bool) -> Optional[str]:
    """The normalized location a logged path names (a local absolute path, or `scheme://bucket/key`
    for an object store), None when it is of the other kind than the sink root or relative."""
    parsed = urlparse(path)
    if local_root:
        if parsed.scheme not in ("file", ""):
            return None
        p = unquote(parsed.path)
        return posixpath.normpath(p) if p.startswith("/") else None
    if parsed.scheme in ("file", ""):
        return None
    target = norm_uri(unquote(path.partition("?")[0]))
    head, sep, tail = target.partition("://")
    return f"{head}{sep}{posixpath.normpath('/' + tail).lstrip('/')}"


def root_of(st: Storage) -> str:
    """The sink root as `target_of` spells locations."""
    root = st.display.partition("?")[0].rstrip("/")
    return posixpath.normpath(root) if st.is_local else norm_uri(root)


def sink_rel(path: str, root: str, local_root: bool) -> Optional[str]:
    """The path of a file a sink log names, relative to the sink root; None when it lies outside."""
    target = target_of(path, local_root)
    if target is None:
        return None
    base = posixpath.normpath(root) if local_root else norm_uri(root)
    if not target.startswith(base.rstrip("/") + "/"):
        return None
    rel = target[len(base.rstrip("/")) + 1:]
    return None if not rel or rel.startswith("..") or "/../" in f"/{rel}/" else rel


@dataclass(frozen=True)
class Placement:
    """Where the files a sink log names are. `moved` maps a logged path to the relative path
    under the sink root where the same file is now (the sink was moved or copied from one of
    `old_roots`); `missing` are named files no reader of the sink sees and no copy under the sink
    replaces (deleted, or outside the sink root)."""

    named: int = 0
    missing: tuple[str, ...] = ()
    missing_bytes: int = 0
    moved: Mapping[str, str] = field(default_factory=dict)
    moved_bytes: int = 0
    old_roots: tuple[str, ...] = ()
    moved_rows: Optional[int] = None
    unlisted: tuple[str, ...] = ()  # data files in the listed folders that no entry names (rel paths)

    def rel(self, path: str, root: str, local_root: bool) -> Optional[str]:
        """Where `path` is under the sink now: inside the root, or where a move put it."""
        return self.moved.get(path) or sink_rel(path, root, local_root)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def place(st: Storage, named: Mapping[str, int], count_rows: bool = True) -> Placement:
    """Judge every path in `named` (logged path -> logged size) against the sink at `st`."""
    root = root_of(st)
    local = st.is_local
    folders: dict[str, set[str]] = {}

    def present(rel: str) -> bool:
        head, _, name = rel.rpartition("/")
        if head not in folders:
            try:
                files, _dirs = st.list_names(head)
            except StorageError:
                files = []
            folders[head] = set(files)
        return name in folders[head]

    missing: list[str] = []
    missing_bytes = 0
    moved: dict[str, str] = {}
    moved_bytes = 0
    old_roots: list[str] = []
    for path, size in named.items():
        rel = sink_rel(path, root, local)
        if rel is not None:
            if not present(rel) and holds_rows(size):
                missing.append(path)
                missing_bytes += max(size, 0)
            continue
        target = target_of(path, local)
        if target is None:
            continue  # a relative path or another file system: not judged
        found = _relocated(target, old_roots, present)
        if found is not None and local and _same_file(target, posixpath.join(root, found[1])):
            continue  # the same file through another spelling of the root (a symlink)
        if found is None:  # outside the sink, no copy under it: readers skip it, exists or not
            if not holds_rows(size):
                continue
            missing.append(path)
            missing_bytes += max(size, 0)
            continue
        old_root, rel = found
        if old_root not in old_roots:
            old_roots.append(old_root)
        moved[path] = rel
        moved_bytes += max(size, 0)
    rows = _rows(st, sorted(set(moved.values())), moved_bytes) if moved and count_rows else None
    known = {rel for rel in (sink_rel(p, root, local) for p in named) if rel} | set(moved.values())
    unlisted = sorted(f"{head}/{name}" if head else name for head, names in folders.items() for name in names
                      if not name.startswith((".", "_")) and not is_checksum_name(name)
                      and (f"{head}/{name}" if head else name) not in known)
    return Placement(len(named), tuple(missing), missing_bytes, moved, moved_bytes, tuple(old_roots), rows,
                     tuple(unlisted))


def _relocated(target: str, old_roots: list[str], present: Callable[[str], bool]) -> Optional[tuple[str, str]]:
    """(old root, relative path) when the file `target` names is under the sink at the same
    relative path: a root already found first, then the shortest relative path that exists."""
    for old in old_roots:
        if target.startswith(old + "/"):
            rel = target[len(old) + 1:]
            if present(rel):
                return old, rel
    parts = target.split("/")
    for k in range(1, min(len(parts) - 1, MAX_DEPTH) + 1):
        rel = "/".join(parts[-k:])
        old = "/".join(parts[:-k])
        if not old or old.endswith(":/") or old.endswith("://") or old.endswith(":"):
            break
        if present(rel):
            return old, rel
    return None


def _rows(st: Storage, rels: list[str], total: int) -> Optional[int]:
    """Rows in the moved files (parquet: the footer; JSON lines: newlines), None when another
    format is among them or they exceed ROW_COUNT_BUDGET bytes."""
    if total > ROW_COUNT_BUDGET or not rels:
        return None
    rows = 0
    for rel in rels:
        ext = rel.rsplit("/", 1)[-1].rsplit(".", 1)[-1]  # part-...-c000.json; .json.gz is not counted
        try:
            if ext == "parquet":
                import io

                import pyarrow.parquet as pq

                rows += pq.ParquetFile(io.BytesIO(st.read(rel, ROW_COUNT_BUDGET))).metadata.num_rows
            elif ext == "json":
                data = st.read(rel, ROW_COUNT_BUDGET)
                rows += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
            else:
                return None
        except Exception:  # noqa: BLE001 - compressed or unreadable: rows unknown
            return None
    return rows


def new_root_spelling(raw: str, st: Storage, encoded: bool = True) -> str:
    """The sink root spelled like the logged path `raw` (its scheme and URI style) when both are
    of one kind of store; across kinds (a sink moved between the local disk and an object
    store, or between two stores) as Spark spells the new one: `file:///...` locally, the
    store's Hadoop scheme (`s3a://` for S3, `gs://`, Azure's as named) and bucket remotely,
    never with user info. `encoded`: a local root percent-encoded as in a URI (the file sink
    logs `Path.toUri.toString`); False for Hadoop's `Path.toString` (transformWithState's schema
    file paths), which keeps the characters as they are and spells a local file `file:/...`."""
    logged_local = urlparse(raw).scheme in ("file", "")
    if st.is_local:
        root = quote(root_of(st), safe="/:=@!$&'()*+,;-._~") if encoded else root_of(st)
        if not encoded and not logged_local:
            return f"file:{root}"
        if raw.startswith("file:///") or raw.startswith("file://localhost/") or not logged_local:
            return f"file://{root}"
        if raw.startswith("file:"):
            return f"file:{root}"
        return root_of(st)
    scheme, _, rest = st.display.partition("?")[0].rstrip("/").partition("://")
    kind = norm_uri(f"{scheme}://").partition("://")[0]
    if kind in ("s3", "gs"):
        rest = _bucket_path(rest)  # no user info (pyarrow's `anonymous@`, credentials) in a log
    logged = raw.partition("://")[0]
    if not logged_local and norm_uri(f"{logged}://").partition("://")[0] == kind:
        return f"{logged}://{rest}"  # the same kind of store: the scheme Spark logged
    return f"{'s3a' if kind == 's3' else kind}://{rest}"


def rewritten_path(raw: str, rel: str, st: Storage) -> str:
    """`raw` pointed at `rel` under the sink: the new root, then the last components of `raw`
    exactly as Spark encoded them (partition folders keep their escaping)."""
    k = rel.count("/") + 1
    tail = "/".join(raw.partition("?")[0].split("/")[-k:])
    return f"{new_root_spelling(raw, st)}/{tail}"


def rewrite_paths(content: bytes, moved: Mapping[str, str], st: Storage) -> bytes:
    """A sink log file (`v1` then one JSON object per line) with every moved path pointing at
    the sink's current location; other lines byte for byte."""
    from streamctl.formats.compactible import rewrite_entry_paths

    return rewrite_entry_paths(content, lambda path: rewritten_path(path, moved[path], st) if path in moved else None)


def describe(p: Placement, log: str) -> list[tuple[str, str, dict[str, object]]]:
    """The finding of a placement: (code, message, details), none when every file is in place."""
    from streamctl.inspectors.findings import human_bytes

    unseen = len(p.missing) + len(p.moved)
    if not unseen:
        return []
    rows = f", {p.moved_rows} rows" if p.moved_rows is not None and not p.missing else ""
    parts = []
    if p.moved:
        parts.append(f"{len(p.moved)} lie under {_roots_text(p.old_roots)}, where the sink was before it was moved or "
                     "copied, and are at the same place under the sink now (align rewrites the log's paths)")
    if p.missing:
        parts.append(f"{len(p.missing)} are gone or outside the sink with no copy in it (first: {p.missing[0]}); "
                     "streamctl cannot bring them back")
    return [("SINK_FILES_MISSING",
             f"{log}/ names {unseen} data file(s) ({human_bytes(p.missing_bytes + p.moved_bytes)}{rows}) that no reader "
             "of the sink sees: a batch read silently skips files outside the sink folder and files that are gone "
             "(a partitioned sink's read fails on them); "
             + "; ".join(parts),
             {"missing_count": unseen, "moved_count": len(p.moved), "lost_count": len(p.missing),
              "bytes": p.missing_bytes + p.moved_bytes, "rows": p.moved_rows if not p.missing else None,
              "old_roots": list(p.old_roots), "examples": (list(p.missing) + sorted(p.moved))[:MAX_EXAMPLES]})]


def _roots_text(roots: tuple[str, ...]) -> str:
    return ", ".join(roots[:3]) + (f" and {len(roots) - 3} more" if len(roots) > 3 else "")



def orphans(st: Storage, p: Placement, newest_log_mtime_ns: Optional[int]) -> list[tuple[str, int, int]]:
    """(rel, size, mtime_ns) of the unlisted data files written before the log's newest batch file:
    a later batch committed after them, so no running batch owns them (a failed or aborted batch's
    files; docs/formats/sinks.md#orphan-files). Newer ones may be a running batch's: not judged."""
    if newest_log_mtime_ns is None:
        return []
    out = []
    for rel in p.unlisted:
        try:
            e = st.lookup(rel)
        except StorageError:
            continue
        if e is not None and not e.is_dir and e.mtime_ns is not None and e.mtime_ns < newest_log_mtime_ns:
            out.append((rel, int(e.size or 0), int(e.mtime_ns)))
    return out

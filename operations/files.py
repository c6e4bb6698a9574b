"""Writable roots: the only place where streamctl changes files.

A `Root` is one folder the user named (the checkpoint, the sink, the backup folder). Every path
passed to it is relative and is checked to stay inside the root, so no step can touch a path
outside the roots the user named. Local folders use `os` (atomic renames, exclusive create);
other file systems go through `pyarrow.fs` (moves are copy -> verify -> delete).
"""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import threading
import uuid
from typing import Any, Optional

from streamctl.formats.errors import StorageError
from streamctl.inspectors.outputs import fsync_dir, fsync_dirs
from streamctl.inspectors.storage import Storage, parallel_map
from streamctl.operations.local_digest import HASH_THREADS, THREADED_FROM, _hash_file, hash_file
from streamctl.operations.object_store import S3_COPY_LIMIT, ObjectStore, hash_stream, scheme_of
from streamctl.operations.paths import _NOT_NORMAL, check_rel, is_normal_rel  # noqa: F401 - re-exported


class Pending:
    """A write under way on a thread (`Root.write_atomic_started`, the journal's group commit):
    `wait()` returns once it is durable and raises what it raised. The thread is no daemon: an error exit of the command
    still lets it end (a torn temporary file, never a torn file at its name)."""

    def __init__(self, fn: Optional[Any] = None) -> None:
        self.error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        if fn is not None:
            self._thread = threading.Thread(target=self._run, args=(fn,), name="streamctl-write")
            self._thread.start()

    def _run(self, fn: Any) -> None:
        try:
            fn()
        except BaseException as exc:  # raised again by wait() on the caller's thread
            self.error = exc

    def wait(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self.error = self.error, None
        if error is not None:
            raise error


class Root:
    """One writable root folder (local path or URI)."""

    def __init__(self, name: str, location: str) -> None:
        if location.split("://", 1)[0].lower() in ("hdfs", "viewfs") and "://" in location:
            raise StorageError(location, "changes on HDFS are refused: no HDFS runs in the tests to prove the lock's "
                                         "exclusive create, backup and undo on it (inspections work)")
        self.name = name
        self.storage = Storage.open(location)
        self.is_local = self.storage.is_local  # asked per step: an attribute, not a property chain
        self.location = self.storage.display
        self._prefix = f"{self.location.rstrip('/')}/" if self.location != "/" else "/"  # local(rel) == prefix + rel
        self._uri_prefix = self.storage.uri_prefix()
        self._fs = None
        self._fs_root = ""
        self._s3_cached: Any = None
        self._made: set[str] = set()  # local folders this root made or found (moves skip makedirs)
        self._fresh: set[str] = set()  # local folders this process made by `_rename_new`: empty but for its renames
        self._taken_check: Optional[bool] = None  # `rename_into`'s existence check: os.access (True), lstat (False)
        self._synced: set[str] = set()  # local folders sync_parents fsynced with their ancestors
        self._unsynced: set[str] = set()  # folders this root made (again) since: ancestors to fsync again
        self._store = ObjectStore(self)  # used only when not local
        if not self.storage.is_local:
            self._fs = self.storage._fs  # noqa: SLF001 - same package family, one opener
            self._fs_root = self.storage._fs_root  # noqa: SLF001

    def uri(self, rel: str) -> str:
        """`Storage.uri`; a path without a "/" at either end (every step's) by one concatenation."""
        prefix = self._uri_prefix
        if prefix is not None and rel and rel[0] != "/" and rel[-1] != "/":
            return prefix + rel
        return self.storage.uri(rel)

    def local(self, rel: str) -> str:
        rel = check_rel(rel, self.location)
        if os.sep == "/":
            return self._prefix + rel
        return os.path.join(self.location, *rel.split("/"))

    def _remote(self, rel: str) -> str:
        rel = check_rel(rel, self.location)
        return f"{self._fs_root}/{rel}" if self._fs_root else rel

    # -- queries --------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        return self.kind(rel) != "missing"

    def kind(self, rel: str) -> str:
        if self.is_local:
            path = self.local(rel)
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                return "missing"
            except OSError as exc:
                raise StorageError(self.uri(rel), exc.strerror or str(exc)) from None
            if stat.S_ISLNK(mode):
                return "dir" if os.path.isdir(path) else "file"
            return "dir" if stat.S_ISDIR(mode) else "file"
        import pyarrow.fs as pafs

        info = self._fs.get_file_info(self._remote(rel))  # type: ignore[union-attr]
        if info.type == pafs.FileType.NotFound:
            return "missing"
        return "dir" if info.type == pafs.FileType.Directory else "file"

    def read(self, rel: str) -> bytes:
        check_rel(rel, self.location)
        return self.storage.read(rel)

    def digest_if_exists(self, rel: str) -> Optional[tuple[int, str]]:
        """(size, sha256) of a file or folder, None when nothing is there; a local file costs one
        open (no separate existence check)."""
        if self.is_local:
            try:
                return hash_file(self.local(rel))
            except FileNotFoundError:
                return None
            except IsADirectoryError:
                pass
            except OSError as exc:
                raise StorageError(self.uri(rel), exc.strerror or str(exc)) from None
        return self.digest(rel) if self.exists(rel) else None

    def digests_if_exist(self, rels: list[str]) -> list[Optional[tuple[int, str]]]:
        """digest_if_exists of each path, in order. Local files up to THREADED_FROM bytes are read
        in one loop (a batch of 8,192 steps, no call chain per file); larger ones afterwards on
        HASH_THREADS threads (their reads and hashing release the GIL); folders and errors take
        digest_if_exists."""
        head = self._head()
        if head is None:
            return [self.digest_if_exists(rel) for rel in rels]
        out: list[Optional[tuple[int, str]]] = []
        large: list[int] = []  # indices of files larger than THREADED_FROM
        for rel in rels:
            if is_normal_rel(rel):
                try:
                    got = _hash_file(head + rel, THREADED_FROM)
                except FileNotFoundError:
                    out.append(None)
                    continue
                except OSError:
                    pass
                else:
                    if got is None:
                        large.append(len(out))
                    out.append(got)
                    continue
            out.append(self.digest_if_exists(rel))  # a folder, an error, a path to normalise: as always
        if large:
            for k, got in zip(large, parallel_map(lambda k: self.digest_if_exists(rels[k]), large, HASH_THREADS),
                              strict=True):
                out[k] = got
        return out

    def _head(self) -> Optional[str]:
        """The local path prefix of this root's normal relative paths (`local(rel) == head + rel`
        when `is_normal_rel(rel)`); None on object stores and where the separator is not "/"."""
        return self._prefix if self.is_local and os.sep == "/" else None

    def file_digest(self, rel: str) -> Optional[tuple[int, str]]:
        """(size, sha256) of an object read once (one request on object stores: no existence or
        kind check first); None when `rel` is not a plain file there (missing, or a folder),
        which the general `digest_if_exists` then decides."""
        if self.is_local:
            try:
                return hash_file(self.local(rel))
            except OSError:
                return None
        if self._store.is_s3:
            return self._store.file_digest(rel)
        try:
            with self._fs.open_input_stream(self._remote(rel)) as fh:  # type: ignore[union-attr]
                return hash_stream(fh)
        except OSError:  # FileNotFoundError, or a folder on stores that say so differently
            return None

    def copy_checked(self, rel: str, dest: Root, dest_rel: str, want: tuple[int, str]) -> None:
        """Copy one file into another root and read the copy back: it must hold exactly `want`
        (size, sha256) or StorageError (the source is kept). Within one object store the copy is
        the store's own (S3 CopyObject: no bytes through this process)."""
        if (not self.is_local and not dest.is_local and self._store.is_s3 and dest._store.is_s3
                and self._fs.equals(dest._fs) and want[0] < S3_COPY_LIMIT):  # type: ignore[union-attr]
            self._store.s3_copy(rel, dest._store, dest_rel)
        elif not self.is_local and not dest.is_local and self._fs.equals(dest._fs):  # type: ignore[union-attr]
            try:
                self._fs.copy_file(self._remote(rel), dest._remote(dest_rel))  # type: ignore[union-attr]
            except FileNotFoundError:
                raise
            except Exception:  # noqa: BLE001 - a store or emulator without server-side copy
                dest.write_atomic(dest_rel, self.read_all(rel))
        else:
            self._copy_file(rel, dest, dest_rel)
        if dest.file_digest(dest_rel) != tuple(want):
            raise StorageError(dest.uri(dest_rel), "copy differs from its source; source kept")

    def sync_parents(self, rels: list[str] | set[str]) -> None:
        """Make renames, creates and deletes of these paths durable: fsync each distinct parent
        folder and, the first time this root syncs it (or after this root made it again), its
        ancestors up to the root; later only the folder itself, whose entries are all that a
        move changes (local only; object-store calls are durable when they return)."""
        if not self.is_local:
            return
        parents, known, walk = self._sync_split(rels)
        for p, ok in zip(known, fsync_dirs(known), strict=True):
            if not ok:
                walk.add(p)  # gone since (an emptied folder removed): its parent changed
        fsync_dirs(self._with_ancestors(walk))
        self.synced(parents)

    def synced(self, parents: set[str]) -> None:
        """These parent folders and their ancestors are fsynced."""
        self._synced |= parents
        self._unsynced -= parents

    def _sync_split(self, rels: list[str] | set[str]) -> tuple[set[str], list[str], set[str]]:
        """(the distinct parent folders of `rels`, those synced before with their ancestors, sorted,
        those whose ancestors are to be fsynced too)."""
        heads = {rel.rpartition("/")[0] for rel in rels}  # each distinct folder checked once, not each path
        parents = {self.local(h) if h else os.path.dirname(self.local("x")) for h in heads}
        walk = {p for p in parents if p not in self._synced or p in self._unsynced}
        return parents, sorted(parents - walk), walk

    def _with_ancestors(self, walk: set[str]) -> list[str]:
        """These folders and their ancestors up to the root, sorted, each once."""
        top = os.path.normpath(self.location)
        dirs: set[str] = set()
        for p in walk:
            d = p
            while d not in dirs and len(d) >= len(top):
                dirs.add(d)
                if os.path.normpath(d) == top:
                    break
                d = os.path.dirname(d)
        return sorted(dirs)

    def digest(self, rel: str) -> tuple[int, str]:
        """(size, sha256 hex) of a file, or of a folder (over its sorted relative names and file digests).
        On object stores a folder may exist only as the prefix of its objects (no marker object), which
        some stores' emulators do not report as a folder: such a prefix counts as a folder too."""
        kind = self.kind(rel)
        if kind == "dir" or (kind == "missing" and not self.is_local and self.walk_files(rel)):
            return self.tree_digest(rel)
        if self.is_local:
            try:
                return hash_file(self.local(rel))
            except OSError as exc:
                raise StorageError(self.uri(rel), exc.strerror or str(exc)) from None
        with self._fs.open_input_stream(self._remote(rel)) as fh:  # type: ignore[union-attr]
            return hash_stream(fh)

    def tree_digest(self, rel: str) -> tuple[int, str]:
        """(total size, sha256 over sorted relative names and file digests) of the files below `rel`;
        an empty or absent folder gives the digest of nothing (object stores keep no empty folders)."""
        h = hashlib.sha256()
        total = 0
        subs = self.walk_files(rel)
        for sub in subs:
            try:
                size, digest = self.digest(f"{rel}/{sub}")
            except StorageError:
                if self.kind(f"{rel}/{sub}") != "missing":
                    raise
                # listed, then gone before it was read: the folder is being written (Spark's state
                # maintenance writes a snapshot after the query stopped)
                raise StorageError(self.uri(f"{rel}/{sub}"), "vanished while streamctl read its folder: something still "
                                   "writes to the checkpoint (the query, or its Spark session's state maintenance after "
                                   "the query stopped); wait until it is quiet") from None
            total += size
            h.update(f"{sub}\0{size}\0{digest}\n".encode())
        return total, h.hexdigest()

    def walk_files(self, rel: str) -> list[str]:
        """Files under folder `rel`, relative to it, sorted."""
        return [name for name, _size in self._walk(rel, sizes=False)]

    def walk_sizes(self, rel: str) -> list[tuple[str, int]]:
        """(path relative to `rel`, size) of every file under folder `rel`, sorted; none when it
        does not exist (object stores: one recursive listing)."""
        return self._walk(rel, sizes=True)

    def tree_size(self, rel: str) -> tuple[int, int]:
        """(files, bytes) under folder `rel`, as walk_sizes counts them (unsorted: a sum)."""
        found = self._walk(rel, sizes=True, ordered=False)
        return len(found), sum(size for _, size in found)

    def _walk(self, rel: str, sizes: bool, ordered: bool = True) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        if self.is_local:
            # os.walk's answer: symlinks to folders are not followed and not files; a folder that
            # cannot be listed is skipped
            folders = [(self.local(rel) if rel else self.location, "")]
            while folders:
                path, prefix = folders.pop()
                try:
                    with os.scandir(path) as it:
                        entries = list(it)
                except OSError:
                    continue
                for de in entries:
                    try:
                        is_dir = de.is_dir()
                    except OSError:
                        is_dir = False
                    if not is_dir:
                        out.append((prefix + de.name, de.stat(follow_symlinks=False).st_size if sizes else 0))
                    elif not de.is_symlink():
                        folders.append((de.path, f"{prefix}{de.name}/"))
            return sorted(out) if ordered else out
        import pyarrow.fs as pafs

        base = self._remote(rel) if rel else self._fs_root
        sel = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        for info in self._fs.get_file_info(sel):  # type: ignore[union-attr]
            if info.type == pafs.FileType.File:
                out.append((info.path[len(base):].lstrip("/"), int(info.size or 0)))
        return sorted(out)

    # -- changes --------------------------------------------------------------------------
    def _makedirs(self, path: str) -> None:
        """A local folder and its missing parents; its ancestors are fsynced again at the next sync."""
        os.makedirs(path, exist_ok=True)
        self._made.add(path)
        self._unsynced.add(path)

    def write_atomic(self, rel: str, data: bytes) -> None:
        """Write a whole file so that readers see the old or the new content, never a part."""
        if self.is_local:
            path = self.local(rel)
            self._makedirs(os.path.dirname(path))
            tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.streamctl.tmp")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            fsync_dir(os.path.dirname(path))
            return
        self._folder_markers(rel)
        with self._fs.open_output_stream(self._remote(rel)) as fh:  # type: ignore[union-attr]
            fh.write(data)

    def _folder_markers(self, rel: str) -> None:
        """On GCS, the folder marker objects (`<folder>/`) of a new file's folders, once per
        folder: Hadoop's GCS connector writes them as Spark makes its folders, and a store whose
        delimited listing does not infer folders (fake-gcs-server) lists a sub-folder only by
        its marker. Other stores have no folders to make."""
        parent = rel.rpartition("/")[0]
        if not parent or parent in self._made or scheme_of(self.location) not in ("gs", "gcs"):
            return
        self._fs.create_dir(self._remote(parent), recursive=True)  # type: ignore[union-attr]
        while parent and parent not in self._made:
            self._made.add(parent)
            parent = parent.rpartition("/")[0]

    def write_atomic_started(self, rel: str, data: bytes) -> Pending:
        """`write_atomic` on a thread (local: a write, two fsyncs and a rename, which release the
        GIL: plan.json and manifest.json are written while the executor goes on); object stores
        here and now. Durable once the result's `wait()` returned."""
        if not self.is_local:
            self.write_atomic(rel, data)
            return Pending()
        return Pending(lambda: self.write_atomic(rel, data))

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create a file only if it does not exist (the lock). False when it exists."""
        if self.is_local:
            # written whole under a temporary name, then linked into place (link fails when the
            # name exists): a reader never sees the lock without its content (an empty lock would
            # read as a foreign one and send the operator to --break-lock while its owner runs)
            path = self.local(rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
            try:
                with open(tmp, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
                except OSError:  # a file system without hard links: exclusive create, then write
                    return _create_exclusive_unlinked(path, data)
            finally:
                os.unlink(tmp)
            fsync_dir(os.path.dirname(path))
            return True
        return self._store.create_exclusive(rel, data)

    def listed_sizes(self, rels: list[str]) -> dict[str, Optional[int]]:
        """Size of each file (None when it is not there) from one listing per distinct folder:
        what a purge on an object store records instead of reading every object."""
        by_dir: dict[str, list[str]] = {}
        for rel in rels:
            by_dir.setdefault(check_rel(rel, self.location).rpartition("/")[0], []).append(rel)
        out: dict[str, Optional[int]] = {}
        for head, members in by_dir.items():
            entries = {e.name: e for e in (self.storage.list_dir(head) or [])}
            for rel in members:
                e = entries.get(rel.rpartition("/")[2])
                out[rel] = None if e is None or e.is_dir else int(e.size or 0)
        return out

    def delete_many(self, rels: list[str]) -> None:
        """Delete files, absent ones included, in as few requests as the store allows: S3
        DeleteObjects (1,000 keys a request), Azure Blob batch delete (256), else one request
        per file on a few threads (GCS)."""
        if not rels:
            return
        if self.is_local:
            for rel in rels:
                self.delete(rel)
            return
        self._store.delete_many(rels)

    def delete(self, rel: str) -> None:
        if self.is_local:
            path = self.local(rel)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            return
        if self.kind(rel) == "dir":
            self._fs.delete_dir(self._remote(rel))  # type: ignore[union-attr]
        elif self.kind(rel) == "file":
            self._fs.delete_file(self._remote(rel))  # type: ignore[union-attr]

    def rename_into(self, rel: str, dest: Root, dest_rel: str) -> bool:
        """Rename a local file or folder into another local root, never over anything there: True
        when it was renamed; False when that cannot be done here and now (not both local, nothing
        at `rel`, something at `dest_rel`, another file system): the caller takes the general
        path."""
        if not (self.is_local and dest.is_local):
            return False
        return dest._rename_new(self.local(rel), dest.local(dest_rel))

    def rename_files_into(self, rels: list[str], dest: Root, dest_folder: str) -> list[bool]:
        """`rename_into` of each path to `<dest_folder>/<rel>` in `dest`, in order, in one loop (a
        batch of local moves: no call chain per file, normal paths joined to the roots' prefixes
        as they are). True for each path renamed."""
        head, dest_head = self._head(), dest._head()
        if head is None or dest_head is None or not dest.is_local or not is_normal_rel(dest_folder):
            return [self.rename_into(rel, dest, f"{dest_folder}/{rel}") for rel in rels]
        into, rename_new = f"{dest_head}{dest_folder}/", dest._rename_new
        return [rename_new(head + rel, into + rel) if is_normal_rel(rel) else
                self.rename_into(rel, dest, f"{dest_folder}/{rel}") for rel in rels]

    def _rename_new(self, src: str, dst: str) -> bool:
        """Rename local `src` to `dst` in this root, never over anything at `dst` (`_taken`, or a
        folder this call made, which holds nothing else): the check and the rename are two calls,
        and the lock keeps every other streamctl out of the roots in between. False when something is at `dst` or the rename fails (nothing at
        `src`: renamed by a crashed run; another file system)."""
        parent = dst.rpartition("/")[0] if os.sep == "/" else os.path.dirname(dst)
        if parent not in self._made:  # one makedirs per folder, not per file
            if not os.path.lexists(parent):
                self._fresh.add(parent)
            self._makedirs(parent)
        # A folder this process made holds only what it renamed in, each name once (a plan's
        # paths never repeat or nest); elsewhere the name is checked first.
        if parent not in self._fresh and self._taken(dst):
            return False
        try:
            os.rename(src, dst)
        except OSError:
            return False
        return True

    def _taken(self, path: str) -> bool:
        """Whether anything is at local `path`, a dangling symlink included: os.path.lexists's
        answer. Asked with os.access (F_OK, the effective ids, the last symlink not followed),
        which answers False without raising FileNotFoundError (half the cost), once this root's
        own folder answered True to it; else (a platform or C library without those flags, where
        it would answer False) with os.path.lexists."""
        if self._taken_check is None:
            self._taken_check = (os.access in os.supports_follow_symlinks and os.access in os.supports_effective_ids
                                 and os.access(self.location, os.F_OK, effective_ids=True, follow_symlinks=False))
        if self._taken_check:
            return os.access(path, os.F_OK, effective_ids=True, follow_symlinks=False)
        return os.path.lexists(path)

    def move_to(self, rel: str, dest: Root, dest_rel: str) -> None:
        """Move a file or folder into another root. Local: a rename when both are on one file
        system, else copy -> fsync -> verify -> delete. Remote: copy -> verify -> delete."""
        if self.is_local and dest.is_local:
            src, dst = self.local(rel), dest.local(dest_rel)
            parent = os.path.dirname(dst)
            if parent not in dest._made:  # one makedirs per folder, not per file
                dest._makedirs(parent)
            try:
                try:
                    os.rename(src, dst)
                except FileNotFoundError:
                    if not os.path.lexists(src):
                        raise
                    dest._makedirs(parent)  # the folder went away since (undo, cleanup)
                    os.rename(src, dst)
                return
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise StorageError(self.uri(rel), f"cannot move to {dst}: {exc.strerror}") from None
        self.copy_to(rel, dest, dest_rel)
        same = (self.tree_digest(rel) == dest.tree_digest(dest_rel) if self.kind(rel) == "dir"
                else self.digest(rel) == dest.digest(dest_rel))
        if not same:
            raise StorageError(dest.uri(dest_rel), "copy differs from its source; source kept")
        self.delete(rel)

    def copy_to(self, rel: str, dest: Root, dest_rel: str) -> None:
        if self.kind(rel) == "dir":
            for sub in self.walk_files(rel):
                self.copy_to(f"{rel}/{sub}", dest, f"{dest_rel}/{sub}")
            return
        self._copy_file(rel, dest, dest_rel)

    def _copy_file(self, rel: str, dest: Root, dest_rel: str) -> None:
        if self.is_local and dest.is_local:
            dst = dest.local(dest_rel)
            dest._makedirs(os.path.dirname(dst))
            shutil.copy2(self.local(rel), dst)
            with open(dst, "rb+") as fh:
                os.fsync(fh.fileno())
            return
        dest.write_atomic(dest_rel, self.read_all(rel))

    def read_all(self, rel: str) -> bytes:
        if self.is_local:
            with open(self.local(rel), "rb") as fh:
                return fh.read()
        with self._fs.open_input_stream(self._remote(rel)) as fh:  # type: ignore[union-attr]
            return fh.read()

    def remove_empty_dirs(self, rel: str) -> None:
        """Remove `rel` and its parents while they are empty folders (local only)."""
        if not self.is_local:
            return
        path = self.local(rel)
        while os.path.normpath(path) != os.path.normpath(self.location):
            try:
                os.rmdir(path)
            except OSError:
                return
            path = os.path.dirname(path)


def _create_exclusive_unlinked(path: str, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return True


def maybe_digest(root: Root, rel: str) -> Optional[tuple[int, str]]:
    return root.digest(rel) if root.exists(rel) else None

"""Read-only storage for checkpoints and sinks: local paths and `file://`, `s3://`, `gs://`,
`hdfs://`, `abfs://` URIs.

Every remote file system goes through `pyarrow.fs`. Local folders are listed with `os.scandir`
instead of `pyarrow.fs.LocalFileSystem`: pyarrow stats every entry it lists, which made a
130,000-file checkpoint take 0.7 s to list against 0.14 s for scandir (see BENCHMARKS.md); the
semantics (names, file vs folder, missing vs unreadable) are the same. Reads of local files also
use plain `open`.

The rules every caller relies on:
- one listing per folder; nothing is stat-ed unless asked for (`stat`);
- a missing folder lists as `None`, never as an error; anything else that prevents a listing or a
  read (permission denied, a file where a folder should be, a symlink loop, an unreachable
  endpoint) raises `StorageError` naming the path, with a one-line reason;
- reads are bounded (`read(max_bytes=...)`): checkpoints hold small files;
- nothing here writes.
"""
from __future__ import annotations

import errno
import os
import stat as stat_mod
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, TypeVar
from urllib.parse import parse_qsl, urlparse

from streamctl.formats.errors import StorageError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow.fs

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
REMOTE_SCHEMES = ("s3", "s3a", "s3n", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "az")
DEFAULT_MAX_READ = 64 * 1024 * 1024


class Entry(NamedTuple):
    """One name in a folder listing (a NamedTuple: listings hold 100,000s of them)."""

    name: str
    is_dir: bool
    size: Optional[int] = None  # known without an extra call on remote stores only
    mtime_ns: Optional[int] = None


SIZE_CHUNK = 512  # files per task of Storage.sizes
SIZE_THREADS = 4


_SCANDIR_FD = os.scandir in os.supports_fd  # POSIX
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _is_dir(de: os.DirEntry[str]) -> bool:
    try:
        return de.is_dir()
    except OSError:
        return False


def _one_line(exc: BaseException) -> str:
    """The first line of an error text (pyarrow's HDFS errors run to a hundred lines)."""
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        return exc.strerror.lower()
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.EACCES or exc.errno == errno.EPERM:
        return "permission denied"
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOTDIR:
        return "is a file, expected a folder"
    if exc.errno == errno.EISDIR:
        return "is a folder, expected a file"
    if exc.errno == errno.ENOENT:
        return "does not exist"
    return _one_line(exc)


AZURE_SCHEMES = ("abfs", "abfss", "az")
AZURE_KEY_ENV = "AZURE_STORAGE_ACCOUNT_KEY"  # the account key stays in the environment, never in a URI


def azure_location(uri: str) -> dict[str, str]:
    """The parts of `abfs[s]://<container>@<account>.dfs.core.windows.net/<path>[?blob_storage_authority=
    host:port&dfs_storage_authority=host:port&enable_tls=false]` (the last options reach an emulator)."""
    parsed = urlparse(uri)
    opts = dict(parse_qsl(parsed.query))
    container, _, host = parsed.netloc.rpartition("@")
    account = host.split(".", 1)[0]
    if not container or not account:
        raise ValueError("expected abfs[s]://<container>@<account>.dfs.core.windows.net/<path>")
    tls = parsed.scheme.lower() == "abfss" or opts.get("enable_tls", "true").lower() not in ("false", "0")
    return {"account": account, "container": container, "path": parsed.path.strip("/"),
            "scheme": "https" if tls else "http", "blob_authority": opts.get("blob_storage_authority", ""),
            "dfs_authority": opts.get("dfs_storage_authority", opts.get("blob_storage_authority", ""))}


def _azure_with_key(uri: str) -> tuple[pyarrow.fs.FileSystem, str]:
    """An Azure file system authenticated by the account key in AZURE_STORAGE_ACCOUNT_KEY."""
    import pyarrow.fs as pafs

    loc = azure_location(uri)
    kwargs: dict[str, str] = {"blob_storage_scheme": loc["scheme"], "dfs_storage_scheme": loc["scheme"]}
    if loc["blob_authority"]:
        kwargs.update(blob_storage_authority=loc["blob_authority"], dfs_storage_authority=loc["dfs_authority"])
    fs = pafs.AzureFileSystem(loc["account"], account_key=os.environ[AZURE_KEY_ENV], **kwargs)
    return fs, f"{loc['container']}/{loc['path']}".rstrip("/")


def parallel_map(fn: Callable[[A], B], items: list[A], threads: int, chunk: int = 1) -> list[B]:
    """[fn(x) for x in items], in order, on at most `threads` threads with `chunk` items per task
    (a task per item costs more than a short system call); in this thread when one task would
    do. For calls that wait with the GIL released: system calls, object-store requests. The
    first exception is raised, as the sequential loop would raise it."""
    if len(items) <= chunk:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    chunks = [items[k:k + chunk] for k in range(0, len(items), chunk)]
    with ThreadPoolExecutor(max_workers=min(threads, len(chunks))) as pool:
        return [r for part in pool.map(lambda c: [fn(x) for x in c], chunks) for r in part]


def is_local_location(location: str) -> bool:
    """A path, a `file://` URI or (on Windows) a drive letter: the local file system."""
    scheme = urlparse(location).scheme.lower()
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


# A remote file up to this size is read whole at its first read: one request instead of one per
# read (a zip's end record, its central directory, then each entry are three or more reads).
WHOLE_READ_BYTES = 1 << 20


class _RangedFile:
    """A seekable view of a remote file whose reads never start at or past its end (a GCS ranged
    read there answers HTTP 416) and whose errors are StorageError naming the file. A small file
    (WHOLE_READ_BYTES) is fetched whole once and read from memory."""

    def __init__(self, fh: Any, uri: str) -> None:
        self._fh, self._uri = fh, uri
        self._size = fh.size()
        self._pos = 0
        self._whole: Optional[bytes] = None

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:  # pyarrow's reader of a Python file (a parquet footer and columns) asks
        return bool(self._fh.closed)

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(base + offset, 0)
        return self._pos

    def read(self, n: int = -1) -> bytes:
        if self._pos >= self._size:
            return b""
        n = self._size - self._pos if n is None or n < 0 else min(n, self._size - self._pos)
        try:
            if self._whole is None and self._size <= WHOLE_READ_BYTES:
                self._whole = bytes(self._fh.read_at(self._size, 0))
            data = self._whole[self._pos:self._pos + n] if self._whole is not None else self._fh.read_at(n, self._pos)
        except Exception as exc:  # pyarrow's errors
            raise StorageError(self._uri, _one_line(exc)) from None
        self._pos += len(data)
        return bytes(data)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> _RangedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_fd(fd: int, size: int, limit: int) -> bytes:
    """Up to `limit` bytes of an open regular file of `size` bytes (as fstat saw it), to its
    end. Reads are sized by the file, not by the limit: a read of the limit would allocate it
    (64 MiB) for every small log file. A file that grew since the fstat is read on
    in 1 MiB reads, so the limit still holds."""
    want = min(limit, size + 1)
    data = os.read(fd, want)
    if len(data) < want or len(data) >= limit:
        return data
    parts = [data]
    got = len(data)
    while got < limit:
        part = os.read(fd, min(limit - got, 1 << 20))
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


class Storage:
    """A read-only view of one root folder. Paths passed to methods are relative, `/`-separated."""

    def __init__(self, display: str, local_root: Optional[str] = None,
                 fs: Optional[pyarrow.fs.FileSystem] = None, fs_root: str = "") -> None:
        self.display = display.rstrip("/") or display
        self._local_root = local_root
        self._fs = fs
        self._fs_root = fs_root.rstrip("/")

    # -- construction -------------------------------------------------------------------
    @classmethod
    def open(cls, location: str) -> Storage:
        """Open a local path, a `file://` URI or a remote URI. Raises StorageError for an
        unknown scheme or a file system that cannot be reached."""
        parsed = urlparse(location)
        scheme = parsed.scheme.lower()
        if is_local_location(location):
            path = parsed.path if scheme == "file" else location
            if scheme == "file" and parsed.netloc not in ("", "localhost"):
                raise StorageError(location, "file:// URIs must name a local path (file:///...)")
            path = os.path.abspath(os.path.expanduser(path))
            return cls(display=path, local_root=path)
        if scheme not in REMOTE_SCHEMES:
            raise StorageError(location, f"unsupported URI scheme {scheme!r} "
                               "(use a local path, file://, s3://, gs://, hdfs:// or abfs://)")
        uri = location
        if scheme in ("s3a", "s3n"):
            uri = "s3" + location[len(scheme):]
        if scheme == "gcs":
            uri = "gs" + location[len(scheme):]
        try:
            import pyarrow.fs as pafs

            if scheme in AZURE_SCHEMES and os.environ.get(AZURE_KEY_ENV):
                fs, root = _azure_with_key(uri)
            else:
                fs, root = pafs.FileSystem.from_uri(uri)
        except Exception as exc:  # pyarrow raises ArrowInvalid/OSError with long texts
            raise StorageError(location, f"cannot open file system: {_one_line(exc)}") from None
        return cls(display=location, fs=fs, fs_root=root)

    @classmethod
    def open_local(cls, location: str) -> Optional[Storage]:
        """`open` for a location on the local file system; None for any other, judged on the
        words first (a remote store is never contacted). The agent protocol's rule: the agent
        watches a local folder (pipeline/agent.py, operations/stop.py)."""
        if not is_local_location(location):
            return None
        st = cls.open(location)
        return st if st.is_local else None

    @property
    def is_local(self) -> bool:
        return self._local_root is not None

    def uri(self, rel: str = "") -> str:
        """The user-facing location of `rel` (a local path, or the URI the user gave)."""
        rel = rel.strip("/")
        if not rel:
            return self.display
        base, q, query = self.display.partition("?")  # s3://b/chk?endpoint_override=... keeps its options last
        return f"{base.rstrip('/')}/{rel}{q}{query}"

    def uri_prefix(self) -> Optional[str]:
        """`uri(rel)` is this prefix + `rel.strip("/")` for any `rel` that is not empty; None when
        the location has a query (its options stay last)."""
        return None if "?" in self.display else f"{self.display.rstrip('/')}/"

    def local_prefix(self) -> Optional[str]:
        """The local path of `rel` is this prefix + `rel.strip("/")` (what `sizes` stats); None on
        object stores and where the separator is not "/"."""
        if self._local_root is None or os.sep != "/":
            return None
        return f"{self._local_root.rstrip('/') or ''}/"

    def _local(self, rel: str) -> str:
        assert self._local_root is not None
        rel = rel.strip("/")
        return os.path.join(self._local_root, rel) if rel else self._local_root

    def _remote(self, rel: str) -> str:
        rel = rel.strip("/")
        return f"{self._fs_root}/{rel}" if rel else self._fs_root

    # -- listing ------------------------------------------------------------------------
    def _local_call(self, rel: str, call: Callable[[str], T]) -> Optional[T]:
        """Run `call(path)` on a local path: None when the path does not exist, StorageError
        (naming the path, one line) for any other OS error."""
        path = self._local(rel)
        try:
            return call(path)
        except FileNotFoundError:
            if os.path.islink(path):
                raise StorageError(self.uri(rel), "dangling symlink") from None
            return None
        except OSError as exc:
            raise StorageError(self.uri(rel), _os_reason(exc)) from None

    def list_dir(self, rel: str = "") -> Optional[list[Entry]]:
        """List one folder. None when it does not exist; StorageError when it cannot be listed."""
        if self._local_root is not None:
            def scan(path: str) -> list[Entry]:
                with os.scandir(path) as it:
                    return [Entry(de.name, _is_dir(de)) for de in it]

            return self._local_call(rel, scan)
        return self._list_remote(rel)

    def prefetch(self, rel: str) -> None:
        """On object stores, list the whole subtree `rel` with one recursive (paged) listing and
        answer later list_dir/list_names calls below it from memory: a state folder with hundreds
        of partitions costs a few requests instead of one per folder. A no-op locally, where one
        listing per folder is the cheapest way."""
        if self._local_root is not None or rel.strip("/") in getattr(self, "_prefetch_tried", ()):
            return  # listed already (the inspection lists state/ together with offsets/ and commits/)
        self._prefetch_tried = getattr(self, "_prefetch_tried", set()) | {rel.strip("/")}
        import pyarrow.fs as pafs

        assert self._fs is not None
        base = self._remote(rel)
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        except Exception as exc:
            self._prefetch_tried.discard(rel.strip("/"))  # asked again, it fails where it is asked
            raise StorageError(self.uri(rel), _one_line(exc)) from None
        rel = rel.strip("/")
        folders: dict[str, list[Entry]] = {rel: []}
        for info in infos:
            sub = info.path[len(base):].strip("/")
            parent, _, _name = sub.rpartition("/")
            parent_rel = f"{rel}/{parent}" if parent else rel
            is_dir = info.type == pafs.FileType.Directory
            folders.setdefault(parent_rel, []).append(Entry(
                info.base_name, is_dir, None if is_dir else info.size, None if is_dir else info.mtime_ns))
            if is_dir:
                folders.setdefault(f"{rel}/{sub}", [])
        if not infos:
            return  # missing or empty: let the usual listing tell which
        self._prefetched = getattr(self, "_prefetched", {})
        self._prefetched[rel] = folders

    def _from_prefetch(self, rel: str) -> Optional[tuple[bool, Optional[list[Entry]]]]:
        """(hit, entries) when `rel` lies below a prefetched subtree; entries None = missing."""
        for root, folders in getattr(self, "_prefetched", {}).items():
            if rel == root or rel.startswith(root + "/"):
                return True, folders.get(rel)
        return None

    def _list_remote(self, rel: str) -> Optional[list[Entry]]:
        import pyarrow.fs as pafs

        assert self._fs is not None
        cached = self._from_prefetch(rel.strip("/"))
        if cached is not None:
            return None if cached[1] is None else list(cached[1])
        path = self._remote(rel)
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except Exception as exc:
            text = _one_line(exc)
            if "not a directory" in text.lower() or "is a file" in text.lower():
                raise StorageError(self.uri(rel), "is a file, expected a folder") from None
            raise StorageError(self.uri(rel), text) from None
        if not infos:
            # Object stores have no empty folders; tell "missing" from "empty" by asking.
            try:
                info = self._fs.get_file_info(path)
            except Exception as exc:
                raise StorageError(self.uri(rel), _one_line(exc)) from None
            if info.type == pafs.FileType.NotFound:
                return None
            if info.type == pafs.FileType.File:
                raise StorageError(self.uri(rel), "is a file, expected a folder")
            return []
        out = []
        for info in infos:
            mtime = info.mtime_ns if info.type == pafs.FileType.File else None
            out.append(Entry(info.base_name, info.type == pafs.FileType.Directory,
                             info.size if info.type == pafs.FileType.File else None, mtime))
        return out

    def list_names(self, rel: str = "") -> tuple[list[str], list[str]]:
        """(file names, folder names) of one folder; ([], []) when it does not exist.

        Locally one `scandir`: the kind of each entry comes with the listing (no stat per name),
        so a folder named like a file (`5.delta/`) is seen as the folder it is; names only (no
        Entry per file: a state folder holds hundreds)."""
        if self._local_root is not None:
            def scan(path: str) -> tuple[list[str], list[str]]:
                files: list[str] = []
                dirs: list[str] = []
                # scandir of an open folder: its entries carry no joined path (10% of the listing);
                # is_dir() follows a symlink as scandir(path)'s does (fstatat from the folder)
                fd = os.open(path, os.O_RDONLY | _O_DIRECTORY) if _SCANDIR_FD else -1
                try:
                    with os.scandir(fd if fd >= 0 else path) as it:
                        for de in it:  # _is_dir inlined: a state folder holds hundreds of names
                            try:
                                (dirs if de.is_dir() else files).append(de.name)
                            except OSError:
                                files.append(de.name)
                finally:
                    if fd >= 0:
                        os.close(fd)
                return files, dirs

            return self._local_call(rel, scan) or ([], [])
        entries = self.list_dir(rel) or []
        return [e.name for e in entries if not e.is_dir], [e.name for e in entries if e.is_dir]

    # -- files --------------------------------------------------------------------------
    def lookup(self, rel: str = "") -> Optional[Entry]:
        """The entry at `rel` (with size and mtime), None when missing; StorageError when it
        cannot be asked (permission denied, a dangling symlink, an unreachable endpoint)."""
        if self._local_root is not None:
            st = self._local_call(rel, os.stat)
            if st is None:
                return None
            return Entry(rel.rsplit("/", 1)[-1], stat_mod.S_ISDIR(st.st_mode), st.st_size, st.st_mtime_ns)
        import pyarrow.fs as pafs

        assert self._fs is not None
        try:
            info = self._fs.get_file_info(self._remote(rel))
        except Exception as exc:
            raise StorageError(self.uri(rel), _one_line(exc)) from None
        if info.type == pafs.FileType.NotFound:
            return None
        return Entry(info.base_name, info.type == pafs.FileType.Directory, info.size, info.mtime_ns)

    def sizes(self, rels: list[str]) -> list[int]:
        """The size of each file (0 when missing), in order. Local: one stat each in a plain loop
        (on threads they fight for the GIL: slower, BENCHMARKS.md); object stores: `lookup` on a
        few threads in chunks (each request waits with the GIL released)."""
        def one(rel: str) -> int:
            e = self.lookup(rel)
            return int(e.size or 0) if e is not None else 0

        if self._local_root is None:
            return parallel_map(one, rels, SIZE_THREADS, SIZE_CHUNK)
        prefix, out = self.local_prefix(), []
        for rel in rels:
            try:
                out.append(os.stat(prefix + rel.strip("/") if prefix is not None else self._local(rel)).st_size)
            except OSError:
                out.append(one(rel))  # missing (0), a dangling symlink or permission denied (StorageError)
        return out

    def kind(self, rel: str = "") -> str:
        """'file', 'dir' or 'missing'."""
        entry = self.lookup(rel)
        return "missing" if entry is None else "dir" if entry.is_dir else "file"

    def stat(self, rel: str) -> Entry:
        """Size and modification time of one file or folder; StorageError when missing."""
        entry = self.lookup(rel)
        if entry is None:
            raise StorageError(self.uri(rel), "does not exist")
        return entry

    def read_ends(self, rel: str, head: int, tail: int) -> Optional[tuple[bytes, bytes, int]]:
        """(first `head` bytes, last `tail` bytes, size) of a file, without reading it whole:
        locally two `pread`s (None when it is not a regular file); on object stores and HDFS a
        size request and one ranged read per end (one read when the file is that small).
        StorageError when it cannot be opened."""
        if self._local_root is None:
            return self._remote_ends(rel, head, tail)
        path = self._local(rel)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            try:
                info = os.fstat(fd)
                if not stat_mod.S_ISREG(info.st_mode):
                    return None
                size = info.st_size
                return os.pread(fd, head, 0), os.pread(fd, min(tail, size), max(size - tail, 0)), size
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(self.uri(rel), _os_reason(exc)) from None

    def open_random(self, rel: str) -> Any:
        """A seekable binary file object of `rel` (a context manager): the local file, or
        pyarrow's random access file (ranged reads) on object stores and HDFS. For formats read
        in parts, like a zip's central directory and one entry. StorageError when it cannot be opened."""
        try:
            if self._local_root is not None:
                path = self._local(rel)
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
                if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    raise StorageError(self.uri(rel), "not a regular file")
                return os.fdopen(fd, "rb")
            assert self._fs is not None
            return _RangedFile(self._fs.open_input_file(self._remote(rel)), self.uri(rel))
        except StorageError:
            raise
        except FileNotFoundError:
            raise StorageError(self.uri(rel), "does not exist") from None
        except Exception as exc:  # OSError, pyarrow's errors
            raise StorageError(self.uri(rel), _os_reason(exc) if isinstance(exc, OSError) and self._local_root
                               else _one_line(exc)) from None

    def _remote_ends(self, rel: str, head: int, tail: int) -> tuple[bytes, bytes, int]:
        assert self._fs is not None
        try:
            with self._fs.open_input_file(self._remote(rel)) as fh:
                size = fh.size()
                if size <= head + tail:
                    data = fh.read_at(size, 0) if size else b""
                    return data[:head], data[max(size - tail, 0):], size
                return fh.read_at(head, 0), fh.read_at(tail, size - tail), size
        except FileNotFoundError:
            raise StorageError(self.uri(rel), "does not exist") from None
        except Exception as exc:  # pyarrow's OSError texts span lines
            raise StorageError(self.uri(rel), _one_line(exc)) from None

    def read(self, rel: str, max_bytes: int = DEFAULT_MAX_READ) -> bytes:
        """Read a whole small file. StorageError when missing, unreadable or larger than max_bytes."""
        if self._local_root is not None:
            path = self._local(rel)
            try:
                # O_NONBLOCK: a FIFO where a log file belongs opens without waiting for a writer;
                # only a regular file (or a link to one) is read (docs/formats/README.md#the-reader)
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
                try:
                    info = os.fstat(fd)
                    if not stat_mod.S_ISREG(info.st_mode):
                        mode = info.st_mode
                        what = ("a folder" if stat_mod.S_ISDIR(mode) else "a FIFO" if stat_mod.S_ISFIFO(mode)
                                else "a socket" if stat_mod.S_ISSOCK(mode) else "a device")
                        raise StorageError(self.uri(rel), f"is {what}, not a regular file")
                    data = _read_fd(fd, info.st_size, max_bytes + 1)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise StorageError(self.uri(rel), _os_reason(exc)) from None
        else:
            assert self._fs is not None
            try:
                with self._fs.open_input_stream(self._remote(rel)) as fh:
                    data = fh.read(max_bytes + 1)
            except FileNotFoundError:
                raise StorageError(self.uri(rel), "does not exist") from None
            except Exception as exc:
                raise StorageError(self.uri(rel), _one_line(exc)) from None
        if len(data) > max_bytes:
            raise StorageError(self.uri(rel), f"larger than {max_bytes} bytes; not a checkpoint log file")
        return data

"""The executor's co-processes: one renames local files (renameat2, RENAME_NOREPLACE) while the
executor encodes the journal records of those renames, another reads and hashes the next group
commit's files (their `begin` records' pre-images) meanwhile, and a third fsyncs the folders of
the batch before, so the Python work, the reads, the kernel's renames and the disk's flushes
overlap on two cores.

Why a second interpreter and not a thread: renames and reads are short system calls, each of
which drops and takes back the GIL; two threads doing them hand the GIL over at every call, and
on two cores that costs more than it overlaps (BENCHMARKS.md, "Moves at the storage's speed"). A
co-process has its own GIL. It imports nothing of streamctl but this module and `fsync_dirs`
(inspectors/outputs.py; both stdlib only), and is started with the running interpreter, this
file run as a script in isolated mode without `site` (`python -I -S <this file> <parent pid>`:
about 12 ms of CPU to start instead of 40, three times a mutation; `fsync_dirs` is then loaded
from its file beside this package's), or `python -m streamctl.operations.coprocess <parent pid>`
where the file is not on disk.

Protocol (docs/formats/streamctl.md#the-renaming-hashing-and-syncing-co-processes), bytes on the child's stdin and
stdout, requests answered in order, each read whole before it is answered. Each begins with a head line
`<kind> <n> <bytes>\\n`, `<bytes>` the length of its lines (read in one read; a head without it is
read a line at a time). `m` then 2n lines, the source and target of each rename
(absolute, os.fsencode; renames with a line break in a path are run in process instead); each is
one renameat2(RENAME_NOREPLACE), which never replaces anything. The answer is n lines in the same
order: `0` done, or the errno of the failure (the caller takes its general path for those).
`h` then n lines, absolute paths of files: the answer is n lines, `<size> <sha256 hex>` of
each file as `hash_file` reads it, or `-<errno>` (the caller reads that one itself). `s`
likewise: `<size>` of each (stat), or `-<errno>`. `f` then n lines, absolute paths of
folders: the answer is n lines, `0` once each is fsynced, or `1` when it cannot be opened.
`b`, then a root folder (absolute) and n paths relative to it: answered as `h`, each
file read only where it resolves inside the root (`hash_beneath`; else `-<errno>`), so the
executor sends a whole plan's reads before the plan is checked, several requests at once.
The co-process dies with its parent (PR_SET_PDEATHSIG on Linux, and a check of its parent before
each request): no rename runs after the executor is gone.
"""
from __future__ import annotations

import errno
import io
import os
import sys

# What a co-process imports is what each of the three interpreters a mutation starts pays
# (issue 23): subprocess, threading and hashlib are imported where they are used, typing only for
# the type checker (which takes any `if TYPE_CHECKING:` as true).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    import subprocess
    import threading
    from typing import IO, Callable, Iterable, Optional

RENAME_NOREPLACE = 1
CHUNK = 1 << 20  # bytes per read when hashing

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_noatime = getattr(os, "O_NOATIME", 0)


def hash_file(path: str | bytes, dir_fd: Optional[int] = None, nofollow: bool = False) -> tuple[int, str]:
    """(size, sha256 hex) of a local file, read with plain system calls (no buffered file object:
    half the cost on small files); a folder raises IsADirectoryError. O_NOATIME where the file is
    ours (Linux): reading 100,000 files to hash them should not write 100,000 inodes back.
    `dir_fd`: `path` is relative to that open folder; `nofollow`: a symlink is not followed
    (ELOOP)."""
    global _noatime
    flags = _READ_FLAGS | (_NOFOLLOW if nofollow else 0)
    try:
        fd = os.open(path, flags | _noatime, dir_fd=dir_fd)
    except PermissionError:
        if not _noatime:
            raise
        _noatime = 0  # not the owner of the files: plain reads from now on
        fd = os.open(path, flags, dir_fd=dir_fd)
    import hashlib  # once per process (then a lookup in sys.modules)

    try:
        h = hashlib.sha256()
        size = 0
        while True:
            block = os.read(fd, CHUNK)
            if not block:
                return size, h.hexdigest()
            size += len(block)
            h.update(block)
    finally:
        os.close(fd)


def _hash_line(path: bytes, dir_fd: Optional[int] = None, nofollow: bool = False) -> bytes:
    try:
        size, digest = hash_file(path, dir_fd, nofollow)
    except OSError as exc:
        return b"-%d\n" % (exc.errno or errno.EIO)
    return b"%d %s\n" % (size, digest.encode())


def hash_all(paths: list[bytes]) -> list[bytes]:
    """The answer line of each path of an `h` request: `<size> <sha256 hex>`, or `-<errno>`."""
    return [_hash_line(path) for path in paths]


def hash_beneath(root: bytes, rels: list[bytes]) -> list[bytes]:
    """The answers of a `b` request: as `hash_all` of `root`'s relative paths `rels` (normal:
    no "", "." or ".." part), each opened only where it resolves inside `root`: its folder's
    real path inside root's, the file itself no symlink (O_NOFOLLOW). That is what the runner's
    `check_plan` asks of a step's path, so these reads may start before it has run (issue 23): a
    path it would refuse is never opened here (`-EXDEV`; a symlink: `-ELOOP`; the executor
    reads those itself, after the check). Each folder is resolved and opened once (O_PATH), its
    files opened relative to it."""
    top = os.path.realpath(root)
    inside = top.rstrip(b"/") + b"/"
    folders: dict[bytes, int] = {}  # folder -> open descriptor, or minus the errno
    out = []
    try:
        for rel in rels:
            head, _, name = rel.rpartition(b"/")
            fd = folders.get(head)
            if fd is None:
                real = os.path.realpath(root.rstrip(b"/") + b"/" + head) if head else top
                if real != top and not real.startswith(inside):
                    fd = -errno.EXDEV
                else:
                    try:
                        fd = os.open(real, _FOLDER_FLAGS)
                    except OSError as exc:
                        fd = -(exc.errno or errno.EIO)
                folders[head] = fd
            out.append(b"-%d\n" % -fd if fd < 0 else _hash_line(name, fd, True))
    finally:
        for fd in folders.values():
            if fd >= 0:
                os.close(fd)
    return out


def renameat2() -> Optional[Callable[..., int]]:
    """renameat2 of the C library (Linux, glibc 2.28+), or None."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    # no argtypes: its arguments are passed as they come, ints as C ints and bytes as char
    # pointers (int, const char *, int, const char *, unsigned int): a third less time per call
    # than converting them by a declared list (0.65 us of 1.9, 66,000 times a roll back; issue 23)
    fn.restype = ctypes.c_int
    return fn


def rename_all(fn: Optional[Callable[..., int]], pairs: Iterable[tuple[bytes, bytes]]) -> list[int]:
    """renameat2(src, dst, RENAME_NOREPLACE) of each pair, in order: 0 or the errno. Relative to
    one open descriptor per folder (O_PATH), so the kernel walks each path once per folder, not
    once per file."""
    pairs = list(pairs)
    if fn is None:
        return [errno.ENOSYS] * len(pairs)
    import ctypes

    flags = _FOLDER_FLAGS
    fds: dict[bytes, int] = {}
    out: list[int] = []
    sdir_at = ddir_at = None  # the folders of the pair before: a batch's pairs come folder by folder
    sfd = dfd = -1
    try:
        for src, dst in pairs:
            sdir, _, sname = src.rpartition(b"/")
            ddir, _, dname = dst.rpartition(b"/")
            if sdir != sdir_at or ddir != ddir_at:
                try:
                    sfd = fds.get(sdir, -1)
                    if sfd < 0:
                        sfd = fds[sdir] = os.open(sdir or b"/", flags)
                    dfd = fds.get(ddir, -1)
                    if dfd < 0:
                        dfd = fds[ddir] = os.open(ddir or b"/", flags)
                except OSError as exc:
                    sdir_at = ddir_at = None
                    out.append(exc.errno or errno.ENOSYS)
                    continue
                sdir_at, ddir_at = sdir, ddir
            out.append(0 if fn(sfd, sname, dfd, dname, RENAME_NOREPLACE) == 0 else ctypes.get_errno() or errno.ENOSYS)
    finally:
        for fd in fds.values():
            os.close(fd)
    return out


def size_all(paths: list[bytes]) -> list[bytes]:
    """The answer line of each path of an `s` request: `<size>` (stat, symlinks followed), or
    `-<errno>`."""
    out = []
    for path in paths:
        try:
            out.append(b"%d\n" % os.stat(path).st_size)
        except OSError as exc:
            out.append(b"-%d\n" % (exc.errno or errno.EIO))
    return out


def sync_all(paths: list[bytes]) -> list[bytes]:
    """The answer lines of an `f` request, in order: `0` once a folder is fsynced, `1` when it
    cannot be opened (gone); `fsync_dirs`, the write side's fsync of folders (stdlib only, like
    this module)."""
    return [b"0\n" if ok else b"1\n" for ok in _fsync_dirs()(paths)]


def _fsync_dirs() -> Callable[[list[bytes]], list[bool]]:
    """inspectors/outputs.py's `fsync_dirs`: imported, or, in a co-process run as a script
    (`_command`: no site, so no streamctl package), loaded from its file beside this one's folder."""
    try:
        from streamctl.inspectors.outputs import fsync_dirs
    except ImportError:
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "inspectors", "outputs.py")
        spec = importlib.util.spec_from_file_location("_streamctl_outputs", path)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fsync_dirs = module.fsync_dirs
    return fsync_dirs


def _command() -> list[str]:
    """The co-process's command line: this file as a script of an isolated interpreter without
    `site` (stdlib only, as this module is: neither site-packages nor their .pth files are read),
    else, when the file is not on disk, this module run by `-m`."""
    here = os.path.abspath(__file__)
    if here.endswith(".py") and os.path.isfile(here):
        return [sys.executable, "-I", "-S", here, str(os.getpid())]
    return [sys.executable, "-m", "streamctl.operations.coprocess", str(os.getpid())]


_SERVED = {b"h": hash_all, b"s": size_all, b"f": sync_all}  # one path a line; `m` takes two


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the parent ends (Linux), and an exit now if it is gone already."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def serve(inp: IO[bytes], out: IO[bytes], parent: Optional[int] = None) -> None:
    """The co-process: answer requests until stdin closes. A request is read whole before any
    file is renamed, so the parent's write never waits on the renames."""
    fn = renameat2()
    while True:
        head = inp.readline()
        kind = head[:1]
        if head[1:2] != b" " or (kind not in (b"m", b"b") and kind not in _SERVED):
            return  # stdin closed (or not a request of this protocol)
        renames = kind == b"m"
        count, _, size = head[2:].partition(b" ")
        want = (2 if renames else 1) * int(count) + (kind == b"b")
        if size.strip():  # the lines' bytes given (`_request`): one read and one split
            lines = inp.read(int(size)).split(b"\n")
            if len(lines) != want + 1 or lines.pop():
                return  # short, or not the lines it said: not this protocol
        else:
            lines = [inp.readline()[:-1] for _ in range(want)]
        if parent is not None and os.getppid() != parent:
            return  # the executor is gone: nothing more is renamed or read
        if renames:
            pairs = iter(lines)
            codes = rename_all(fn, zip(pairs, pairs, strict=True))
            out.write(b"0\n" * len(codes) if not any(codes) else b"".join(b"%d\n" % e for e in codes))
        elif kind == b"b":
            out.write(b"".join(hash_beneath(lines[0], lines[1:])))
        else:
            out.write(b"".join(_SERVED[kind](lines)))
        out.flush()


PIPE_BYTES = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size


def _widen(pipe: Optional[IO[bytes]]) -> None:
    """Let a pipe hold a whole request (F_SETPIPE_SZ, Linux): with the default 64 KiB, the
    first batch's 8,192 paths (700 KB) sent to a hasher still starting up kept the executor
    waiting 45 ms for its interpreter, and every batch of renames (1.5 MB) crossed in 23 turns
    of both processes (issue 23). Where it cannot be widened, it works as before."""
    if pipe is None or not sys.platform.startswith("linux"):
        return
    import fcntl

    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setsize is None:
        return
    try:
        fcntl.fcntl(pipe.fileno(), setsize, PIPE_BYTES)
    except OSError:
        pass  # over the limit a user may set: the default size


def _request(kind: bytes, lines: list[str], n: int) -> Optional[bytes]:
    """The bytes of a request: `<kind> <n> <bytes>` and its lines (`<bytes>` long, each ended by a
    line break: the co-process reads them in one read and splits them in one call, not a
    readline per path), encoded at once; None when a line holds a line break (such a request is
    not sent: done in process)."""
    text = "\n".join(lines)
    if text.count("\n") != len(lines) - 1:
        return None
    body = os.fsencode(text)
    return b"%s %d %d\n%s\n" % (kind, n, len(body) + 1, body)


def _lines(data: Optional[bytes]) -> Optional[list[bytes]]:
    """An answer's lines without their line breaks (None stays None: the co-process failed)."""
    return None if data is None else data.split(b"\n")[:-1]


class CoProcess:
    """A co-process, started on first use: `submit` renames (or `submit_hashes` reads), later
    `renamed` (or `hashes`) gives their answers (one request at a time). Any failure of the
    co-process (it cannot start, it died, a short answer) makes the answer None and stops using
    it: the caller then renames or reads in process."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._broken = False
        self._waiting = 0  # answers sent for and not read, of the request in flight
        self._queued: list[int] = []  # and of the requests sent after it (`queue_hashes`), in order
        self._rest = b""  # answer bytes read past the request in flight (theirs)
        self._writer: Optional[threading.Thread] = None  # writing the queued requests
        self._nicer = 0  # the niceness it takes on top of its parent's (`step_back`)

    def submit(self, pairs: list[tuple[str, str]]) -> bool:
        """Send renames (source, target: absolute local paths) to run in order; False when they
        were not sent (nothing of them was renamed)."""
        return bool(pairs) and self._send(b"m", [p for pair in pairs for p in pair], len(pairs))

    def submit_hashes(self, paths: list[str]) -> bool:
        """Send absolute local paths of files to read and hash, in order; False when not sent."""
        return bool(paths) and self._send(b"h", paths, len(paths))

    def queue_hashes(self, requests: list[tuple[str, list[str]]]) -> bool:
        """Send `b` requests, (root folder, paths relative to it) each, to be answered one by one
        by `hashes()` in this order; written by a thread (the co-process reads them as it goes:
        a whole plan's paths fill the pipe many times over). False when they were not sent."""
        if self._broken or self._waiting or self._writer is not None or not requests:
            return False
        data, counts = [], []
        for root, rels in requests:
            request = _request(b"b", [root, *rels], len(rels)) if rels else None
            if request is None:  # an empty request; a line break in a path
                return False
            data.append(request)
            counts.append(len(rels))
        if self._proc is None:
            try:
                self._start()
            except OSError:
                self.close()
                return False
        stdin = self._proc.stdin if self._proc is not None else None
        if stdin is None:
            return False

        def write() -> None:
            try:
                stdin.write(b"".join(data))
                stdin.flush()
            except (OSError, ValueError):
                pass  # it died (or was stopped): its answers come short, and the caller reads in process

        self._waiting, self._queued = counts[0], counts[1:]
        import threading

        self._writer = threading.Thread(target=write, name="streamctl-coprocess-write", daemon=True)
        self._writer.start()
        return True

    def submit_sizes(self, paths: list[str]) -> bool:
        """Send absolute local paths of files to stat, in order; False when not sent."""
        return bool(paths) and self._send(b"s", paths, len(paths))

    def submit_syncs(self, paths: list[str]) -> bool:
        """Send absolute local paths of folders to fsync, in order; False when not sent."""
        return bool(paths) and self._send(b"f", paths, len(paths))

    def spawn(self) -> None:
        """Start the co-process now, so its start-up overlaps the caller's work (else the first
        request starts it). A failure to start shows at that request, as always."""
        if self._proc is None and not self._broken:
            try:
                self._start()
            except OSError:
                self.close()

    def step_back(self, by: int) -> None:
        """Lower the co-process's scheduling priority by `by` (its nice value), now or as it
        starts, where the system lets us; nothing otherwise."""
        self._nicer = by
        self._renice()

    def _renice(self) -> None:
        if self._proc is None or not self._nicer:
            return
        try:
            pid = self._proc.pid
            os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, pid) + self._nicer))
        except (OSError, AttributeError):
            pass

    def _start(self) -> None:
        import subprocess

        self._proc = subprocess.Popen(_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._renice()
        for pipe in (self._proc.stdin, self._proc.stdout):
            _widen(pipe)

    def _send(self, kind: bytes, lines: list[str], n: int) -> bool:
        if self._broken or self._waiting:
            return False
        data = _request(kind, lines, n)
        if data is None:
            return False
        try:
            if self._proc is None:
                self._start()
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except OSError:
            self.close()
            return False
        self._waiting = n
        return True

    def answered(self) -> bool:
        """Whether the answer of the request in flight has begun to come, so that reading it
        waits no longer than its writing (the co-process writes an answer whole, once it is
        done); True with nothing in flight or no co-process (the read then says so)."""
        if self._proc is None or self._proc.stdout is None or not self._waiting or self._rest:
            return True
        import select

        try:
            ready, _, _ = select.select([self._proc.stdout], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(ready)

    def _answers(self) -> Optional[list[bytes]]:
        """The answer lines of the request in flight, without their line breaks."""
        return _lines(self._answer())

    def _answer(self) -> Optional[bytes]:
        """The answer of the request in flight, its lines as they came, each ended by a line
        break; None when the co-process failed."""
        if self._proc is None or not self._waiting:
            return None
        out: io.BufferedReader = self._proc.stdout  # type: ignore[assignment]  # Popen's pipe, buffered (bufsize -1)
        assert out is not None
        chunks, got = ([self._rest], self._rest.count(b"\n")) if self._rest else ([], 0)
        self._rest = b""
        try:  # in as few reads as the pipe gives (a readline per answer was 8,192 calls a batch)
            while got < self._waiting:
                chunk = out.read1(1 << 20)
                if not chunk:
                    raise OSError("the co-process ended")
                chunks.append(chunk)
                got += chunk.count(b"\n")
        except OSError:
            self.close()
            return None
        if got > self._waiting and self._queued:  # the next queued request's answers began: kept for it
            last = chunks.pop()
            keep = last.count(b"\n") - (got - self._waiting)  # lines of `last` that are this request's
            parts = last.split(b"\n", keep)
            self._rest = parts.pop()
            if parts:
                chunks.append(b"\n".join(parts) + b"\n")
            got = self._waiting
        if got != self._waiting or not chunks[-1].endswith(b"\n"):  # more than it was asked: not this protocol
            self.close()
            return None
        self._waiting = self._queued.pop(0) if self._queued else 0
        return b"".join(chunks)

    def _numbers(self) -> Optional[list[int]]:
        """The answers of the request in flight, one integer each; None when the co-process failed."""
        n = self._waiting
        data = self._answer()
        if data is not None and len(data) == 2 * n and data == b"0\n" * n:  # all done (the usual batch): no int() per line
            return [0] * n
        lines = _lines(data)
        try:
            return None if lines is None else [int(line) for line in lines]
        except ValueError:
            self.close()
            return None

    def renamed(self) -> Optional[list[int]]:
        """The answers of the submitted renames: 0 (done) or the errno, each; None when the
        co-process failed (then any of them may or may not have happened: the caller finds out
        from the files, after this returned: the co-process has ended by then)."""
        return self._numbers()

    def synced(self) -> Optional[list[int]]:
        """The answers of the submitted folder fsyncs: 0 (fsynced) or 1 (the folder could not be
        opened), each; None when the co-process failed (then the caller fsyncs them itself)."""
        return self._numbers()

    def sizes(self) -> Optional[list[int]]:
        """The answers of the submitted stats: each file's size, or minus the errno of the failure;
        None when the co-process failed."""
        return self._numbers()

    def hashes(self) -> Optional[list[tuple[int, str] | int]]:
        """The answers of the submitted reads: (size, sha256 hex) of each file, or the errno of
        the failure to read it; None when the co-process failed."""
        data = self._answer()
        if data is None:
            return None
        out: list[tuple[int, str] | int] = []
        try:
            if data[:1] != b"-" and b"\n-" not in data:  # every file read (the usual answer): parsed at once
                n = data.count(b"\n")
                parts = data.decode("ascii").split()
                digests = parts[1::2]
                if len(parts) != 2 * n or data.count(b" ") != n or set(map(len, digests)) != {64}:
                    raise ValueError("not <size> <sha256> lines")
                return list(zip(map(int, parts[::2]), digests, strict=True))
            for line in data.split(b"\n")[:-1]:
                if line[:1] == b"-":
                    out.append(int(line[1:]))
                    continue
                size, digest = line.split()
                if len(digest) != 64:
                    raise ValueError(line)
                out.append((int(size), digest.decode("ascii")))
        except ValueError:
            self.close()
            return None
        return out

    def stop(self) -> None:
        """Tell the co-process to end (`close` waits for it): its input closed when every answer
        was read, else (a failure, an operation that stops early) killed. No more requests."""
        self._broken = True
        proc = self._proc
        if proc is None:
            return
        if self._waiting:
            proc.kill()
        writer, self._writer = self._writer, None
        if writer is not None:  # its write ends: the requests were read, or the co-process is gone
            writer.join()
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass

    def close(self) -> None:
        """End the co-process (`stop`), and return when it has ended."""
        self.stop()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        import subprocess

        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


if __name__ == "__main__":
    _parent = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else None
    if _parent is not None:
        _die_with_parent(_parent)
    serve(sys.stdin.buffer, sys.stdout.buffer, _parent)
    os._exit(0)  # every answer is flushed: no interpreter teardown for the parent to wait for


# -- co-processes started ahead --------------------------------------------------------------------
# A mutation that will move many local files wants three co-processes right after its plan is
# made; each interpreter takes ~30 ms to start, and three starting at once there delayed the
# first batch's reads by 130 ms (issue 23). `warm` starts them before the plan is made, while one
# core idles; the executor `take`s them; `cool` ends those nothing took.
_WARM: list[CoProcess] = []


def warm(n: int) -> None:
    """Have `n` co-processes started (not yet asked anything)."""
    while len(_WARM) < n:
        co = CoProcess()
        co.spawn()
        _WARM.append(co)


def take() -> CoProcess:
    """A co-process `warm` started, else a new one (started on first use)."""
    return _WARM.pop(0) if _WARM else CoProcess()


def cool() -> None:
    """End the co-processes `warm` started that were not taken (all told, then each waited for)."""
    idle, _WARM[:] = list(_WARM), []
    for co in idle:
        co.stop()
    for co in idle:
        co.close()

"""Read and hash local files (size, sha256): in this process (`hash_file`), or in a co-process
that hashes the next group commit's files while the executor renames the current one's.

Why a second interpreter and not a thread: the reads and the renames are short system calls,
each of which drops and takes back the GIL; two threads doing them hand the GIL over at every
call, and on two cores that costs more than it overlaps (BENCHMARKS.md, "Moves at the storage's
speed"). A co-process has its own GIL. It imports nothing of streamctl but this module (stdlib
only), and is started with the running interpreter: `python -m streamctl.operations.hasher`.

Protocol (docs/formats/streamctl.md#the-hashing-co-process), bytes on the child's stdin and
stdout: a request is `<n>\\n` then n paths, one per line (os.fsencode; a batch with a line
break in a path is hashed in process instead); the answer is n lines in the same order:
`<size> <sha256 hex>`, `-` when nothing is there, `?` for anything else (a folder, permission
denied, ...), which the caller asks again in process so its errors read as they always do.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from typing import IO, Optional

CHUNK = 1 << 20
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
_noatime = getattr(os, "O_NOATIME", 0)

Digest = tuple[int, str]


def hash_file(path: "str | bytes") -> Digest:
    """(size, sha256 hex) of a local file, read with plain system calls (no buffered file object:
    half the cost on small files); a folder raises IsADirectoryError. O_NOATIME where the file is
    ours (Linux): reading 100,000 files to hash them should not write 100,000 inodes back."""
    global _noatime
    try:
        fd = os.open(path, _READ_FLAGS | _noatime)
    except PermissionError:
        if not _noatime:
            raise
        _noatime = 0  # not the owner of the files: plain reads from now on
        fd = os.open(path, _READ_FLAGS)
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


def _answer(path: bytes) -> bytes:
    try:
        size, hexdigest = hash_file(path)
    except FileNotFoundError:
        return b"-"
    except OSError:
        return b"?"
    return b"%d %s" % (size, hexdigest.encode())


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The co-process: answer requests until stdin closes. A request is read whole before any
    file is hashed, so the parent's write never waits on the hashing."""
    while True:
        head = inp.readline()
        if not head:
            return
        paths = [inp.readline()[:-1] for _ in range(int(head))]
        out.write(b"".join(_answer(p) + b"\n" for p in paths))
        out.flush()


class Hasher:
    """The co-process, started on first use; `submit` a batch of paths, later `result` it. Any
    failure of the co-process (it cannot start, it died, a short answer) makes `result` return
    None for that batch and stops using it: the caller then hashes in process."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._broken = False

    def submit(self, paths: list[str]) -> Optional[int]:
        """Send one batch; its size to pass to `result`, None when it was not sent."""
        if self._broken or not paths:
            return None
        data = [os.fsencode(p) for p in paths]
        if any(b"\n" in p for p in data):
            return None
        try:
            if self._proc is None:
                self._proc = subprocess.Popen([sys.executable, "-m", "streamctl.operations.hasher"],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert self._proc.stdin is not None
            self._proc.stdin.write(b"%d\n%s\n" % (len(data), b"\n".join(data)))
            self._proc.stdin.flush()
        except OSError:
            self.close(kill=True)
            return None
        return len(data)

    def result(self, n: Optional[int]) -> Optional[list[Optional[Digest] | str]]:
        """The answers of a submitted batch: (size, sha256), None (nothing there) or "?" (ask
        again in process); None when the co-process failed."""
        if n is None or self._proc is None:
            return None
        assert self._proc.stdout is not None
        out: list[Optional[Digest] | str] = []
        try:
            for _ in range(n):
                line = self._proc.stdout.readline()
                if not line.endswith(b"\n"):
                    raise OSError("the hashing co-process ended")
                if line == b"-\n":
                    out.append(None)
                elif line == b"?\n":
                    out.append("?")
                else:
                    size, hexdigest = line.split()
                    out.append((int(size), hexdigest.decode()))
        except (OSError, ValueError):
            self.close(kill=True)
            return None
        return out

    def close(self, kill: bool = False) -> None:
        """End the co-process: when every answer was read, by closing its input; else (a failure,
        an operation that stops early) by killing it."""
        self._broken = True
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if kill:
            proc.kill()
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)

"""Folder trees: snapshots, to prove what an operation changed (or that it changed nothing), and
the quiet copy, move and removal of a tree a Spark session wrote (`wait_quiet`, `copy_tree`,
`move_tree`, `remove_tree`): every test that copies, moves or removes such a tree uses them."""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any, Callable, Iterable


def tree(base: Path) -> dict[str, str]:
    """relative path -> sha256 of each file below base (symlinks: "link:" + their target, not followed)."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(base):
        for f in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / f
            out[str(p.relative_to(base))] = ("link:" + os.readlink(p)) if p.is_symlink() else \
                hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def snapshot_tree(root: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file below root (to prove nothing was written)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                st = p.lstat()
            except OSError:
                continue
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


# -- quiet trees: copying, moving and removing what a Spark session wrote ---------------------------
#
# The shared session's state store maintenance thread outlives a query: every 200 ms
# (pipeline/session.py) it may still write a snapshot into a stopped query's checkpoint, as a
# `.<name>.<uuid>.tmp` file renamed into place, and after a failed run a task of the aborted stage
# may still write. A copy taken then holds a temp file no restart reads (align would plan to move
# it), or fails when the file is renamed away mid-copy; a removal fails with "directory not empty".
# So every copy, move and removal of a tree a Spark session wrote waits until the tree is quiet,
# then acts, and acts again where a writer still raced it.

QUIET_S = 0.6  # nothing changed for this long: quiet (three maintenance intervals)
TIMEOUT_S = 10.0  # the longest one wait for quiet lasts; what still races is retried
ATTEMPTS = 8
_POLL_S = 0.1


def _listing(root: Path) -> tuple[dict[str, tuple[int, int, int]], int]:
    """relative path -> (mode, size, mtime_ns) of `root` and every entry below it (links not
    followed), and the newest mtime_ns among them. A folder's mtime changes with every entry made,
    removed or renamed in it, so a temp file written and renamed between two listings shows."""
    out: dict[str, tuple[int, int, int]] = {}
    newest = 0

    def add(path: str) -> None:
        nonlocal newest
        try:
            st = os.lstat(path)
        except OSError:  # gone between the listing and the lstat: the next listing shows it
            return
        out[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
        newest = max(newest, st.st_mtime_ns)

    add(str(root))
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            add(os.path.join(dirpath, n))
    return out, newest


def wait_quiet(root: Path, quiet_s: float = QUIET_S, timeout_s: float = TIMEOUT_S) -> bool:
    """Wait until nothing at or below `root` has changed for `quiet_s` (no entry made, removed,
    renamed, written or touched): True once quiet, False when `timeout_s` passed first (the callers
    below then retry what raced). A tree whose newest change is already `quiet_s` old is quiet at
    once (a modification time in the future counts as now)."""
    deadline = time.monotonic() + timeout_s
    last, newest = _listing(Path(root))
    since = min(newest / 1e9, time.time())
    while True:
        idle = time.time() - since
        if idle >= quiet_s:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(_POLL_S, quiet_s - idle))
        now, _ = _listing(Path(root))
        if now != last:
            last, since = now, time.time()


def _copy_entry(src: str, dest: str) -> None:
    """One entry of a copy: a named pipe made anew (opening it would block until a writer came),
    anything else copied with its times."""
    if stat.S_ISFIFO(os.lstat(src).st_mode):
        os.mkfifo(dest)
        shutil.copystat(src, dest)
    else:
        shutil.copy2(src, dest)


def _temps(root: Path) -> list[str]:
    return [os.path.join(d, n) for d, _dirs, files in os.walk(root) for n in files if n.endswith(".tmp")]


def copy_tree(src: Path, dest: Path, *, replace: bool = False,
              ignore: Callable[[str, list[str]], Iterable[str]] | None = None,
              quiet_s: float = QUIET_S, timeout_s: float = TIMEOUT_S, attempts: int = ATTEMPTS) -> Path:
    """Copy the tree at `src` to `dest` once `src` is quiet; returns `dest`. Links are copied as
    links (never followed), named pipes made anew (never opened), everything else with its times;
    `ignore` as shutil.copytree's. `dest` must not exist, unless `replace`: then it is removed
    first (remove_tree), and removed again when a writer made it again before the copy.

    The copy is what `src` held while nothing wrote: copied again when `src` changed during the
    copy (a file written, a temp file renamed away mid-copy). A copy that holds a `*.tmp` file is
    kept only when `src` stays unchanged a further `quiet_s` after it, so a state store's temp file
    about to be renamed into place is never copied as part of the tree (a temp file the tree keeps,
    a test's own, is). AssertionError after `attempts` copies."""
    src, dest = Path(src), Path(dest)
    for _ in range(attempts):
        if replace:
            remove_tree(dest, quiet_s=quiet_s, timeout_s=timeout_s, attempts=attempts)
        elif os.path.lexists(dest):
            raise FileExistsError(f"{dest}: already there (replace=True replaces it)")
        try:
            return _copy_quiet(src, dest, ignore, quiet_s, timeout_s, attempts)
        except FileExistsError:  # a writer of the old tree made `dest` again after its removal
            if not replace:
                raise
    raise AssertionError(f"{dest}: made again by a writer after each of {attempts} removals")


def _copy_quiet(src: Path, dest: Path, ignore: Any, quiet_s: float, timeout_s: float, attempts: int) -> Path:
    why = ""
    for _ in range(attempts):
        wait_quiet(src, quiet_s, timeout_s)
        before, _newest = _listing(src)
        try:
            shutil.copytree(src, dest, symlinks=True, ignore=ignore, copy_function=_copy_entry)
        except shutil.Error as exc:  # an entry gone mid-copy
            why = f"an entry vanished mid-copy: {str(exc)[:300]}"
        else:
            if _temps(dest):
                time.sleep(quiet_s)
            if _listing(src)[0] == before:
                return dest
            why = "it changed during the copy" + (f" (the copy caught {_temps(dest)[:3]})" if _temps(dest) else "")
        if os.path.lexists(dest):
            shutil.rmtree(dest)
    raise AssertionError(f"{src}: still being written after {attempts} copies: {why}")


def remove_tree(path: Path, *, quiet_s: float = QUIET_S, timeout_s: float = TIMEOUT_S,
                attempts: int = ATTEMPTS) -> None:
    """Remove the tree at `path` (or the file, link or named pipe; nothing there is fine) once it
    is quiet. Removed again while a writer still races it ("directory not empty", an entry gone
    mid-removal, the tree made again); when one did, it must then stay gone for `quiet_s`.
    AssertionError after `attempts` removals."""
    path = Path(path)
    raced, why = False, ""
    for _ in range(attempts):
        if not os.path.lexists(path):
            if not raced or _stays_gone(path, quiet_s):
                return
            why = "made again after its removal"
            continue
        raced |= not wait_quiet(path, quiet_s, timeout_s)
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError as exc:  # ENOTEMPTY, or ENOENT: a writer made or renamed an entry meanwhile
            raced, why = True, str(exc)[:300]
    if not os.path.lexists(path) and _stays_gone(path, quiet_s):
        return
    raise AssertionError(f"{path}: still being written after {attempts} removals: {why}")


def _stays_gone(path: Path, quiet_s: float) -> bool:
    deadline = time.monotonic() + quiet_s
    while time.monotonic() < deadline:
        if os.path.lexists(path):
            return False
        time.sleep(min(_POLL_S / 2, quiet_s))
    return not os.path.lexists(path)


def move_tree(src: Path, dest: Path, *, quiet_s: float = QUIET_S, timeout_s: float = TIMEOUT_S) -> Path:
    """Move the tree at `src` to `dest` (which must not exist; its parent must) as `mv` does, once
    `src` is quiet: one rename on one file system, else copy_tree then remove_tree. Returns `dest`."""
    src, dest = Path(src), Path(dest)
    if os.path.lexists(dest):
        raise FileExistsError(f"{dest}: already there")
    wait_quiet(src, quiet_s, timeout_s)
    try:
        os.rename(src, dest)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        copy_tree(src, dest, quiet_s=quiet_s, timeout_s=timeout_s)
        remove_tree(src, quiet_s=quiet_s, timeout_s=timeout_s)
    return dest

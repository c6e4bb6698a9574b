"""The quiet-tree helpers of tests/helpers/trees.py against a writer that is still busy, as the
shared Spark session's state store maintenance thread is after a query stopped (no Spark here)."""
from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from helpers.trees import copy_tree, move_tree, remove_tree, tree

TMP = ".{n}.snapshot.3f1e2d4c-0000-1111-2222-333344445555.tmp"


def _snapshots(folder: Path, first: int, count: int, started: threading.Event) -> None:
    """Snapshots first..first+count-1, each a temp file written in two pieces, then renamed into
    place (as Hadoop's atomic create does), then a pause: about 0.1 s each, most of it with no temp
    file there (so a copy taken without waiting mostly catches none, and only the wait holds it)."""
    for n in range(first, first + count):
        tmp = folder / TMP.format(n=n)
        with open(tmp, "wb") as fh:
            for _ in range(2):
                fh.write(b"s" * 100)
                fh.flush()
                started.set()
                time.sleep(0.01)
        os.rename(tmp, folder / f"{n}.snapshot")
        time.sleep(0.08)


def test_a_copy_waits_until_the_writer_is_done_and_holds_no_temp_file(tmp_path: Path) -> None:
    src = tmp_path / "chk"
    part = src / "state/0/0"
    part.mkdir(parents=True)
    (part / "1.delta").write_bytes(b"d")
    started = threading.Event()
    writer = threading.Thread(target=_snapshots, args=(part, 2, 10, started))
    writer.start()
    assert started.wait(5)
    copy_tree(src, tmp_path / "copy", quiet_s=0.5)  # the writer pauses at most 0.08 s
    copied_after_the_writer = not writer.is_alive()
    writer.join()
    assert copied_after_the_writer  # a copy taken while it wrote would miss the later snapshots
    assert tree(tmp_path / "copy") == tree(src)
    assert set(os.listdir(tmp_path / "copy/state/0/0")) == {"1.delta"} | {f"{n}.snapshot" for n in range(2, 12)}


def test_a_temp_file_renamed_just_after_the_copy_is_not_kept(tmp_path: Path, monkeypatch: Any) -> None:
    """The tree was quiet and unchanged through the copy, but its temp file is renamed into place a
    moment later: the copy is taken again, without it."""
    src = tmp_path / "chk"
    part = src / "state/0/0"
    part.mkdir(parents=True)
    tmp = part / TMP.format(n=4)
    tmp.write_bytes(b"s")
    old = time.time() - 60
    for p in (tmp, part, part.parent, src / "state", src):
        os.utime(p, (old, old))
    real = shutil.copytree
    timers: list[threading.Timer] = []

    def copytree(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        if not timers:
            timers.append(threading.Timer(0.05, os.rename, (tmp, part / "4.snapshot")))
            timers[0].start()
        return out

    monkeypatch.setattr(shutil, "copytree", copytree)
    copy_tree(src, tmp_path / "copy", quiet_s=0.6)
    timers[0].join()
    assert os.listdir(tmp_path / "copy/state/0/0") == ["4.snapshot"]


def test_a_temp_file_the_tree_keeps_is_copied(tmp_path: Path) -> None:
    src = tmp_path / "chk"
    (src / "offsets").mkdir(parents=True)
    (src / "offsets" / TMP.format(n=8)).write_text("v1\n")
    copy_tree(src, tmp_path / "copy", quiet_s=0.1)
    assert tree(tmp_path / "copy") == tree(src)


def test_a_named_pipe_is_copied_and_moved_as_a_pipe_never_opened(tmp_path: Path) -> None:
    src = tmp_path / "chk"
    (src / "offsets").mkdir(parents=True)
    (src / "offsets/2").write_text("v1\n")
    os.mkfifo(src / "offsets/3")
    os.symlink("2", src / "offsets/newest")
    copier = threading.Thread(target=copy_tree, args=(src, tmp_path / "copy"), kwargs={"quiet_s": 0.1})
    copier.start()
    copier.join(10)
    blocked = copier.is_alive()
    if blocked:  # a reader blocked in open() gets end-of-file
        os.close(os.open(src / "offsets/3", os.O_WRONLY | os.O_NONBLOCK))
        copier.join()
    assert not blocked, "the copy opened the named pipe"
    _same_kinds(tmp_path / "copy")
    _same_kinds(move_tree(tmp_path / "copy", tmp_path / "moved", quiet_s=0.1))
    assert not (tmp_path / "copy").exists()


def _same_kinds(root: Path) -> None:
    assert stat.S_ISFIFO(os.lstat(root / "offsets/3").st_mode), root
    assert os.readlink(root / "offsets/newest") == "2" and (root / "offsets/2").read_text() == "v1\n"


def test_a_removal_retries_while_a_writer_makes_files_again(tmp_path: Path, monkeypatch: Any) -> None:
    """The writer outlasts the wait for quiet: removals race it (directory not empty, the tree made
    again by its mkdirs) until it is done; the tree is then gone and stays gone."""
    root = tmp_path / "chk"
    part = root / "state/0/0"
    stop_at = time.monotonic() + 1.0

    def write() -> None:
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            try:
                part.mkdir(parents=True, exist_ok=True)
                (part / f".{n}.tmp").write_bytes(b"x")
                os.rename(part / f".{n}.tmp", part / f"{n}.delta")
            except OSError:  # the removal took the folder meanwhile
                pass
            time.sleep(0.002)

    part.mkdir(parents=True)
    writer = threading.Thread(target=write)
    writer.start()
    real = shutil.rmtree
    calls: list[str] = []

    def rmtree(path: Any, *args: Any, **kw: Any) -> Any:
        calls.append(str(path))
        return real(path, *args, **kw)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    remove_tree(root, quiet_s=0.3, timeout_s=0.3)
    writer.join()
    assert not root.exists()
    assert len(calls) >= 2, calls


def test_copy_tree_refuses_an_existing_destination_unless_it_replaces_it(tmp_path: Path) -> None:
    src, dest = tmp_path / "a", tmp_path / "b"
    (src / "commits").mkdir(parents=True)
    (src / "commits/0").write_text("v1\n")
    (dest / "stale").mkdir(parents=True)
    with pytest.raises(FileExistsError):
        copy_tree(src, dest, quiet_s=0.1)
    copy_tree(src, dest, replace=True, quiet_s=0.1)
    assert tree(dest) == tree(src)
    remove_tree(dest, quiet_s=0.1)
    remove_tree(dest, quiet_s=0.1)  # nothing there: fine
    assert not dest.exists()

"""Local writes of streamctl's own files outside the write side: the outputs of `inspect` (JSON
lines, Parquet, the metrics file), the agent's lease and stop requests, and the coordinated sink's
folder fsyncs. Never a checkpoint's or a sink's files: those are written by operations/files.py
(`Root`) alone. Storage (inspectors/storage.py) only reads.
"""
from __future__ import annotations

import os
from typing import Callable


def atomic_write(path: str, write: Callable[[str], None]) -> None:
    """`write(tmp)` to a temporary file beside `path` (`.<name>.<random>.tmp`), then rename it
    over `path`: readers see the old file or the new one, never half of one. The one local
    atomic writer of the read side and the pipeline side (outputs of `inspect`, the agent's
    lease, stop requests); the write side's is operations/files.py Root.write_atomic."""
    import tempfile

    path = os.path.abspath(os.path.expanduser(path))
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text_atomic(path: str, text: str) -> None:
    """`path` holds `text` (UTF-8, fsynced before the rename), written by `atomic_write`."""
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())

    atomic_write(path, write)


def fsync_dir(path: str | bytes) -> bool:
    """fsync a local folder, so the renames, creates and deletes in it are durable; False when it
    cannot be opened (gone). A folder the file system cannot fsync is not an error. For the two
    writers on the local file system, operations/files.py and the coordinated sink
    (pipeline/coordinated_sink.py); reading never calls it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    return True


FSYNC_THREADS = 8  # folder fsyncs in flight at once


def fsync_dirs(paths: list[str] | list[bytes]) -> list[bool]:
    """`fsync_dir` of each folder, in order, on FSYNC_THREADS threads: each fsync of a folder
    ends in a flush of the disk's cache even when the file system's journal holds it already,
    and concurrent fsyncs share those flushes. For the write side's `Root.sync_parents`."""
    if len(paths) < 2:
        return [fsync_dir(p) for p in paths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(FSYNC_THREADS, len(paths))) as pool:
        return list(pool.map(fsync_dir, paths))

"""A two-way split of local, CPU-bound inspection work over a forked child (issue 23 goal 1).

Listing and judging the 600 store folders of a 132,000-file checkpoint is Python work on one
core: about 0.18 s of `inspect epochs`' 0.30 s (BENCHMARKS.md, session 16). `fork_map` computes the second half of a list of
independent units in a forked child while the parent computes the first half, and takes the
child's results back pickled through a pipe (docs/reading.md#the-split-inspection).

It is the serial loop whenever the split cannot be trusted or cannot pay: fewer units than
`min_items`, one CPU, a system other than Linux, or another thread in the process (a fork copies
only the calling thread: a lock another thread holds stays held in the child). If the
child fails in any way (an exception, a signal, a result that does not unpickle), the parent
computes those units itself, so errors surface in the serial order with the serial text.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import warnings
from typing import Callable, Sequence, TypeVar

CHILD_SHARE = 0.46

T = TypeVar("T")
R = TypeVar("R")


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Linux, two CPUs or more, and no other thread runs but rich's spinner redraw
    (`inspect`'s progress line on a terminal: it only writes to the terminal, which the child
    never does)."""
    if not sys.platform.startswith("linux") or cpus() < 2:  # where it is tested (macOS' system libraries and fork disagree)
        return False
    me = threading.current_thread()
    return all(t is me or _redraws_only(t) for t in threading.enumerate())


def _redraws_only(thread: threading.Thread) -> bool:
    kind = type(thread)
    return kind.__name__ == "_RefreshThread" and kind.__module__ == "rich.live"


def fork_map(fn: Callable[[T], R], items: Sequence[T], min_items: int) -> list[R]:
    """[fn(x) for x in items], the second half computed in a forked child when that can pay."""
    if len(items) < max(min_items, 2) or not can_fork():
        return [fn(x) for x in items]
    # the child's share: it also pickles its answer, which the parent then unpickles (measured:
    # each side's wait is shortest near 46 %)
    half = len(items) - int(len(items) * CHILD_SHARE)
    read_fd, write_fd = os.pipe()
    try:  # room for the whole answer (Linux; 1 MiB is the default limit): the child need not wait
        import fcntl

        fcntl.fcntl(write_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass
    try:
        with warnings.catch_warnings():  # 3.12+ warns of any other thread: can_fork allowed this one
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return [fn(x) for x in items]
    if pid == 0:  # the child: compute, send, leave without running the parent's exit handlers
        code = 1
        try:
            os.close(read_fd)
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it quietly; the parent reports
            data = pickle.dumps([fn(x) for x in items[half:]], protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view):]
            code = 0
        except BaseException:  # noqa: BLE001 - any failure: the parent computes these units itself
            pass
        finally:
            os._exit(code)
    os.close(write_fd)
    reaped = False
    try:
        head = [fn(x) for x in items[:half]]
        chunks = []
        while True:
            chunk = os.read(read_fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
        reaped = True
        tail = None
        if os.waitstatus_to_exitcode(status) == 0:
            try:
                tail = pickle.loads(b"".join(chunks))
            except Exception:  # noqa: BLE001 - a damaged answer: computed here instead
                tail = None
        if not isinstance(tail, list) or len(tail) != len(items) - half:
            tail = [fn(x) for x in items[half:]]
        return head + tail
    finally:
        os.close(read_fd)
        if not reaped:  # the parent's half raised: the child's work is not wanted
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(pid, 0)

"""Local, CPU-bound inspection work shared with a forked child (issue 23 goal 1).

Listing and judging the 600 store folders of a 132,000-file checkpoint is Python work: about
0.18 s on one core (BENCHMARKS.md). `fork_map` computes a list of independent units on two
cores: the parent takes units from the start of the list, a forked child takes them from the end,
and each marks a unit in a shared table of bytes (`claims`) before it computes it, so the two
meet wherever their speeds put them (docs/reading.md#the-split-inspection). The child sends its
results back pickled through a pipe, by one pickler whose memo lasts the child's life: an object
sent before (the shape of a store listed like another, inspectors/state.py) is sent again as a
reference to the first, which the parent's one unpickler resolves.

The child can also be started early (`start_early`): by the `streamctl` entry point, before the
CLI's own imports (typer, the commands: about 55 ms), for `inspect epochs` of one local
checkpoint. It works out the units itself (the logs' newest batches, the partition folders) and
starts on them while the parent imports; `fork_map` joins it when the parent's own key of the
work (the checkpoint, its units, the versions it judges them against) is the child's, and
discards it otherwise.

It is the serial loop whenever the split cannot be trusted or cannot pay: fewer units than
`min_items`, one CPU, a system other than Linux, or another thread in the process (a fork copies
only the calling thread: a lock another thread holds stays held in the child). If the child
fails in any way (an exception, a signal, a result that does not unpickle), the parent computes
its units itself, so errors surface in the serial order with the serial text.
"""
from __future__ import annotations

import io
import os
import pickle
import signal
import sys
import threading
import warnings
from typing import Any, Callable, Optional, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

FREE, PARENT, CHILD = 0, 1, 2  # a unit's byte in `claims`
EARLY_CLAIMS = 1 << 20  # the early child's claim table (bytes; pages are mapped as touched): units at most
PIPE_SIZE = 1 << 20  # room for a whole answer (Linux; 1 MiB is the default limit): the child need not wait

#: (key, fn, items) of the work a child does; None when it has none
Job = Optional[tuple[Any, Callable[[Any], Any], Sequence[Any]]]
Work = Callable[[], Job]


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


class _Child:
    """A forked child taking units from the end of `claims`. It sends pickled messages, each an
    8-byte length and its bytes: an early child its key first, then one (unit, result) per unit
    as it is done, which the parent takes between its own units (`poll`). One pickler writes
    them all and one unpickler reads them (`_Sender`): once a message fails to unpickle, none
    after it is read (its references could resolve to other objects)."""

    def __init__(self, claims: Any, work: Work) -> None:
        import fcntl

        self.claims = claims
        read_fd, write_fd = os.pipe()
        try:
            fcntl.fcntl(write_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
        except OSError:
            pass
        try:
            with warnings.catch_warnings():  # 3.12+ warns of any other thread: can_fork allowed this one
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:  # the child: never returns into the parent's stack nor runs its exit handlers
            os.close(read_fd)
            os._exit(_serve(claims, write_fd, work))
        os.close(write_fd)
        self.pid: Optional[int] = pid
        self.fd = read_fd
        self.buffer = bytearray()
        self.stream = io.BytesIO()
        self.unpickler = pickle.Unpickler(self.stream)
        self.broken = False
        self.blocking = True
        self.done: dict[int, Any] = {}  # the child's results by unit

    def key(self) -> Any:
        """An early child's first message, its key (waiting for it); None when it ended without one."""
        while True:
            message = self._next()
            if message is not None:
                return message[0]
            if not self._read(blocking=True):
                return None

    def poll(self) -> None:
        """Take the results the child has sent so far, without waiting."""
        if self._read(blocking=False):
            self._parse()

    def finish(self) -> dict[int, Any]:
        """Every result the child sent, once it has ended (reaped)."""
        while self._read(blocking=True):
            pass
        self._parse()
        self._reap(kill=False)
        return self.done

    def kill(self) -> None:
        """End the child and reap it (its work is not wanted)."""
        self._reap(kill=True)

    def _read(self, blocking: bool) -> bool:
        """Read what the pipe holds (blocking: wait for something); False at its end or when
        nothing is there yet."""
        if blocking != self.blocking:
            os.set_blocking(self.fd, blocking)
            self.blocking = blocking
        try:
            chunk = os.read(self.fd, PIPE_SIZE)
        except BlockingIOError:
            return False
        self.buffer += chunk
        return bool(chunk)

    def _next(self) -> Optional[tuple[Any]]:
        """The next whole message in the buffer, as a 1-tuple; None when there is none yet (or
        it does not unpickle: the units it held are computed by the parent)."""
        if len(self.buffer) < 8:
            return None
        size = int.from_bytes(self.buffer[:8], "little")
        if len(self.buffer) < 8 + size:
            return None
        data = bytes(self.buffer[8:8 + size])
        del self.buffer[:8 + size]
        if self.broken:
            return (None,)
        self.stream.seek(0)
        self.stream.truncate()
        self.stream.write(data)
        self.stream.seek(0)
        try:
            return (self.unpickler.load(),)
        except Exception:  # noqa: BLE001 - a damaged message: what it held, and all after it, is computed here
            self.broken = True
            return (None,)

    def _parse(self) -> None:
        while True:
            message = self._next()
            if message is None:
                return
            if isinstance(message[0], tuple) and len(message[0]) == 2 and isinstance(message[0][0], int):
                self.done[message[0][0]] = message[0][1]

    def _reap(self, kill: bool) -> None:
        if self.pid is None:
            return
        if kill:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        os.waitpid(self.pid, 0)
        self.pid = None
        os.close(self.fd)


def _serve(claims: Any, fd: int, work: Work) -> int:
    """The child's life: its units from the end of the list, each result sent as it is done,
    until it meets the parent's units (or the parent is gone). 0 when it met them."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it quietly; the parent reports
        job = work()
        if job is None:
            return 1
        key, fn, items = job
        send = _Sender(fd).send
        if key is not _LATE:
            send(key)
        if len(items) > len(claims):
            return 1
        parent = os.getppid()
        for j in range(len(items) - 1, -1, -1):
            if claims[j] != FREE or os.getppid() != parent:
                break
            claims[j] = CHILD
            send((j, fn(items[j])))
        return 0
    except BaseException:  # noqa: BLE001 - any failure (a message that did not pickle whole among them:
        return 1  # the memos would disagree): the child ends, the parent computes the units it did not send


class _Sender:
    """The child's messages, written by one pickler (its memo kept: the objects it holds stay
    alive, so no id is reused). An object sent is sent again as a reference to what the parent
    read the first time: a unit's answer is never changed after it is sent (read_state's and the
    digests' answers are new objects, or immutable ones shared between answers)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = io.BytesIO()
        self.pickler = pickle.Pickler(self.buffer, protocol=pickle.HIGHEST_PROTOCOL)

    def send(self, value: Any) -> None:
        self.pickler.dump(value)
        data = self.buffer.getvalue()
        self.buffer.seek(0)
        self.buffer.truncate()
        view = memoryview(len(data).to_bytes(8, "little") + data)
        while view:
            view = view[os.write(self.fd, view):]


_LATE = object()  # the key of a child forked by fork_map itself: it sends no key
_early: Optional[_Child] = None
_registered = 0  # exit handlers start_early registered (cli/entry.py `_leave` knows them as its own)


def start_early(work: Work) -> None:
    """Fork a child that runs `work()` and starts on its units at once; `fork_map` with the
    same key joins it, any other call (or the end of the process) discards it."""
    global _early
    if _early is not None or not can_fork():
        return
    import atexit
    import mmap

    try:
        _early = _Child(mmap.mmap(-1, EARLY_CLAIMS), work)
    except OSError:
        return
    atexit.register(discard_early)
    global _registered
    _registered += 1


def discard_early() -> None:
    global _early
    child, _early = _early, None
    if child is not None:
        child.kill()


def fork_map(fn: Callable[[T], R], items: Sequence[T], min_items: int, key: Any = None) -> list[R]:
    """[fn(x) for x in items], shared with a forked child when that can pay; with the early
    child when it was started for the same `key` (its work: the same units and `fn`)."""
    child = _take_early(key, len(items))
    if child is None:
        if len(items) < max(min_items, 2) or not can_fork():
            return [fn(x) for x in items]
        import mmap

        try:
            child = _Child(mmap.mmap(-1, len(items)), lambda: (_LATE, fn, items))
        except OSError:
            return [fn(x) for x in items]
    claims = child.claims
    head: list[R] = []
    try:
        for i, item in enumerate(items):
            if claims[i] != FREE:  # the child's from here on (or it is taking it now: computed twice, kept once)
                break
            claims[i] = PARENT
            head.append(fn(item))
            child.poll()
        done = child.finish()
    except BaseException:
        child.kill()  # the parent's units raised: the child's work is not wanted
        raise
    # the child's units; any it did not send (it failed) computed here, in order
    return head + [done[i] if i in done else fn(items[i]) for i in range(len(head), len(items))]


def _take_early(key: Any, count: int) -> Optional[_Child]:
    """The early child when its key is `key`; it is discarded for any other key (a call
    without a key leaves it)."""
    global _early
    if key is None or _early is None:
        return None
    child, _early = _early, None
    if count <= len(child.claims) and child.key() == key:
        return child
    child.kill()
    return None

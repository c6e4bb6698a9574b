"""The grammar of the restart oracle's actions (tests/helpers/oracle.py): what an incident or an
operator does to a pipeline's folders. An action is a plain record (:class:`Action`) and
:func:`apply` carries it out on a copy of a clean pipeline, returning where its folders are now.

Dimensions:
* ``log``: ``offsets``, ``commits``, ``sources`` (the file source's log), ``sink`` (the sink's
  commit log: `_spark_metadata/`, `_delta_log/`, `_commits/`), ``state`` (partition 0's store
  files), ``metadata``;
* ``which``: the ``newest``, ``oldest`` kept or a ``middle`` file of that log;
* ``how``: ``delete``, ``truncate`` (half of it), ``empty``, ``corrupt`` (bytes changed in
  place), ``number`` (a numeric field of a JSON line out of range), ``fifo`` (a named pipe in its
  place), ``folder`` (an empty folder in its place), ``zeroed`` (its bytes all zero, its size
  kept: what a crash leaves of a file whose data never reached the disk);
* ``set.<field>.<low|high|back|ahead>``: that numeric field of the newest file (its last
  occurrence) set below zero, above a Java long, two below its value (in range, and wrong: a
  batch or an offset gone back), or ten years of milliseconds above it (in range: a clock or an
  offset far forward; not the watermarks, which data with event times ahead moves as far), its
  checksum companions dropped (kept, Hadoop's checksum fails the read of
  any change, as ``number`` shows): every field of :data:`FIELDS`;
* ``crc``: its checksum companions (Hadoop's ``.N.crc``, Spark's ``N.crc``) ``keep`` as they are
  or ``drop`` with it;
* ``move``: the ``checkpoint``, the ``output``, the ``input`` or ``all`` three (the pipeline's
  folder renamed) to another place;
* ``change``: the next version of the query restarts on the checkpoint (oracle_shapes.CHANGES:
  a stateful operator added or removed, the deduplication key changed, the input read under
  another path), judged by ``streamctl preflight``;
* ``scene``: ``new_checkpoint`` (a new query over the old sink), ``retired`` (drop-sink with
  --assume-stopped), ``reprocess`` (offsets/ and commits/ deleted to reprocess, state left),
  ``live_busy``, ``live_idle``, ``live_stopping`` (the query runs without the agent).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from helpers.oracle_shapes import Layout
from helpers.trees import move_tree

LOGS = ("offsets", "commits", "sources", "sink", "state", "metadata")
WHICH = ("newest", "oldest", "middle")
HOWS = ("delete", "truncate", "empty", "corrupt", "number", "fifo", "folder", "zeroed")
CRCS = ("keep", "drop")
MOVES = ("checkpoint", "output", "input", "all")
SCENES = ("new_checkpoint", "retired", "reprocess", "live_busy", "live_idle", "live_stopping")
OUT_OF_RANGE = ("-7", "9223372036854775808")  # below every id, above a Java long
# the numeric fields of each JSON log (the set.<field>.<side> actions); a shape whose newest file
# has no such field has no case
FIELDS = {
    "offsets": ("batchWatermarkMs", "batchTimestampMs", "logOffset", "0"),  # "0": a Kafka partition's offset
    "commits": ("nextBatchWatermarkMs",),
    "sources": ("timestamp", "batchId"),
    "sink": ("size", "modificationTime", "blockReplication", "blockSize",  # a file sink's entries (Delta's add too)
             "version", "timestamp", "lastUpdated", "readVersion",  # Delta's txn and commitInfo
             "epoch", "committed_at_ms", "num_writers", "partition", "attempt", "rows"),  # a coordinated record
}
SIDES = ("low", "high", "back", "ahead")  # below zero, above a Java long, two below, ten years above
AHEAD_MS = 10 * 365 * 24 * 3600 * 1000
# an event-time watermark ahead is what data with event times ahead gives: nothing on disk tells
# a hand edit from it
NOT_AHEAD = ("batchWatermarkMs", "nextBatchWatermarkMs")


@dataclass(frozen=True)
class Action:
    kind: str  # "damage" | "move" | "scene" | "change" | "none"
    log: str = ""
    which: str = ""
    how: str = ""
    crc: str = "keep"
    what: str = ""  # the move's or the scene's

    def id(self) -> str:
        if self.kind == "damage":
            return f"{self.log}-{self.which}-{self.how}" + ("-crcdrop" if self.crc == "drop" else "")
        if self.kind in ("move", "scene", "change"):
            return f"{self.kind}-{self.what}"
        return "none"

    @classmethod
    def parse(cls, text: str) -> Action:
        """The inverse of :meth:`id` (for ``./dev oracle --case``)."""
        parts = text.split("-")
        if parts[0] in ("move", "scene", "change"):
            return cls(parts[0], what="-".join(parts[1:]))
        if text == "none":
            return cls("none")
        crc = "drop" if parts[-1] == "crcdrop" else "keep"
        log, which, how = parts[:3]
        return cls("damage", log, which, how, crc)


class NoTarget(Exception):
    """The action has nothing to act on in this shape (no state in a stateless query, one file)."""


# -- the files of a log --------------------------------------------------------------------------

def _numbered(folder: Path, suffixes: tuple[str, ...] = ("",), unique_ids: bool = False) -> list[Path]:
    """The files of `folder` named `<n><suffix>`, by number (Spark's log files, state versions);
    with `unique_ids` also `<n>_<unique id><suffix>` (RocksDB state files of checkpoint format 2),
    ordered by number, then name."""
    out = []
    if not folder.is_dir():
        return out
    for p in folder.iterdir():
        for suf in suffixes:
            stem = p.name[: len(p.name) - len(suf)] if suf and p.name.endswith(suf) else (p.name if not suf else None)
            if stem is not None and unique_ids and "_" in stem:
                stem = stem.split("_", 1)[0]
            if stem is not None and stem.isdigit():
                out.append((int(stem), p.name, p))
                break
    return [p for _n, _name, p in sorted(out)]


def log_files(lay: Layout, log: str, sink: str) -> list[Path]:
    ck = lay.checkpoint
    if log in ("offsets", "commits"):
        return _numbered(ck / log)
    if log == "sources":
        return _numbered(ck / "sources" / "0", ("", ".compact"))
    if log == "metadata":
        return [ck / "metadata"] if (ck / "metadata").exists() else []
    if log == "sink":
        if sink == "delta":
            return _numbered(lay.output / "_delta_log", (".json",))
        if sink == "coordinated":
            return _numbered(lay.output / "_commits", (".json",))
        return _numbered(lay.output / "_spark_metadata", ("", ".compact"))
    if log == "state":
        part = ck / "state" / "0" / "0"
        if not part.is_dir():
            return []
        stores = [d for d in sorted(part.iterdir()) if d.is_dir() and not d.name.startswith("_")
                  and d.name != "SSTs"]
        folder = stores[0] if stores and not any(part.glob("*.delta")) and not any(part.glob("*.changelog")) \
            and not any(part.glob("*.zip")) else part
        return _numbered(folder, (".delta", ".snapshot", ".changelog", ".zip"), unique_ids=True)
    raise ValueError(log)


def pick(files: list[Path], which: str) -> Path:
    if not files:
        raise NoTarget("no file")
    if which == "newest":
        return files[-1]
    if which == "oldest":
        return files[0]
    if len(files) < 3:
        raise NoTarget("no middle file")
    return files[len(files) // 2]


def companions(path: Path) -> list[Path]:
    return [c for c in (path.with_name(f".{path.name}.crc"), path.with_name(f"{path.name}.crc")) if c.exists()]


# -- the damage ------------------------------------------------------------------------------------

def damage(path: Path, how: str, crc: str) -> str:
    """Damage `path` in place; returns what was done (for the report)."""
    data = path.read_bytes()
    if crc == "drop":
        for c in companions(path):
            c.unlink()
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        if len(data) < 2:
            raise NoTarget("too short to truncate")
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "corrupt":
        if not data:
            raise NoTarget("empty file")
        mid = len(data) // 2
        span = min(8, len(data) - mid)
        path.write_bytes(data[:mid] + bytes((b ^ 0x5A) for b in data[mid:mid + span]) + data[mid + span:])
    elif how == "zeroed":
        if not data:
            raise NoTarget("empty file")
        path.write_bytes(bytes(len(data)))
    elif how == "number":
        new = _number_out_of_range(data)
        if new is None:
            raise NoTarget("no numeric field")
        path.write_bytes(new)
    elif how.startswith("set."):
        _set, name, side = how.split(".")
        new = _field_set(data, name, side)
        if new is None:
            raise NoTarget(f"no numeric field {name}")
        path.write_bytes(new)
    elif how == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif how == "folder":
        path.unlink()
        path.mkdir()
    else:
        raise ValueError(how)
    return f"{how} {path.name}" + (" (checksum companions dropped)" if crc == "drop" else "")


def _number_out_of_range(data: bytes) -> Optional[bytes]:
    """The last numeric JSON value of the file set out of range (below zero for the first such
    field on an odd position, above a Java long otherwise): ids, offsets, watermarks, sizes."""
    import re

    text = data.decode("utf-8", "replace")
    found = list(re.finditer(r'"([A-Za-z_]+)"\s*:\s*(-?\d+)', text))
    if not found:
        return None
    m = found[-1]
    value = OUT_OF_RANGE[len(found) % 2]
    return (text[: m.start(2)] + value + text[m.end(2):]).encode()


def _field_set(data: bytes, name: str, side: str) -> Optional[bytes]:
    """The last numeric value of the JSON field `name` set below zero, above a Java long, two
    below what it was, or AHEAD_MS above it (None when there is no such field, or it is below 2
    to go back from)."""
    import re

    text = data.decode("utf-8", "replace")
    found = list(re.finditer(r'"' + re.escape(name) + r'"\s*:\s*(-?\d+)', text))
    if not found:
        return None
    m = found[-1]
    if side == "back":
        if int(m.group(1)) < 2:
            return None
        value = str(int(m.group(1)) - 2)
    elif side == "ahead":
        value = str(int(m.group(1)) + AHEAD_MS)
    else:
        value = OUT_OF_RANGE[SIDES.index(side)]
    return (text[: m.start(1)] + value + text[m.end(1):]).encode()


def unblock(path: Path) -> None:
    """A reader blocked in open() on a FIFO gets end-of-file (the oracle's timeout)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    os.close(fd)


def release_readers(paths: list[Path], timeout: float = 15.0) -> None:
    """Unblock the FIFOs of `paths` until none has a reader left: a task thread blocked in open()
    outlives the query the oracle stopped, and once the case's tree is put back its pipe is gone
    from every path: that thread, and its executor slot, would stay blocked for every later case.
    A writer's non-blocking open succeeds only while a reader is there."""
    import time

    deadline = time.monotonic() + timeout
    while paths and time.monotonic() < deadline:
        readers = False
        for path in paths:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            os.close(fd)
            readers = True
        if not readers:
            return
        time.sleep(0.1)


# the thread names (Linux keeps 15 characters) of a Spark task and of the micro-batch thread: one of
# them blocked opening a pipe stops the query for good; a maintenance thread's would not
QUERY_THREADS = ("Executor task l", "stream executio")


def blocked_on_pipe() -> bool:
    """Whether a task or micro-batch thread of a process this one started (the JVM) waits in open()
    for a named pipe's writer (its wait channel `wait_for_partner`, Linux): nobody writes the
    oracle's pipes, so that restart waits forever. Read from /proc, never by opening the pipe
    (a writer's open would let the reader on)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    todo, ours = list(children.get(os.getpid(), [])), []
    while todo:
        pid = todo.pop()
        ours.append(pid)
        todo.extend(children.get(pid, []))
    for pid in ours:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                    if f.read().strip() != "wait_for_partner":
                        continue
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip().startswith(QUERY_THREADS):
                        return True
            except OSError:
                continue
    return False


def fifos(root: Path) -> list[Path]:
    import stat

    out = []
    for dirpath, dirs, files in os.walk(root):
        for n in files + dirs:
            p = Path(dirpath, n)
            try:
                if stat.S_ISFIFO(os.lstat(p).st_mode):
                    out.append(p)
            except OSError:
                pass
    return out


# -- moves ----------------------------------------------------------------------------------------

def move(lay: Layout, what: str, work: Path) -> Layout:
    """Move one folder (or the pipeline's whole folder) as `mv` does; the new layout."""
    if what == "all":
        base = lay.checkpoint.parent
        new = work / "moved-pipeline"
        move_tree(base, new)
        return Layout(new / lay.input.name, new / lay.checkpoint.name, new / lay.output.name)
    dest = work / "moved" / what
    dest.parent.mkdir(parents=True, exist_ok=True)
    src = {"checkpoint": lay.checkpoint, "output": lay.output, "input": lay.input}[what]
    move_tree(src, dest)
    return Layout(dest if what == "input" else lay.input, dest if what == "checkpoint" else lay.checkpoint,
                  dest if what == "output" else lay.output)

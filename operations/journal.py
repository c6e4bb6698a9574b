"""The journal of a backup folder (docs/formats/streamctl.md#the-journal): its closed set of event kinds,
how records are written (group commits: one write and one fsync locally, one new segment object on
object stores), read back (a torn line of a crashed run skipped, anything else unknown refused) and
encoded, and the JSON encoding (orjson) its records share with plan.json and manifest.json. The executor,
the runner, teardown and the Kafka group offsets write records through `Journal`; nothing else
reads or writes a journal's bytes.
"""
from __future__ import annotations

import enum
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import orjson

from streamctl.inspectors.logs import load_json
from streamctl.inspectors.storage import parallel_map
from streamctl.operations.files import Root
from streamctl.operations.plan import Refused

JOURNAL_FILE = "journal.jsonl"
SEGMENT_DIR = "journal"  # object stores: journal/<n>.jsonl, one object per group commit
_SEGMENT = re.compile(r"([0-9]+)\.jsonl")
CRASH_ENV = "STREAMCTL_TEST_CRASH_AFTER"
CRASH_EXIT = 86
READ_THREADS = 8  # segment objects read at once


class Event(str, enum.Enum):
    """Every kind of journal record, the whole set: a journal holding another is refused."""
    START = "start"  # the operation began (op id, pid, steps)
    BEGIN = "begin"  # a step is about to run (durable before the step: what was there, `pre`)
    DONE = "done"  # a step ran (its manifest entry)
    FINISHED = "finished"  # every step ran
    VERIFIED = "verified"  # the verification after the steps (ok, what was found)
    REFUSED = "refused"  # the plan made under the lock was refused
    UNDO_START = "undo_start"
    UNDO_DONE = "undo_done"  # a step undone
    UNDONE = "undone"  # every step undone
    PURGE_BEGIN = "purge_begin"  # drop-sink --purge: deleting archived copies
    PURGE_DONE = "purge_done"
    WRITER_STOPPED = "writer_stopped"  # drop-sink: the writer stopped (lease, stop request)
    DRAINED = "drained"  # drop-sink: planned == committed == sink epoch


class Conflict(Refused):
    """The files no longer look like the journal says: refuse rather than guess (exit 4)."""


@dataclass
class JournalState:
    started: bool = False
    begun: dict[int, dict[str, Any]] = field(default_factory=dict)  # first begin record per step
    done: dict[int, dict[str, Any]] = field(default_factory=dict)
    finished: bool = False
    verified: Optional[dict[str, Any]] = None
    undone: set[int] = field(default_factory=set)
    undo_finished: bool = False
    purged: bool = False  # drop-sink --purge deleted the archived copies


class Journal:
    """The journal of one backup folder. Local: journal.jsonl, appended with one write and one
    fsync per group commit. Object stores (no append): each group commit is a new segment object
    journal/<n>.jsonl, created only if absent (the store's conditional create, as the lock), so
    nothing written is ever rewritten and a long operation writes each record once."""

    _writes = 0  # per process, for the crash hook

    def __init__(self, backup: Root) -> None:
        self.backup = backup
        self._next: Optional[int] = None  # object stores: the number of the next segment
        self._checked_end = False  # local: whether the file's end was checked for a torn line

    def path(self) -> str:
        return journal_location(self.backup)

    def append(self, record: dict[str, Any]) -> None:
        self.append_many([record])

    def append_many(self, records: list[dict[str, Any]]) -> None:
        """Append records and make them durable together: one write and one fsync (local), one
        new segment object (object stores). The group commit of the executor."""
        if not records:
            return
        for r in records:  # the closed schema: a writer naming another event is a bug, not a record
            Event(r["event"])
        now = int(time.time() * 1000)
        lines = [record_line(r, now) for r in records]
        crash_after = os.environ.get(CRASH_ENV)
        crash_at = None
        if crash_after and crash_after.isdigit() and Journal._writes + len(lines) >= int(crash_after):
            crash_at = max(int(crash_after) - Journal._writes, 0)  # test hook: die right after that record
            lines = lines[:crash_at]
        data = b"".join(lines)
        if self.backup.is_local:
            self._append_local(data)
        elif data:
            self._write_segment(data)
        Journal._writes += len(lines)
        if crash_at is not None:
            os._exit(CRASH_EXIT)  # test hook: die like a killed process, no cleanup

    def _append_local(self, data: bytes) -> None:
        path = self.backup.local(JOURNAL_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "ab+") as fh:
            if not self._checked_end:  # a torn last line of a crashed run: never glue a record to it
                self._checked_end = True
                if fh.tell() > 0 and os.pread(fh.fileno(), 1, fh.tell() - 1) != b"\n":
                    data = b"\n" + data
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def _write_segment(self, data: bytes) -> None:
        """One group commit on an object store: the next segment, created only if no object has its
        name (listed once per process: the lock is ours, so no one else numbers segments)."""
        if self._next is None:
            self._next = max(self._segments(), default=0) + 1
        rel = f"{SEGMENT_DIR}/{self._next:06d}.jsonl"
        if not self.backup.create_exclusive(rel, data):
            raise Conflict(f"{self.backup.uri(rel)} already exists: another process writes this journal "
                           "(the lock is no longer ours); nothing was overwritten")
        self._next += 1

    def _segments(self) -> list[int]:
        """The numbers of the journal's segment objects, ascending (names other than <n>.jsonl are
        not segments)."""
        found = [_SEGMENT.fullmatch(e.name) for e in self.backup.storage.list_dir(SEGMENT_DIR) or [] if not e.is_dir]
        return sorted(int(m.group(1)) for m in found if m)

    def _chunks(self) -> list[bytes]:
        """The journal's bytes in record order: journal.jsonl (local, or an object store's backup
        of the earlier single-object layout), then the segments by number."""
        chunks = [self.backup.read_all(JOURNAL_FILE)] if self.backup.exists(JOURNAL_FILE) else []
        if self.backup.is_local:
            return chunks
        numbers = self._segments()
        self._next = max(numbers, default=0) + 1
        return chunks + parallel_map(lambda n: self.backup.read_all(f"{SEGMENT_DIR}/{n:06d}.jsonl"), numbers,
                                             READ_THREADS)

    def read(self) -> JournalState:
        """The journal's records applied in order. A line that is not JSON is a torn line of a
        crashed run (a resume appends after it, so it may sit in the middle) and is skipped; a JSON
        line that is not a journal record (not an object, an event that is not a name, a step that
        is not a step number) is refused (Conflict): an undo or a resume never acts on records it
        cannot read."""
        state = JournalState()
        where = journal_location(self.backup)
        for chunk in self._chunks():  # each on its own: a torn end never runs into the next chunk
            lines = chunk.decode("utf-8", "replace").splitlines()
            for i, line in enumerate(lines):
                try:
                    rec = load_json(line)
                except ValueError:
                    continue  # a torn line of a crashed run
                if not isinstance(rec, dict) or not _apply_record(state, rec):
                    raise Conflict(f"{where}: line {i + 1} is not a journal record (an unknown event or a bad step "
                                   "number); refusing to act on it, nothing was changed")
        return state


def _step_of(rec: dict[str, Any]) -> Optional[int]:
    step = rec.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def _apply_record(state: JournalState, rec: dict[str, Any]) -> bool:
    """Apply one record; False when it is not a record this journal writes (an event outside
    `Event`, or a step record without a step number)."""
    try:
        ev = Event(rec.get("event"))
    except ValueError:
        return False
    if ev in (Event.BEGIN, Event.DONE, Event.UNDO_DONE) and _step_of(rec) is None:
        return False
    if ev is Event.START:
        state.started = True
    elif ev is Event.BEGIN:
        state.begun.setdefault(int(rec["step"]), rec)
    elif ev is Event.DONE:
        state.done[int(rec["step"])] = rec
    elif ev is Event.FINISHED:
        state.finished = True
    elif ev is Event.VERIFIED:
        state.verified = rec
    elif ev is Event.UNDO_DONE:
        state.undone.add(int(rec["step"]))
    elif ev is Event.UNDONE:
        state.undo_finished = True
    elif ev is Event.PURGE_BEGIN:
        state.purged = True
    return True


def journal_location(backup: Root) -> str:
    """Where a backup's journal is: its journal.jsonl (local) or its journal/ folder of segments."""
    return backup.uri(JOURNAL_FILE if backup.is_local else SEGMENT_DIR)


# The JSON of the backup folder: orjson (Rust; sorted keys, UTF-8, compact). Measured on the
# 58,561-file trim (BENCHMARKS.md): 117,122 journal records in 80 ms against 245 ms for the
# hand-written encoders it replaces and 594 ms for json.dumps. Readers take any JSON: journals,
# plans and manifests written by earlier versions (json.dumps' spacing, ASCII escapes) resume and
# undo as before.
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
_LINE = _SORTED | orjson.OPT_APPEND_NEWLINE


def encode(doc: Any) -> bytes:
    """A document's JSON: keys sorted, compact, UTF-8."""
    return orjson.dumps(doc, option=_SORTED)


def record_line(rec: dict[str, Any], now: int) -> bytes:
    """One journal line: the record with its `time_ms`, keys sorted, and a newline."""
    return orjson.dumps(dict(rec, time_ms=now), option=_LINE)


def json_file(doc: dict[str, Any]) -> bytes:
    """plan.json / manifest.json: one key per line at the top, lists one item per line, each
    item compact (a 100,000-step plan stays greppable by path, one step per line)."""
    parts = []
    for key in sorted(doc):
        value, name = doc[key], orjson.dumps(key)
        if isinstance(value, list) and value:
            parts.append(b"  " + name + b": [\n    " + b",\n    ".join(orjson.dumps(v, option=_SORTED) for v in value)
                         + b"\n  ]")
        else:
            parts.append(b"  " + name + b": " + orjson.dumps(value, option=_SORTED))
    return b"{\n" + b",\n".join(parts) + b"\n}\n"

"""The journal of a backup folder (docs/formats/streamctl.md#the-journal): its closed set of event kinds,
how records are written (group commits: one write and one fsync locally, one new segment object on
object stores), read back (a torn line of a crashed run skipped, anything else unknown refused) and
encoded, and the JSON encoding its records share with plan.json and manifest.json. The executor,
the runner, teardown and the Kafka group offsets write records through `Journal`; nothing else
reads or writes a journal's bytes.
"""
from __future__ import annotations

import enum
import json
import json.encoder
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from streamctl.formats.reader import load_json
from streamctl.inspectors.storage import parallel_map
from streamctl.operations.files import Root
from streamctl.operations.plan import Refused, Step

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
        data = "".join(lines).encode()
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


_quote = json.encoder.encode_basestring_ascii  # what json.dumps does with a str (ensure_ascii)
_BEGIN_KEYS = frozenset(("event", "step", "action", "root", "path", "pre"))
_DIGEST_KEYS = frozenset(("size", "sha256"))
_ENTRY_KEYS = ("action", "backup", "path", "root", "sha256", "size", "uri")  # a manifest entry, sorted
_ENTRY_KEY_SET = frozenset(_ENTRY_KEYS)
_STEP_KEY_SET = frozenset(("action", "path", "reason", "root"))  # a plan step without content


_QUOTED: dict[str, str] = {}  # _q's memo: actions, root names, reasons repeat over 100,000 steps


def _q(v: str) -> str:
    """_quote of a string that repeats (an action, a root name, a step's reason), memoised."""
    t = _QUOTED.get(v)
    if t is None:
        if len(_QUOTED) > 4096:
            _QUOTED.clear()
        t = _QUOTED[v] = _quote(v)
    return t


class _Entry(dict):  # type: ignore[type-arg]
    """A manifest entry that keeps its JSON text: the done record and manifest.json write the
    same text, encoded once (`_entry_json`). Never changed after it is made."""

    __slots__ = ("text",)
    text: str


def _scalar(v: Any) -> str:
    """json.dumps of a str, int or None (the common cases) without the encoder's set-up per call."""
    if type(v) is str:  # noqa: E721
        return _quote(v)
    if v is None:
        return "null"
    if type(v) is int:  # noqa: E721 - not bool
        return str(v)
    return json.dumps(v)


def _entry_json(m: dict[str, Any]) -> str:
    """json.dumps(m, sort_keys=True) of a manifest entry (or a plan step, any flat record); the
    common shapes without the general encoder (two journal records per step, the plan and the
    manifest: most of an operation's encoding time otherwise)."""
    if type(m) is _Entry:  # noqa: E721
        return m.text
    if m.keys() == _ENTRY_KEY_SET:
        return (f'{{"action": {_scalar(m["action"])}, "backup": {_scalar(m["backup"])}, "path": {_scalar(m["path"])}, '
                f'"root": {_scalar(m["root"])}, "sha256": {_scalar(m["sha256"])}, "size": {_scalar(m["size"])}, '
                f'"uri": {_scalar(m["uri"])}}}')
    if m.keys() == _STEP_KEY_SET:
        return (f'{{"action": {_scalar(m["action"])}, "path": {_scalar(m["path"])}, "reason": {_scalar(m["reason"])}, '
                f'"root": {_scalar(m["root"])}}}')
    if all(v is None or type(v) in (str, int) for v in m.values()):  # noqa: E721
        return "{" + ", ".join(f"{_quote(k)}: {_scalar(m[k])}" for k in sorted(m)) + "}"
    return json.dumps(m, sort_keys=True)


def _step_json(step: Step) -> str:
    """_entry_json(step.to_record()): a plan step, its repeated strings quoted once."""
    if step.content is not None:
        return _entry_json(step.to_record())
    return (f'{{"action": {_q(step.action)}, "path": {_quote(step.path)}, "reason": {_q(step.reason)}, '
            f'"root": {_q(step.root)}}}')


def record_line(rec: dict[str, Any], now: int) -> str:
    """One journal line: json.dumps(dict(rec, time_ms=now), sort_keys=True) + newline, the begin
    and done records of steps written without the general encoder (the same text; a test
    compares them)."""
    ev = rec.get("event")
    if ev == "begin" and rec.keys() == _BEGIN_KEYS and type(rec["step"]) is int:  # noqa: E721
        pre = rec["pre"]
        if pre is None or (isinstance(pre, dict) and pre.keys() == _DIGEST_KEYS):
            pre_json = "null" if pre is None else f'{{"sha256": {_scalar(pre["sha256"])}, "size": {_scalar(pre["size"])}}}'
            return (f'{{"action": {_q(rec["action"])}, "event": "begin", "path": {_quote(rec["path"])}, '
                    f'"pre": {pre_json}, "root": {_q(rec["root"])}, "step": {rec["step"]}, "time_ms": {now}}}\n')
    elif ev == "done" and len(rec) == 3 and isinstance(rec.get("manifest"), dict) and type(rec.get("step")) is int:  # noqa: E721
        return f'{{"event": "done", "manifest": {_entry_json(rec["manifest"])}, "step": {rec["step"]}, "time_ms": {now}}}\n'
    return json.dumps(dict(rec, time_ms=now), sort_keys=True) + "\n"


def _json_file(doc: dict[str, Any], encoded: Optional[dict[str, list[str]]] = None) -> bytes:
    """plan.json / manifest.json: one key per line at the top, lists one item per line, each item
    compact (json's C encoder: indent=2 takes the pure-Python one, seconds on 100,000 steps).
    `encoded`: lists whose items are JSON texts already."""
    parts = []
    doc = dict(doc, **(encoded or {}))
    for key in sorted(doc):
        value = doc[key]
        if encoded and key in encoded:
            items = ",\n    ".join(value)
            parts.append(f"  {json.dumps(key)}: [\n    {items}\n  ]" if value else f"  {json.dumps(key)}: []")
        elif isinstance(value, list) and value:
            items = ",\n    ".join(_entry_json(v) if isinstance(v, dict) else json.dumps(v, sort_keys=True)
                                      for v in value)
            parts.append(f"  {json.dumps(key)}: [\n    {items}\n  ]")
        else:
            parts.append(f"  {json.dumps(key)}: {json.dumps(value, sort_keys=True)}")
    return ("{\n" + ",\n".join(parts) + "\n}\n").encode()



"""streamctl's own backup formats (docs/formats/streamctl.md#the-journal): the journal's records,
their closed set of event kinds, how a journal's bytes read back (a torn line of a crashed run
skipped, anything else unknown refused by the reader), and the JSON encoding the records share with
plan.json and manifest.json. Writing them durably (group commits, fsync, segment objects) is
operations/journal.py's; nothing else knows a journal's bytes.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from streamctl.formats.jsontext import dumps_each, dumps_file
from streamctl.formats.reader import load_json

JOURNAL_FILE = "journal.jsonl"
SEGMENT_DIR = "journal"  # object stores: journal/<n>.jsonl, one object per group commit
_SEGMENT = re.compile(r"([0-9]+)\.jsonl")


def segment_rel(number: int) -> str:
    """An object store journal's segment object: journal/<n>.jsonl, n zero-padded to 6 digits."""
    return f"{SEGMENT_DIR}/{number:06d}.jsonl"


def segment_number(name: str) -> Optional[int]:
    """The number of a segment object's name, None for a name that is no segment."""
    m = _SEGMENT.fullmatch(name)
    return int(m.group(1)) if m else None


class Event(str, enum.Enum):
    """Every kind of journal record, the whole set: a journal holding another is refused."""
    START = "start"  # the operation began (op id, pid, steps)
    BEGIN = "begin"  # a step is about to run (durable before the step: what was there, `pre`)
    DONE = "done"  # a step ran (its manifest entry)
    BEGIN_CHUNK = "begin_chunk"  # the begin records of many local moves in one (`steps`, `pre`: [size, sha256] each)
    DONE_CHUNK = "done_chunk"  # the done records of many local moves, each done by one rename (`steps`)
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


def journal_records(chunk: bytes) -> Iterator[tuple[int, Optional[dict[str, Any]]]]:
    """(line index, record) for each line of a journal chunk that is JSON: the record when it is an
    object, None for any other JSON value (the reader refuses it). A line that is not JSON is a torn
    line of a crashed run (a resume appends after it, so it may sit in the middle): skipped."""
    # split as bytes, at line breaks only: a str would also split at U+2028, which a record's UTF-8 text may hold
    for i, line in enumerate(chunk.splitlines()):
        try:
            rec = load_json(line.decode("utf-8", "replace"))
        except ValueError:
            continue
        yield i, rec if isinstance(rec, dict) else None


RENAMED = "renamed"  # a done record's key: the step's move was one rename, its manifest entry its begin record's


def _is_step(step: Any) -> bool:
    return isinstance(step, int) and not isinstance(step, bool) and step >= 0


def _step_of(rec: dict[str, Any]) -> Optional[int]:
    step = rec.get("step")
    return step if _is_step(step) else None


def _chunk_steps(rec: dict[str, Any]) -> Optional[list[int]]:
    """The step numbers of a chunk record (`begin_chunk`, `done_chunk`), None when it holds no
    list of step numbers, or (`begin_chunk`) no `pre` of [size, sha256] for each of them."""
    steps = rec.get("steps")
    if not isinstance(steps, list) or not all(_is_step(s) for s in steps):
        return None
    if rec.get("event") == Event.BEGIN_CHUNK:
        pre = rec.get("pre")
        if (rec.get("action") != "move" or not isinstance(pre, list) or len(pre) != len(steps)
                or not all(isinstance(p, list) and len(p) == 2 and _is_step(p[0]) and isinstance(p[1], str)
                           for p in pre)):
            return None
    return steps


def apply_record(state: JournalState, rec: dict[str, Any]) -> bool:
    """Apply one record; False when it is not a record this journal writes (an event outside
    `Event`, or a step record without a step number)."""
    try:
        ev = Event(rec.get("event"))
    except ValueError:
        return False
    if ev in (Event.BEGIN, Event.DONE, Event.UNDO_DONE) and _step_of(rec) is None:
        return False
    if ev in (Event.BEGIN_CHUNK, Event.DONE_CHUNK):
        steps = _chunk_steps(rec)
        if steps is None:
            return False
        if ev is Event.BEGIN_CHUNK:  # each step's begin record, as a `begin` of it reads
            for i, (size, sha256) in zip(steps, rec["pre"], strict=True):
                state.begun.setdefault(i, {"event": Event.BEGIN.value, "step": i, "action": "move",
                                           "pre": {"size": size, "sha256": sha256}})
        else:  # each step's done record, as a `done` record saying `renamed`
            for i in steps:
                state.done[i] = {"event": Event.DONE.value, "step": i, RENAMED: True}
        return True
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


_EVENTS = frozenset(Event) | frozenset(e.value for e in Event)  # the members and their names, whatever their hash


def record_lines(records: list[dict[str, Any]], now: int) -> bytes:
    """The journal lines of these records, one JSON object per line, each record given its
    `time_ms` = now (set in the record itself, as it reads back). Each record's event is checked
    against the closed set (`Event`: a writer naming another event is a bug, not a record)."""
    for rec in records:
        if rec["event"] not in _EVENTS:
            raise ValueError(f"{rec['event']!r} is not a journal event")
        rec["time_ms"] = now
    return b"\n".join(dumps_each(records)) + b"\n" if records else b""


def record_line(rec: dict[str, Any], now: int) -> bytes:
    """One journal line (record_lines of one record)."""
    return record_lines([rec], now)


def json_file(doc: dict[str, Any]) -> bytes:
    """plan.json / manifest.json: the document indented, keys sorted (`dumps_file`)."""
    return dumps_file(doc)

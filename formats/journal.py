"""streamctl's own backup formats (docs/formats/streamctl.md#the-journal): the journal's records,
their closed set of event kinds, how a journal's bytes read back (a torn line of a crashed run
skipped, anything else unknown refused by the reader), and the JSON encoding the records share with
plan.json and manifest.json. Writing them durably (group commits, fsync, segment objects) is
operations/journal.py's; nothing else knows a journal's bytes.
"""
from __future__ import annotations

import enum
import json
import json.encoder
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Protocol

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
    for i, line in enumerate(chunk.decode("utf-8", "replace").splitlines()):
        try:
            rec = load_json(line)
        except ValueError:
            continue
        yield i, rec if isinstance(rec, dict) else None


def _step_of(rec: dict[str, Any]) -> Optional[int]:
    step = rec.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def apply_record(state: JournalState, rec: dict[str, Any]) -> bool:
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


class StepLike(Protocol):
    """What the encoder reads of a plan step (operations/plan.py `Step`, a frozen dataclass)."""

    @property
    def action(self) -> str: ...
    @property
    def root(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def content(self) -> Optional[bytes]: ...
    def to_record(self) -> dict[str, Any]: ...


def _step_json(step: StepLike) -> str:
    """_entry_json(step.to_record()): a plan step, its repeated strings quoted once."""
    if step.content is not None:
        return _entry_json(step.to_record())
    return (f'{{"action": {_q(step.action)}, "path": {_quote(step.path)}, "reason": {_q(step.reason)}, '
            f'"root": {_q(step.root)}}}')


def record_line(rec: dict[str, Any], now: int) -> str:
    """One journal line: json.dumps(dict(rec, time_ms=now), sort_keys=True) + newline, the begin
    and done records of steps written without the general encoder (the same text; a test
    compares them)."""
    ev = Event(rec["event"]).value  # the closed schema: a writer naming another event is a bug, not a record
    if ev == "begin" and rec.keys() == _BEGIN_KEYS and type(rec["step"]) is int:  # noqa: E721
        pre = rec["pre"]
        if pre is None or (isinstance(pre, dict) and pre.keys() == _DIGEST_KEYS):
            pre_json = "null" if pre is None else f'{{"sha256": {_scalar(pre["sha256"])}, "size": {_scalar(pre["size"])}}}'
            return (f'{{"action": {_q(rec["action"])}, "event": "begin", "path": {_quote(rec["path"])}, '
                    f'"pre": {pre_json}, "root": {_q(rec["root"])}, "step": {rec["step"]}, "time_ms": {now}}}\n')
    elif ev == "done" and len(rec) == 3 and isinstance(rec.get("manifest"), dict) and type(rec.get("step")) is int:  # noqa: E721
        return f'{{"event": "done", "manifest": {_entry_json(rec["manifest"])}, "step": {rec["step"]}, "time_ms": {now}}}\n'
    return json.dumps(dict(rec, time_ms=now), sort_keys=True) + "\n"


def json_file(doc: dict[str, Any], encoded: Optional[dict[str, list[str]]] = None) -> bytes:
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



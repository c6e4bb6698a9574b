"""A plan: the ordered steps of one mutation and its classified effect on delivery.

Steps are the only vocabulary the executor knows:
- `move`: move a file or folder of a root into the backup (`files/<root>/<path>`);
- `write`: write a whole file (the previous content, if any, is moved into the backup first);
- `put_back`: move a file of the `archive` root to the same path under the `input` root (align
  returning input files that `cleanSource=archive` moved away; undo moves it back);
- `catalog_rollback`: roll an Iceberg table back to a snapshot through its catalog (pyiceberg;
  `content` is the JSON order: catalog spec, from and to snapshot, the metadata file it expects
  current; `path` that file); undo sets the previous current snapshot again;
- `delete`: delete a file with no backup copy (`--purge` only);
- `copy`: copy a file of the root `COPY_FROM[root]` to the same path under `root`, never over
  other content (`streamctl copy`: the old place is only read; undo takes the copy out again).
Contents of `write` steps are part of the plan, so a plan file fully describes what will happen.
"""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from streamctl.formats.errors import StreamctlError
from streamctl.inspectors.errors import raise_unreadable

EXACTLY_ONCE = "exactly-once"
DUPLICATES = "duplicates"
LOSS = "loss"
PLAN_VERSION = 1


STEP_ACTIONS = ("move", "write", "put_back", "catalog_rollback", "delete", "copy")
PUT_BACK_TO = "input"  # the root a `put_back` step moves its file to (align: archived input, docs/model.md#replayable-batches)
# the root a `copy` step reads its file from, per root it writes to (streamctl copy: the new place
# is `checkpoint`/`sink`, which the runner locks, backs up under and verifies; the old place is read only)
COPY_FROM = {"checkpoint": "from_checkpoint", "sink": "from_sink"}




@dataclass(frozen=True)
class Step:
    action: str  # "move" | "write" | "put_back" | "catalog_rollback" | "delete" (only with --purge) | "copy"
    root: str  # "checkpoint" | "sink" | "archive" (put_back: from there to the same path under PUT_BACK_TO)
    path: str  # relative to the root, "/"-separated
    reason: str
    content: Optional[bytes] = None  # for "write"

    def __init__(self, action: str, root: str, path: str, reason: str, content: Optional[bytes] = None) -> None:
        """The fields set into the instance's dict at once: the frozen dataclass's own __init__ sets
        each through object.__setattr__, twice the cost (a rollback's plan makes 66,000 steps)."""
        d = self.__dict__
        d["action"], d["root"], d["path"], d["reason"], d["content"] = action, root, path, reason, content

    def to_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"action": self.action, "root": self.root, "path": self.path, "reason": self.reason}
        if self.content is not None:
            try:
                rec["content"] = self.content.decode("utf-8")
            except UnicodeDecodeError:
                rec["content_base64"] = base64.b64encode(self.content).decode("ascii")
        return rec

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Step:
        content = None
        if "content" in rec:
            content = str(rec["content"]).encode("utf-8")
        elif "content_base64" in rec:
            content = base64.b64decode(rec["content_base64"])
        return cls(str(rec["action"]), str(rec["root"]), str(rec["path"]), str(rec.get("reason", "")), content)

    def describe(self) -> str:
        if self.action == "move":
            return f"move {self.root}:{self.path} to the backup ({self.reason})"
        if self.action == "delete":
            return f"delete {self.root}:{self.path} ({self.reason})"
        if self.action == "catalog_rollback":
            return f"roll the Iceberg table {self.root}:{self.path} back through its catalog ({self.reason})"
        if self.action == "put_back":
            return f"put {self.root}:{self.path} back to {PUT_BACK_TO}:{self.path} ({self.reason})"
        if self.action == "copy":
            return f"copy {COPY_FROM.get(self.root, '?')}:{self.path} to {self.root}:{self.path} ({self.reason})"
        return f"write {self.root}:{self.path} ({self.reason})"


@dataclass
class Option:
    """One way to realign, with its effect on delivery (shown when nothing is exactly-once)."""

    strategy: str  # "rollback" | "roll_forward" | "keep" | "none"
    target: Optional[int]
    classification: str
    duplicates: list[int] = field(default_factory=list)
    loss: list[int] = field(default_factory=list)
    why: str = ""
    feasible: bool = True

    def to_record(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "target": self.target, "classification": self.classification,
                "duplicates": self.duplicates, "loss": self.loss, "feasible": self.feasible, "why": self.why}


@dataclass
class Plan:
    command: str
    roots: dict[str, str]  # root name -> location
    strategy: str
    target: Optional[int]
    classification: str
    steps: list[Step]
    expected_verdict: str
    duplicates: list[int] = field(default_factory=list)
    loss: list[int] = field(default_factory=list)
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    options: list[Option] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # what verification needs (sink kind, app id)
    op_id: str = ""

    def to_record(self, steps: bool = True) -> dict[str, Any]:
        """The plan as a document; `steps=False` leaves the steps out."""
        rec = {
            "plan_version": PLAN_VERSION,
            "op_id": self.op_id,
            "command": self.command,
            "roots": dict(self.roots),
            "strategy": self.strategy,
            "target": self.target,
            "classification": self.classification,
            "duplicates": list(self.duplicates),
            "loss": list(self.loss),
            "expected_verdict": self.expected_verdict,
            "before": self.before,
            "after": self.after,
            "options": [o.to_record() for o in self.options],
            "notes": list(self.notes),
            "settings": dict(self.settings),
        }
        if steps:
            rec["steps"] = self.step_records()
        return rec

    def step_records(self) -> list[dict[str, Any]]:
        """Each step's record, made once for the steps the plan holds (plan.json and the command's
        --json output share them)."""
        made = self.__dict__.get("_step_records")
        if made is None or made[0] is not self.steps or made[1] != len(self.steps):
            made = (self.steps, len(self.steps), [s.to_record() for s in self.steps])
            self.__dict__["_step_records"] = made
        return made[2]

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Plan:
        steps = [Step.from_record(s) for s in rec["steps"]]
        roots = dict(rec["roots"])
        for s in steps:
            if s.action not in STEP_ACTIONS:
                raise ValueError(f"unknown step action {s.action!r}")
            if s.action == "put_back" and not {s.root, PUT_BACK_TO} <= set(roots):
                raise ValueError(f"a put_back step of root {s.root!r} without the roots {s.root!r} and {PUT_BACK_TO!r}")
            if s.action == "copy" and not {s.root, COPY_FROM.get(s.root, "")} <= set(roots):
                raise ValueError(f"a copy step of root {s.root!r} without the root it copies from")
        return cls(
            command=str(rec["command"]), roots=roots, strategy=str(rec["strategy"]),
            target=rec.get("target"), classification=str(rec["classification"]),
            steps=steps, expected_verdict=str(rec["expected_verdict"]),
            duplicates=list(rec.get("duplicates") or []), loss=list(rec.get("loss") or []),
            before=dict(rec.get("before") or {}), after=dict(rec.get("after") or {}),
            options=[Option(**o) for o in rec.get("options") or []], notes=list(rec.get("notes") or []),
            settings=dict(rec.get("settings") or {}), op_id=str(rec.get("op_id") or ""))


class Refused(StreamctlError):
    """A mutating command will not act (exit 4, nothing changed); `options` say what could be
    done instead. `code` names why in one word, for counting (a fleet's refusals by reason): the
    finding code of a message in the form `<where>: CODE: ...` (LIVE_QUERY, RETIRED, LOG_GAP, ...)
    unless given, else empty."""

    def __init__(self, message: str, options: Optional[list[Option]] = None, code: str = "") -> None:
        super().__init__(message)
        self.options = options or []
        found = re.search(r": ([A-Z][A-Z0-9_]{3,}): ", message)
        self.code = code or (found.group(1) if found else "")


class NotVerified(StreamctlError):
    """A mutation ran but its post-check did not reach the promised state (exit 5)."""


def epochs_text(epochs: list[int]) -> str:
    """[3, 4, 5, 9] -> "3..5, 9"."""
    if not epochs:
        return "none"
    out: list[str] = []
    start = prev = epochs[0]
    for e in epochs[1:] + [None]:  # type: ignore[list-item]
        if e is not None and e == prev + 1:
            prev = e
            continue
        out.append(str(start) if start == prev else f"{start}..{prev}")
        if e is not None:
            start = prev = e
    return ", ".join(out)


def refuse_corrupt_state(q: Any, snapshot_aside: bool = False) -> None:
    """A state file a restart reads does not match its checksum or is torn (STATE_FILE_CORRUPT):
    no plan decides which copy is right; refuse naming the files. `snapshot_aside`: align moves a
    bad snapshot with an intact older chain aside (`snapshot_aside` in the finding) instead."""
    for f in q.findings:
        if f.code == "STATE_FILE_CORRUPT" and f.details.get("restart") == "auto_snapshot_repair" \
                and not f.details.get("snapshot_aside"):  # a zip gone: nothing to move aside
            raise Refused(f"{q.checkpoint}: STATE_FILE_CORRUPT: {f.message.split(': Spark', 1)[0]}; the restart loads "
                          "around it by itself (auto snapshot repair): restart the query as is; streamctl moves no "
                          "state a restart may read")
        if f.code == "STATE_FILE_CORRUPT" and not (snapshot_aside and f.details.get("snapshot_aside")):
            raise Refused(f"{q.checkpoint}: STATE_FILE_CORRUPT: {f.message.split(': Spark', 1)[0]}; streamctl moves no "
                          "state around a corrupt file: put it back from a copy of the checkpoint")


def refuse_layout_conflict(q: Any) -> None:
    """Never repair what a restart reads: when the sources of a state layout disagree
    (STATE_LAYOUT_CONFLICT), no mutation may move state; refuse naming the sources."""
    for f in q.findings:
        if f.code == "STATE_LAYOUT_CONFLICT":
            sources = ", ".join(f"{k} says {v}" for k, v in f.details.get("sources", {}).items())
            raise Refused(f"{q.checkpoint}: STATE_LAYOUT_CONFLICT: operator {f.details.get('operator')}: the partition "
                          f"count's sources disagree ({sources}); streamctl moves no state a restart may read")


@dataclass
class CheckpointRequest:
    """What every checkpoint mutation (align, trim) names: the checkpoint, its sink (kind, Delta
    app id) and the quiet period of the liveness check."""

    checkpoint: str
    sink: Optional[str] = None
    sink_kind: str = "auto"
    app_id: Optional[str] = None
    quiet_period_s: float = 0.0

    def inspect(self) -> Any:
        """The checkpoint's inspection a mutation may act on (`refuse_unsafe`)."""
        from streamctl.inspectors.checkpoint import inspect_checkpoint

        q = inspect_checkpoint(self.checkpoint, sink=self.sink, sink_kind=self.sink_kind, app_id=self.app_id,
                               quiet_period_s=self.quiet_period_s, deep=True)
        refuse_unsafe(q)
        return q


def refuse_unsafe(q: Any) -> None:
    """No mutation acts on what it cannot read, on a retired checkpoint or on a live query:
    StorageError naming the unreadable file; Refused for RETIRED, LIVE_QUERY or a
    STATE_LAYOUT_CONFLICT (refuse_layout_conflict)."""
    raise_unreadable(q)
    retired = [f for f in q.findings if f.code == "RETIRED"]
    if retired:  # drop-sink's or copy --move's tombstone: the query goes on elsewhere, or nowhere
        raise Refused(f"{q.checkpoint}: RETIRED: {retired[0].message}")
    live = [f for f in q.findings if f.code == "LIVE_QUERY"]
    if live:
        raise Refused(f"{q.checkpoint}: LIVE_QUERY: {live[0].message}")
    refuse_layout_conflict(q)


def liveness_evidence(q: Any, quiet_period_s: float) -> str:
    """What a mutation's plan relied on to believe the query is not running (the plan names it:
    an idle query writes nothing, so quiet files alone prove little)."""
    lease = getattr(q, "lease", None) or {}
    status = lease.get("status")
    if status == "released":
        return "the streamctl agent's lease is released: the query stopped"
    if status == "stale":
        return "the streamctl agent's lease expired without being released (the driver died)"
    if quiet_period_s:
        period = "the derived quiet period" if quiet_period_s < 0 else f"the quiet period ({quiet_period_s:g} s)"
        return (f"no streamctl agent lease; no offsets/ or commits/ file changed within {period}, which an idle "
                "query does not change either: stop the query before --execute")
    return ("none: no streamctl agent lease and the quiet-period check is off (--quiet-period 0); "
            "stop the query before --execute")

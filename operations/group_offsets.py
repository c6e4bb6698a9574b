"""`streamctl kafka commit-offsets` as a mutation of the one runner (operations/runner.py,
docs/model.md#kafka-commit-offsets): its plan (one `write` step per partition whose group offset
changes, root `group`), and the steps that carry it out against the broker.

The backup of a consumer group is its offsets: the `begin` record of the journal holds the group's
offsets read right before the commit, `manifest.json` each changed partition's `previous` and
`committed` offset. `--undo` checks the manifest against the journal and the group against what
was committed (a partition moved since refuses, nothing changed), then commits the previous
offsets again; partitions the group had no offset for are deleted (OffsetDelete), or, when the
group held nothing before, the group is (DeleteGroups). Spark never reads the group: the
checkpoint is only read (and locked while the operation runs)."""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional

from streamctl.formats.journal import Event
from streamctl.inspectors.documents import document
from streamctl.operations.backup_folder import MANIFEST_FILE, write_manifest, write_plan
from streamctl.operations.files import Root
from streamctl.operations.journal import Conflict, Journal
from streamctl.operations.meter import Meter
from streamctl.operations.plan import EXACTLY_ONCE, Plan, Step

COMMAND = "kafka commit-offsets"
ROOT = "group"

Offsets = dict[tuple[str, int], int]


def records(offsets: Mapping[tuple[str, int], Optional[int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]


def offsets_of(recs: list[dict[str, Any]]) -> Offsets:
    return {(str(r["topic"]), int(r["partition"])): int(r["offset"]) for r in recs if r.get("offset") is not None}


def plan_commit(broker: Any, location: str, group: str, query_id: Optional[str], epoch: int, target: Offsets) -> Plan:
    """The plan of publishing `target` (the checkpoint's offsets of `epoch`) to `group`, from what
    the broker holds now. Read-only."""
    state = broker.group_state(group)
    current = broker.group_offsets(group) if state is not None else {}
    steps = [Step("write", ROOT, f"{t}/{p}", f"group offset {current.get((t, p))} -> {off} (epoch {epoch})",
                  str(off).encode()) for (t, p), off in sorted(target.items()) if current.get((t, p)) != off]
    return Plan(command=COMMAND, roots={"checkpoint": location}, strategy="commit-offsets", target=epoch,
                classification=EXACTLY_ONCE, steps=steps, expected_verdict="committed",
                before={"group": group, "group_state": state, "offsets": records(current)},
                after={"offsets": records(target)},
                settings={"group": group, "bootstrap": broker.bootstrap, "query_id": query_id})


def refusal(plan: Plan) -> Optional[str]:
    """Why the group must not be changed now (it has active members), or None."""
    from streamctl.inspectors.kafka import ACTIVE_STATES

    state = plan.before.get("group_state")
    if state in ACTIVE_STATES:
        return f"group {plan.settings['group']} has active members ({state}); stop its consumers first"
    return None


def committed(plan: Plan) -> Offsets:
    """The offsets the plan's steps commit (the changed partitions)."""
    out: Offsets = {}
    for s in plan.steps:
        topic, _, part = s.path.rpartition("/")
        out[(topic, int(part))] = int((s.content or b"").decode())
    return out


class GroupOffsets:
    """The steps of a commit-offsets plan, as the runner runs them (the `Steps` of operations/runner.py)."""

    def __init__(self, plan: Plan, backup: Root, broker: Any, meter: Optional[Callable[[str], None]] = None) -> None:
        """`meter` gets the partitions done (a terminal's progress line)."""
        self.plan, self.backup, self.broker, self.meter = plan, backup, broker, meter
        self.group = str(plan.settings["group"])
        self.journal = Journal(backup)

    def write_plan(self) -> None:
        write_plan(self.backup, self.plan)

    def read_journal(self) -> Any:
        """The journal's state (the Steps protocol)."""
        return self.journal.read()

    def run(self) -> Any:
        """Journal the group's offsets as they are (begin), commit, journal and write the manifest
        (done). A commit is idempotent: a resumed run commits again."""
        from streamctl.inspectors.kafka import GroupActive
        from streamctl.operations.runner import Untouched

        state = self.journal.read()
        pending: list[dict[str, Any]] = []
        if not state.started:
            pending.append({"event": Event.START, "op_id": self.plan.op_id, "steps": len(self.plan.steps)})
        if 0 not in state.begun:  # the backup: the group's offsets before anything changes
            state.begun[0] = {"event": Event.BEGIN, "step": 0, "action": "commit", "root": ROOT, "path": self.group,
                              "pre": {"offsets": records(self.broker.group_offsets(self.group))}}
            pending.append(state.begun[0])
        self.journal.append_many(pending)
        if state.finished:
            return state
        try:
            self.broker.commit_group_offsets(self.group, committed(self.plan),
                                             f"streamctl query={self.plan.settings.get('query_id')} epoch={self.plan.target}")
        except GroupActive as exc:
            raise Untouched(str(exc).split(": ", 1)[-1]) from None
        previous = offsets_of(state.begun[0]["pre"]["offsets"])
        entries = [{"topic": t, "partition": p, "previous": previous.get((t, p)), "committed": off}
                   for (t, p), off in sorted(committed(self.plan).items())]
        self._tick(len(entries), "commit: ")
        self.journal.append({"event": Event.DONE, "step": 0, "manifest": {"group": self.group, "offsets": entries}})
        write_manifest(self.backup, self.plan, group=self.group, offsets=entries)
        self.journal.append({"event": Event.FINISHED})
        return state

    def _previous(self, state: Any) -> Offsets:
        """The group's offsets before the operation, from the journal, checked against the manifest."""
        previous = offsets_of(state.begun[0]["pre"]["offsets"])
        if 0 in state.done:
            try:
                doc = json.loads(self.backup.read(MANIFEST_FILE))
                listed = {(str(e["topic"]), int(e["partition"])): e["previous"] for e in doc["offsets"]}
            except (ValueError, KeyError, TypeError) as exc:
                raise Conflict(f"undo refused, {self.backup.uri(MANIFEST_FILE)} is not a valid manifest "
                               f"({type(exc).__name__}); nothing was changed") from None
            wrong = [f"{t}/{p}" for (t, p) in committed(self.plan) if listed.get((t, p), -1) != previous.get((t, p))]
            if wrong or set(listed) != set(committed(self.plan)):
                raise Conflict(f"undo refused, the backup {self.backup.location} does not match its manifest "
                               f"(previous offsets of {', '.join(wrong) or 'other partitions'}); nothing was changed")
        return previous

    def undo(self) -> list[str]:
        from streamctl.inspectors.kafka import GroupActive, KafkaError

        state = self.journal.read()
        if 0 not in state.begun:
            return []
        previous = self._previous(state)
        target = committed(self.plan)
        now = self.broker.group_offsets(self.group)
        moved = [f"{t}/{p} is at {now.get((t, p))}" for (t, p), off in sorted(target.items())
                 if now.get((t, p)) not in (off, previous.get((t, p)))]
        if moved:
            raise Conflict(f"undo refused, group {self.group}'s offsets changed after the operation "
                           f"({'; '.join(moved[:5])}); nothing was changed")
        restore = {tp: previous[tp] for tp in target if tp in previous and now.get(tp) != previous[tp]}
        drop = [tp for tp in sorted(target) if tp not in previous and tp in now]
        whole = bool(drop) and not previous and set(now) <= set(target)  # the group did not exist before
        self.journal.append({"event": Event.UNDO_START, "steps": 1})
        try:
            if drop and not whole:  # first: a broker without OffsetDelete refuses before anything changed
                self.broker.delete_group_offsets(self.group, drop)
            if restore:
                self.broker.commit_group_offsets(self.group, restore, f"streamctl undo of {self.plan.op_id}")
            if whole:
                self.broker.delete_group(self.group)
        except GroupActive as exc:
            raise Conflict(f"undo refused: {str(exc).split(': ', 1)[-1]}") from None
        except KafkaError as exc:
            raise Conflict(f"undo refused: {exc}") from None
        undone = [f"{t}/{p}" for t, p in sorted(set(restore) | set(drop))]
        self._tick(len(undone), "undo: ")
        self.journal.append_many([{"event": Event.UNDO_DONE, "step": 0}, {"event": Event.UNDONE}])
        return undone

    def _tick(self, n: int, label: str) -> None:
        """n partitions done at once (one commit request carries them all)."""
        meter = Meter(n, self.meter, "partitions", label)
        for _ in range(n):
            meter.tick(0)


def verify_commit(broker: Any, plan: Plan) -> tuple[bool, dict[str, Any]]:
    """Read the group back: every partition at the checkpoint's offset."""
    after = broker.group_offsets(str(plan.settings["group"]))
    want = offsets_of(plan.after["offsets"])
    return all(after.get(tp) == off for tp, off in want.items()), {"offsets": records(after)}


def verify_undo(broker: Any, plan: Plan) -> tuple[bool, dict[str, Any]]:
    """Read the group back after an undo: every partition the operation changed is as before it."""
    now = broker.group_offsets(str(plan.settings["group"]))
    before = offsets_of(plan.before["offsets"])
    return all(now.get(tp) == before.get(tp) for tp in committed(plan)), {"offsets": records(now)}


def _nothing(_plan: Plan, _journal: Any) -> Optional[str]:
    return None  # a running query does not matter: Spark never reads the group


def operation(broker: Any) -> Any:
    """commit-offsets, as the runner runs, resumes and undoes it, against this broker."""
    from streamctl.operations.runner import Operation

    return Operation(COMMAND, lambda plan, _roots: verify_commit(broker, plan), resumable=_nothing, undoable=_nothing,
                     undo_check=lambda plan, _roots: verify_undo(broker, plan),
                     steps=lambda plan, _roots, backup, _say, meter: GroupOffsets(plan, backup, broker, meter))


def locked_planner(broker: Any, location: str, group: str, epoch: str) -> Callable[[str, Any], Plan]:
    """The runner's planner of `--execute`: under the lock, the checkpoint and the group again."""
    from streamctl.inspectors.kafka import epoch_offsets
    from streamctl.operations.plan import Refused

    def planner(_op_id: str, _backup: Any) -> Plan:
        q, chosen, target, _raws = epoch_offsets(location, epoch)
        again = plan_commit(broker, location, group, q.query_id, chosen, target)
        why = refusal(again)
        if why:
            raise Refused(why)
        return again

    return planner


def undo_document(done: Any) -> dict[str, Any]:
    """The KafkaCommitOffsetsUndo document of an undone commit."""
    return document("KafkaCommitOffsetsUndo", {"group": done.plan.settings["group"],
            "backup": done.backup.location, "restored": len(done.restored), "partitions": done.restored,
            "after": done.after, "before_operation": done.plan.before, "verified": done.verified})


def commit_document(plan: Any, checkpoint: str, outcome: Any, refusal: Optional[str]) -> dict[str, Any]:
    """The KafkaCommitOffsets document of a plan (and of its outcome when it ran): JSON contract,
    docs/json.md."""
    if outcome is not None:  # the plan made under the lock
        plan = outcome.plan
    current, target = offsets_of(plan.before["offsets"]), offsets_of(plan.after["offsets"])
    done = outcome is not None and outcome.executed
    rows = [{"topic": t, "partition": p, "current": current.get((t, p)), "target": off,
             "change": "none" if current.get((t, p)) == off else ("set" if current.get((t, p)) is None else "move")}
            for (t, p), off in sorted(target.items())]
    return document("KafkaCommitOffsets", {"checkpoint": checkpoint,
            "query_id": plan.settings.get("query_id"), "group": plan.settings["group"],
            "group_state": plan.before.get("group_state"), "epoch": plan.target, "executed": done,
            "refused": refusal is not None, "refusal": refusal, "verified": outcome.verified if done else None,
            "changes": sum(1 for r in rows if r["change"] != "none"), "partitions": rows,
            "backup": outcome.backup.location if done else None})

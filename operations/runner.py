"""The one runner of every mutation (docs/model.md#the-mutation-path): align, trim, drop-sink and
`kafka commit-offsets` hand it a request and get an outcome back; the order and the invariants
live here, once:

    validate the backup -> lock -> plan under the lock -> check the plan -> write the plan ->
    journal -> steps -> (finish) -> verify -> release

with `resume` (after a crash: the same operation, from its journal) and `undo` (the exact bytes
back, checked against the manifest first). Commands only build the `Request`, call `execute`,
`resume` or `undo`, render the outcome and return the exit code of console/errors.py's table.

The plan's invariants are operations/plan_checks.py's (`check_backup_target` before the lock,
`check_plan` under it). Every failure after the lock and before the first step releases the lock;
a failure during the steps keeps it (the journal says how to resume)."""
from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

from streamctl.formats.errors import StorageError, UsageError
from streamctl.formats.journal import Event
from streamctl.formats.layout import BACKUPS_DIR, CHECKPOINT_LOGS, PLAN_FILE, WRITTEN_FILE
from streamctl.operations.files import Root
from streamctl.operations.plan import Plan, Refused
from streamctl.operations.plan_checks import check_backup_target, check_plan, step_actions

Say = Callable[[str], None]
Verifier = Callable[[Plan, dict[str, Root]], tuple[bool, dict[str, Any]]]


class Steps(Protocol):
    """What carries out a plan's steps, journaled into the backup: `operations.executor.Executor`
    (files), or the Kafka group's offsets (`operations.group_offsets`)."""

    journal: Any

    def write_plan(self) -> None: ...

    def read_journal(self) -> Any:
        """The journal's state as `run` and `undo` read it: a record they could not act on is a
        Conflict here, before any lock is taken."""

    def run(self) -> Any: ...

    def undo(self) -> list[str]: ...


def file_steps(plan: Plan, roots: dict[str, Root], backup: Root, say: Optional[Say], meter: Optional[Say]) -> Steps:
    from streamctl.operations.executor import Executor

    # manifest.json is written while the runner verifies: `_run` writes the `verified` record after
    # it, which waits for the manifest to be durable (Journal.after)
    return Executor(plan, roots, backup, progress=say, meter=meter, manifest_ahead=True)


def positions_as_before(plan: Plan, roots: dict[str, Root]) -> tuple[bool, dict[str, Any]]:
    """After an undo: the checkpoint's (and sink's) positions are those from before the operation."""
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    q = inspect_checkpoint(plan.roots["checkpoint"], sink=plan.roots.get("sink"),
                           sink_kind=plan.settings.get("sink_kind") or "auto", app_id=plan.settings.get("app_id"),
                           quiet_period_s=0, deep=True)
    back = {"planned": q.planned, "committed": q.committed, "sink_epoch": q.sink.epoch if q.sink else None}
    ok = all(back[k] == plan.before.get(k) for k in back if k != "sink_epoch" or q.sink is not None)
    return ok, dict(back, verdict=q.verdict)


def live_by_lease(plan: Plan, _journal: Any = None) -> Optional[str]:
    """The LIVE_QUERY refusal when the agent's lease is live (the quiet period is off: the
    operation itself has just written files)."""
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    location = plan.roots["checkpoint"]
    live = [f for f in inspect_checkpoint(location, quiet_period_s=0).findings if f.code == "LIVE_QUERY"]
    return f"{location}: LIVE_QUERY: {live[0].message}" if live else None


@dataclass(frozen=True)
class Operation:
    """What the runner knows of one mutating command, for every run of it."""

    command: str  # as in plan.json and in `streamctl <command> --resume/--undo`
    verify: Verifier  # after the steps: the promised state reached?
    backup_flag: str = "--backup-dir"
    backup_under: str = BACKUPS_DIR  # the default backup folder, below the checkpoint
    backup_root: str = "backup"  # the backup's root name ("archive" for drop-sink: a root of its plan)
    finish: Optional[Callable[[Plan, dict[str, Root], Any], None]] = None  # after the steps, before verify
    resumable: Callable[[Plan, Any], Optional[str]] = live_by_lease  # on resume: a reason to refuse
    undoable: Callable[[Plan, Any], Optional[str]] = live_by_lease  # on undo: a reason to refuse
    undo_check: Verifier = positions_as_before  # after an undo
    steps: Callable[[Plan, dict[str, Root], Root, Optional[Say], Optional[Say]], Steps] = file_steps


@dataclass
class Request:
    """One `--execute` of a mutating command."""

    checkpoint: str
    planner: Callable[[str, Root], Plan]  # (operation id, backup root) -> the plan, made under the lock
    backup_dir: Optional[str] = None
    break_lock: bool = False
    # records the planner leaves for the journal, written before the first step (drop-sink:
    # `writer_stopped`, `drained`)
    opening: list[dict[str, Any]] = field(default_factory=list)
    # the operation id, named ahead by a caller that records the backup folder before the run
    # (a fleet run: operations/fleet_run.py); else a new one
    op_id: Optional[str] = None
    # take over the lock this op_id left when its process is gone (a fleet run resumed after a
    # crash while that checkpoint was being planned: its lock is there, its plan is not)
    takeover: bool = False


@dataclass
class Outcome:
    plan: Plan
    backup: Root
    executed: bool  # False: the plan made under the lock was empty, nothing was done
    resumed: bool = False
    verified: bool = False
    got: dict[str, Any] = field(default_factory=dict)

    @property
    def journal(self) -> str:
        from streamctl.operations.journal import journal_location

        return journal_location(self.backup)


@dataclass
class Undone:
    plan: Plan
    backup: Root
    restored: list[str]
    verified: bool
    after: dict[str, Any]


class Untouched(Refused):
    """Steps that refused before they changed anything (a Kafka group with active members): the
    refusal is journaled and the lock released."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during the steps: the lock is kept, the message says how to resume or undo (exit 130)."""


def roots_of(plan: Plan) -> dict[str, Root]:
    return {name: Root(name, loc) for name, loc in plan.roots.items()}


def new_op_id(command: str) -> str:
    return f"{command.replace(' ', '-')}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(2)}"


def execute(op: Operation, req: Request, say: Optional[Say] = None, meter: Optional[Say] = None) -> Outcome:
    """Validate the backup, lock, plan under the lock (what is executed is what was inspected),
    check and write the plan, run the journaled steps, finish, verify, release."""
    from streamctl.operations.lock import Lock

    op_id = req.op_id or new_op_id(op.command)
    ck = Root("checkpoint", req.checkpoint)
    # validated before the lock: an early failure leaves no lock behind
    backup = check_backup_target(req.backup_dir or ck.uri(f"{op.backup_under}/{op_id}"), op.backup_flag,
                                 op.backup_root)
    lock = Lock.acquire(ck, op.command, op_id, break_lock=req.break_lock, takeover_op=op_id if req.takeover else None)
    try:  # until the first step runs, every failure releases the lock
        plan = req.planner(op_id, backup)
        if not plan.steps:  # decided under the lock: not while another operation is half done
            lock.release()
            return Outcome(plan, backup, executed=False)
        plan.op_id = op_id
        roots = roots_of(plan)
        steps = op.steps(plan, roots, backup, say, meter)
        check_plan(plan, roots)
        steps.write_plan()
        steps.journal.append_many(req.opening)
    except BaseException:
        lock.release()
        raise
    return _run(op, plan, roots, backup, steps, lock, resumed=False)


def _run(op: Operation, plan: Plan, roots: dict[str, Root], backup: Root, steps: Steps, lock: Any,
         resumed: bool) -> Outcome:
    from streamctl.operations.journal import Conflict

    hint = f"streamctl {op.command} --resume {backup.location}"

    def kept(exc: BaseException) -> StorageError:  # storage failed mid-way (permission denied...): exit 3
        path = getattr(exc, "path", None) or os.fsdecode(getattr(exc, "filename", None) or backup.location)
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__
        return StorageError(path, f"{reason}; the lock is kept: resume with: {hint} (or undo with --undo)")

    try:
        steps.run()
    except Untouched as exc:
        steps.journal.append({"event": Event.REFUSED, "reason": str(exc)})
        lock.release()
        raise
    except Conflict as exc:  # the lock is kept: the journal says where it stopped
        raise Conflict(str(exc) if resumed else f"{exc}; resume with: {hint}") from None
    except (StorageError, OSError) as exc:
        raise kept(exc) from None
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; the lock is kept: resume with {hint} or undo with --undo") from None
    if op.finish is not None:
        op.finish(plan, roots, steps)
    _note_written(plan, roots)
    ok, got = op.verify(plan, roots)
    try:
        steps.journal.settle()  # manifest.json, written while the verification ran
    except (StorageError, OSError) as exc:
        raise kept(exc) from None
    steps.journal.append({"event": Event.VERIFIED, "ok": ok, "got": got})
    lock.release()
    return Outcome(plan, backup, executed=True, resumed=resumed, verified=ok, got=got)


WRITTEN = WRITTEN_FILE  # the checkpoint log files the last operation wrote (inspectors/liveness_findings.py)


def _note_written(plan: Plan, roots: dict[str, Root]) -> None:
    """Record the offsets/ and commits/ files the operation wrote (size, mtime) in the checkpoint's
    `_streamctl/written.json`: they are streamctl's own, so the liveness check never reads them as
    a running query's (docs/model.md#liveness). Best effort: a failure only leaves the check as it was."""
    import json

    ck = roots.get("checkpoint")
    if ck is None or not {"write", "copy"} & step_actions(plan):  # a plan of moves (66,000 of a roll back) writes none
        return
    files: dict[str, list[int]] = {}
    for s in plan.steps:  # copies too: a copy's new place holds offsets/ and commits/ files it just wrote
        if s.root == "checkpoint" and s.action in ("write", "copy") and s.path.split("/", 1)[0] in CHECKPOINT_LOGS:
            try:
                e = ck.storage.lookup(s.path)
            except StorageError:
                continue
            if e is not None and e.mtime_ns is not None:
                files[s.path] = [int(e.size or 0), int(e.mtime_ns)]
    if not files:
        return
    try:
        ck.write_atomic(WRITTEN, json.dumps({"op_id": plan.op_id, "files": files}).encode())
    except (StorageError, OSError):
        pass


def _earlier(op: Operation, backup_location: str, undo: bool, say: Optional[Say],
             meter: Optional[Say]) -> tuple[Plan, Root, dict[str, Root], Steps, Any]:
    """An earlier operation of this command, from its backup folder: plan, backup, roots, steps,
    journal state; refused when it was undone."""
    from streamctl.operations.backup_folder import load

    plan, backup = load(backup_location)
    if plan.command != op.command:
        raise UsageError(f"{backup.uri(PLAN_FILE)}: a plan of `streamctl {plan.command}`, not of {op.command}")
    roots = roots_of(plan)
    steps = op.steps(plan, roots, backup, say, meter)
    journal = steps.read_journal()
    if journal.undo_finished or (journal.undone and not undo):  # a crashed undo is simply undone again
        raise Refused(f"{backup.location}: this operation was undone; plan a new one instead of "
                      f"{'undoing' if undo else 'resuming'} it")
    return plan, backup, roots, steps, journal


def _take_over(op: Operation, plan: Plan, roots: dict[str, Root], what: str, break_lock: bool,
               refusal: Callable[[], Optional[str]]) -> Any:
    """The lock of an earlier operation (taken over when its owner is gone), then the refusal
    check under it; a refusal releases the lock."""
    from streamctl.operations.lock import Lock

    lock = Lock.acquire(roots["checkpoint"], f"{op.command} --{what}", plan.op_id, break_lock=break_lock,
                        takeover_op=plan.op_id)
    try:
        why = refusal()
        if why:
            raise Refused(why)
    except BaseException:
        lock.release()
        raise
    return lock


def resume(op: Operation, backup_location: str, break_lock: bool = False, say: Optional[Say] = None,
           meter: Optional[Say] = None) -> Outcome:
    """After a crash (the lock stays): take the lock over, refuse when the checkpoint moved on,
    run every step not yet done, finish, verify."""
    plan, backup, roots, steps, journal = _earlier(op, backup_location, False, say, meter)
    lock = _take_over(op, plan, roots, "resume", break_lock, lambda: op.resumable(plan, journal))
    return _run(op, plan, roots, backup, steps, lock, resumed=True)


def undo(op: Operation, backup_location: str, break_lock: bool = False, say: Optional[Say] = None,
         meter: Optional[Say] = None) -> Undone:
    """Put back exactly what an earlier operation changed: every backed-up file is checked against
    the manifest, and every touched path against the journal, before anything changes (any
    mismatch refuses, exit 4); then check the state is the one from before the operation."""
    plan, backup, roots, steps, journal = _earlier(op, backup_location, True, say, meter)
    purged = (f"{backup.location}: undo refused: the archived copies were deleted with --purge (the journal "
              "records the purge); nothing was changed") if journal.purged else None
    lock = _take_over(op, plan, roots, "undo", break_lock, lambda: op.undoable(plan, journal) or purged)
    try:
        restored = steps.undo()  # a Conflict (a Refused) changed nothing
    except Refused:
        lock.release()
        raise
    lock.release()
    ok, after = op.undo_check(plan, roots)
    return Undone(plan, backup, restored, ok, after)

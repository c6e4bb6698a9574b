"""The one runner of every mutation (docs/model.md#the-mutation-path): align, trim, drop-sink and
`kafka commit-offsets` hand it a request and get an outcome back; the order and the invariants
live here, once:

    validate the backup -> lock -> plan under the lock -> check the plan -> write the plan ->
    journal -> steps -> (finish) -> verify -> release

(the steps' reads of the files they will move may start before the check, beneath the roots)

with `resume` (after a crash: the same operation, from its journal) and `undo` (the exact bytes
back, checked against the manifest first). Commands only build the `Request`, call `execute`,
`resume` or `undo`, render the outcome and return the exit code of console/errors.py's table.

The invariants checked here:

* `check_backup_target` (before the lock): a named backup/archive folder is new or empty, is a
  folder (not a file) and on a supported scheme; so an early failure never leaves a lock behind.
* `check_plan` (under the lock, before the plan file): no two steps of one root whose paths nest
  (a folder moved after the files in it would land on their backup path), and every step's path,
  resolved (symlinks followed), stays inside its root.
* every failure after the lock and before the first step releases the lock; a failure during the
  steps keeps it (the journal says how to resume).

Each refusal raises `Refused` (exit 4, nothing changed)."""
from __future__ import annotations

import functools
import gc
import os
import secrets
import stat
import time
from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Callable, Optional, Protocol, TypeVar, cast

from streamctl.formats.errors import StorageError, UsageError
from streamctl.formats.journal import Event
from streamctl.inspectors.split import discard_early, start_early
from streamctl.operations.files import Root, all_normal_rels, check_rel
from streamctl.operations.plan import PUT_BACK_TO, Plan, Refused


def check_backup_target(location: str, what: str = "--backup-dir", name: str = "backup") -> Root:
    """The backup (or archive) root for a new operation: refuse a file, an unsupported scheme or
    a folder that already holds anything (a backup never overwrites or deletes a file)."""
    try:
        root = Root(name, location)
        kind = root.storage.kind()
    except StorageError as exc:
        raise Refused(f"{what}: {exc}") from None
    if kind == "file":
        raise Refused(f"{what} {root.location}: is a file, not a folder; name a new or empty folder")
    if kind == "dir":
        try:
            held = _entries(root)
        except (OSError, StorageError) as exc:
            raise Refused(f"{what} {root.location}: cannot be listed ({exc})") from None
        if held:
            raise Refused(f"{what} {root.location}: is not empty (it holds {held[0]}); a backup never "
                          "overwrites anything: name a new or empty folder")
        if root.is_local and not os.access(root.location, os.W_OK | os.X_OK):
            raise Refused(f"{what} {root.location}: not writable")
    elif root.is_local:
        parent = _existing_parent(root.location)
        if parent is None or not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
            raise Refused(f"{what} {root.location}: cannot be created (no writable folder above it)")
    return root


def _entries(root: Root) -> list[str]:
    """Whatever a folder holds (files, links, empty sub-folders count too), at most a few names."""
    if root.is_local:
        for dirpath, dirs, files in os.walk(root.location):
            found = files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]
            if found or dirs:
                rel = os.path.relpath(os.path.join(dirpath, (found or dirs)[0]), root.location)
                return [rel.replace(os.sep, "/")]
        return []
    import pyarrow.fs as pafs

    sel = pafs.FileSelector(root._fs_root, recursive=True, allow_not_found=True)  # noqa: SLF001
    return [i.path[len(root._fs_root):].lstrip("/") for i in root._fs.get_file_info(sel)[:1]]  # type: ignore[union-attr]  # noqa: SLF001


def _existing_parent(path: str) -> Any:
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        up = os.path.dirname(p)
        if up == p:
            return None
        p = up
    return p


def nested_steps(plan: Plan) -> list[tuple[str, str]]:
    """Pairs of step paths of one root where one is inside the other (or equal)."""
    return [pair for root, paths in _paths_by_root(plan).items()
            for pair in _nested(root, paths, [p.rpartition("/") for p in paths])]


def _paths_by_root(plan: Plan) -> dict[str, list[str]]:
    roots = set(map(_ROOT, plan.steps))
    if len(roots) == 1:  # the usual plan (trim's 116,000 steps): the paths in one C loop
        return {roots.pop(): list(map(_PATH, plan.steps))}
    by_root: dict[str, list[str]] = {}
    for s in plan.steps:
        got = by_root.get(s.root)
        if got is None:
            got = by_root[s.root] = []
        got.append(s.path)
    return by_root


_ROOT, _PATH, _ACTION = attrgetter("root"), attrgetter("path"), attrgetter("action")


def _actions(plan: Plan) -> set[str]:
    """The actions a plan's steps take (one C loop over 100,000 steps)."""
    return set(map(_ACTION, plan.steps))


def _nested(root: str, paths: list[str], parts: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """`nested_steps` of one root's paths; `parts`: each path's rpartition("/")."""
    if not _may_nest(paths, [head for head, _, _ in parts]):
        return []
    out = []
    ordered = sorted([p + "/" for p in paths])  # a folder sorts right before its contents
    for a, b in zip(ordered, ordered[1:], strict=False):
        if b.startswith(a):  # equal, or b inside a
            out.append((f"{root}:{a[:-1]}", f"{root}:{b[:-1]}"))
    return out


def _may_nest(paths: list[str], heads: Optional[list[str]] = None) -> bool:
    """Whether two of these paths may be equal or one inside the other: a path met twice, or one
    that is a folder above another's (every prefix ending before a "/"). One pass with sets,
    not the sort of every path (a 66,000-step plan; issue 23); True sends them to the sort.
    `heads`: each path's folder, when known."""
    uniq = set(paths)
    if len(uniq) != len(paths) or "" in uniq:
        return True
    above: set[str] = set()
    for folder in set(heads) if heads is not None else {p.rpartition("/")[0] for p in uniq}:
        while folder and folder not in above:  # its own prefixes were added with it
            above.add(folder)
            folder = folder.rpartition("/")[0]
    return not uniq.isdisjoint(above)


def escaping_steps(plan: Plan, roots: dict[str, Root]) -> list[str]:
    """Step paths that, resolved (symlinks followed, on local roots), leave their root."""
    by_root = _paths_by_root(plan)
    if "put_back" in _actions(plan):
        by_root[PUT_BACK_TO] = [s.path for s in plan.steps if s.action == "put_back"]
    return [e for name, paths in by_root.items() for e in _escaping(name, roots.get(name), paths)]


def _escaping(root_name: str, root: Optional[Root], paths: list[str],
              parts: Optional[list[tuple[str, str, str]]] = None, normal: bool = False) -> list[str]:
    """`escaping_steps` of one root's paths (`parts`: their rpartition("/"), when made). Each
    folder is checked and resolved once (counted in C, `Counter`: the paths of a 116,000-step
    trim are not grouped one by one in Python, issue 23); a step's own name is resolved only
    when it is a symlink (found by one listing of a folder many steps touch, else one lstat). A
    name that is no symlink resolves inside its resolved folder, so a folder that resolves inside
    its root keeps every such name inside it."""
    if root is None or not root.is_local:
        return []  # object stores have no symlinks; a Kafka group is no file root
    # normal paths as they are; else each is checked (the first outside its root raises) and normalised
    if not (normal or all_normal_rels(paths)):
        parts = [check_rel(p, root.location).rpartition("/") for p in paths]
    elif parts is None:
        parts = [p.rpartition("/") for p in paths]
    counts = Counter([head for head, _, _ in parts])  # folder -> steps in it, in the steps' order
    small = {head for head, n in counts.items() if n < LISTING_FROM}  # their names are lstat'ed
    index: dict[str, dict[str, str]] = {}  # folder -> name -> path: the small folders', then every one

    def names_in(head: str) -> dict[str, str]:
        got = index.get(head)
        if got is None:  # at most two passes: the small folders (and this one), then all
            want = None if index else small | {head}
            for (h, _, name), path in zip(parts, paths, strict=True):
                if want is None or h in want:
                    names = index.get(h)
                    if names is None:
                        names = index[h] = {}
                    names[name] = path
            got = index[head]
        return got

    out: list[str] = []
    top = os.path.realpath(root.location)
    resolved: dict[tuple[str, str], str] = {}  # (root, folder) -> its real path, one lstat each (_real_folder)
    for head, n in counts.items():
        parent = root.local(head) if head else root.location
        real_parent = _real_folder(root, root_name, head, top, resolved)
        inside = real_parent == top or real_parent.startswith(top.rstrip(os.sep) + os.sep)
        if not inside:
            names, links = names_in(head), _links(parent, names_in(head))
        else:
            links = _links(parent, None if n >= LISTING_FROM else names_in(head))
            if not links:
                continue
            names = names_in(head)
            links &= names.keys()
        for name in (names if not inside else links):
            path = os.path.join(parent, name)
            real = os.path.realpath(path) if name in links else os.path.join(real_parent, name)
            if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
                out.append(f"{root.uri(names[name])} (resolves to {real})")
    return out


def _real_folder(root: Root, root_name: str, head: str, top: str, resolved: dict[tuple[str, str], str]) -> str:
    """os.path.realpath of the root's folder `head` (a checked relative path), from its parent's
    real path when the folder is no symlink (one lstat; realpath lstats every component from /:
    600 folders of a roll back cost 50 ms, issue 23); a symlink is resolved by realpath itself.
    `top`: the root's own real path."""
    if not head:
        return top
    key = (root_name, head)
    got = resolved.get(key)
    if got is not None:
        return got
    up, _, name = head.rpartition("/")  # a normal path: no "", "." or ".." part
    path = root.local(head)
    try:
        link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        link = False  # as realpath: a name it cannot lstat is kept as it is
    got = os.path.realpath(path) if link else os.path.join(_real_folder(root, root_name, up, top, resolved), name)
    resolved[key] = got
    return got


LISTING_FROM = 16  # steps in one folder from which one listing is cheaper than an lstat each


def _links(parent: str, names: Optional[dict[str, str]]) -> set[str]:
    """Which of these names (entries of `parent`; checked: no "." or ".." names; None: any entry)
    are symlinks. A name that is not one resolves to itself inside its resolved folder."""
    if names is None or len(names) >= LISTING_FROM:
        try:
            with os.scandir(parent) as it:  # the kind comes with the listing: filter's C loop, no Python per entry
                found = {e.name for e in filter(os.DirEntry.is_symlink, it)}
            return found if names is None else found & names.keys()
        except OSError:
            if names is None:
                return set()  # not listable: no entry of it can be renamed either (each step then fails as always)
    out = set()
    for name in names or ():
        try:
            if stat.S_ISLNK(os.lstat(os.path.join(parent, name)).st_mode):
                out.add(name)
        except OSError:
            pass  # nothing there (yet): realpath would keep the name as it is
    return out


def check_plan(plan: Plan, roots: dict[str, Root]) -> None:
    """Refuse a plan that could lose a byte or touch a path outside its roots (each root's paths
    split once for both checks)."""
    by_root = _paths_by_root(plan)
    parts = {name: [p.rpartition("/") for p in paths] for name, paths in by_root.items()}
    nested = [pair for name, paths in by_root.items() for pair in _nested(name, paths, parts[name])]
    if nested:
        a, b = nested[0]
        raise Refused(f"the plan has steps whose paths nest ({a} holds {b}"
                      + (f"; {len(nested) - 1} more" if len(nested) > 1 else "")
                      + "): a folder and files in it are never moved separately; refusing")
    if "put_back" in _actions(plan):
        by_root[PUT_BACK_TO] = [s.path for s in plan.steps if s.action == "put_back"]
        parts.pop(PUT_BACK_TO, None)
    normal = plan.paths_normal(all_normal_rels)  # every step path (put_back paths too); the executor asks again
    escaping = [e for name, paths in by_root.items()
                for e in _escaping(name, roots.get(name), paths, parts.get(name), normal)]
    if escaping:
        raise Refused(f"refusing a path outside the named roots: {escaping[0]}"
                      + (f" (+{len(escaping) - 1} more)" if len(escaping) > 1 else ""))


# ------------------------------------------------------------------------------ the runner

Say = Callable[[str], None]
Verifier = Callable[[Plan, dict[str, Root]], tuple[bool, dict[str, Any]]]


class Steps(Protocol):
    """What carries out a plan's steps, journaled into the backup: `operations.executor.Executor`
    (files), or the Kafka group's offsets (`operations.group_offsets`)."""

    journal: Any

    def write_plan(self) -> None: ...

    def start(self) -> None:
        """Work that may begin once the plan is made, before it is checked and written: reads
        only, and none of a path the check would refuse (the executor's hasher reads the plan's
        files beneath their roots); `close` ends it when `run` never comes."""

    def close(self) -> None: ...

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
    backup_under: str = "_streamctl/backups"  # the default backup folder, below the checkpoint
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
    # the CLI's: this process lowers its own priority once the renames run (`Executor.step_back`)
    step_back: bool = False


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


F = TypeVar("F", bound=Callable[..., Any])


def _no_cycle_collection(fn: F) -> F:
    """`fn` with Python's cycle collector paused: a mutation's plan, journal and manifest records
    (100,000 steps) are freed by reference counting, while the collector walked that heap nine
    times in a trim, 0.1 s of its one busy core (issue 23). On again when `fn` returns; a
    caller that paused it keeps it paused."""

    @functools.wraps(fn)
    def paused(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            _aged()
            gc.enable()

    return cast(F, paused)


def _aged() -> None:
    """What the paused call allocated (a 66,000-step roll back: millions of objects, all still
    counted as young) moved into the oldest generation without a collection: gc.freeze() then
    gc.unfreeze() merge the generations' lists (constant time) and zero the young count. Else
    the first allocation after gc.enable() walked them all, 54 ms between the lock's release and
    the output (issue 23). Their cycles, if any, go with the next full collection. Not when
    something else froze objects (gc.unfreeze would release them too)."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


@_no_cycle_collection
def execute(op: Operation, req: Request, say: Optional[Say] = None, meter: Optional[Say] = None) -> Outcome:
    """Validate the backup, lock, plan under the lock (what is executed is what was inspected),
    check and write the plan, run the journaled steps, finish, verify, release."""
    from streamctl.operations.lock import Lock

    op_id = new_op_id(op.command)
    ck = Root("checkpoint", req.checkpoint)
    # validated before the lock: an early failure leaves no lock behind
    backup = check_backup_target(req.backup_dir or ck.uri(f"{op.backup_under}/{op_id}"), op.backup_flag,
                                 op.backup_root)
    lock = Lock.acquire(ck, op.command, op_id, break_lock=req.break_lock)
    # what is executed is what was inspected under the lock: a split inspection's child forked
    # before it (cli/entry.py starts one for read-only commands) may hold listings of a state
    # another operation changed since, with the same key
    discard_early()
    steps: Optional[Steps] = None
    from streamctl.operations import coprocess

    try:  # until the first step runs, every failure releases the lock
        if op.steps is file_steps and ck.is_local:  # their start-up overlaps the plan (one core idles)
            from streamctl.operations.executor import warm_up

            warm_up()
        plan = req.planner(op_id, backup)
        if not plan.steps:  # decided under the lock: not while another operation is half done
            coprocess.cool()
            lock.release()
            return Outcome(plan, backup, executed=False)
        plan.op_id = op_id
        roots = roots_of(plan)
        steps = op.steps(plan, roots, backup, say, meter)
        if req.step_back and hasattr(steps, "step_back"):
            steps.step_back = True
        steps.start()  # the executor's hasher reads the plan's files beneath their roots while it is checked and written
        check_plan(plan, roots)
        coprocess.cool()  # those it did not take (a plan of one batch)
        steps.write_plan()
        steps.journal.append_many(req.opening)
    except BaseException:
        coprocess.cool()
        if steps is not None:  # what start() began
            steps.close()
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

    ck = roots.get("checkpoint")  # roots_of(plan): plan.roots' locations as roots
    if op.finish is None and hasattr(steps, "steps_done") and ck is not None and ck.is_local:
        # local only: an object store's client may run threads of its own, which no fork may copy
        steps.steps_done = functools.partial(_verify_ahead, plan.roots["checkpoint"])
    try:
        try:
            _keep(plan, steps, steps.run())
        except BaseException:
            discard_early()  # `_verify_ahead`'s child, if the run failed after forking it
            raise
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
    try:
        ok, got = op.verify(plan, roots)
    finally:
        discard_early()  # `_verify_ahead`'s child, when the verification did not join it
    try:
        steps.journal.settle()  # manifest.json, written while the verification ran
    except (StorageError, OSError) as exc:
        raise kept(exc) from None
    steps.journal.append({"event": Event.VERIFIED, "ok": ok, "got": got})
    lock.release()
    return Outcome(plan, backup, executed=True, resumed=resumed, verified=ok, got=got)


_KEPT: list[Any] = []  # the last run's plan, steps and journal state (`_keep`)


def _keep(*objects: Any) -> None:
    """Keep the last run's plan, steps and journal state alive until the process ends (or the
    next run): freed one by one as the run returned, a 66,000-step roll back's journal records
    cost 80 ms between the run and its verification, and its plan 20 ms after the output (issue
    23). cli/entry.py ends the process with os._exit, which frees nothing."""
    _KEPT[:] = objects


def _verify_ahead(checkpoint: str) -> None:
    """Once every step is durable: fork the child of the verifying inspection (inspectors/split.py
    `start_early`) before manifest.json's writer thread starts, which would leave the verification
    on one core (a fork is only made by a process of one thread). The verification's `read_state`
    joins it when its key (the checkpoint, its folders, the versions now) is the child's; it is
    discarded otherwise. Nothing else writes the checkpoint until then: the lock is held, no
    `finish` step is left (see `_run`) and the query is stopped."""
    from streamctl.inspectors.chains import early_split

    start_early(lambda: early_split(checkpoint))


WRITTEN = "_streamctl/written.json"  # the checkpoint log files the last operation wrote (inspectors/checkpoint.py)


def _note_written(plan: Plan, roots: dict[str, Root]) -> None:
    """Record the offsets/ and commits/ files the operation wrote (size, mtime) in the checkpoint's
    `_streamctl/written.json`: they are streamctl's own, so the liveness check never reads them as
    a running query's (docs/model.md#liveness). Best effort: a failure only leaves the check as it was."""
    import json

    ck = roots.get("checkpoint")
    if ck is None or "write" not in _actions(plan):  # a plan of moves (66,000 of a roll back) writes none
        return
    files: dict[str, list[int]] = {}
    for s in plan.steps:
        if s.root == "checkpoint" and s.action == "write" and s.path.split("/", 1)[0] in ("offsets", "commits"):
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
    from streamctl.operations.executor import load

    plan, backup = load(backup_location)
    if plan.command != op.command:
        raise UsageError(f"{backup.uri('plan.json')}: a plan of `streamctl {plan.command}`, not of {op.command}")
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
    discard_early()  # as `execute`: nothing listed before the lock is used under it
    try:
        why = refusal()
        if why:
            raise Refused(why)
    except BaseException:
        lock.release()
        raise
    return lock


@_no_cycle_collection
def resume(op: Operation, backup_location: str, break_lock: bool = False, say: Optional[Say] = None,
           meter: Optional[Say] = None) -> Outcome:
    """After a crash (the lock stays): take the lock over, refuse when the checkpoint moved on,
    run every step not yet done, finish, verify."""
    plan, backup, roots, steps, journal = _earlier(op, backup_location, False, say, meter)
    lock = _take_over(op, plan, roots, "resume", break_lock, lambda: op.resumable(plan, journal))
    return _run(op, plan, roots, backup, steps, lock, resumed=True)


@_no_cycle_collection
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

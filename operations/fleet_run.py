"""A mutation over a fleet of checkpoints (`streamctl trim '/data/chk/*'`): each checkpoint is
planned, or carried out through the one runner (operations/runner.py: its own lock, journal,
backup, verify, resume and undo), on a bounded thread pool; a refusal or failure of one never
stops or changes another. The run record (operations/fleet_record.py) says what each checkpoint's
operation did, so the run resumes and undoes as a whole (docs/model.md#fleet-runs).

What differs between commands (the request from the run's settings, the planner) is handed in;
what an exception means to the operator (its exit code) too: `code_of`, console/errors.py's table.
"""
from __future__ import annotations

import functools
import posixpath
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional
from urllib.parse import urlparse

from streamctl.formats.errors import UsageError
from streamctl.formats.layout import PLAN_FILE
from streamctl.operations import fleet_record as rec
from streamctl.operations.files import Root
from streamctl.operations.plan import Plan

DEFAULT_WORKERS = 4
CodeOf = Callable[[BaseException], int]
Tick = Callable[[str], None]


def sink_for(checkpoint: str, pattern: str) -> str:
    """The sink of `checkpoint` by `--sink-pattern`: `{name}` is the checkpoint folder's name,
    `{checkpoint}` its location; a pattern that is not absolute (no leading `/`, no scheme) is
    relative to the checkpoint folder. `..` is resolved in the path, a URI's `?options` kept."""
    base, q, options = checkpoint.partition("?")
    base = base.rstrip("/")
    name = posixpath.basename(urlparse(base).path.rstrip("/")) or base
    sink = pattern.replace("{name}", name).replace("{checkpoint}", base)
    if not (sink.startswith("/") or "://" in sink):
        sink = f"{base}/{sink}"
    scheme, sep, rest = sink.partition("://")
    if sep:  # keep scheme://bucket, normalize the path after it
        bucket, _slash, path = rest.partition("/")
        sink = f"{scheme}://{bucket}{posixpath.normpath('/' + path)}"
    else:
        sink = posixpath.normpath(sink)
    return sink if "?" in sink else sink + q + options  # a pattern's own ?options win


def inside(pattern: str, matches: list[str]) -> None:
    """A local pattern's matches stay in the folder the pattern names: a match that is a symlink
    out of it is a usage error (name it directly to act on it), before anything changes."""
    import glob
    import os

    from streamctl.inspectors.fleet import is_remote

    if is_remote(pattern) or "://" in pattern:
        return
    parts = os.path.expanduser(pattern).split(os.sep)
    base = os.sep.join(parts[:next((i for i, p in enumerate(parts) if glob.has_magic(p)), len(parts))]) or "."
    real_base = os.path.realpath(base)
    for m in matches:
        real = os.path.realpath(m)
        if real != real_base and not real.startswith(real_base.rstrip(os.sep) + os.sep):
            raise UsageError(f"{m}: matched by {pattern} but a symlink out of {base} (it resolves to {real}); "
                             "name it directly to act on it")


def check_engine(engine: Optional[str], master: Optional[str]) -> None:
    """UsageError for an --engine not known, or a --master without --engine spark."""
    from streamctl.inspectors.fleet import ENGINES

    if engine is not None and engine not in ENGINES:
        raise UsageError(f"invalid value for --engine: {engine!r} (choose from {', '.join(ENGINES)})")
    if master is not None and engine != "spark":
        raise UsageError("--master is the Spark master of --engine spark; add --engine spark or drop --master")


@contextmanager
def engine(name: Optional[str], master: Optional[str]) -> Iterator[Any]:
    """None for the local engine (threads of this process); for `spark`, inspectors/fleet.py's
    SparkRunner (an active SparkSession reused, else one started on `master` and stopped after)."""
    if name != "spark":
        yield None
        return
    from streamctl.inspectors.fleet import DEFAULT_MASTER, SparkRunner

    with SparkRunner(master or DEFAULT_MASTER, "streamctl-fleet-run") as runner:
        yield runner


@dataclass
class Tally:
    """What the terminal's progress line and the summary count, shared by the run's threads."""

    total: int
    done: int = 0
    files: int = 0
    bytes: int = 0
    failed: int = 0
    refused: int = 0
    current: dict[str, str] = field(default_factory=dict)  # checkpoint -> its runner's last meter line
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, row: dict[str, Any], tick: Tick) -> None:
        with self._lock:
            self.done += 1
            if row["status"] in (rec.DONE, rec.UNDONE):
                self.files += int(row.get("files") or 0)
                self.bytes += int(row.get("bytes") or 0)
            self.refused += row["status"] == rec.REFUSED
            self.failed += row["status"] in (rec.FAILED, rec.UNREADABLE, rec.NOT_VERIFIED)
            self.current.pop(row["checkpoint"], None)
            tick(self.line())

    def meter(self, checkpoint: str, tick: Tick) -> Tick:
        """The runner's meter of one checkpoint (files, bytes, rate, eta of its steps) after the
        fleet's counts."""
        def say(msg: str) -> None:
            with self._lock:
                self.current[checkpoint] = msg
                tick(self.line())

        return say

    def line(self) -> str:
        from streamctl.inspectors.findings import human_bytes

        head = (f"{self.done}/{self.total} checkpoints, {self.files} file(s), {human_bytes(self.bytes)}, "
                f"{self.refused} refused, {self.failed} failed")
        now = next(reversed(self.current.items()), None)
        return head if now is None else f"{head}; {now[0]}: {now[1]}"


# Set by the fleet's Ctrl-C handler (`_interrupted`): no checkpoint starts after it, even where
# Python dropped the KeyboardInterrupt itself (raised inside a finalizer or weakref callback).
CTRL_C = threading.Event()


def _unless_interrupted(fn: Callable[[int], dict[str, Any]], i: int) -> dict[str, Any]:
    if CTRL_C.is_set():
        raise KeyboardInterrupt
    return fn(i)


def pool_map(fn: Callable[[int], dict[str, Any]], count: int, workers: int) -> list[dict[str, Any]]:
    """fn(i) for every i, on at most `workers` threads; results in input order. After a Ctrl-C
    no further i starts (KeyboardInterrupt)."""
    fn = functools.partial(_unless_interrupted, fn)
    if workers <= 1 or count <= 1:
        return [fn(i) for i in range(count)]
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=min(workers, count), thread_name_prefix="streamctl-fleet")
    try:
        return list(pool.map(fn, range(count)))
    except KeyboardInterrupt:  # the checkpoints under way finish; the others stay pending for --resume-run
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)


def status_of(code: int) -> str:
    """The status of a checkpoint whose operation raised, before it changed anything."""
    return {4: rec.REFUSED, 3: rec.UNREADABLE, 5: rec.NOT_VERIFIED}.get(code, rec.FAILED)


def plan_row(plan: Plan) -> dict[str, Any]:
    """What the fleet plan and result say of one checkpoint's plan."""
    sizes = plan.after.get("reclaimable") or {}
    kept = [plan.target, plan.before.get("committed")] if plan.command == "trim" else None  # trim's kept window
    return {"strategy": plan.strategy, "target": plan.target, "kept": kept,
            "delivery": plan.classification, "steps": len(plan.steps),
            "files": sum(v["files"] for v in sizes.values()) if sizes else len(plan.steps),
            "bytes": sum(v["bytes"] for v in sizes.values()), "liveness": plan.before.get("liveness") or ""}


def base_row(e: rec.Entry) -> dict[str, Any]:
    return {"checkpoint": e.checkpoint, "sink": e.sink or "", "status": rec.PENDING, "reason": "", "exit_code": 0,
            "strategy": "", "target": None, "kept": None, "delivery": "", "steps": 0, "files": 0, "bytes": 0,
            "liveness": "", "op_id": e.op_id, "backup": e.backup}


Started = Callable[..., None]  # (field=value): the record told an operation started (local engine)
EntryFn = Callable[[rec.Entry, Optional[Tick], Optional[Started]], dict[str, Any]]


def plan_entry(e: rec.Entry, _meter: Optional[Tick], _started: Optional[Started], *,
               planner: Callable[[rec.Entry], Plan], code_of: CodeOf) -> dict[str, Any]:
    """One checkpoint's plan, or why it refuses or cannot be read; nothing is changed."""
    row = base_row(e)
    try:
        plan = planner(e)
    except Exception as exc:  # noqa: BLE001 - one checkpoint's failure is its row, never the fleet's
        code = int(code_of(exc))
        row.update(status=status_of(code), reason=str(exc), reason_code=getattr(exc, "code", ""), exit_code=code)
    else:
        row.update(plan_row(plan), status="planned" if plan.steps else rec.NOTHING)
    return row


def run_each(fn: EntryFn, entries: list[rec.Entry], workers: int, spark: Any, tick: Tick,
             done: Optional[Callable[[int, dict[str, Any]], None]] = None,
             started: Optional[Callable[..., None]] = None) -> list[dict[str, Any]]:
    """fn(entry, meter, started) of every entry, rows in input order, each handed to `done(i, row)`
    (the run record) on the driver. The local engine: on at most `workers` threads, each row as it
    comes, with the runner's meter. `spark` (inspectors/fleet.py's SparkRunner): `workers` Spark tasks
    share the entries, each running fn on its own against the shared storage; no meter, no record
    write inside a task: the rows come back when the job ends."""
    tally = Tally(len(entries))
    if spark is not None:
        tick(f"{len(entries)} checkpoint(s) in {max(1, min(workers, len(entries)))} Spark task(s)")
        rows = spark.map(functools.partial(_in_task, fn), entries, workers)
        for i, row in enumerate(rows):
            if done is not None:
                done(i, row)
            tally.add(row, tick)
        return rows

    def one(i: int) -> dict[str, Any]:
        e = entries[i]
        say = (lambda **changes: started(i, **changes)) if started is not None else None
        row = fn(e, tally.meter(e.checkpoint, tick), say)
        if done is not None:
            done(i, row)
        tally.add(row, tick)
        return row

    return pool_map(one, len(entries), workers)


def _in_task(fn: EntryFn, e: rec.Entry) -> dict[str, Any]:
    return fn(e, None, None)


def plan_fleet(entries: list[rec.Entry], planner: Callable[[rec.Entry], Plan], code_of: CodeOf, workers: int,
               tick: Tick, spark: Any = None) -> list[dict[str, Any]]:
    """Each checkpoint's plan, or why it refuses or cannot be read; nothing is changed."""
    return run_each(functools.partial(plan_entry, planner=planner, code_of=code_of), entries, workers, spark, tick)


def _started(backup: str) -> bool:
    """Has the operation written its plan into its backup folder (so it may have changed files)?"""
    if not backup:
        return False
    try:
        return Root("backup", backup).exists(PLAN_FILE)
    except Exception:  # noqa: BLE001 - an unreadable backup folder: not started as far as we can tell
        return False


def _recorder(run: rec.FleetRun, indexes: Optional[list[int]] = None) -> Callable[[int, dict[str, Any]], None]:
    """What the record keeps of a row (`indexes`: the run's entry of each row, when a subset runs)."""
    def done(k: int, row: dict[str, Any]) -> None:
        i = k if indexes is None else indexes[k]
        changes = row.pop("record", None)  # undo says itself what the record keeps
        if changes is None:
            changes = {key: row[key] for key in ("status", "reason", "exit_code", "files", "bytes", "op_id", "backup")}
        run.update(i, **changes)

    return done


def _failed(row: dict[str, Any], exc: BaseException, code_of: CodeOf) -> None:
    code = int(code_of(exc))
    started = _started(row["backup"])
    row.update(status=rec.FAILED if started else status_of(code), reason=str(exc),
               reason_code=getattr(exc, "code", ""), exit_code=code,
               backup=row["backup"] if started else "", op_id=row["op_id"] if started else "")


def _outcome(row: dict[str, Any], outcome: Any) -> None:
    row.update(plan_row(outcome.plan))
    if not outcome.executed:
        row.update(status=rec.NOTHING, backup="", op_id="", files=0, bytes=0)
    elif outcome.verified:
        row.update(status=rec.DONE, backup=outcome.backup.location)
    else:
        row.update(status=rec.NOT_VERIFIED, exit_code=5, backup=outcome.backup.location,
                   reason=f"{row['checkpoint']}: ran but the checkpoint is {outcome.got.get('verdict')}, "
                          f"not the promised {outcome.plan.expected_verdict}")


def execute_entry(e: rec.Entry, meter: Optional[Tick], started: Optional[Started], *, op: Any,
                  planner: Callable[[rec.Entry], Plan], code_of: CodeOf, break_lock: bool) -> dict[str, Any]:
    """One checkpoint through the runner, under the operation id and backup folder the record
    named before the run started. Run again after a crash while it was being planned (its lock
    there, no plan yet), the lock of that same operation id is taken over once its process is gone."""
    from streamctl.inspectors.checkpoint import require_checkpoint
    from streamctl.inspectors.storage import Storage
    from streamctl.operations import runner

    row = base_row(e)
    try:
        op_id = e.op_id or runner.new_op_id(op.command)
        backup = e.backup or Root("checkpoint", e.checkpoint).uri(f"{op.backup_under}/{op_id}")
        row.update(op_id=op_id, backup=backup, status=rec.RUNNING)
        if started is not None:
            started(op_id=op_id, backup=backup, status=rec.RUNNING)
        require_checkpoint(Storage.open(e.checkpoint))  # before the lock: nothing is created where no checkpoint is
        outcome = runner.execute(op, runner.Request(e.checkpoint, lambda _op, _b: planner(e), None, break_lock,
                                                    op_id=op_id, takeover=True), meter=meter)
    except Exception as exc:  # noqa: BLE001 - one checkpoint's failure is its row, never the fleet's
        _failed(row, exc, code_of)
    else:
        _outcome(row, outcome)
    return row


def execute_fleet(run: rec.FleetRun, op: Any, planner: Callable[[rec.Entry], Plan], code_of: CodeOf,
                  workers: int, break_lock: bool, tick: Tick, spark: Any = None) -> list[dict[str, Any]]:
    fn = functools.partial(execute_entry, op=op, planner=planner, code_of=code_of, break_lock=break_lock)
    with _interrupted(run):
        return run_each(fn, run.entries, workers, spark, tick, _recorder(run), run.update)


@contextmanager
def _interrupted(run: rec.FleetRun) -> Iterator[None]:
    """The record saved at the end of the run; on Ctrl-C too (the checkpoints under way have
    finished or kept their locks), then the message names the run's resume (exit 130)."""
    import signal

    from streamctl.operations.runner import Interrupted

    def on_ctrl_c(_signum: int, _frame: Any) -> None:
        CTRL_C.set()
        raise KeyboardInterrupt

    CTRL_C.clear()
    previous = signal.signal(signal.SIGINT, on_ctrl_c) if threading.current_thread() is threading.main_thread() else None
    try:
        yield
        if CTRL_C.is_set():  # the KeyboardInterrupt was dropped, but no checkpoint started after it
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        run.flush()
        raise Interrupted(f"interrupted; resume the fleet run with: streamctl {run.command} --resume-run "
                          f"{run.location} (or undo it with --undo-run)") from None
    except Exception as exc:
        run.flush()
        from streamctl.inspectors.fleet import SparkJobFailed

        if isinstance(exc, SparkJobFailed):  # no row came back; every operation id is in the record
            from streamctl.operations.plan import NotVerified

            raise NotVerified(f"{exc}; the checkpoints its tasks reached may be part-way: resume the fleet run "
                              f"with: streamctl {run.command} --resume-run {run.location} (or undo it with "
                              "--undo-run)") from None
        raise
    finally:
        CTRL_C.clear()  # this run's: a later fleet in the same process starts unflagged
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    run.flush()


def resume_entry(e: rec.Entry, meter: Optional[Tick], started: Optional[Started], *, op: Any,
                 planner: Callable[[rec.Entry], Plan], code_of: CodeOf, break_lock: bool) -> dict[str, Any]:
    """A checkpoint the run left unfinished: one that never started runs now; one whose operation
    started (its plan is in its backup folder) resumes from its journal."""
    from streamctl.operations import runner

    if not _started(e.backup):
        return execute_entry(e, meter, started, op=op, planner=planner, code_of=code_of, break_lock=break_lock)
    row = base_row(e)
    try:
        outcome = runner.resume(op, e.backup, break_lock, meter=meter)
    except Exception as exc:  # noqa: BLE001
        row.update(status=rec.FAILED, reason=str(exc), exit_code=int(code_of(exc)))
    else:
        _outcome(row, outcome)
    return row


def resume_fleet(run: rec.FleetRun, op: Any, planner: Callable[[rec.Entry], Plan], code_of: CodeOf,
                 workers: int, break_lock: bool, tick: Tick, spark: Any = None) -> list[dict[str, Any]]:
    """Every checkpoint the run left unfinished, resumed or run (resume_entry)."""
    todo = [i for i, e in enumerate(run.entries) if e.status in rec.UNFINISHED]
    fn = functools.partial(resume_entry, op=op, planner=planner, code_of=code_of, break_lock=break_lock)
    with _interrupted(run):
        return run_each(fn, [run.entries[i] for i in todo], workers, spark, tick, _recorder(run, todo),
                        lambda k, **changes: run.update(todo[k], **changes))


def undo_entry(e: rec.Entry, meter: Optional[Tick], _started: Optional[Started], *, op: Any, code_of: CodeOf,
               break_lock: bool) -> dict[str, Any]:
    """Put back one checkpoint from its backup folder (checked against its manifest first); a
    refusal leaves it as it is and its status in the record unchanged (the row's `record`)."""
    from streamctl.operations import runner

    row = base_row(e)
    if _undone(op, e.backup):  # undone before, after the record's last save
        row.update(status=rec.UNDONE, record={"status": rec.UNDONE, "reason": ""})
        return row
    try:
        done = runner.undo(op, e.backup, break_lock, meter=meter)
    except Exception as exc:  # noqa: BLE001
        code = int(code_of(exc))
        row.update(status=status_of(code), reason=str(exc), exit_code=code, record={"reason": str(exc)})
    else:
        row.update(status=rec.UNDONE if done.verified else rec.NOT_VERIFIED, files=len(done.restored),
                   exit_code=0 if done.verified else 5,
                   reason="" if done.verified else f"{e.checkpoint}: undo ran but the positions differ")
        row["record"] = {"status": rec.UNDONE if done.verified else e.status, "reason": row["reason"]}
    return row


def undo_fleet(run: rec.FleetRun, op: Any, code_of: CodeOf, workers: int, break_lock: bool,
               tick: Tick, spark: Any = None) -> list[dict[str, Any]]:
    """Put back every checkpoint the run changed (undo_entry)."""
    todo = [i for i, e in enumerate(run.entries) if e.status != rec.UNDONE and _started(e.backup)]
    fn = functools.partial(undo_entry, op=op, code_of=code_of, break_lock=break_lock)
    with _interrupted(run):
        return run_each(fn, [run.entries[i] for i in todo], workers, spark, tick, _recorder(run, todo))


def _undone(op: Any, backup: str) -> bool:
    """Does the operation's journal say an undo of it finished?"""
    from streamctl.operations.backup_folder import load
    from streamctl.operations.runner import roots_of

    try:
        plan, root = load(backup)
        return bool(op.steps(plan, roots_of(plan), root, None, None).read_journal().undo_finished)
    except Exception:  # noqa: BLE001 - unreadable: the undo itself says why
        return False


def entries_of(targets: list[tuple[str, Optional[str], str, Optional[str]]]) -> list[rec.Entry]:
    seen: set[str] = set()
    out = []
    for checkpoint, sink, kind, app_id in targets:
        if checkpoint in seen:
            raise UsageError(f"{checkpoint}: named twice; a fleet run takes each checkpoint once")
        seen.add(checkpoint)
        out.append(rec.Entry(checkpoint, sink, kind, app_id))
    return out

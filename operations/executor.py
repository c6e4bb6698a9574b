"""Execute and resume a plan (docs/model.md#the-mutation-path): a journal entry before and after
each step, idempotent steps, every touched file backed up (size and sha256 in the manifest).
The backup folder's layout is operations/backup_folder.py's; what one step does,
operations/apply_steps.py's; moves by copy on object stores, operations/object_moves.py's; undo,
operations/undo.py's.

Test-only hooks (environment): STREAMCTL_TEST_CRASH_AFTER=N ends the process abruptly right after
its N-th journal record (operations/journal.py); STREAMCTL_TEST_STEP_DELAY=S sleeps S seconds
after each step.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

from streamctl.formats.journal import RENAMED, Event, JournalState
from streamctl.formats.layout import BACKED_UP_DIR, UNDONE_DIR
from streamctl.operations.apply_steps import StepApplier, moved_entry
from streamctl.operations.backup_folder import write_manifest_started, write_plan_started
from streamctl.operations.files import Pending, Root
from streamctl.operations.journal import Commit, Conflict, Journal, journal_location
from streamctl.operations.meter import Meter
from streamctl.operations.object_moves import delete_remote, move_by_copy, parallel
from streamctl.operations.plan import COPY_FROM, PUT_BACK_TO, Plan, Step

DELAY_ENV = "STREAMCTL_TEST_STEP_DELAY"
BATCH_STEPS = 8192  # journal group commit: records per fsync at most
BATCH_SECONDS = 1.0  # and done records durable at the latest this long after their batch started
WAVE_STEPS = 256  # copy steps on threads between two looks at the clock (BATCH_SECONDS)


def _digest_record(d: Optional[tuple[int, str]]) -> Optional[dict[str, Any]]:
    return None if d is None else {"size": d[0], "sha256": d[1]}


class Executor:
    """Runs a plan's file steps (`run`), or undoes them (`undo`), journaled into the backup folder."""

    def __init__(self, plan: Plan, roots: dict[str, Root], backup: Root,
                 progress: Optional[Callable[[str], None]] = None,
                 meter: Optional[Callable[[str], None]] = None, manifest_ahead: bool = False,
                 gate: Optional[tuple[int, Callable[[], None]]] = None,
                 copy_wave: Optional[Callable[[Step], Any]] = None) -> None:
        """`progress` gets one line per step; `meter` a throttled status (files done, bytes, rate,
        eta) for a terminal. `manifest_ahead`: `run` returns with manifest.json still being
        written on a thread, durable before the journal's next record (the runner's `verified`,
        written after its verification), else durable when `run` returns. `gate` (index, check):
        no step from that index on begins before every step below it is done and durable and
        the check returned (it raises to stop there: copy --move's retirement of the old place
        waits for the verified copy). `copy_wave`: `copy` steps with an object store on either
        side run on COPY_THREADS threads (each request a round trip), a wave at a time: a run of
        consecutive copy steps of one wave (the key it gives a step); a step of the next wave
        begins only once every step of the wave before it is done (streamctl copy: the query's
        logs after its data and state, its `metadata` last). Without it, one at a time."""
        self.manifest_ahead = manifest_ahead
        self.copy_wave = copy_wave
        self.gate = gate
        self.plan = plan
        self.roots = roots
        self.backup = backup
        self.journal = Journal(backup)
        self.applier = StepApplier(roots, backup)
        self.say = progress  # None: the per-step lines are not even formatted
        self.meter = Meter(len(plan.steps), meter)
        self.delay = float(os.environ.get(DELAY_ENV) or 0)
        self._objects: set[int] = set()  # steps whose begin digest is of one plain object read (see _pre_images)

    @property
    def batch_steps(self) -> int:
        return BATCH_STEPS

    @property
    def batch_seconds(self) -> float:
        return BATCH_SECONDS

    # -- plan and manifest files -----------------------------------------------------------------
    def write_plan(self) -> None:
        """plan.json, written on a thread while the first batch is prepared: the journal writes
        no record before it is durable (`Journal.after`)."""
        self.journal.after(write_plan_started(self.backup, self.plan))

    def _manifest(self, state: JournalState) -> Pending:
        """manifest.json from the done records, written on a thread (`wait()`: durable). A
        `renamed` done record's entry is made from its begin record (`_renamed_entries`)."""
        done = state.done
        order = sorted(done)
        compact = [i for i in order if RENAMED in done[i] and "manifest" not in done[i]]
        renamed = iter(self._renamed_entries(compact, state))
        entries = []
        for i in order:
            rec = done[i]
            m = rec["manifest"] if "manifest" in rec else next(renamed) if RENAMED in rec else None
            if m:
                entries.append(m)
        return write_manifest_started(self.backup, self.plan, files=entries)

    def _renamed_entries(self, indices: list[int], state: JournalState) -> list[dict[str, Any]]:
        """The manifest entries of steps whose done record says `renamed`: a local move done by
        one rename, the file its begin record read (size, sha256) now at its backup path. Made
        here rather than carried in each done record, which keeps the journal small."""
        steps, begun = self.plan.steps, state.begun
        out = []
        for i in indices:
            step, pre = steps[i], begun[i]["pre"]
            out.append(moved_entry(step, self.roots[step.root], pre["size"], pre["sha256"]))
        return out

    def read_journal(self) -> JournalState:
        """The journal's state, each `renamed` done record given its manifest entry (what resume
        and undo read); Conflict when a `renamed` record has no begin record of a local move with
        its file's size and sha256 (nothing is acted on from a record that cannot be read)."""
        state = self.journal.read()
        steps, begun = self.plan.steps, state.begun
        wrong = next((i for i, rec in begun.items() if i >= len(steps) or rec.get("action", steps[i].action)
                      != steps[i].action), None)
        if wrong is not None:
            raise Conflict(f"{journal_location(self.backup)}: a begin record of step {wrong} names another action than "
                           "the plan's step (or a step the plan does not have); refusing to act on it, nothing was "
                           "changed")
        compact = [i for i, rec in state.done.items() if "manifest" not in rec and RENAMED in rec]
        for i in compact:
            pre = begun[i].get("pre") if i in begun else None
            if (state.done[i][RENAMED] is not True or i >= len(steps) or steps[i].action != "move"
                    or not isinstance(pre, dict) or not isinstance(pre.get("size"), int)
                    or not isinstance(pre.get("sha256"), str)):
                raise Conflict(f"{journal_location(self.backup)}: the done record of step {i} says it was renamed, but no "
                               "begin record of that move holds its file's size and sha256; refusing to act on it, "
                               "nothing was changed")
        for i, m in zip(compact, self._renamed_entries(compact, state), strict=True):
            state.done[i]["manifest"] = m
        return state

    # -- run -----------------------------------------------------------------------------------
    def run(self) -> JournalState:
        """Run (or continue) every step not yet done. Steps are idempotent: a step begun but not
        done by a crashed run is simply run again.

        Group commit: the begin records of a batch of steps (at most BATCH_STEPS) are made durable
        with one fsync before any of those steps acts; the done records follow once the batch's
        effects are durable (its folders fsynced), together with the next batch's begin records,
        or at the latest BATCH_SECONDS after the batch began. So no effect is ever durable before
        the record that lets resume and undo find it, and a crash at any point leaves only begun
        steps to run again."""
        state = self.read_journal()
        pending: list[dict[str, Any]] = []
        first_run = not state.started  # the backup folder was checked new or empty: no step's backup path is taken
        if not state.started:
            pending.append({"event": Event.START, "op_id": self.plan.op_id, "pid": os.getpid(),
                            "steps": len(self.plan.steps)})
            state.started = True
        todo = [i for i in range(len(self.plan.steps)) if i not in state.done]
        self.meter = Meter(len(todo), self.meter.out)  # a resumed run counts what is left
        at = self.gate[0] if self.gate is not None else len(self.plan.steps)
        # The next batch's files are read (their pre-images) on a thread while this batch acts:
        # reads and renames both wait on the file system. Never across the gate: the files after
        # it are read only once it has looked.
        with ThreadPoolExecutor(max_workers=1) as ahead:
            for phase in ([i for i in todo if i < at], [i for i in todo if i >= at]):
                if phase and phase[0] >= at and self.gate is not None:
                    self.journal.append_many(pending)  # the steps before the gate on record before it looks
                    pending = []
                    self.gate[1]()
                batches = [phase[k:k + BATCH_STEPS] for k in range(0, len(phase), BATCH_STEPS)]
                news = [[i for i in batch if i not in state.begun] for batch in batches]
                read = ahead.submit(self._pre_images, news[0]) if batches else None
                for j, batch in enumerate(batches):
                    assert read is not None
                    pres = read.result()
                    read = ahead.submit(self._pre_images, news[j + 1]) if j + 1 < len(batches) else None
                    commit = self._begin(news[j], pres, state, pending)
                    commit.wait()  # the begin records durable before any step of this batch acts
                    pending = self._act(batch, news[j], state, first_run)
        manifest = self._manifest(state)  # rebuilt from the journal's done records (each entry, or `renamed`)
        if not state.finished:
            pending.append({"event": Event.FINISHED})
            state.finished = True
        # the done records' fsync and the manifest's run together, and while the runner verifies:
        # both durable before the next record (`Journal.after`: the runner's `verified`)
        self.journal.after(self.journal.append_started(pending))
        self.journal.after(manifest)
        if not self.manifest_ahead:
            self.journal.settle()
        return state

    def _begin(self, new: list[int], pres: dict[int, Optional[dict[str, Any]]], state: JournalState,
               pending: list[dict[str, Any]]) -> Commit:
        """The begin records of a batch's new steps, after `pending` (done records of batches
        before), in one group commit: started, durable once its `wait()` returned. The local
        moves of files that are there go in one `begin_chunk` record (their steps and each one's
        size and sha256: what a `begin` record of each says, one line for the batch); the other
        steps get a `begin` record each."""
        records = list(pending)
        steps, roots, local_backup = self.plan.steps, self.roots, self.backup.is_local
        chunk: list[int] = []
        chunk_pre: list[list[Any]] = []
        for i in new:
            step, pre = steps[i], pres[i]
            if step.action == "move" and local_backup and pre is not None and roots[step.root].is_local:
                chunk.append(i)
                chunk_pre.append([pre["size"], pre["sha256"]])
                state.begun[i] = {"event": Event.BEGIN, "step": i, "action": "move", "pre": pre}
                continue
            rec = {"event": Event.BEGIN, "step": i, "action": step.action, "root": step.root,
                   "path": step.path, "pre": pre}
            records.append(rec)
            state.begun[i] = rec
        if chunk:
            records.append({"event": Event.BEGIN_CHUNK, "action": "move", "steps": chunk, "pre": chunk_pre})
        return self.journal.append_started(records)

    def _act(self, batch: list[int], new: list[int], state: JournalState, first_run: bool) -> list[dict[str, Any]]:
        """The steps of one batch whose begin records are durable, in plan order, their folders
        fsynced; returns the batch's done records, which go with a later commit."""
        pending: list[dict[str, Any]] = []
        touched: list[Step] = []
        deletes: list[int] = []  # remote deletes (--purge) go in batched requests, in plan order
        copies: list[int] = []  # moves by copy: parallel copies, then batched deletes, in plan order
        renames: list[int] = []  # local moves: renamed, then recorded in plan order
        wave: list[int] = []  # copy steps with an object store on a side: on threads, a wave at a time
        copied = {i for i in new if first_run and i in self._objects}
        t0 = time.monotonic()

        def copy_wave() -> None:
            """The wave's copies on threads, recorded in plan order; the done records so far
            committed once a batch has run BATCH_SECONDS."""
            nonlocal pending, touched, t0
            self._record(wave, self._copy_many(wave, state), state, pending, touched, delayed=False)
            wave.clear()
            if time.monotonic() - t0 > BATCH_SECONDS:
                self.commit_done(touched, pending)
                pending, touched, t0 = [], [], time.monotonic()

        def flush() -> None:
            self._record(deletes, self._delete_remote(deletes, state), state, pending, touched)
            self._record(copies, self._move_by_copy(copies, state), state, pending, touched)
            self._rename_many(renames, state, pending, touched)
            copy_wave()
            deletes.clear()
            copies.clear()
            renames.clear()

        for i in batch:
            step = self.plan.steps[i]
            if step.action == "delete" and not self.roots[step.root].is_local:
                deletes.append(i)
                continue
            if self._threaded_copy(step):
                if wave and (len(wave) >= WAVE_STEPS or self._wave(wave[-1]) != self._wave(i)):
                    flush()
                wave.append(i)
                continue
            if i in copied:
                copies.append(i)
                continue
            if self._renamable(step, state.begun[i].get("pre")):
                renames.append(i)
                continue
            flush()
            self._step_line(i)
            pre = state.begun[i].get("pre")
            self._record([i], [self.applier.apply(step, pre)], state, pending, touched)
            if time.monotonic() - t0 > BATCH_SECONDS:
                self.commit_done(touched, pending)
                pending, touched, t0 = [], [], time.monotonic()
        flush()
        self._sync(touched)
        return pending

    def _record(self, indices: list[int], entries: list[Optional[dict[str, Any]]], state: JournalState,
                pending: list[dict[str, Any]], touched: list[Step], delayed: bool = True) -> None:
        """The done records of these steps, with their manifest entries, into `pending`
        (`delayed`: the test hook's delay after each; threaded copies had theirs on their thread)."""
        for i, entry in zip(indices, entries, strict=True):
            rec = {"event": Event.DONE, "step": i, "manifest": entry}
            pending.append(rec)
            state.done[i] = rec
            touched.append(self.plan.steps[i])
            pre = state.begun[i].get("pre")
            self.meter.tick(pre.get("size") or 0 if isinstance(pre, dict) else 0)
            if self.delay and delayed:
                time.sleep(self.delay)

    def _pre_images(self, indices: list[int]) -> dict[int, Optional[dict[str, Any]]]:
        """What each step's file is before it acts (size, sha256), for its begin record. Local
        files are read here, one after the other. Files a --purge deletes on an object store get
        their size from one listing per folder, no read (no undo can use a digest of a purged
        file). Objects are read on COPY_THREADS threads, one request each; those that are plain
        files are noted in `_objects` (their moves go by copy -> verify -> batched delete). A
        copy step's new path on an object store is read the same way (what is there before it)."""
        steps = self.plan.steps
        pres: dict[int, Optional[dict[str, Any]]] = {}
        listed: dict[str, list[int]] = {}
        remote: list[int] = []
        copies: list[int] = []
        local: dict[str, list[int]] = {}
        for i in indices:
            step = steps[i]
            root = self.roots[step.root]
            if step.action == "delete" and not root.is_local:
                listed.setdefault(step.root, []).append(i)
            elif step.action == "copy" and not root.is_local:
                copies.append(i)
            elif step.action == "move" and not (root.is_local and self.backup.is_local):
                remote.append(i)
            else:
                local.setdefault(step.root, []).append(i)
        for name, idx in local.items():
            for i, d in zip(idx, self.roots[name].digests_if_exist([steps[i].path for i in idx]), strict=True):
                pres[i] = _digest_record(d)
        for i, d in zip(remote, parallel(lambda i: self.roots[steps[i].root].file_digest(steps[i].path), remote),
                        strict=True):
            if d is not None:
                self._objects.add(i)
            else:  # missing, or a folder: the general digest decides
                d = self.roots[steps[i].root].digest_if_exists(steps[i].path)
            pres[i] = _digest_record(d)
        # a copy's new path on an object store: one read each, on threads (None: no object there)
        for i, d in zip(copies, parallel(lambda i: self.roots[steps[i].root].file_digest(steps[i].path), copies),
                        strict=True):
            pres[i] = _digest_record(d)
        for name, idx in listed.items():
            sizes = self.roots[name].listed_sizes([steps[i].path for i in idx])
            for i in idx:
                size = sizes[steps[i].path]
                pres[i] = None if size is None else {"size": size, "sha256": None}
        return pres

    def describe(self, step: Step) -> str:
        """A step in words, the backup folder named as its command names it (drop-sink: the archive)."""
        word = "archive" if self.plan.command == "drop-sink" else "backup"
        return step.describe().replace("to the backup", f"to the {word}")

    def _step_line(self, i: int) -> None:
        if self.say is not None:
            self.say(f"step {i + 1}/{len(self.plan.steps)}: {self.describe(self.plan.steps[i])}")

    def _renamable(self, step: Step, pre: Any) -> bool:
        """A move a local rename can do (a file or folder that was there when its begin record
        was written, both roots local); not with the test hook's per-step delay."""
        return (step.action == "move" and isinstance(pre, dict) and not self.delay and self.backup.is_local
                and self.roots[step.root].is_local)

    def _rename_many(self, indices: list[int], state: JournalState, pending: list[dict[str, Any]],
                     touched: list[Step]) -> None:
        """Local moves by one rename each (independent steps: no two paths nest, and their begin
        records are durable), root by root (`Root.rename_files_into`), their manifest entries
        made from the begin records' size and sha256 and their done records one `done_chunk`
        record; a step the rename cannot do (moved already by a crashed run, something at its
        backup path, another file system) takes the general path of `StepApplier.apply` and a
        `done` record of its own. Recorded in plan order."""
        steps, begun, done, backup = self.plan.steps, state.begun, state.done, self.backup
        if self.say is not None:
            for i in indices:
                self._step_line(i)
        by_root: dict[str, list[int]] = {}
        for i in indices:
            by_root.setdefault(steps[i].root, []).append(i)
        ok: dict[int, bool] = {}
        for name, idx in by_root.items():
            renames = self.roots[name].rename_files_into([steps[i].path for i in idx], backup, f"{BACKED_UP_DIR}/{name}")
            ok.update(zip(idx, renames, strict=True))
        renamed: list[int] = []
        size = 0
        for i in indices:
            step, pre = steps[i], begun[i]["pre"]
            if ok[i]:
                name, rel = step.root, step.path
                renamed.append(i)
                done[i] = {"event": Event.DONE, "step": i, RENAMED: True,
                           "manifest": {"root": name, "path": rel, "uri": self.roots[name].uri(rel),
                                        "backup": f"{BACKED_UP_DIR}/{name}/{rel}", "action": "moved",
                                        "size": pre["size"], "sha256": pre["sha256"]}}
            else:
                rec = {"event": Event.DONE, "step": i, "manifest": self.applier.apply(step, pre)}
                pending.append(rec)
                done[i] = rec
            touched.append(step)
            size += pre["size"] or 0
        if renamed:
            pending.append({"event": Event.DONE_CHUNK, "steps": renamed})
        if indices:
            self.meter.tick(size, len(indices))

    def _threaded_copy(self, step: Step) -> bool:
        """A copy step that goes on threads (`copy_wave` given): an object store on either side."""
        return (self.copy_wave is not None and step.action == "copy"
                and not (self.roots[step.root].is_local and self.roots[COPY_FROM[step.root]].is_local))

    def _wave(self, i: int) -> Any:
        assert self.copy_wave is not None
        return self.copy_wave(self.plan.steps[i])

    def _copy_many(self, indices: list[int], state: JournalState) -> list[Optional[dict[str, Any]]]:
        """Copy steps whose begin records are durable, COPY_THREADS at once; each is
        `StepApplier.apply`'s idempotent copy (never over other content, read back against its
        source), so a crash mid-wave leaves begun steps that a resume runs again. The manifest
        entries, in order; the first failure is raised once the wave's other copies ended."""
        steps, begun = self.plan.steps, state.begun
        for i in indices:
            self._step_line(i)

        def one(i: int) -> Optional[dict[str, Any]]:
            entry = self.applier.apply(steps[i], begun[i].get("pre"))
            if self.delay:  # the test hook: each thread slowed, so a crash test finds the copy mid-way
                time.sleep(self.delay)
            return entry

        return parallel(one, indices)

    def _move_by_copy(self, indices: list[int], state: JournalState) -> list[Optional[dict[str, Any]]]:
        if not indices:
            return []
        for i in indices:
            self._step_line(i)
        return list(move_by_copy(self.roots, self.backup, [self.plan.steps[i] for i in indices],
                                 [state.begun[i]["pre"] for i in indices]))

    def _delete_remote(self, indices: list[int], state: JournalState) -> list[Optional[dict[str, Any]]]:
        if not indices:
            return []
        return list(delete_remote(self.roots, [self.plan.steps[i] for i in indices],
                                  [state.begun[i].get("pre") for i in indices]))

    def _sync(self, steps: list[Step]) -> None:
        """Make the effects of these steps durable: the folders that hold them, in the roots and
        the backup, one path per folder (a folder's fsync makes every entry in it durable)."""
        by_root: dict[str, dict[str, str]] = {}  # root -> folder -> one path in it
        for step in steps:
            by_root.setdefault(step.root, {})[step.path.rpartition("/")[0]] = step.path
        backup = {f"{BACKED_UP_DIR}/{name}/{rel}" for name, folders in by_root.items() for rel in folders.values()}
        backup.update(f"{UNDONE_DIR}/{s.root}/{s.path}" for s in steps if s.action in ("write", "copy"))
        back = {step.path for step in steps if step.action == "put_back"}
        if back:
            by_root.setdefault(PUT_BACK_TO, {}).update((rel.rpartition("/")[0], rel) for rel in back)
        for name, folders in by_root.items():
            self.roots[name].sync_parents(set(folders.values()))
        self.backup.sync_parents(backup)

    def commit_done(self, steps: list[Step], records: list[dict[str, Any]]) -> None:
        """These steps' effects made durable, then their records."""
        self._sync(steps)
        self.journal.append_many(records)

    # -- undo ----------------------------------------------------------------------------------
    def undo(self) -> list[str]:
        """operations/undo.py: put back exactly what the operation changed."""
        from streamctl.operations.undo import Undo

        return Undo(self).run()

"""Execute, resume and undo a plan: backup of every touched file (size and sha256 in a manifest),
a journal entry before and after each step, idempotent steps.

Backup folder layout (`--backup-dir`, by default `<checkpoint>/_streamctl/backups/<op id>`):

    plan.json        the plan, steps and the contents of written files included
    journal.jsonl    one JSON object per line: start, begin/done per step, finished, verified, undo
                     (local file systems: appended, one fsync per group commit)
    journal/<n>.jsonl  the same records on object stores, which cannot append: one segment object
                     per group commit, numbered from 000001, read in order (a journal.jsonl of the
                     earlier single-object layout is read first)
    manifest.json    every file moved or replaced: root, path, backup path, size, sha256 (written when
                     the steps are done; until then the journal's `done` records carry the same entries,
                     a move done by one rename as `renamed`: its entry is made from its begin record)
    files/<root>/<path>   the backed-up files, at their original relative paths
    undone/<root>/<path>  files `--undo` took out again (files the operation had created)

Test-only hooks (environment): STREAMCTL_TEST_CRASH_AFTER=N ends the process abruptly right after
its N-th journal record; STREAMCTL_TEST_STEP_DELAY=S sleeps S seconds after each step.
"""
from __future__ import annotations

import errno
import hashlib
import json
import json.encoder
import operator
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from streamctl.formats.coordinated_log import COORD_COMMITS
from streamctl.formats.errors import StorageError, StreamctlError
from streamctl.formats.file_sink_log import FILE_SINK_LOG
from streamctl.formats.journal import (
    ITEM_FIRST,
    ITEM_SEP,
    JOURNAL_FILE,
    SEGMENT_DIR,
    EncodedItems,
    EncodedPieces,
    Event,
    JournalState,
    json_file_parts,
)
from streamctl.formats.jsontext import plain_texts
from streamctl.formats.reader import load_json
from streamctl.inspectors.storage import parallel_map
from streamctl.operations.coprocess import CoProcess, take, warm
from streamctl.operations.files import (
    Pending,
    Root,
    all_normal_rels,
    is_normal_rel,
    rename_outcomes,
    run_renames,
)
from streamctl.operations.journal import Commit, Conflict, Journal, journal_location
from streamctl.operations.plan import PUT_BACK_TO, Plan, Step

PLAN_FILE = "plan.json"
MANIFEST_FILE = "manifest.json"
DELAY_ENV = "STREAMCTL_TEST_STEP_DELAY"
BATCH_STEPS = 8192  # journal group commit: records per fsync at most
_ACTION, _ROOT, _PATH = operator.attrgetter("action"), operator.attrgetter("root"), operator.attrgetter("path")  # in C
BATCH_SECONDS = 1.0  # and done records durable at the latest this long after their batch started
STEP_BACK = 10  # the niceness added to the run's other processes once the renamer runs (`Executor._step_back`)
METER_SECONDS = 0.2
COPY_THREADS = 8  # object-store reads and copies in flight at once
UNDO_COPY_BATCH = 256  # undo on object stores: copies put back per batched delete of their backups
RENAMED = "renamed"  # a done record's key: the step's move was one rename, its manifest entry its begin record's


def warm_up() -> None:
    """Start the co-processes a pipelined run takes (renamer, hasher, syncer) now, before the
    plan is made (coprocess.warm); the caller `coprocess.cool()`s those no run took."""
    warm(3)


def parallel(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """fn over items on at most COPY_THREADS threads, one item per task (object-store requests
    overlap), in order."""
    return parallel_map(fn, items, COPY_THREADS)


def write_plan(backup: Root, plan: Plan) -> None:
    """plan.json into a backup folder that holds none (a backup never overwrites anything)."""
    write_plan_started(backup, plan).wait()


def write_plan_started(backup: Root, plan: Plan) -> Pending:
    """`write_plan`, its bytes written on a thread (`Root.write_atomic_started`); checked and
    encoded here."""
    if backup.exists(PLAN_FILE):
        raise Conflict(f"{backup.uri(PLAN_FILE)} already exists: the backup folder holds another operation "
                       "(use --resume with its journal, or another --backup-dir)")
    rec = plan.to_record(steps=False)
    text = plan.steps_text(ITEM_SEP)  # the steps' items as json_file writes them, formatted
    rec["steps"] = EncodedItems(ITEM_FIRST + text) if text is not None else plan.step_records()
    return backup.write_atomic_started(PLAN_FILE, json_file_parts(rec))


def write_manifest(backup: Root, plan: Plan, **entries: Any) -> None:
    write_manifest_started(backup, plan, **entries).wait()


def write_manifest_started(backup: Root, plan: Plan, **entries: Any) -> Pending:
    return backup.write_atomic_started(MANIFEST_FILE, json_file_parts({"op_id": plan.op_id, "command": plan.command,
                                                                       "roots": plan.roots, **entries}))


def backup_rel(step: Step) -> str:
    return f"files/{step.root}/{step.path}"


def _entry_base(step: Step, root: Root) -> dict[str, Any]:
    """The manifest entry's common keys of a step."""
    return {"root": step.root, "path": step.path, "uri": root.uri(step.path), "backup": backup_rel(step)}


def _moved_entry(step: Step, uri: str, size: Any, sha256: Any) -> dict[str, Any]:
    """The manifest entry of a file moved into the backup (the common case, built directly);
    `uri` is its root's `uri(step.path)`."""
    return {"root": step.root, "path": step.path, "uri": uri, "backup": f"files/{step.root}/{step.path}",
            "action": "moved", "size": size, "sha256": sha256}


_HEX = b"0123456789abcdef"


def _digest_record(d: Optional[tuple[int, str]]) -> Optional[dict[str, Any]]:
    return None if d is None else {"size": d[0], "sha256": d[1]}


class Meter:
    """Files done, bytes, rate and eta of a running operation, at most every METER_SECONDS (and
    at the last one); `what` names the things counted, `label` what is done to them."""

    def __init__(self, total: int, out: Optional[Callable[[str], None]], what: str = "files", label: str = "") -> None:
        self.total, self.out, self.what, self.label = total, out, what, label
        self.files = self.bytes = 0
        self.t0 = self.last = time.monotonic()

    def tick(self, size: int, files: int = 1) -> None:
        """`files` more done, of `size` bytes together."""
        if self.out is None:
            return
        self.files += files
        self.bytes += int(size)
        now = time.monotonic()
        if now - self.last < METER_SECONDS and self.files < self.total:
            return
        self.last = now
        rate = self.files / max(now - self.t0, 1e-6)
        eta = max(self.total - self.files, 0) / rate if rate else 0.0
        self.out(f"{self.label}{self.files:,}/{self.total:,} {self.what}, {self.bytes / 1e6:,.1f} MB, "
                 f"{rate:,.0f} {self.what}/s, eta {eta:,.0f} s")


@dataclass
class _Renaming:
    """A batch of local moves by rename: the steps, the (source, target) paths of those that are
    renames (`order`: their steps), whether they went to the co-process (`sent`) or the outcomes of
    renames run in process (`done`)."""

    indices: list[int]
    order: list[int] = field(default_factory=list)
    pairs: list[tuple[str, str]] = field(default_factory=list)
    sent: bool = False
    done: Optional[list[bool]] = None


@dataclass
class _Syncing:
    """A batch's folder fsyncs sent to the syncing co-process: its steps, and per root the parent
    folders `Root.synced` takes once every fsync is answered."""

    steps: list[Step]
    marks: list[tuple[Root, set[str]]]


@dataclass
class _Hashing:
    """The pre-images of a batch's new steps being read by the hashing co-process: the steps
    (`indices`), in order those whose files were sent (`sent`, plain local paths), and in how
    many requests (`parts`: one a root for reads beneath the roots, answered in turn)."""

    indices: list[int]
    sent: list[int]
    parts: int = 1


class Executor:
    def __init__(self, plan: Plan, roots: dict[str, Root], backup: Root,
                 progress: Optional[Callable[[str], None]] = None,
                 meter: Optional[Callable[[str], None]] = None, manifest_ahead: bool = False) -> None:
        """`progress` gets one line per step; `meter` a throttled status (files done, bytes, rate,
        eta) for a terminal. `manifest_ahead`: `run` returns with manifest.json still being
        written on a thread, durable before the journal's next record (the runner's `verified`,
        written after its verification), else durable when `run` returns."""
        self.manifest_ahead = manifest_ahead
        # this process too steps back once the renames run (`_step_back`): the CLI's choice (a
        # priority it cannot take back), not a library caller's
        self.step_back = False
        self._stepped_back = False
        # called once every step is durable, before manifest.json's writer thread starts: the
        # runner forks the verifying inspection's child there (a fork needs a process of one thread)
        self.steps_done: Optional[Callable[[], None]] = None
        self.plan = plan
        self.roots = roots
        self.backup = backup
        self.journal = Journal(backup)
        self.progress = progress or (lambda _m: None)
        self._say = progress  # None: the per-step lines are not even formatted (100,000 steps)
        self.meter = Meter(len(plan.steps), meter)
        self.delay = float(os.environ.get(DELAY_ENV) or 0)
        self._objects: set[int] = set()  # steps whose begin digest is of one plain file read (see _pre_images)
        self._co: Optional[CoProcess] = None  # the renaming co-process while run() runs
        self._hasher: Optional[CoProcess] = None  # and the one reading the next batch's pre-images
        self._syncer: Optional[CoProcess] = None  # and the one fsyncing the folders of the batch before
        self._queued: Optional[list[Optional[_Hashing]]] = None  # every batch's pre-images, asked by start()
        self._uri_heads = {name: root.storage.uri_prefix() for name, root in roots.items()}  # what uri() puts before a path
        self._plan_normal: Optional[bool] = None  # every step's path normal (`_normal`), asked once
        # manifest.json's items of the batches renamed so far (`_renamed_items`), made while the
        # next batch renames, and their steps in order; None once a batch had another kind of step
        self._items: Optional[list[bytes]] = []
        self._itemized: list[int] = []

    def _normal(self, rels: list[str]) -> bool:
        """all_normal_rels(rels), for step paths: true of every batch when the plan's paths are
        all normal, which is checked once (four checks of each batch's joined paths were 40 ms of
        a 66,000-step run, issue 23)."""
        if self._plan_normal is None:
            self._plan_normal = self.plan.paths_normal(all_normal_rels)
        return self._plan_normal or all_normal_rels(rels)

    # -- plan file ----------------------------------------------------------------------------
    def write_plan(self) -> None:
        """plan.json, written on a thread while the first batch is prepared: the journal writes
        no record before it is durable (`Journal.after`)."""
        self.journal.after(write_plan_started(self.backup, self.plan))

    def start(self) -> None:
        """Before a fresh run of more than one batch, as soon as the plan is made: take the
        co-processes and send the hasher every batch's files at once, to be read beneath their
        roots (`hash_beneath`: no path the plan's check would refuse is opened, so the reads
        overlap that check, `plan.json` and the journal's opening records, while one core
        idles; issue 23). `run` takes them; `close` stops them when it never comes."""
        if self._co is not None or len(self.plan.steps) <= BATCH_STEPS:
            return
        self._co, self._hasher, self._syncer = take(), take(), take()
        self._queued = self._hash_plan()
        self._co.spawn()  # the renamer and the syncer start up meanwhile too
        self._syncer.spawn()

    def _hash_plan(self) -> Optional[list[Optional[_Hashing]]]:
        """`queue_hashes` of every batch's local pre-images, one request per batch and root;
        per batch, what was sent (None: nothing, read in process). None when nothing went."""
        n = len(self.plan.steps)
        out: list[Optional[_Hashing]] = []
        requests: list[tuple[str, list[str]]] = []
        for k in range(0, n, BATCH_STEPS):
            indices = list(range(k, min(k + BATCH_STEPS, n)))
            sent: list[int] = []
            parts = 0
            for head, idx, rels in self._local_groups(indices):
                sent += idx
                parts += 1
                requests.append((head.rstrip("/") or "/", rels))
            out.append(_Hashing(indices, sent, parts) if sent else None)
        if self._hasher is None or not requests or not self._hasher.queue_hashes(requests):
            return None
        return out

    def close(self) -> None:
        """Stop the co-processes (killed when answers are left unread): all told first, then each
        waited for, so they end together."""
        running = [co for co in (self._co, self._hasher, self._syncer) if co is not None]
        for co in running:
            co.stop()
        for co in running:
            co.close()
        self._co = self._hasher = self._syncer = None
        self._queued = None

    def _manifest(self, state: JournalState) -> Pending:
        """manifest.json from the done records, written on a thread (`wait()`: durable). A
        `renamed` done record's entry is made from its begin record (`_renamed_entries`)."""
        done = state.done
        order = sorted(done)
        compact = [i for i in order if RENAMED in done[i] and "manifest" not in done[i]]
        if compact and len(compact) == len(order):  # every step a rename of this run (the usual fresh run)
            items = (EncodedPieces(self._items) if self._items is not None and self._itemized == compact
                     else self._renamed_items(compact, state))
            if items is not None:
                return write_manifest_started(self.backup, self.plan, files=items)
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
        here rather than carried in each done record: 116,000 of them were half the journal's
        bytes and a fifth of the run's own work (issue 23)."""
        steps, begun = self.plan.steps, state.begun
        heads = self._uri_heads if self._normal([steps[i].path for i in indices]) else {}
        out = []
        for i in indices:
            step, pre = steps[i], begun[i]["pre"]
            head = heads.get(step.root)
            out.append(_moved_entry(step, head + step.path if head is not None else self.roots[step.root].uri(step.path),
                                    pre["size"], pre["sha256"]))
        return out

    def _renamed_items(self, indices: list[int], state: JournalState) -> Optional[EncodedItems]:
        """manifest.json's items of `_renamed_entries(indices, state)`, the bytes `json_file`
        writes for them, made by one format per entry instead of a dict each and its encoding
        (a third of the time, issue 23); None when any of their text would need a JSON escape
        (a quote, a backslash, a control character, a name that is not UTF-8) or a value is not
        of its usual type: then the dicts are encoded as always."""
        steps, begun = self.plan.steps, state.begun
        chosen = [steps[i] for i in indices]
        pres = [begun[i]["pre"] for i in indices]
        paths = [s.path for s in chosen]
        shas = [p["sha256"] for p in pres]
        sizes = [p["size"] for p in pres]
        heads = {name: self._uri_heads.get(name) for name in {s.root for s in chosen}}
        if not (set(map(type, sizes)) == {int} and set(map(type, shas)) == {str} and self._normal(paths)
                and all(head is not None and plain_texts([name, head]) for name, head in heads.items())
                and plain_texts(paths)):
            return None
        try:
            if "".join(shas).encode().translate(None, _HEX):  # anything but hex digits
                return None
        except UnicodeEncodeError:
            return None
        # each row is `dumps(_moved_entry(...))`, key for key (tests/test_fast_paths.py checks the bytes)
        rows = [f'{{"action":"moved","backup":"files/{s.root}/{s.path}","path":"{s.path}","root":"{s.root}",'
                f'"sha256":"{sha}","size":{size},"uri":"{heads[s.root]}{s.path}"}}'
                for s, sha, size in zip(chosen, shas, sizes, strict=True)]
        return EncodedItems(ITEM_FIRST + ITEM_SEP.decode().join(rows).encode())

    def read_journal(self) -> JournalState:
        """The journal's state, each `renamed` done record given its manifest entry (what resume
        and undo read); Conflict when a `renamed` record has no begin record of a local move with
        its file's size and sha256 (nothing is acted on from a record that cannot be read)."""
        state = self.journal.read()
        steps, begun = self.plan.steps, state.begun
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
        effects are durable (its folders fsynced), together with a later batch's begin records,
        or at the latest BATCH_SECONDS after the last commit. So no effect is ever durable
        before the record that lets resume and undo find it, and a crash at any point leaves only
        begun steps to run again.

        Pipeline (runs of more than one batch): a batch of local moves is renamed by a
        co-process (operations/coprocess.py) while this process encodes its done records and
        commits the next batch's begin records; a second co-process reads and hashes the files of
        the batch after (their pre-images) meanwhile, and a third fsyncs the folders of the batch
        before, whose done records wait for its answer; so the Python work, the reads, the
        kernel's renames and the disk's flushes overlap on two cores."""
        state = self.read_journal()
        pending: list[dict[str, Any]] = []
        first_run = not state.started  # the backup folder was checked new or empty: no step's backup path is taken
        if state.done:  # a resumed run: its manifest holds the earlier run's entries, not only this run's items
            self._items = None
        if not state.started:
            pending.append({"event": Event.START, "op_id": self.plan.op_id, "pid": os.getpid(),
                            "steps": len(self.plan.steps)})
            state.started = True
        todo = [i for i in range(len(self.plan.steps)) if i not in state.done]
        self.meter = Meter(len(todo), self.meter.out)  # a resumed run counts what is left
        batches = [todo[k:k + BATCH_STEPS] for k in range(0, len(todo), BATCH_STEPS)]
        queued, self._queued = self._queued, None  # every batch's reads, sent by start()
        if queued is not None and (len(queued) != len(batches) or [h.indices if h else None for h in queued] != [
                [i for i in b if i not in state.begun] if q else None for b, q in zip(batches, queued, strict=True)]):
            self.close()  # asked for other steps than this run's batches: not used
            queued = None
        if len(batches) > 1 and self._co is None:  # one group commit: nothing to overlap
            self._co, self._hasher, self._syncer = take(), take(), take()
        running: Optional[_Renaming] = None  # the batch before, renaming in the co-process
        syncing: Optional[_Syncing] = None  # the folders of the batch before that, in the syncer
        pres_next: Optional[dict[int, Optional[dict[str, Any]]]] = None
        ahead: Optional[_Hashing] = None  # this batch's pre-images, read by the hashing co-process
        try:
            for n, batch in enumerate(batches):
                new = [i for i in batch if i not in state.begun]
                this, ahead = (queued[n], None) if queued is not None else (ahead, None)
                if queued is None and this is None and n + 1 < len(batches):  # the hasher is free: the next batch's reads start now
                    ahead = self._hash_ahead([i for i in batches[n + 1] if i not in state.begun])
                pres = pres_next if pres_next is not None else self._pre_images(new, this)
                pres_next = None
                if queued is None and this is not None and n + 1 < len(batches):  # its answers read: the next batch's reads
                    ahead = self._hash_ahead([i for i in batches[n + 1] if i not in state.begun])
                self._synced(syncing)  # the folders of the done records in `pending`
                syncing = None
                commit = self._begin(new, pres, state, pending)  # written and fsynced while the renames are prepared
                committed = time.monotonic()
                pending = []
                renaming = self._prepare_renames(batch) if self._co is not None and self._renames_only(batch, state) else None
                before, running = running, None
                if before is not None:  # the batch before: its renames answered, the renamer free
                    self._renamed(before)
                commit.wait()  # the begin records durable before any step of this batch acts
                if renaming is not None:  # this batch's renames go first, then the records of the batch before
                    running = self._start_renames(renaming)
                if before is not None:  # its done records and its folders, while this batch renames
                    pending = self._finish_renames(before, state)
                    syncing = self._sync_ahead([self.plan.steps[i] for i in before.indices])
                    if time.monotonic() - committed > BATCH_SECONDS:  # done records not held back long
                        self._synced(syncing)
                        syncing = None
                        self.journal.append_many(pending)
                        pending = []
                if running is None:
                    pending += self._act(batch, new, state, first_run)
                elif n + 1 < len(batches) and ahead is None and queued is None:  # read while the co-process renames
                    pres_next = self._pre_images([i for i in batches[n + 1] if i not in state.begun])
            if running is not None:
                pending += self._finish_renames(running, state)
                self._sync([self.plan.steps[i] for i in running.indices])
            self._synced(syncing)
        finally:
            self.close()  # co-processes killed when answers are left unread (an operation that stops early)
        if self.steps_done is not None:
            self.steps_done()
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
        before), in one group commit: started, durable once its `wait()` returned."""
        records = list(pending)
        for i in new:
            step = self.plan.steps[i]
            rec = {"event": Event.BEGIN, "step": i, "action": step.action, "root": step.root,
                   "path": step.path, "pre": pres[i]}
            records.append(rec)
            state.begun[i] = rec
        return self.journal.append_started(records)

    def _renames_only(self, batch: list[int], state: JournalState) -> bool:
        """Every step of the batch is a local move the rename can do (the pipeline's case):
        `_renamable` of each, its roots asked once."""
        steps, begun = self.plan.steps, state.begun
        return (all(self._renames_into_backup(name) for name in {steps[i].root for i in batch})
                and all(steps[i].action == "move" and isinstance(begun[i].get("pre"), dict) for i in batch))

    def _act(self, batch: list[int], new: list[int], state: JournalState, first_run: bool) -> list[dict[str, Any]]:
        """The steps of one batch whose begin records are durable, in plan order, their folders
        fsynced; returns the batch's done records, which go with a later commit."""
        pending: list[dict[str, Any]] = []
        touched: list[Step] = []
        deletes: list[int] = []  # remote deletes (--purge) go in batched requests, in plan order
        copies: list[int] = []  # moves by copy: parallel copies, then batched deletes, in plan order
        renames: list[int] = []  # local moves: renamed, then recorded in plan order
        copied = {i for i in new if first_run and i in self._objects}
        t0 = time.monotonic()
        for i in batch:
            step = self.plan.steps[i]
            if step.action == "delete" and not self.roots[step.root].is_local:
                deletes.append(i)
                continue
            if i in copied:
                copies.append(i)
                continue
            if self._renamable(step, state.begun[i].get("pre")):
                renames.append(i)
                continue
            self._delete_remote(deletes, state, pending, touched)
            self._move_by_copy(copies, state, pending, touched)
            self._rename_many(renames, state, pending, touched)
            deletes, copies, renames = [], [], []
            self._step_line(i)
            pre = state.begun[i].get("pre")
            rec = {"event": Event.DONE, "step": i, "manifest": self._apply(step, pre)}
            self.meter.tick(pre.get("size") or 0 if isinstance(pre, dict) else 0)
            pending.append(rec)
            state.done[i] = rec
            touched.append(step)
            if self.delay:
                time.sleep(self.delay)
            if time.monotonic() - t0 > BATCH_SECONDS:
                self._commit_done(touched, pending)
                pending, touched, t0 = [], [], time.monotonic()
        self._delete_remote(deletes, state, pending, touched)
        self._move_by_copy(copies, state, pending, touched)
        self._rename_many(renames, state, pending, touched)
        self._sync(touched)
        return pending

    def _local_pre(self, step: Step) -> bool:
        """Whether a step's pre-image is read from a local file system (not a listing, not an object)."""
        return self._local_kind(step.action, step.root)

    def _local_kind(self, action: str, root_name: str) -> bool:
        """`_local_pre` of a step of this action and root (it depends on nothing else)."""
        root = self.roots[root_name]
        if action == "delete" and not root.is_local:
            return False
        return not (action == "move" and not (root.is_local and self.backup.is_local))

    def _hash_ahead(self, indices: list[int]) -> Optional[_Hashing]:
        """Send the plain local files of these steps to the hashing co-process, to be read while
        this process works on the batch before; None when nothing was sent."""
        if self._hasher is None or not indices:
            return None
        sent: list[int] = []
        paths: list[str] = []
        for head, idx, rels in self._local_groups(indices):
            sent += idx
            paths += [head + rel for rel in rels]
        return _Hashing(indices, sent) if sent and self._hasher.submit_hashes(paths) else None

    def _local_groups(self, indices: list[int]) -> list[tuple[str, list[int], list[str]]]:
        """The steps among these whose pre-images a co-process can read, per root: its local path
        prefix (`Root._head`), the steps, their (normal) paths; the rest are read here, as always."""
        steps = self.plan.steps
        if not indices:
            return []
        chosen = [steps[indices[0]]] if len(indices) == 1 else list(operator.itemgetter(*indices)(steps))
        # the steps' actions and roots, in C: one of each in the usual batch (66,000 moves of one
        # root were grouped step by step in 55 ms before the first rename, issue 23)
        actions, names = set(map(_ACTION, chosen)), set(map(_ROOT, chosen))
        by_root: dict[str, list[int]] = {}
        if len(actions) == 1 and len(names) == 1:
            if self._local_kind(chosen[0].action, chosen[0].root):
                by_root[chosen[0].root] = list(indices)
        else:
            kinds = {(a, r): self._local_kind(a, r) for a in actions for r in names}
            for i, step in zip(indices, chosen, strict=True):
                if kinds[(step.action, step.root)]:
                    by_root.setdefault(step.root, []).append(i)
        out = []
        for name, idx in by_root.items():
            head = self.roots[name]._head()
            rels = list(map(_PATH, chosen)) if len(idx) == len(chosen) else [steps[i].path for i in idx]
            if head is not None and self._normal(rels):
                out.append((head, idx, rels))
        return out

    def _pre_images(self, indices: list[int], ahead: Optional[_Hashing] = None) -> dict[int, Optional[dict[str, Any]]]:
        """What each step's file is before it acts (size, sha256), for its begin record. Local
        files are read by the hashing co-process when `ahead` sent them, else here, on this thread
        (threads on small local files fight for the GIL: BENCHMARKS.md); a file it could not read
        (a folder, an error) is read here by the general path. Files a --purge deletes on an object
        store get their size from one listing per folder, no read (no undo can use a digest of a
        purged file). Objects are read on COPY_THREADS threads, one request each; those that are
        plain files are noted in `_objects` (their moves go by copy -> verify -> batched delete)."""
        pres: dict[int, Optional[dict[str, Any]]] = {}
        if ahead is not None and ahead.indices == indices and self._hasher is not None:
            answers: Optional[list[tuple[int, str] | int]] = []
            for _ in range(ahead.parts):  # a request per root (`_hash_plan`): answered in turn
                part = self._hasher.hashes()
                if part is None or answers is None:
                    answers = None  # it failed: read here (the co-process is closed)
                    break
                answers += part
            if answers is not None:
                for i, got in zip(ahead.sent, answers, strict=True):
                    if isinstance(got, tuple):
                        pres[i] = _digest_record(got)
                    elif got == errno.ENOENT:
                        pres[i] = None
                    else:  # a folder, or an error to report: as always
                        step = self.plan.steps[i]
                        pres[i] = _digest_record(self.roots[step.root].digest_if_exists(step.path))
        listed: dict[str, list[int]] = {}
        remote: list[int] = []
        local: list[int] = []
        for i in indices:
            if i in pres:
                continue
            step = self.plan.steps[i]
            if self._local_pre(step):
                local.append(i)
            elif step.action == "delete":  # on an object store
                listed.setdefault(step.root, []).append(i)
            else:
                remote.append(i)
        by_root: dict[str, list[int]] = {}
        for i in local:
            by_root.setdefault(self.plan.steps[i].root, []).append(i)
        for name, idx in by_root.items():
            for i, d in zip(idx, self.roots[name].digests_if_exist([self.plan.steps[i].path for i in idx]), strict=True):
                pres[i] = _digest_record(d)
        for i, d in zip(remote, parallel(lambda i: self.roots[self.plan.steps[i].root].file_digest(
                self.plan.steps[i].path), remote), strict=True):
            step = self.plan.steps[i]
            if d is not None:
                self._objects.add(i)
            else:  # missing, or a folder: the general digest decides
                d = self.roots[step.root].digest_if_exists(step.path)
            pres[i] = _digest_record(d)
        for name, idx in listed.items():
            sizes = self.roots[name].listed_sizes([self.plan.steps[i].path for i in idx])
            for i in idx:
                size = sizes[self.plan.steps[i].path]
                pres[i] = None if size is None else {"size": size, "sha256": None}
        return pres

    def _step_line(self, i: int) -> None:
        if self._say is not None:
            self._say(f"step {i + 1}/{len(self.plan.steps)}: {self._describe(self.plan.steps[i])}")

    def _step_lines(self, indices: list[int]) -> None:
        if self._say is not None:
            for i in indices:
                self._step_line(i)

    def _renamable(self, step: Step, pre: Any) -> bool:
        """A move the atomic local rename can do (a file or folder that was there when its begin
        record was written, both roots local); not with the test hook's per-step delay."""
        return step.action == "move" and isinstance(pre, dict) and self._renames_into_backup(step.root)

    def _renames_into_backup(self, root: str) -> bool:
        """Moves from `root` into the backup can be renames (both local; not with the test hook's delay)."""
        return not self.delay and self.backup.is_local and self.roots[root].is_local

    def _rename_many(self, indices: list[int], state: JournalState, pending: list[dict[str, Any]],
                     touched: list[Step]) -> None:
        """Local moves by one renameat2(RENAME_NOREPLACE) each (independent steps: no two paths
        nest, and their begin records are durable), then recorded in plan order; a step the
        rename cannot do (moved already by a crashed run, something at its backup path, another
        file system) takes the general path of `_apply`, in order. One thread: threads fight
        for the GIL between these short system calls (BENCHMARKS.md)."""
        if indices:
            records = self._finish_renames(self._start_renames(self._prepare_renames(indices)), state)
            pending.extend(records)
            touched.extend(self.plan.steps[i] for i in indices)

    def _prepare_renames(self, indices: list[int]) -> _Renaming:
        """The (source, target) paths of these moves, the targets' folders made; nothing moved."""
        steps = self.plan.steps
        by_root: dict[str, list[int]] = {}
        for i in indices:
            by_root.setdefault(steps[i].root, []).append(i)
        renaming = _Renaming(indices)
        for name, idx in by_root.items():
            rels = [steps[i].path for i in idx]
            # the backup paths are files/<root>/<path>: normal when the path is (a root's name is)
            got = self.roots[name].rename_pairs(rels, self.backup, [f"files/{name}/{rel}" for rel in rels],
                                                normal=is_normal_rel(name) and self._normal(rels))
            if got is not None:  # else: not renames (another file system, no renameat2): _apply
                renaming.order.extend(idx)
                renaming.pairs.extend(got)
        return renaming

    def _start_renames(self, renaming: _Renaming) -> _Renaming:
        """Start the renames (their begin records are durable) in the co-process, else run them
        here."""
        self._step_lines(renaming.indices)
        if self._co is not None:
            renaming.sent = self._co.submit(renaming.pairs)
            if renaming.sent and not self._stepped_back:
                self._step_back()
        if not renaming.sent:
            renaming.done = run_renames(renaming.pairs)
        return renaming

    def _step_back(self) -> None:
        """Once the first renames are sent: the hasher and the syncer (and this process, when
        `step_back`) lower their scheduling priority by STEP_BACK, so that where the run's busy
        processes outnumber the free cores (four on two) the renamer, which every batch waits
        for, is run first; the others have slack (the hasher reads batches ahead, this process
        prepares the next batch while one renames). Measured on two cores: a 66,000-file roll
        back 7-9% faster (BENCHMARKS.md, session 26). The renamer keeps its priority; nothing
        raises one (that needs privileges)."""
        self._stepped_back = True
        for co in (self._hasher, self._syncer):
            if co is not None:
                co.step_back(STEP_BACK)
        if self.step_back:
            try:
                os.nice(STEP_BACK)
            except (OSError, AttributeError):
                pass  # no such call here (not Unix): as before

    def _renamed(self, renaming: _Renaming) -> list[bool]:
        """Wait for the renames: which of `renaming.pairs` were done. When the co-process failed
        halfway, none counts as done: `_apply` finds out from the files."""
        if renaming.done is None:
            errnos = self._co.renamed() if self._co is not None else None
            renaming.done = [False] * len(renaming.pairs) if errnos is None else rename_outcomes(errnos)
        return renaming.done

    def _finish_renames(self, renaming: _Renaming, state: JournalState) -> list[dict[str, Any]]:
        """Wait for the renames (`_renamed`), take the general path (`_apply`) for those not done,
        and return the done records in plan order (to be written once their folders are
        fsynced)."""
        renamed = dict(zip(renaming.order, self._renamed(renaming), strict=False))  # a co-process that died early reports fewer
        steps, begun, done = self.plan.steps, state.begun, state.done
        records = []
        for i in renaming.indices:  # a rename's entry is its begin record's (`_renamed_entries`): not carried
            rec = ({"event": Event.DONE, "step": i, RENAMED: True} if renamed.get(i)
                   else {"event": Event.DONE, "step": i, "manifest": self._apply(steps[i], begun[i]["pre"])})
            records.append(rec)
            done[i] = rec
        if self._items is not None:  # its manifest items, while the co-process renames the next batch
            piece = self._renamed_items(renaming.indices, state) if all(map(renamed.get, renaming.indices)) else None
            if piece is None:
                self._items = None
            else:
                self._items.append(piece)
                self._itemized += renaming.indices
        if self.meter.out is not None:  # the batch at once: its steps are recorded together
            self.meter.tick(sum(begun[i]["pre"].get("size") or 0 for i in renaming.indices), len(renaming.indices))
        return records

    def _move_by_copy(self, indices: list[int], state: JournalState, pending: list[dict[str, Any]],
                      touched: list[Step]) -> None:
        """Moves of plain files by copy (an object store on either side): the copies in parallel,
        each read back and checked against its begin record's digest, then the sources deleted in
        batched requests once every copy is whole (never a delete at a backup path). A crash in
        between leaves source and copy both, which the general path of a resume settles."""
        if not indices:
            return

        self._step_lines(indices)

        def copy(i: int) -> None:
            step, pre = self.plan.steps[i], state.begun[i]["pre"]
            self.roots[step.root].copy_checked(step.path, self.backup, backup_rel(step), (pre["size"], pre["sha256"]))

        parallel(copy, indices)
        by_root: dict[str, list[str]] = {}
        for i in indices:
            by_root.setdefault(self.plan.steps[i].root, []).append(self.plan.steps[i].path)
        for name, paths in by_root.items():
            self.roots[name].delete_many(paths)
        for i in indices:
            step, pre = self.plan.steps[i], state.begun[i]["pre"]
            rec = {"event": Event.DONE, "step": i, "manifest": dict(_entry_base(step, self.roots[step.root]), action="moved",
                                                                size=pre["size"], sha256=pre["sha256"])}
            pending.append(rec)
            state.done[i] = rec
            touched.append(step)
            self.meter.tick(pre["size"] or 0)
            if self.delay:
                time.sleep(self.delay)

    def _delete_remote(self, indices: list[int], state: JournalState, pending: list[dict[str, Any]],
                       touched: list[Step]) -> None:
        """Run the --purge deletes of these steps on object stores in batched requests."""
        by_root: dict[str, list[str]] = {}
        for i in indices:
            step = self.plan.steps[i]
            by_root.setdefault(step.root, []).append(step.path)
        for name, paths in by_root.items():
            self.roots[name].delete_many(paths)
        for i in indices:
            step = self.plan.steps[i]
            pre = state.begun[i].get("pre")
            size = pre.get("size") if isinstance(pre, dict) else None
            entry = dict(_entry_base(step, self.roots[step.root]), backup=None,
                         action="absent" if pre is None else "deleted", size=size,
                         sha256=pre.get("sha256") if isinstance(pre, dict) else None)
            rec = {"event": Event.DONE, "step": i, "manifest": entry}
            pending.append(rec)
            state.done[i] = rec
            touched.append(step)
            self.meter.tick(size or 0)

    def _sync(self, steps: list[Step]) -> None:
        """Make the effects of these steps durable (their folders, in the roots and the backup)."""
        for root, rels in self._sync_targets(steps):
            root.sync_parents(rels)

    def _sync_targets(self, steps: list[Step]) -> list[tuple[Root, set[str]]]:
        """Paths whose folders hold these steps' effects, per root (the backup's last): one path
        per folder, since a folder's fsync makes every entry in it durable (`sync_parents` asks
        only each path's folder): a batch of 8,192 moves into 75 folders names 75 paths in each
        root, not 8,192 (issue 23)."""
        by_root: dict[str, dict[str, str]] = {}  # root -> folder -> one path in it
        for step in steps:
            folders = by_root.get(step.root)
            if folders is None:
                folders = by_root[step.root] = {}
            folders[step.path.rpartition("/")[0]] = step.path
        backup = {f"files/{name}/{rel}" for name, folders in by_root.items() for rel in folders.values()}
        backup.update(f"undone/{s.root}/{s.path}" for s in steps if s.action == "write")
        back = {step.path for step in steps if step.action == "put_back"}
        if back:
            folders = by_root.setdefault(PUT_BACK_TO, {})
            folders.update((rel.rpartition("/")[0], rel) for rel in back)
        return [*((self.roots[name], set(folders.values())) for name, folders in by_root.items()), (self.backup, backup)]

    def _sync_ahead(self, steps: list[Step]) -> Optional[_Syncing]:
        """Send the fsyncs of `_sync(steps)` to the syncing co-process (the caller's `_synced` waits
        for them before the steps' done records are written); when they cannot go, `_sync` now."""
        marks: list[tuple[Root, set[str]]] = []
        folders: list[str] = []
        if self._syncer is not None:
            for root, rels in self._sync_targets(steps):
                got = root.folders_to_sync(rels)
                if got is not None:
                    marks.append((root, got[0]))
                    folders += got[1]
        if folders and self._syncer is not None and self._syncer.submit_syncs(folders):
            return _Syncing(steps, marks)
        self._sync(steps)
        return None

    def _synced(self, syncing: Optional[_Syncing]) -> None:
        """Wait for the fsyncs `_sync_ahead` sent; when the co-process failed, or a folder could not
        be opened (gone since: its parent changed), `_sync` of those steps now, as always."""
        if syncing is None:
            return
        answers = self._syncer.synced() if self._syncer is not None else None
        if answers is None or any(answers):
            self._sync(syncing.steps)
            return
        for root, parents in syncing.marks:
            root.synced(parents)

    def _commit_done(self, steps: list[Step], records: list[dict[str, Any]]) -> None:
        self._sync(steps)
        self.journal.append_many(records)

    def _recreated_empty(self, root: Root, rel: str, b: str, pre: dict[str, Any]) -> bool:
        """True when the backup holds exactly what the begin record hashed at `rel` and `rel` is now
        an empty folder: the move was done, and something made the folder again afterwards."""
        return (root.kind(rel) == "dir" and not root.walk_files(rel)
                and self.backup.digest(b) == (pre.get("size"), pre.get("sha256")))

    def _apply(self, step: Step, pre: Any) -> Optional[dict[str, Any]]:
        root = self.roots[step.root]
        b = backup_rel(step)
        base = _entry_base(step, root)
        if step.action == "move":
            if isinstance(pre, dict) and root.rename_into(step.path, self.backup, b):
                # one atomic rename that never replaces anything: the file the begin record hashed
                # was there and nothing was at its backup path (else the checks below decide)
                return dict(base, action="moved", size=pre["size"], sha256=pre["sha256"])
            if root.exists(step.path):
                # the begin record hashed it already (the file is only moved after that record)
                size, sha = (pre["size"], pre["sha256"]) if isinstance(pre, dict) else root.digest(step.path)
                if self.backup.exists(b) and isinstance(pre, dict) and self._recreated_empty(root, step.path, b, pre):
                    # moved before a crash, then made again, empty, after it: a restart attempt of the
                    # old query creates the sink's `_spark_metadata` folder before it reads the
                    # checkpoint (and fails on the tombstone). An empty folder holds nothing; left in
                    # place it would hide the retired sink's files from readers of its log.
                    root.delete(step.path)
                    return dict(base, action="moved", size=pre["size"], sha256=pre["sha256"])
                if self.backup.exists(b):  # a copy-based move interrupted before its delete:
                    # never delete at a backup path; the source goes only when the copy is whole
                    if self.backup.digest(b) != (size, sha) or root.digest(step.path) != (size, sha):
                        raise Conflict(f"{self.backup.uri(b)} already holds other content than "
                                       f"{root.uri(step.path)}; refusing to overwrite a backed-up file")
                    root.delete(step.path)
                    return dict(base, action="moved", size=size, sha256=sha)
                root.move_to(step.path, self.backup, b)
                return dict(base, action="moved", size=size, sha256=sha)
            if self.backup.exists(b):
                size, sha = self.backup.digest(b)
                return dict(base, action="moved", size=size, sha256=sha)
            return dict(base, action="absent", size=None, sha256=None)
        if step.action == "put_back":
            return self._put_back(step, root, base, pre)
        if step.action == "catalog_rollback":
            return self._catalog_rollback(step, root, base)
        if step.action == "delete":  # --purge: no backup copy, the manifest keeps size and sha256
            if root.exists(step.path):
                size, sha = root.digest(step.path)
                root.delete(step.path)
                return dict(base, backup=None, action="deleted", size=size, sha256=sha)
            if isinstance(pre, dict):
                return dict(base, backup=None, action="deleted", size=pre.get("size"), sha256=pre.get("sha256"))
            return dict(base, backup=None, action="absent", size=None, sha256=None)
        if step.action == "write":
            assert step.content is not None
            want = hashlib.sha256(step.content).hexdigest()
            written = {"written_size": len(step.content), "written_sha256": want}
            if root.exists(step.path):
                size, sha = root.digest(step.path)
                if sha == want:
                    prev = self.backup.digest(b) if self.backup.exists(b) else None
                    if prev is None and isinstance(pre, dict) and pre.get("sha256") == want:
                        return dict(base, action="unchanged", size=size, sha256=sha, **written)
                    return dict(base, action="replaced" if prev else "created",
                                size=None if prev is None else prev[0], sha256=None if prev is None else prev[1], **written)
                if self.backup.exists(b):
                    raise Conflict(f"{root.uri(step.path)} changed while the operation ran (its earlier content is "
                                   f"already in {self.backup.uri(b)}); refusing to overwrite it")
                root.move_to(step.path, self.backup, b)
                root.write_atomic(step.path, step.content)
                return dict(base, action="replaced", size=size, sha256=sha, **written)
            prev = self.backup.digest(b) if self.backup.exists(b) else None
            root.write_atomic(step.path, step.content)
            return dict(base, action="replaced" if prev else "created",
                        size=None if prev is None else prev[0], sha256=None if prev is None else prev[1], **written)
        raise StreamctlError(f"unknown step action {step.action!r} in the plan")

    @staticmethod
    def _catalog_order(step: Step) -> dict[str, Any]:
        try:
            order = json.loads((step.content or b"{}").decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            order = None
        if not isinstance(order, dict) or not {"catalog", "from_snapshot", "to_snapshot", "metadata"} <= set(order):
            raise StreamctlError("a catalog_rollback step without its order (catalog, from and to snapshot, metadata)")
        return order

    def _catalog_rollback(self, step: Step, root: Root, base: dict[str, Any]) -> dict[str, Any]:
        """Iceberg's rollback_to_snapshot through the table's catalog (pyiceberg), only from the
        state the plan saw: the catalog must still name the metadata file and snapshot it read
        (else Conflict: the table moved on); already at the target (a resumed run): done."""
        from streamctl.inspectors.iceberg import catalog_table, pin

        order = self._catalog_order(step)
        table = catalog_table(order["catalog"])
        current = table.metadata.current_snapshot_id
        if current != order["to_snapshot"]:
            if current != order["from_snapshot"] or \
                    str(table.metadata_location).rsplit("/", 1)[-1] != str(order["metadata"]).rsplit("/", 1)[-1]:
                raise Conflict(f"{order['catalog']}: the table moved on since the plan was made (current snapshot "
                               f"{current}, the plan expected {order['from_snapshot']}); nothing was changed")
            table.manage_snapshots().rollback_to_snapshot(int(order["to_snapshot"])).commit()
            table = catalog_table(order["catalog"])
        pin(str(table.metadata.location), str(table.metadata_location), order["catalog"])
        return dict(base, backup=None, action="catalog_rollback", size=None, sha256=None)

    def _put_back(self, step: Step, root: Root, base: dict[str, Any], pre: Any) -> dict[str, Any]:
        """Move an archived file back to the same path under the `input` root, never over a file
        there: other content at the destination is a conflict (nothing moved); the same content
        there with the archive copy gone is a put-back done before a crash."""
        dest = self.roots[PUT_BACK_TO]
        base = dict(base, backup=None)
        want = (pre["size"], pre["sha256"]) if isinstance(pre, dict) else None
        if root.exists(step.path):
            size, sha = want if want is not None else root.digest(step.path)
            if root.rename_into(step.path, dest, step.path):
                return dict(base, action="put_back", size=size, sha256=sha)
            if dest.exists(step.path):
                if dest.digest(step.path) != (size, sha):
                    raise Conflict(f"{dest.uri(step.path)} exists with other content than the archived "
                                   f"{root.uri(step.path)}; refusing to overwrite an input file")
                root.delete(step.path)  # a copy-based move interrupted before its delete
                return dict(base, action="put_back", size=size, sha256=sha)
            root.move_to(step.path, dest, step.path)
            return dict(base, action="put_back", size=size, sha256=sha)
        if dest.exists(step.path):
            got = dest.digest(step.path)
            if want is not None and got != want:
                raise Conflict(f"{dest.uri(step.path)} exists with other content than the archived file the plan "
                               f"puts back ({root.uri(step.path)} is gone); refusing")
            return dict(base, action="put_back", size=got[0], sha256=got[1])
        return dict(base, action="absent", size=None, sha256=None)

    def _describe(self, step: Step) -> str:
        """A step in words, the backup folder named as its command names it (drop-sink: the archive)."""
        word = "archive" if self.plan.command == "drop-sink" else "backup"
        return step.describe().replace("to the backup", f"to the {word}")

    # -- undo ----------------------------------------------------------------------------------
    def undo(self) -> list[str]:
        """Put back every file the operation moved or replaced, take out every file it created;
        exact bytes, checked against the manifest's sha256. Refuses (Conflict, nothing changed)
        when a file was changed after the operation (for example Spark ran again)."""
        state = self.read_journal()
        if not state.started and not state.begun:
            raise Conflict(f"undo refused: {journal_location(self.backup)} holds no record of the operation (empty or "
                           f"torn), so nothing shows what it changed; the files it moved are under "
                           f"{self.backup.uri('files')}; nothing was changed")
        unrecorded = [s.path for i, s in enumerate(self.plan.steps)
                      if i not in state.begun and s.action == "move" and self.backup.exists(backup_rel(s))]
        if unrecorded:  # the backup holds what the journal does not say was moved: its tail is lost
            raise Conflict(f"undo refused: the backup holds {len(unrecorded)} file(s) the journal "
                           f"{journal_location(self.backup)} does not record as moved ({', '.join(unrecorded[:3])}"
                           f"{', ...' if len(unrecorded) > 3 else ''}): the journal is torn; nothing was changed")
        todo = [i for i in sorted(state.begun, reverse=True) if i not in state.undone]
        purged = [self.plan.steps[i].path for i in todo if self.plan.steps[i].action == "delete"]
        if purged:
            raise Conflict(f"undo refused: {len(purged)} file(s) were deleted with --purge and cannot be restored "
                           f"({', '.join(purged[:3])}{', ...' if len(purged) > 3 else ''})")
        broken = self._backup_mismatches(todo, state)
        if broken:
            raise Conflict(f"undo refused, the backup {self.backup.location} does not match its manifest: "
                           + "; ".join(broken[:5]) + (f" (+{len(broken) - 5} more)" if len(broken) > 5 else "")
                           + "; nothing was changed")
        conflicts = []
        for i in todo:
            c = self._undo_conflict(i, state)
            if c:
                conflicts.append(c)
        if conflicts:
            raise Conflict("undo refused, files changed after the operation: " + "; ".join(conflicts[:5])
                           + (f" (+{len(conflicts) - 5} more)" if len(conflicts) > 5 else ""))
        pending: list[dict[str, Any]] = [{"event": Event.UNDO_START, "steps": len(todo)}]
        self.meter = Meter(len(todo), self.meter.out, label="undo: ")
        restored: list[str] = []
        touched: list[Step] = []
        copyable = self._copyable(todo, state)
        copies: list[int] = []  # object stores: put back by parallel copies, then batched deletes
        t0 = time.monotonic()
        for i in todo:  # group commit as in run(): an undo_done record is durable only after its effect
            step = self.plan.steps[i]
            if self._say is not None:
                self._say(f"undo step {i + 1}: {self._describe(step)}")
            if i in copyable:
                copies.append(i)
                if len(copies) < UNDO_COPY_BATCH:
                    continue
            else:
                self._undo_by_copy(copies, state, pending, touched, restored)
                restored.extend(self._undo_step(i, state))
                self._undo_done(i, state, pending, touched)
            self._undo_by_copy(copies, state, pending, touched, restored)
            copies = []
            if len(touched) >= BATCH_STEPS or time.monotonic() - t0 > BATCH_SECONDS:
                self._commit_done(touched, pending)
                pending, touched, t0 = [], [], time.monotonic()
        self._undo_by_copy(copies, state, pending, touched, restored)
        self._commit_done(touched, pending + [{"event": Event.UNDONE}])
        return restored

    def _undo_done(self, i: int, state: JournalState, pending: list[dict[str, Any]], touched: list[Step]) -> None:
        self.meter.tick(((state.done.get(i) or {}).get("manifest") or {}).get("size") or 0)
        pending.append({"event": Event.UNDO_DONE, "step": i})
        touched.append(self.plan.steps[i])

    def _copyable(self, todo: list[int], state: JournalState) -> set[int]:
        """Moves an undo puts back by copy -> verify -> batched delete: an object store on either
        side, the backup one plain file (one recursive listing of the backup's files/) whose
        manifest entry has its sha256."""
        if self.backup.is_local and all(r.is_local for r in self.roots.values()):
            return set()
        files = {f"files/{rel}" for rel, _size in self.backup.walk_sizes("files")}
        out = set()
        for i in todo:
            step, m = self.plan.steps[i], ((state.done.get(i) or {}).get("manifest") or {})
            if (step.action == "move" and m.get("action") == "moved" and m.get("sha256") and backup_rel(step) in files
                    and not (self.backup.is_local and self.roots[step.root].is_local)):
                out.add(i)
        return out

    def _undo_by_copy(self, indices: list[int], state: JournalState, pending: list[dict[str, Any]],
                      touched: list[Step], restored: list[str]) -> None:
        """Put back moved files by copy: on COPY_THREADS threads each backed-up file is copied to
        its path and read back against the manifest's sha256 (a path that holds it again already,
        checked identical before the undo began, keeps its backup copy, as in _undo_step), then
        the backup copies go in batched deletes once every copy is whole."""
        if not indices:
            return

        def put_back(i: int) -> bool:
            step = self.plan.steps[i]
            root, m = self.roots[step.root], state.done[i]["manifest"]
            if root.exists(step.path):
                return False
            self.backup.copy_checked(backup_rel(step), root, step.path, (m["size"], m["sha256"]))
            return True

        done = parallel(put_back, indices)
        self.backup.delete_many([backup_rel(self.plan.steps[i]) for i, copied in zip(indices, done, strict=True) if copied])
        for i, copied in zip(indices, done, strict=True):
            if copied:
                restored.append(self.roots[self.plan.steps[i].root].uri(self.plan.steps[i].path))
            self._undo_done(i, state, pending, touched)

    def _backup_mismatches(self, todo: list[int], state: JournalState) -> list[str]:
        """Every backed-up file of these steps checked against the manifest (size and sha256)
        before undo changes anything: an edited or missing backup file is a refusal."""
        out: list[str] = []
        for i in todo:
            rec = state.done.get(i)
            m = rec.get("manifest") if rec else None
            if not m or m.get("action") not in ("moved", "replaced") or not m.get("sha256"):
                continue
            b = backup_rel(self.plan.steps[i])
            want = (m.get("size"), m.get("sha256"))
            got = self.backup.digest_if_exists(b)
            if got is None:
                root = self.roots[self.plan.steps[i].root]
                if self.plan.steps[i].action == "move" and root.digest_if_exists(self.plan.steps[i].path) == want:
                    continue  # already put back by an interrupted undo
                out.append(f"{self.backup.uri(b)} is missing")
            elif tuple(got) != want:
                out.append(f"{self.backup.uri(b)} differs from the manifest (sha256 {got[1][:12]}..., "
                           f"expected {str(want[1])[:12]}...)")
        return out

    def _pre(self, i: int, state: JournalState) -> Optional[dict[str, Any]]:
        pre = state.begun[i].get("pre")
        return pre if isinstance(pre, dict) else None

    def _undo_conflict(self, i: int, state: JournalState) -> Optional[str]:
        step = self.plan.steps[i]
        root = self.roots[step.root]
        b = backup_rel(step)
        if step.action == "move":
            if self.backup.exists(b) and root.exists(step.path):
                if root.digest(step.path) != self.backup.digest(b):
                    return self._recreated(root, step.path)
            return None
        if step.action == "catalog_rollback":
            from streamctl.inspectors.iceberg import catalog_table

            order = self._catalog_order(step)
            current = catalog_table(order["catalog"]).metadata.current_snapshot_id
            if current not in (order["to_snapshot"], order["from_snapshot"]):
                return (f"{order['catalog']}: the table moved on after the rollback (current snapshot {current}, not "
                        f"{order['to_snapshot']}): setting {order['from_snapshot']} current again would drop what came after")
            return None
        if step.action == "put_back":
            dest, m = self.roots[PUT_BACK_TO], ((state.done.get(i) or {}).get("manifest") or {})
            if dest.exists(step.path):
                if root.exists(step.path):
                    return f"{root.uri(step.path)} is in the archive again while {dest.uri(step.path)} exists too"
                if m.get("sha256") and dest.digest(step.path) != (m.get("size"), m.get("sha256")):
                    return f"{dest.uri(step.path)} was changed after the operation"
            return None
        want = hashlib.sha256(step.content or b"").hexdigest()
        pre = self._pre(i, state)
        if root.exists(step.path):
            _, sha = root.digest(step.path)
            if sha != want and (pre is None or sha != pre.get("sha256")):
                return f"{root.uri(step.path)} was changed after the operation"
        return None

    @staticmethod
    def _recreated(root: Root, rel: str) -> str:
        """What is in the way of putting `rel` back, and what to do (issue 31: a retired sink's
        `_spark_metadata` recreated by a later restart blocked drop-sink --undo without a word why)."""
        where = root.uri(rel)
        if root.kind(rel) != "dir":
            return f"{where} exists again with other content: something wrote it after the operation; move it aside, then undo again"
        files = sorted(root.walk_files(rel))
        what = (f"{len(files)} file(s): {', '.join(files[:3])}{', ...' if len(files) > 3 else ''}" if files else "empty")
        who = (" (a query started on this sink after it was retired wrote a new log)"
               if rel.rstrip("/").endswith((FILE_SINK_LOG, COORD_COMMITS)) else "")
        return (f"{where} was made again after the operation{who}, {what}; move it aside (keep it if that query's "
                "output matters), then undo again")

    def _undo_step(self, i: int, state: JournalState) -> list[str]:
        step = self.plan.steps[i]
        root = self.roots[step.root]
        b = backup_rel(step)
        done: list[str] = []
        if step.action == "catalog_rollback":
            from streamctl.inspectors.iceberg import catalog_table, pin

            order = self._catalog_order(step)
            table = catalog_table(order["catalog"])
            if table.metadata.current_snapshot_id == order["to_snapshot"]:
                table.manage_snapshots().set_current_snapshot(snapshot_id=int(order["from_snapshot"])).commit()
                table = catalog_table(order["catalog"])
                done.append(f"{order['catalog']} (snapshot {order['from_snapshot']} current again)")
            pin(str(table.metadata.location), str(table.metadata_location), order["catalog"])
            return done
        if step.action == "put_back":
            # back into the archive; gone from the input already: Spark archived it again after
            # its replayed batch committed, and the archive holds it as before
            dest = self.roots[PUT_BACK_TO]
            if dest.exists(step.path) and not root.exists(step.path):
                dest.move_to(step.path, root, step.path)
                done.append(root.uri(step.path))
            return done
        if step.action == "move":
            if self.backup.exists(b):
                if root.exists(step.path):  # identical content is back already (checked): keep the backup copy
                    return done
                self.backup.move_to(b, root, step.path)
                done.append(root.uri(step.path))
            return done
        want = hashlib.sha256(step.content or b"").hexdigest()
        pre = self._pre(i, state)
        if pre is not None and pre.get("sha256") == want:
            return done  # the step changed nothing
        if root.exists(step.path) and root.digest(step.path)[1] == want:
            root.move_to(step.path, self.backup, f"undone/{step.root}/{step.path}")
        if self.backup.exists(b):
            self.backup.move_to(b, root, step.path)
            done.append(root.uri(step.path))
        return done


_BACKUP_FILE = re.compile(rf"/(?:{re.escape(PLAN_FILE)}|{re.escape(MANIFEST_FILE)}|{re.escape(JOURNAL_FILE)}"
                          rf"|{SEGMENT_DIR}/[0-9]+\.jsonl)/*$")
_SEGMENT_FOLDER = re.compile(rf"/{SEGMENT_DIR}/*$")


def _without(location: str, pattern: re.Pattern[str]) -> str:
    """`location` without the end `pattern` matches; a URI's query (an object store's endpoint
    options) is kept."""
    head, sep, query = location.partition("?") if "://" in location else (location, "", "")
    return pattern.sub("", head.rstrip("/")) + sep + query


def load(backup_location: str) -> tuple[Plan, Root]:
    """The plan and backup root of an earlier operation, from its backup folder, one of its files
    or its journal/ folder."""
    folder = _without(backup_location, _BACKUP_FILE)  # the folder, or one of its files
    backup = Root("backup", folder)
    if not backup.exists(PLAN_FILE) and _without(folder, _SEGMENT_FOLDER) != folder:
        backup = Root("backup", _without(folder, _SEGMENT_FOLDER))  # its journal/ folder of segments
    if not backup.exists(PLAN_FILE):
        raise StorageError(backup.uri(PLAN_FILE), "does not exist: not a streamctl backup folder (give the folder "
                                                  "that holds plan.json and journal.jsonl)")
    try:
        rec = load_json(backup.read(PLAN_FILE))
        plan = Plan.from_record(rec)
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(backup.uri(PLAN_FILE), f"not a valid plan ({type(exc).__name__}: {exc})") from None
    return plan, backup

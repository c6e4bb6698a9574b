"""The journal of a backup folder (docs/formats/streamctl.md#the-journal), durably: records written
in group commits (one write and one fsync locally, one new segment object on object stores) and
read back, anything unknown refused. The records' bytes, their closed set of event kinds and the
encoding they share with plan.json and manifest.json are formats/journal.py's. The executor, the
runner, teardown and the Kafka group offsets write records through `Journal`.
"""
from __future__ import annotations

import os
import time
from typing import Any, Optional

from streamctl.formats.journal import (
    JOURNAL_FILE,
    SEGMENT_DIR,
    JournalState,
    apply_record,
    journal_records,
    record_lines,
    segment_number,
    segment_rel,
)
from streamctl.inspectors.storage import parallel_map
from streamctl.operations.files import Pending, Root
from streamctl.operations.plan import Refused

CRASH_ENV = "STREAMCTL_TEST_CRASH_AFTER"
CRASH_EXIT = 86
READ_THREADS = 8  # segment objects read at once


class Conflict(Refused):
    """The files no longer look like the journal says: refuse rather than guess (exit 4)."""


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
        self._before: list[Pending | Commit] = []  # writes durable before the next record is written (`after`)

    def path(self) -> str:
        return journal_location(self.backup)

    def after(self, pending: Pending | Commit) -> None:
        """The next record is written only once this write is durable (plan.json before the
        first record: a resume needs it; manifest.json and the run's last done records before
        the `verified` record). A commit the test hook ends in is waited for now: the process
        dies where its caller would have waited for the records before."""
        if isinstance(pending, Commit) and pending.crashes:
            pending.wait()
        self._before.append(pending)

    def settle(self) -> None:
        """Wait for the writes `after` named; raise what they raised."""
        pending, self._before = self._before, []
        for p in pending:
            p.wait()

    def append(self, record: dict[str, Any]) -> None:
        self.append_many([record])

    def append_many(self, records: list[dict[str, Any]]) -> None:
        """Append records and make them durable together: one write and one fsync (local), one
        new segment object (object stores). The group commit of the executor."""
        self.append_started(records).wait()

    def append_started(self, records: list[dict[str, Any]]) -> Commit:
        """`append_many`, whose local write and fsync run on a thread while the caller goes on
        (the executor writes the manifest meanwhile); the records are durable
        once `wait()` returned, which raises what the write raised. Encoded here, on the
        caller's thread; object stores write their segment here too."""
        if not records:
            return Commit()
        now = int(time.time() * 1000)
        crash_after = os.environ.get(CRASH_ENV)
        crash_at = None
        if crash_after and crash_after.isdigit() and Journal._writes + len(records) >= int(crash_after):
            crash_at = max(int(crash_after) - Journal._writes, 0)  # test hook: die right after that record
            records = records[:crash_at]
        data = record_lines(records, now)  # the closed schema: another event raises
        self.settle()
        Journal._writes += len(records)
        if self.backup.is_local:
            return Commit(self._append_local(data), crash_at is not None)
        if data:
            self._write_segment(data)
        return Commit(None, crash_at is not None)

    def _append_local(self, data: bytes) -> Pending:
        """Open the journal here, then write `data` and fsync on a thread (two system calls: on
        a thread, each waits for the GIL once)."""
        path = self.backup.local(JOURNAL_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            if not self._checked_end:  # a torn last line of a crashed run: never glue a record to it
                self._checked_end = True
                end = os.lseek(fd, 0, os.SEEK_END)
                if end > 0 and os.pread(fd, 1, end - 1) != b"\n":
                    data = b"\n" + data
        except BaseException:
            os.close(fd)
            raise
        return Pending(lambda: _write_all(fd, data))

    def _write_segment(self, data: bytes) -> None:
        """One group commit on an object store: the next segment, created only if no object has its
        name (listed once per process: the lock is ours, so no one else numbers segments)."""
        if self._next is None:
            self._next = max(self._segments(), default=0) + 1
        rel = segment_rel(self._next)
        if not self.backup.create_exclusive(rel, data):
            raise Conflict(f"{self.backup.uri(rel)} already exists: another process writes this journal "
                           "(the lock is no longer ours); nothing was overwritten")
        self._next += 1

    def _segments(self) -> list[int]:
        """The numbers of the journal's segment objects, ascending (names other than <n>.jsonl are
        not segments)."""
        found = [segment_number(e.name) for e in self.backup.storage.list_dir(SEGMENT_DIR) or [] if not e.is_dir]
        return sorted(n for n in found if n is not None)

    def _chunks(self) -> list[bytes]:
        """The journal's bytes in record order: journal.jsonl (local, or an object store's backup
        of the earlier single-object layout), then the segments by number."""
        chunks = [self.backup.read_all(JOURNAL_FILE)] if self.backup.exists(JOURNAL_FILE) else []
        if self.backup.is_local:
            return chunks
        numbers = self._segments()
        self._next = max(numbers, default=0) + 1
        return chunks + parallel_map(lambda n: self.backup.read_all(segment_rel(n)), numbers,
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
            for i, rec in journal_records(chunk):
                if rec is None or not apply_record(state, rec):
                    raise Conflict(f"{where}: line {i + 1} is not a journal record (an unknown event or a bad step "
                                   "number); refusing to act on it, nothing was changed")
        return state


def _write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd`, fsync it and close it (on a `Pending` thread)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


class Commit:
    """A group commit under way (`Journal.append_started`)."""

    def __init__(self, writer: Optional[Pending] = None, crash: bool = False) -> None:
        self._writer, self._crash = writer, crash

    @property
    def crashes(self) -> bool:
        """The test hook dies in `wait()` (STREAMCTL_TEST_CRASH_AFTER reached in these records)."""
        return self._crash

    def wait(self) -> None:
        """Return once the records are durable; raise what their write raised."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.wait()
        if self._crash:
            os._exit(CRASH_EXIT)  # test hook: die like a killed process, no cleanup


def journal_location(backup: Root) -> str:
    """Where a backup's journal is: its journal.jsonl (local) or its journal/ folder of segments."""
    return backup.uri(JOURNAL_FILE if backup.is_local else SEGMENT_DIR)



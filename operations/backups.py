"""`streamctl backups`: the backup folders align and trim left in a checkpoint (and drop-sink's
archives), their size and state, and the removal of old finished ones (docs/model.md#backups).

A backup is what makes an operation undoable: it holds the moved files (`files/`), the plan, the
journal and the manifest (docs/formats/streamctl.md#the-backup-folder). Kept in the checkpoint by
default, they make it grow; this lists them and drops those an operator no longer needs:

* only `_streamctl/backups/<op>` of an operation that finished (its journal says verified) or
  was undone, older than `--drop-older-than DAYS`;
* never a backup whose journal shows an operation still under way or crashed (it is what
  `--resume` / `--undo` need), never one whose journal cannot be read, never drop-sink's archives
  under `_streamctl/retired/` (they hold a retired query and its undo).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Optional

from streamctl.formats.errors import StorageError, StreamctlError
from streamctl.formats.layout import BACKUPS_DIR as BACKUPS
from streamctl.formats.layout import RETIRED_DIR as ARCHIVES
from streamctl.operations.files import Root

_STAMP = re.compile(r"-(\d{8}T\d{6}Z)-")


@dataclass(frozen=True)
class BackupInfo:
    name: str
    location: str
    kind: str  # "backup" | "archive" (drop-sink)
    command: str
    created_ms: Optional[int]
    state: str  # "verified" | "undone" | "finished" | "unfinished" | "unreadable"
    files: int
    bytes: int

    def to_record(self) -> dict[str, Any]:
        return {"name": self.name, "location": self.location, "kind": self.kind, "command": self.command,
                "created_ms": self.created_ms, "state": self.state, "files": self.files, "bytes": self.bytes,
                "undo": f"streamctl {self.command} --undo {self.location}" if self.state in ("verified", "finished")
                else None}


def _created_ms(name: str) -> Optional[int]:
    m = _STAMP.search(name)
    if not m:
        return None
    import calendar

    try:
        return calendar.timegm(time.strptime(m.group(1), "%Y%m%dT%H%M%SZ")) * 1000
    except (ValueError, OverflowError):
        return None


def _state(backup: Root) -> str:
    from streamctl.operations.journal import Journal

    try:
        j = Journal(backup).read()
    except (StreamctlError, OSError, ValueError):
        return "unreadable"
    if j.undo_finished:
        return "undone"
    if j.verified is not None:
        return "verified"
    if j.finished:
        return "finished"
    return "unfinished"


def list_backups(checkpoint: str) -> list[BackupInfo]:
    """Every backup and archive folder of the checkpoint, oldest first."""
    ck = Root("checkpoint", checkpoint)
    what = ck.storage.kind("")
    if what != "dir":
        raise StorageError(ck.location, "does not exist" if what == "missing" else "is not a folder")
    out = []
    for sub, kind in ((BACKUPS, "backup"), (ARCHIVES, "archive")):
        for entry in sorted(ck.storage.list_dir(sub) or [], key=lambda e: e.name):
            if not entry.is_dir:
                continue
            backup = Root("backup", ck.uri(f"{sub}/{entry.name}"))
            try:
                sizes = backup.walk_sizes("files")
            except (StorageError, OSError):
                sizes = []
            out.append(BackupInfo(entry.name, backup.location, kind, entry.name.split("-20", 1)[0],
                                  _created_ms(entry.name), _state(backup), len(sizes), sum(s for _, s in sizes)))
    return sorted(out, key=lambda b: (b.created_ms or 0, b.name))


def droppable(backups: list[BackupInfo], older_than_days: float, now_ms: Optional[int] = None) -> list[BackupInfo]:
    """The backups `--drop-older-than` removes: finished or undone align/trim backups older than the age."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    limit = now - int(older_than_days * 86_400_000)
    return [b for b in backups if b.kind == "backup" and b.state in ("verified", "undone", "finished")
            and b.created_ms is not None and b.created_ms <= limit]


def drop(checkpoint: str, backups: list[BackupInfo]) -> None:
    """Delete the given backup folders (their undo goes with them)."""
    ck = Root("checkpoint", checkpoint)
    for b in backups:
        ck.delete(f"{BACKUPS}/{b.name}")

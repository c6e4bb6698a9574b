"""The run record of a fleet run (`streamctl trim '/data/chk/*' --execute`): one JSON file that
lists each checkpoint of the run, its operation id, its backup folder and its outcome, rewritten
atomically after every change, so `--resume-run` and `--undo-run` know what the run left
(docs/formats/streamctl.md#the-fleet-run-record).

Where: `--run-dir DIR` names the folder; by default the first checkpoint's
`_streamctl/fleet-runs/` (inside a root the operator named, where no glob of checkpoints looks).
"""
from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from streamctl.formats.errors import StorageError, UsageError
from streamctl.formats.layout import STREAMCTL_DIR
from streamctl.operations.files import Root

RUN_VERSION = 1
SAVE_EVERY_S = 1.0  # a run of thousands of checkpoints rewrites its record about once a second, not per change
FLEET_RUNS_DIR = f"{STREAMCTL_DIR}/fleet-runs"  # below the first checkpoint, when no --run-dir is given

# a checkpoint's status in the record
PENDING = "pending"  # not started
RUNNING = "running"  # its operation started (lock, plan, journal): resume or undo it by its backup
DONE = "done"  # executed and verified
NOTHING = "nothing_to_do"  # its plan under the lock had no step
REFUSED = "refused"  # nothing changed (exit 4)
UNREADABLE = "unreadable"  # nothing changed: its checkpoint or sink cannot be read (exit 3)
FAILED = "failed"  # stopped during its steps (storage failure), or another error
NOT_VERIFIED = "not_verified"  # executed, but the re-inspection did not reach the promise (exit 5)
UNDONE = "undone"  # put back by --undo-run
STATUSES = (PENDING, RUNNING, DONE, NOTHING, REFUSED, UNREADABLE, FAILED, NOT_VERIFIED, UNDONE)
UNFINISHED = (PENDING, RUNNING, FAILED)  # what --resume-run takes up again (--undo-run: every backup folder with a plan)


@dataclass
class Entry:
    """One checkpoint of the run."""

    checkpoint: str
    sink: Optional[str] = None
    sink_kind: str = "auto"
    app_id: Optional[str] = None
    op_id: str = ""
    backup: str = ""  # the operation's backup folder (`--resume` / `--undo` take it)
    status: str = PENDING
    reason: str = ""  # why it was refused or failed
    exit_code: int = 0
    files: int = 0  # what its plan moves or deletes
    bytes: int = 0


@dataclass
class FleetRun:
    command: str
    run_id: str
    location: str  # the record's own location (a file path or URI)
    settings: dict[str, Any] = field(default_factory=dict)  # the command's options, as resume needs them
    entries: list[Entry] = field(default_factory=list)
    started_ms: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _saved: float = field(default=0.0, repr=False, compare=False)  # time.monotonic() of the last save

    def to_record(self) -> dict[str, Any]:
        return {"run_version": RUN_VERSION, "run_id": self.run_id, "command": self.command,
                "started_ms": self.started_ms, "updated_ms": int(time.time() * 1000), "settings": dict(self.settings),
                "checkpoints": [asdict(e) for e in self.entries]}

    def update(self, index: int, **changes: Any) -> None:
        """Change one entry; the record is rewritten at most every SAVE_EVERY_S seconds (threads of
        the run share it: one at a time), and by `flush`. A crash may lose the newest statuses but
        never an operation: each checkpoint's operation id and backup folder are in the record
        written before the first checkpoint starts, and resume and undo read each backup folder."""
        with self._lock:
            for key, value in changes.items():
                setattr(self.entries[index], key, value)
            if time.monotonic() - self._saved >= SAVE_EVERY_S:
                self.save()

    def flush(self) -> None:
        with self._lock:
            self.save()

    def save(self) -> None:
        folder, name = _split(self.location)
        Root("run", folder).write_atomic(name, json.dumps(self.to_record(), indent=2, sort_keys=True).encode())
        self._saved = time.monotonic()


def _split(location: str) -> tuple[str, str]:
    """(folder, file name) of a record's location; a URI's `?options` stay on the folder."""
    base, q, options = location.partition("?")
    folder, _slash, name = base.rstrip("/").rpartition("/")
    return (folder or ".") + q + options, name


def new_run_id(command: str) -> str:
    return f"{command}-fleet-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(2)}"


def record_location(run_dir: Optional[str], first_checkpoint: str, run_id: str) -> str:
    """`<run dir>/<run id>.json`; by default in the first checkpoint's `_streamctl/fleet-runs/`."""
    if run_dir:
        return Root("run", run_dir).uri(f"{run_id}.json")
    return Root("run", first_checkpoint).uri(f"{FLEET_RUNS_DIR}/{run_id}.json")


def create(command: str, run_dir: Optional[str], entries: list[Entry], settings: dict[str, Any],
           backup_under: str) -> FleetRun:
    """A new run and its record, written before any checkpoint changes, each checkpoint's
    operation id and backup folder (`<checkpoint>/<backup_under>/<op id>`) named in it: a run dir
    that cannot be written is a usage error, and nothing was changed."""
    from streamctl.operations.runner import new_op_id

    if not run_dir:
        _require_folder(entries[0].checkpoint)
    for e in entries:
        e.op_id = new_op_id(command)
        try:
            e.backup = Root("checkpoint", e.checkpoint).uri(f"{backup_under}/{e.op_id}")
        except (StorageError, UsageError, OSError, ValueError):
            e.backup = ""  # a location no backup can be named in: its operation will say why
    run_id = new_run_id(command)
    run = FleetRun(command, run_id, record_location(run_dir, entries[0].checkpoint, run_id), settings, entries,
                   started_ms=int(time.time() * 1000))
    try:
        run.save()
    except (StorageError, OSError) as exc:
        raise UsageError(f"{run.location}: cannot write the fleet run record ({_why(exc)}); name a writable "
                         "folder with --run-dir") from None
    return run


def _require_folder(checkpoint: str) -> None:
    """The default place of the record is inside the first checkpoint: never created where no
    folder is."""
    from streamctl.inspectors.storage import Storage

    try:
        kind = Storage.open(checkpoint).kind()
    except (StorageError, OSError) as exc:
        kind = f"unreadable ({_why(exc)})"
    if kind != "dir":
        raise UsageError(f"{checkpoint}: not a folder ({kind}), so the fleet run record cannot go into its "
                         f"{FLEET_RUNS_DIR}/; name a folder for it with --run-dir")


def load(location: str, command: str) -> FleetRun:
    """A run record by its path or URI; a one-line UsageError naming it when it is not one."""
    folder, name = _split(location)
    try:
        rec = json.loads(Root("run", folder).read(name))
        if not isinstance(rec, dict) or rec.get("run_version") != RUN_VERSION:
            raise ValueError(f"not a version {RUN_VERSION} fleet run record")
        if rec.get("command") != command:
            raise ValueError(f"a run of `streamctl {rec.get('command')}`, not of {command}")
        entries = [Entry(**e) for e in rec["checkpoints"]]
        if any(e.status not in STATUSES for e in entries):
            raise ValueError("an unknown checkpoint status")
        return FleetRun(command, str(rec["run_id"]), location, dict(rec.get("settings") or {}), entries,
                        started_ms=int(rec.get("started_ms") or 0))
    except (StorageError, OSError) as exc:
        raise UsageError(f"{location}: cannot read the fleet run record ({_why(exc)})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{location}: not a fleet run record ({exc})") from None


def _why(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)

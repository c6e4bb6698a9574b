"""The exclusive lock of a mutating command: `<checkpoint>/_streamctl/lock.json`, created with an
atomic exclusive create. A lock whose owner process is gone is reported with its owner and age
and is only taken over with `--break-lock` (or by `--resume` of the same operation)."""
from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Optional

from streamctl.formats.layout import LOCK_FILE, STREAMCTL_DIR
from streamctl.operations.files import Root
from streamctl.operations.plan import Refused


class LockHeld(Refused):
    """Another operation holds the checkpoint: a refusal (exit 4, nothing changed)."""

    def __init__(self, message: str, owner: dict[str, Any]) -> None:
        super().__init__(message, code="locked")
        self.owner = owner


def _alive(owner: dict[str, Any]) -> Optional[bool]:
    """True/False for a process on this host; None when it runs elsewhere (unknown)."""
    if owner.get("host") != socket.gethostname():
        return None
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe(owner: dict[str, Any], now_ms: Optional[int] = None) -> str:
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    age = max(now_ms - int(owner.get("started_ms") or now_ms), 0) / 1000.0
    return (f"{owner.get('command', '?')} (operation {owner.get('op_id', '?')}) by pid {owner.get('pid')} on "
            f"{owner.get('host')}, taken {age:.0f} s ago")


@dataclass
class Lock:
    root: Root
    owner: dict[str, Any]

    @classmethod
    def acquire(cls, root: Root, command: str, op_id: str, break_lock: bool = False,
                takeover_op: Optional[str] = None) -> Lock:
        owner = {"op_id": op_id, "command": command, "host": socket.gethostname(), "pid": os.getpid(),
                 "started_ms": int(time.time() * 1000)}
        data = json.dumps(owner, sort_keys=True).encode()
        for _ in range(2):
            if root.create_exclusive(LOCK_FILE, data):
                return cls(root, owner)
            try:
                held = json.loads(root.read(LOCK_FILE))
            except Exception:  # noqa: BLE001 - a torn or foreign lock file
                held = {}
            if not isinstance(held, dict):
                held = {}
            alive = _alive(held)
            where = root.uri(LOCK_FILE)
            if alive:
                raise LockHeld(f"{where} is held by {describe(held)}: another streamctl is changing this checkpoint", held)
            same_op = takeover_op is not None and held.get("op_id") == takeover_op
            if not (break_lock or (same_op and alive is False)):
                state = "whose process is no longer running" if alive is False else "on another host (cannot tell whether it runs)"
                raise LockHeld(f"{where} is held by {describe(held)}, {state}; rerun with --break-lock once you are sure "
                               "nothing else changes this checkpoint", held)
            root.delete(LOCK_FILE)
        raise LockHeld(f"{root.uri(LOCK_FILE)} could not be taken", {})

    def release(self) -> None:
        try:
            held = json.loads(self.root.read(LOCK_FILE))
        except Exception:  # noqa: BLE001
            return
        if isinstance(held, dict) and held.get("op_id") == self.owner["op_id"] and held.get("pid") == self.owner["pid"]:
            self.root.delete(LOCK_FILE)
            self.root.remove_empty_dirs(STREAMCTL_DIR)  # a refused or failed run leaves nothing behind

"""The requester's side of the streamctl agent protocol: write a stop request, watch the agent's
lease until it is released, withdraw the request (docs/formats/streamctl.md#the-stop-request).

One owner for what `streamctl stop` and `drop-sink --safe` both do. The other side is the agent
(`pipeline/agent.py`, which writes the lease and honours the request); both files are read by
`inspectors/lease.py`. Local checkpoints only: the agent watches a local folder.
"""
from __future__ import annotations

import getpass
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Callable, Optional

from streamctl.inspectors.errors import StorageError, UsageError
from streamctl.inspectors.lease import STOP_FILE, STOP_VERSION, Lease, lease_status, now_ms, read_lease
from streamctl.inspectors.storage import Storage
from streamctl.operations.files import Root

POLL_S = 0.2


def local_checkpoint(location: str) -> Storage:
    """The checkpoint `location` opened for the protocol; UsageError unless it is local (judged on
    the URI first: a remote store is never contacted)."""
    st = Storage.open_local(location)
    if st is None:
        raise UsageError(f"{location}: stop requests can only be written to local checkpoints (a path or file:// URI)")
    return st


def request_stop(st: Storage, reason: Optional[str]) -> str:
    """Write `_streamctl/stop.json` atomically (operations/files.py Root.write_atomic); returns its path."""
    doc = {"version": STOP_VERSION, "requested_at_ms": now_ms(),
           "requested_by": {"host": socket.gethostname(), "pid": os.getpid(), "user": getpass.getuser()},
           "reason": reason}
    Root("checkpoint", st.display).write_atomic(STOP_FILE, (json.dumps(doc) + "\n").encode())
    return os.path.join(st.display, STOP_FILE)


def withdraw(st: Storage) -> None:
    """Delete our stop request (never leave one behind that nobody watches)."""
    try:
        os.unlink(os.path.join(st.display, STOP_FILE))
    except FileNotFoundError:
        pass


@dataclass(frozen=True)
class Outcome:
    status: str  # "released" | "stale" (the driver died while stopping) | "timeout"
    lease: Lease
    waited_s: float


def wait_released(st: Storage, lease: Lease, timeout_s: float,
                  on_change: Optional[Callable[[Lease, str], None]] = None) -> Outcome:
    """Watch the lease until it is released, goes stale or `timeout_s` passes. The request is
    withdrawn on every outcome (on `released` the agent has deleted it already) and on any error
    or interrupt while waiting. `on_change(lease, status)` hears every new state or batch."""
    started = time.monotonic()
    seen = (lease.state, lease.last_batch)
    try:
        while True:
            try:
                lease = read_lease(st) or lease
            except StorageError:
                pass  # a read racing a replace on an odd file system: try again
            status = lease_status(lease, now_ms())
            if (lease.state, lease.last_batch) != seen:
                seen = (lease.state, lease.last_batch)
                if on_change is not None:
                    on_change(lease, status)
            waited = round(time.monotonic() - started, 3)
            if status in ("released", "stale"):
                return Outcome(status, lease, waited)
            if waited >= timeout_s:
                return Outcome("timeout", lease, waited)
            time.sleep(POLL_S)
    finally:
        withdraw(st)

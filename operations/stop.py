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

from streamctl.formats.errors import StorageError, UsageError
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
    status: str  # "released" | "stale" (expired, its driver proven gone) | "unknown" (expired, the driver
    lease: Lease  # runs where streamctl cannot look) | "timeout" (still live, or expired with its driver alive)
    waited_s: float
    driver: str = ""  # "alive" | "dead" | "unknown" when the lease expired


def driver_state(lease: Lease) -> str:
    """Whether the driver that holds an expired lease is alive, from evidence only
    (docs/model.md#liveness): on this host its pid answers (`alive`) or not (`dead`); elsewhere,
    or without a usable pid, `unknown`. A reused pid reads as alive: the safe direction."""
    if lease.host != socket.gethostname() or not isinstance(lease.pid, int) or lease.pid <= 0:
        return "unknown"
    try:
        os.kill(lease.pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        return "alive"
    except (OverflowError, ValueError, OSError):
        return "unknown"
    return "alive"


def describe_expired(lease: Lease, driver: str) -> str:
    """One line on an expired lease and what its driver's evidence says."""
    where = f"run {lease.run_id} on {lease.host}, pid {lease.pid}"
    if driver == "dead":
        return f"the lease expired while {lease.state} and its driver ({where}) is gone: it died without releasing it"
    if driver == "alive":
        return (f"the lease expired while {lease.state} but its driver ({where}) is still running: it stopped "
                "heartbeating (a long query.stop()?); check the driver")
    return (f"the lease expired while {lease.state}; its driver ({where}) runs where streamctl cannot look, so "
            "whether it is alive is unknown: check that it is gone or stopped")


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
            driver = driver_state(lease) if status == "stale" else ""
            if status == "released":
                return Outcome(status, lease, waited)
            if status == "stale" and driver != "alive":  # an alive driver may still release it: wait on
                return Outcome("stale" if driver == "dead" else "unknown", lease, waited, driver)
            if waited >= timeout_s:
                return Outcome("timeout", lease, waited, driver)
            time.sleep(POLL_S)
    finally:
        withdraw(st)

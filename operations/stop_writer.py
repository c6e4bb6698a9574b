"""Stop the writer of a checkpoint before `drop-sink --safe` retires it, or prove it stopped
(docs/model.md#drop-sink, docs/model.md#liveness): a graceful stop through the agent's lease (the
request `streamctl stop` writes), or, without a lease, the operator's word (`--assume-stopped`)
and no file change for the quiet period. Quiet files alone are no proof: an idle query writes
nothing for as long as its input is quiet."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from streamctl.formats.layout import LEASE_FILE
from streamctl.inspectors.findings import shown
from streamctl.operations.files import Root
from streamctl.operations.plan import Refused
from streamctl.operations.stop import now_ms

Say = Callable[[str], None]


def read_checkpoint_lease(location: str) -> Any:
    from streamctl.inspectors.lease import read_lease
    from streamctl.inspectors.storage import Storage

    return read_lease(Storage.open(location))


def stop_writer(location: str, *, safe: bool, quiet_period_s: float, stop_timeout_s: float,
                reason: Optional[str] = None, say: Optional[Say] = None, assume_stopped: bool = False) -> dict[str, Any]:
    """Make sure nothing writes to the checkpoint any more. With a live agent lease: `safe` writes
    the stop request (`_streamctl/stop.json`, as `streamctl stop` does) and waits up to
    `stop_timeout_s` for the lease to be released, then for the quiet period; without `safe` it
    refuses. Without a live lease: refuses when a log file changed within the quiet period.
    Returns what was observed (journaled by the caller)."""
    from streamctl.inspectors.lease import lease_status
    from streamctl.operations import stop

    say = say or (lambda _m: None)
    lease = read_checkpoint_lease(location)
    status = lease_status(lease, now_ms()) if lease is not None else None
    record: dict[str, Any] = {"lease": status, "stop_requested": False}
    if status == "stale":
        driver = stop.driver_state(lease)
        record["driver"] = driver
        # an expired lease is no proof the driver is gone (docs/model.md#liveness); --assume-stopped
        # is the operator's word for a driver streamctl cannot see, never against one it sees running
        if driver == "alive" or (driver == "unknown" and not assume_stopped):
            raise Refused(f"{location}: {stop.describe_expired(lease, driver)}; "
                          + ("rerun once it has stopped" if driver == "alive" else
                             "then rerun with --assume-stopped"))
    if status == "live":
        if not safe:
            raise Refused(f"{location}: the query is running ({LEASE_FILE} held by run "
                          f"{lease.run_id} on {lease.host}, pid {lease.pid}); use --safe to stop it first")
        if not Root("checkpoint", location).is_local:
            raise Refused(f"{location}: stop requests can only be written to local checkpoints")
        st = stop.local_checkpoint(location)
        stop_path = stop.request_stop(st, reason or "streamctl drop-sink --safe")
        record["stop_requested"] = True
        say(f"{location}: stop requested ({stop_path}); waiting up to {stop_timeout_s:g}s for the lease to be released")
        out = stop.wait_released(st, lease, stop_timeout_s)
        lease = out.lease
        if out.status in ("stale", "unknown"):
            raise Refused(f"{location}: {stop.describe_expired(lease, out.driver)}; the stop request was withdrawn; "
                          + ("inspect the checkpoint and rerun once it is quiet" if out.status == "stale"
                             else "then rerun with --assume-stopped"))
        if out.status == "timeout":
            raise Refused(f"{location}: not stopped within --stop-timeout {stop_timeout_s:g}s (lease "
                          f"{lease.state}, last batch {shown(lease.last_batch)}"
                          + (f"; {stop.describe_expired(lease, out.driver)}" if out.driver else "")
                          + "); the stop request was withdrawn")
        record.update(lease="released", stopped_after_s=out.waited_s, last_batch=lease.last_batch,
                      evidence="the streamctl agent released its lease after the stop request")
        say(f"stopped after {record['stopped_after_s']:.1f}s; last batch {shown(lease.last_batch)}")
        _wait_quiet(location, quiet_period_s, quiet_period_s + stop_timeout_s, say)
        return record
    if status is None and not assume_stopped:
        # quiet files are no proof: an idle query writes nothing for as long as its input is quiet
        raise Refused(f"{location}: {NO_PROOF}")
    quiet = _quiet_finding(location, quiet_period_s)
    if quiet is not None:
        raise Refused(f"{location}: {quiet}")
    record["quiet_period_s"] = quiet_period_s
    record["evidence"] = stopped_evidence(status, assume_stopped)
    return record


NO_PROOF = ("no proof that the query stopped: it has no streamctl agent lease (_streamctl/lease.json), and files "
            "that do not change prove nothing (an idle query writes none); attach the agent "
            "(streamctl.pipeline.agent) so that --safe stops it, or stop the query yourself and rerun with "
            "--assume-stopped")


def stopped_evidence(status: Optional[str], assume_stopped: bool) -> str:
    """The liveness evidence a teardown rests on (its plan and journal name it)."""
    if status == "released":
        return "the streamctl agent's lease is released: the query stopped"
    if status == "stale":
        return "the agent's lease expired and its driver is gone" + (" (--assume-stopped)" if assume_stopped else "")
    return "the operator's word (--assume-stopped): no agent lease, nothing changed within the quiet period"


def _quiet_finding(location: str, quiet_period_s: float) -> Optional[str]:
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    q = inspect_checkpoint(location, quiet_period_s=quiet_period_s)
    live = [f for f in q.findings if f.code == "LIVE_QUERY"]
    return live[0].message if live else None


def _wait_quiet(location: str, quiet_period_s: float, max_wait_s: float, say: Say) -> None:
    """After a graceful stop: wait until no log file changed within the quiet period."""
    if quiet_period_s == 0:
        return
    deadline = time.monotonic() + max(max_wait_s, 0)
    said = False
    while True:
        live = _quiet_finding(location, quiet_period_s)
        if live is None:
            return
        if time.monotonic() >= deadline:
            raise Refused(f"{location}: still changing after the stop: {live}")
        if not said:
            say(f"waiting for the quiet period ({quiet_period_s:g}s without a change)")
            said = True
        time.sleep(0.5)

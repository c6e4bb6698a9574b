"""`streamctl stop`: ask a query running under the streamctl agent to stop between batches."""
from __future__ import annotations

from typing import Any, NoReturn, Optional

import typer

from streamctl.console import context, render
from streamctl.inspectors.documents import document
from streamctl.inspectors.findings import shown


def _age(ms: Optional[int], now: int) -> str:
    return "-" if ms is None else f"{max(0, now - ms) / 1000:.1f}s ago"


def _describe(lease: Any, status: str, now: int) -> str:
    batch = "none yet" if lease.last_batch is None else lease.last_batch
    return (f"lease {lease.state} ({status}): query {lease.query_id} run {lease.run_id} on {lease.host} pid {lease.pid}, "
            f"last batch {batch}, heartbeat {_age(lease.heartbeat_ms, now)}")


def stop(
    checkpoint: str = typer.Argument(..., help="A checkpoint path, file:// URI or pipeline name."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until the agent has stopped the query (default)."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait before giving up (exit 4). Default 60."),
    reason: Optional[str] = typer.Option(None, "--reason", help="Why; recorded in the stop request."),
    as_json: bool = typer.Option(False, "--json", help="A StopResult JSON document instead of text."),
) -> None:
    """Stop a query gracefully: the streamctl agent in its driver finishes the micro-batch in
    flight, stops the query between batches (the newest offsets/N has its commits/N) and
    releases its lease.

    Writes CHECKPOINT/_streamctl/stop.json and, with --wait (the default), watches the agent's
    lease until it is released. Needs a query started with streamctl.pipeline.agent.attach and
    a local checkpoint. Refuses (exit 4, and takes its request back) when there is no lease, when
    the lease is stale (the driver died) or when the timeout passes. A query whose lease is
    already released is reported as stopped (exit 0).

    Examples:

    \b
      streamctl stop /data/chk/orders
      streamctl stop orders --reason "deploy 2.3" --timeout 120
      streamctl stop /data/chk/orders --no-wait --json
    """
    from streamctl.console.config import load_config, resolve_checkpoint
    from streamctl.formats.errors import StorageError, UsageError
    from streamctl.inspectors.lease import lease_status, read_lease
    from streamctl.operations.plan import Refused
    from streamctl.operations.stop import (
        describe_expired,
        driver_state,
        local_checkpoint,
        now_ms,
        request_stop,
        wait_released,
    )

    if timeout < 0:
        raise UsageError("invalid value for --timeout: must be >= 0")
    config = load_config(context.CONFIG_PATH)
    location, _pipeline = resolve_checkpoint(checkpoint, config)
    st = local_checkpoint(location)
    kind = st.kind()
    if kind != "dir":
        raise StorageError(location, "does not exist" if kind == "missing" else "is a file, expected a checkpoint folder")

    def say(line: str) -> None:
        if not as_json:
            render.emit_lines([line], "plain")

    def finish(stopped: bool, lease: Any, why: Optional[str], waited_s: float = 0.0) -> NoReturn:
        """The StopResult; `why` the query is not stopped is a refusal: exit 4 through console/errors.py's table."""
        now = now_ms()
        doc = document("StopResult", {"checkpoint": st.display,
               "query_id": lease.query_id if lease is not None else None, "stopped": stopped,
               "lease": dict(lease.to_json(), status=lease_status(lease, now)) if lease is not None else None,
               "waited_s": waited_s, "reason_not_stopped": why})
        if as_json:
            render.emit_json(doc)
        if why is not None:
            raise Refused(f"{st.display}: not stopped: {why}")
        raise typer.Exit()

    lease = read_lease(st)  # a malformed lease: exit 3 before anything is written
    if lease is None:
        finish(False, None, "no agent lease: the query is not running under the streamctl agent (or never started it)")
    status = lease_status(lease, now_ms())
    driver = driver_state(lease) if status == "stale" else ""
    if status == "stale" and driver != "alive":  # an alive driver's agent still honours a request
        finish(False, lease, f"{describe_expired(lease, driver)}"
               + ("; nothing to stop" if driver == "dead" else "")
               + f" (last heartbeat {_age(lease.heartbeat_ms, now_ms())})")
    if status == "released":
        say(f"{st.display}: already stopped: " + _describe(lease, status, now_ms()))
        finish(True, lease, None)

    stop_path = request_stop(st, reason)
    say(f"{st.display}: stop requested ({stop_path})")
    say(_describe(lease, status, now_ms()))
    if not wait:
        finish(False, lease, None)
    out = wait_released(st, lease, timeout, lambda ls, s: say(_describe(ls, s, now_ms())))
    lease = out.lease
    if out.status == "released":
        say(f"stopped after {out.waited_s:.1f}s; last batch {shown(lease.last_batch)}")
        finish(True, lease, None, out.waited_s)
    if out.status in ("stale", "unknown"):
        finish(False, lease, f"{describe_expired(lease, out.driver)}; the stop request was withdrawn", out.waited_s)
    finish(False, lease, f"timed out after {timeout:g}s; the lease is still {lease.state} "
           f"(last batch {shown(lease.last_batch)}, heartbeat {_age(lease.heartbeat_ms, now_ms())}"
           + (f"; {describe_expired(lease, out.driver)}" if out.driver else "")
           + "); the stop request was withdrawn", out.waited_s)

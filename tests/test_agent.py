"""The streamctl agent (lease + graceful stop), `inspectors.lease` and `streamctl stop`.

Real Spark where it matters: a query on a file source (processingTime 500 ms,
maxFilesPerTrigger=1, 200 input files) runs in the background of the session `spark`; the
driver-kill test runs its own driver in a subprocess (a second JVM)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from streamctl.formats.errors import LogParseError
from streamctl.inspectors.lease import Lease, lease_status, read_lease, read_stop_request
from streamctl.inspectors.storage import Storage
from streamctl.pipeline.agent import now_ms, write_json_atomic

# --------------------------------------------------------------------------- helpers


def _lease(**kw: Any) -> dict[str, Any]:
    doc = {"version": 1, "query_id": "q", "run_id": "r", "name": None, "host": "h", "pid": 1,
           "started_at_ms": 1000, "heartbeat_ms": 2000, "expires_at_ms": 5000, "last_batch": 3,
           "state": "running", "released_at_ms": None, "stop_request_ms": None}
    doc.update(kw)
    return doc


def _put_lease(ckpt: Path, doc: dict[str, Any]) -> None:
    write_json_atomic(str(ckpt / "_streamctl"), "lease.json", doc)


# --------------------------------------------------------------------------- unit: lease_status and the reader


def test_lease_status() -> None:
    running = Lease(**_lease())
    assert lease_status(running, 4999) == "live"
    assert lease_status(running, 5000) == "stale"
    stopping = Lease(**_lease(state="stopping"))
    assert lease_status(stopping, 1) == "live"
    assert lease_status(stopping, 10_000) == "stale"
    released = Lease(**_lease(state="released", released_at_ms=4000))
    assert lease_status(released, 1) == "released"
    assert lease_status(released, 10_000) == "released"


def test_read_lease_and_stop_request(tmp_path: Path) -> None:
    st = Storage.open(str(tmp_path))
    assert read_lease(st) is None and read_stop_request(st) is None
    _put_lease(tmp_path, _lease())
    lease = read_lease(st)
    assert lease == Lease(**_lease())
    assert lease is not None and lease.to_json() == _lease()
    write_json_atomic(str(tmp_path / "_streamctl"), "stop.json",
                      {"version": 1, "requested_at_ms": 7, "requested_by": {"host": "h", "pid": 2, "user": "u"}, "reason": None})
    req = read_stop_request(st)
    assert req is not None and req.requested_at_ms == 7 and req.requested_by["user"] == "u"
    assert not [n for n in os.listdir(tmp_path / "_streamctl") if n.endswith(".tmp")]


@pytest.mark.parametrize("text, reason", [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({k: v for k, v in _lease().items() if k != "heartbeat_ms"}), "missing key 'heartbeat_ms'"),
    (json.dumps(_lease(pid="12")), "'pid' must be an int"),
    (json.dumps(_lease(state="zombie")), "'state' must be one of"),
    (json.dumps(_lease(version=9)), "unsupported lease version 9"),
])
def test_malformed_lease(tmp_path: Path, text: str, reason: str) -> None:
    (tmp_path / "_streamctl").mkdir()
    (tmp_path / "_streamctl" / "lease.json").write_text(text)
    with pytest.raises(LogParseError) as err:
        read_lease(Storage.open(str(tmp_path)))
    assert reason in err.value.reason and "\n" not in str(err.value)
    assert err.value.path.endswith("_streamctl/lease.json")


# --------------------------------------------------------------------------- CLI without Spark


def test_stop_without_lease_refuses_and_leaves_no_request(tmp_path: Path, cli: Any) -> None:
    r = cli("stop", str(tmp_path), "--timeout", "5")
    assert r.code == 4, r
    assert "no agent lease" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "_streamctl" / "stop.json").exists()
    r = cli("stop", str(tmp_path), "--json")
    assert r.code == 4, r
    doc = r.json()
    assert doc["kind"] == "StopResult" and doc["api_version"] == "streamctl/v1"
    assert doc["stopped"] is False and doc["lease"] is None and "no agent lease" in doc["reason_not_stopped"]


def test_stop_malformed_lease_is_exit_3(tmp_path: Path, cli: Any) -> None:
    (tmp_path / "_streamctl").mkdir()
    (tmp_path / "_streamctl" / "lease.json").write_text('{"version": 1, "query_id": ')
    r = cli("stop", str(tmp_path))
    assert r.code == 3, r
    assert len(r.stderr.strip().splitlines()) == 1 and "_streamctl/lease.json" in r.stderr and "invalid JSON" in r.stderr
    assert not (tmp_path / "_streamctl" / "stop.json").exists()


def test_stop_stale_and_released_and_usage(tmp_path: Path, cli: Any) -> None:
    t = now_ms()
    _put_lease(tmp_path, _lease(heartbeat_ms=t - 40_000, expires_at_ms=t - 10_000))
    r = cli("stop", str(tmp_path), "--json")
    assert r.code == 4, r
    why = r.json()["reason_not_stopped"]  # host "h": not this host, so whether its driver lives is unknown
    assert "expired" in why and "cannot look" in why and r.json()["lease"]["status"] == "stale", why
    assert not (tmp_path / "_streamctl" / "stop.json").exists()
    _put_lease(tmp_path, _lease(state="released", released_at_ms=t - 1000))
    r = cli("stop", str(tmp_path))
    assert r.code == 0, r
    assert "already stopped" in r.stdout
    assert cli("stop", "s3://bucket/chk").code == 2
    assert cli("stop", str(tmp_path / "missing")).code == 3
    assert cli("stop", str(tmp_path), "--timeout", "-1").code == 2


def test_stop_times_out_and_withdraws(tmp_path: Path, cli: Any) -> None:
    t = now_ms()
    _put_lease(tmp_path, _lease(heartbeat_ms=t, expires_at_ms=t + 60_000))  # live, but nobody acts on it
    t0 = time.monotonic()
    r = cli("stop", str(tmp_path), "--timeout", "1", "--reason", "test")
    assert r.code == 4, r
    assert 1.0 <= time.monotonic() - t0 < 5
    assert "timed out after 1s" in r.stderr and "withdrawn" in r.stderr
    assert "stop requested" in r.stdout
    assert not (tmp_path / "_streamctl" / "stop.json").exists()
    r = cli("stop", str(tmp_path), "--no-wait", "--json", "--reason", "later")
    assert r.code == 0, r
    assert r.json()["stopped"] is False
    req = read_stop_request(Storage.open(str(tmp_path)))
    assert req is not None and req.reason == "later" and req.requested_by["pid"] == os.getpid()


# --------------------------------------------------------------------------- real Spark


def _start_query(spark: Any, root: Path, name: str) -> tuple[Any, Path, Path]:
    from pyspark.sql import functions as F

    from streamctl.fixtures.examples import write_input_files

    inp, ckpt = root / "input", root / "checkpoint"
    write_input_files(inp, 0, 200)
    df = spark.readStream.schema("key STRING, value BIGINT, ts TIMESTAMP").option("maxFilesPerTrigger", 1).json(str(inp))
    df = df.groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("total"))
    q = (df.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(ckpt))
         .queryName(name).trigger(processingTime="500 milliseconds").start())
    return q, ckpt, inp


@pytest.mark.spark
def test_lease_appears_and_advances(spark: Any, tmp_path: Path, align_pipeline: Any) -> None:
    from streamctl.pipeline.agent import attach

    q, ckpt, _ = _start_query(spark, tmp_path, "agent_lease")
    agent = None
    try:
        agent = attach(q, ckpt, heartbeat_s=0.5, ttl_s=5, spark=spark)
        st = Storage.open(str(ckpt))
        first = read_lease(st)
        assert first is not None and first.state == "running" and first.query_id == str(q.id)
        assert first.run_id == str(q.runId) and first.pid == os.getpid() and first.name == "agent_lease"
        assert first.expires_at_ms == first.heartbeat_ms + 5000
        assert lease_status(first, now_ms()) == "live"
        later = align_pipeline.wait_for(lambda: (lambda l: l if l and l.last_batch is not None and l.last_batch >= 2 else None)(read_lease(st)),
                          90, "last_batch >= 2")
        assert later.heartbeat_ms > first.heartbeat_ms
        b = later.last_batch
        align_pipeline.wait_for(lambda: (read_lease(st).last_batch or 0) > b, 30, "last_batch to advance")
        q.stop()  # user code stops the query: the agent releases the lease
        gone = align_pipeline.wait_for(lambda: (lambda l: l if l.state == "released" else None)(read_lease(st)), 15, "release")
        assert gone.released_at_ms is not None and gone.stop_request_ms is None
        assert lease_status(gone, now_ms()) == "released"
    finally:
        q.stop()
        if agent is not None:
            agent.detach()


@pytest.mark.spark
def test_stop_command_stops_between_batches(spark: Any, tmp_path: Path, cli: Any, align_pipeline: Any) -> None:
    """Three runs, stop requested at different moments: every time exit 0, lease released,
    and offsets/ and commits/ end at the same batch (nothing in flight)."""
    import random

    from streamctl.pipeline.agent import attach

    rnd = random.Random(7)
    for i in range(3):
        q, ckpt, _ = _start_query(spark, tmp_path / f"run{i}", f"agent_stop_{i}")
        agent = None
        try:
            agent = attach(q, ckpt, heartbeat_s=1, ttl_s=10, spark=spark, poll_s=0.1)
            align_pipeline.wait_for(lambda ckpt=ckpt, i=i: (align_pipeline.newest(ckpt / "commits") or -1) >= 1 + 2 * i, 90, f"{2 + 2 * i} committed batches")
            time.sleep(rnd.uniform(0, 1.0))  # a different moment each time: mid-batch or idle
            status = q.status
            planned_at_request = align_pipeline.newest(ckpt / "offsets")
            t0 = time.monotonic()
            r = cli("stop", str(ckpt), "--timeout", "60", "--reason", f"test {i}", "--json")
            took = time.monotonic() - t0
            assert r.code == 0, r
            doc = r.json()
            assert doc["stopped"] is True and doc["reason_not_stopped"] is None and doc["query_id"] == str(q.id)
            assert doc["lease"]["state"] == "released" and doc["lease"]["stop_request_ms"] is not None
            assert took < 30, took
            align_pipeline.wait_for(lambda q=q: not q.isActive, 10, "query inactive")
            assert q.exception() is None
            assert align_pipeline.newest(ckpt / "offsets") == align_pipeline.newest(ckpt / "commits"), (i, agent.stop_mode, sorted(os.listdir(ckpt / "offsets")))
            assert agent.stop_mode == "graceful" and agent.stopped_clean is True
            # the batch planned when the request came was finished and committed, not cancelled
            assert (align_pipeline.newest(ckpt / "commits") or -1) >= (planned_at_request or -1)
            assert not (ckpt / "_streamctl" / "stop.json").exists()
            lease = read_lease(Storage.open(str(ckpt)))
            assert lease is not None and lease.state == "released" and lease.last_batch == align_pipeline.newest(ckpt / "commits")
            print(f"run {i}: requested while {status['message']!r} (trigger active: {status['isTriggerActive']}), "
                  f"stopped in {took:.2f}s at batch {lease.last_batch}")
        finally:
            q.stop()
            if agent is not None:
                agent.detach()


@contextmanager
def _agent_on(spark: Any, q: Any, ckpt: Path, **kw: Any) -> Iterator[Any]:
    """The streamctl agent attached to the running query `q`; the query stopped and the agent
    detached after, whatever happened."""
    from streamctl.pipeline.agent import attach

    agent = None
    try:
        agent = attach(q, ckpt, spark=spark, **kw)
        yield agent
    finally:
        q.stop()
        if agent is not None:
            agent.detach()


def _stop_ends_between_batches(cli: Any, ap: Any, q: Any, agent: Any, ckpt: Path, reason: str, calls: Any = None) -> int:
    """`streamctl stop`, then the outcome every graceful stop must have: exit 0, the query ended
    without an error, through the state switch, and nothing in flight. Returns the newest batch."""
    r = cli("stop", str(ckpt), "--timeout", "120", "--reason", reason, "--json")
    assert r.code == 0, r
    ap.wait_for(lambda: not q.isActive, 10, "query inactive")
    assert q.exception() is None
    assert agent.stop_mode == "graceful" and agent.stopped_clean is True, (agent.stop_mode, calls)
    newest = ap.newest(ckpt / "offsets")
    assert newest is not None and newest == ap.newest(ckpt / "commits"), (sorted(os.listdir(ckpt / "offsets")), calls)
    return int(newest)


def _hold_first_switch(agent: Any, hold: Callable[[], None]) -> dict[str, int]:
    """Wrap the agent's state switch: `hold()` runs before the first switch (the agent's thread
    held up between its look and the switch); the counts of switches and of set-backs are kept."""
    real = agent._state_switch
    calls = {"switch": 0, "back": 0}

    def held_up() -> Any:
        switches = real()
        assert switches is not None, "this Spark has no state to switch"
        switch, back = switches

        def late_switch() -> bool:
            calls["switch"] += 1
            if calls["switch"] == 1:
                hold()
            return bool(switch())

        def counted_back() -> bool:
            calls["back"] += 1
            return bool(back())
        return late_switch, counted_back

    agent._state_switch = held_up
    return calls


@pytest.mark.spark
def test_a_held_up_switch_is_proven_or_set_back(spark: Any, tmp_path: Path, cli: Any, align_pipeline: Any) -> None:
    """The agent's thread is held up between its look and the state switch (a loaded driver):
    here the first switch lands right after the next batch's offsets are written, while that batch
    is being planned, where Spark 4.2+ interrupts a batch that finds the query no longer ACTIVE.
    The agent proves after each switch that it landed where it looked; this one it cannot, so it
    sets the state back before the batch's check, and the stop ends between batches: nothing in
    flight, no error."""
    q, ckpt, _ = _start_query(spark, tmp_path, "agent_held_up")
    landed_after: list[int] = []
    with _agent_on(spark, q, ckpt, heartbeat_s=1, ttl_s=10, poll_s=0.1) as agent:

        def until_the_next_batch_is_planned() -> None:
            seen = align_pipeline.newest(ckpt / "offsets") or -1
            align_pipeline.wait_for(lambda: (align_pipeline.newest(ckpt / "offsets") or -1) > seen, 30,
                                    "the next batch's offsets", step=0.001)
            landed_after.append(align_pipeline.newest(ckpt / "offsets"))
        calls = _hold_first_switch(agent, until_the_next_batch_is_planned)
        align_pipeline.wait_for(lambda: (align_pipeline.newest(ckpt / "commits") or -1) >= 1, 90, "2 committed batches")
        newest = _stop_ends_between_batches(cli, align_pipeline, q, agent, ckpt, "held up", calls)
        assert calls["switch"] >= 2 and calls["back"] >= 1, calls
        # the batch being planned when the held-up switch landed ran to its commit
        assert landed_after and newest >= landed_after[0], (landed_after, calls)


@pytest.mark.spark
def test_a_switch_held_up_until_the_batch_commits_still_stops_between_batches(spark: Any, tmp_path: Path, cli: Any,
                                                                               align_pipeline: Any) -> None:
    """Batches back to back (each sleeps 300 ms): the agent looks while a batch executes, and its
    switch is held up until that batch commits, so it lands at the end of the batch, where the
    loop may already see it and end. The proof (the batch still uncommitted) fails and the
    switch is set back; whichever way the race goes (the loop ends on the switch, or runs on and
    is switched again), the stop ends between batches: graceful, nothing in flight, no error."""
    inp, ckpt = tmp_path / "input", tmp_path / "checkpoint"
    inp.mkdir()
    for i in range(100):
        (inp / f"p{i:03d}.json").write_text(f'{{"id": {i}}}\n')
    df = (spark.readStream.schema("id BIGINT").option("maxFilesPerTrigger", 1).json(str(inp))
          .selectExpr("id", "java_method('java.lang.Thread', 'sleep', cast(300 as bigint)) AS slept"))
    q = (df.writeStream.format("noop").option("checkpointLocation", str(ckpt)).queryName("agent_held_to_commit")
         .trigger(processingTime="100 milliseconds").start())
    held_to: list[int] = []
    with _agent_on(spark, q, ckpt, heartbeat_s=1, ttl_s=10, poll_s=0.1) as agent:

        def until_the_batch_commits() -> None:
            planned, committed = align_pipeline.newest(ckpt / "offsets"), align_pipeline.newest(ckpt / "commits")
            if planned is not None and planned != committed:
                align_pipeline.wait_for(lambda: (align_pipeline.newest(ckpt / "commits") or -1) >= planned, 30,
                                        "the batch's commit", step=0.001)
                held_to.append(planned)
        calls = _hold_first_switch(agent, until_the_batch_commits)
        align_pipeline.wait_for(lambda: (align_pipeline.newest(ckpt / "commits") or -1) >= 1, 90, "2 committed batches")
        newest = _stop_ends_between_batches(cli, align_pipeline, q, agent, ckpt, "held to the commit", calls)
        assert held_to and calls["back"] >= 1, (held_to, calls)  # the look saw the batch executing
        assert newest >= held_to[0]


@pytest.mark.spark
def test_a_stop_while_a_batch_lists_its_files_waits_for_the_batch(spark: Any, tmp_path: Path, cli: Any,
                                                                  align_pipeline: Any) -> None:
    """A batch of many new files lists them in a Spark job of its own after its offsets are
    written and before the check that interrupts a batch (Spark 4.2+): that job is of this run
    but names itself ("Listing leaf files ..."), not the batch. A stop requested while it runs
    waits for the batch's own job and ends between batches: the listing batch committed,
    nothing in flight."""
    inp, stage, ckpt = tmp_path / "input", tmp_path / "stage", tmp_path / "checkpoint"
    inp.mkdir()
    stage.mkdir()
    (inp / "first.json").write_text('{"id": -1, "key": "k"}\n')
    df = spark.readStream.schema("id BIGINT, key STRING").json(str(inp))
    q = (df.writeStream.format("noop").option("checkpointLocation", str(ckpt)).queryName("agent_listing")
         .trigger(processingTime="200 milliseconds").start())
    with _agent_on(spark, q, ckpt, heartbeat_s=1, ttl_s=30, poll_s=0.05) as agent:
        align_pipeline.wait_for(lambda: align_pipeline.newest(ckpt / "commits") == 0, 90, "the first batch")
        for i in range(600):
            (stage / f"p{i:05d}.json").write_text(f'{{"id": {i}, "key": "k"}}\n')
        for f in sorted(stage.iterdir()):  # moved in at once: one batch (two at most) sees them
            f.rename(inp / f.name)
        sc = spark.sparkContext
        tracker, store = sc.statusTracker(), sc._jsc.sc().statusStore()

        def listing() -> bool:
            for job in tracker.getActiveJobsIds():
                try:
                    desc = store.job(job).description()
                except Exception:
                    continue
                if desc.isDefined() and str(desc.get()).startswith("Listing leaf files"):
                    return True
            return False
        align_pipeline.wait_for(listing, 60, "the batch's file listing", step=0.002)
        planned = align_pipeline.newest(ckpt / "offsets")  # the batch listing its files, planned
        assert planned is not None and planned == (align_pipeline.newest(ckpt / "commits") or 0) + 1, \
            sorted(os.listdir(ckpt / "offsets"))
        assert _stop_ends_between_batches(cli, align_pipeline, q, agent, ckpt, "during the listing") >= planned


_DRIVER = """
import os, sys, time
from pathlib import Path
from pyspark.sql import SparkSession
from streamctl.pipeline.agent import attach
from streamctl.fixtures.examples import write_input_files
root = Path(sys.argv[1])
spark = (SparkSession.builder.master("local[1]").appName("agent-kill")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
         .config("spark.driver.memory", "512m").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
write_input_files(root / "input", 0, 200)
df = (spark.readStream.schema("key STRING, value BIGINT, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
      .json(str(root / "input")))
q = (df.writeStream.format("noop").option("checkpointLocation", str(root / "checkpoint"))
     .trigger(processingTime="500 milliseconds").start())
attach(q, root / "checkpoint", heartbeat_s=0.5, ttl_s=3, spark=spark)
q.awaitTermination()
"""


@pytest.mark.spark
def test_killed_driver_leaves_a_stale_lease(tmp_path: Path, cli: Any, align_pipeline: Any) -> None:
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(_DRIVER))
    ckpt = tmp_path / "checkpoint"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    st = Storage.open(str(ckpt))
    try:
        def batch_seen() -> Any:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else proc.returncode
            try:
                lease = read_lease(st)
            except LogParseError:
                return None
            return lease if lease is not None and lease.last_batch is not None else None

        lease = align_pipeline.wait_for(batch_seen, 120, "the subprocess's lease to show a batch", step=0.2)
        assert lease.pid == proc.pid
    finally:
        # SIGKILL the whole session: the Python driver and its JVM
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    killed_at = now_ms()
    lease = read_lease(st)
    assert lease is not None and lease.state == "running"
    assert lease.expires_at_ms - lease.heartbeat_ms == 3000
    assert lease.expires_at_ms > killed_at  # heartbeat every 0.5 s, ttl 3 s
    assert lease_status(lease, killed_at) == "live"
    align_pipeline.wait_for(lambda: now_ms() >= lease.expires_at_ms, 5, "expiry")
    assert read_lease(st) == lease  # nobody refreshed it
    assert lease_status(lease, now_ms()) == "stale"
    t0 = time.monotonic()
    r = cli("stop", str(ckpt))
    assert r.code == 4, r
    assert time.monotonic() - t0 < 2
    assert "is gone" in r.stderr and "nothing to stop" in r.stderr  # this host, its pid answers no more
    assert not (ckpt / "_streamctl" / "stop.json").exists()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("driver", ["alive", "dead", "elsewhere"])
def test_lease_stuck_stopping_is_judged_from_evidence(tmp_path: Path, cli: Any, driver: str) -> None:
    """A lease left in "stopping" and expired (its driver stopped heartbeating during a long
    query.stop()) does not prove the driver died: the evidence decides: on this host the pid answers (alive: wait, then time out
    saying so), does not (dead), or the driver runs elsewhere (unknown: refuse, saying what to check)."""
    import socket

    t = now_ms()
    host = "elsewhere.example" if driver == "elsewhere" else socket.gethostname()
    pid = os.getpid() if driver == "alive" else _dead_pid() if driver == "dead" else 4242
    _put_lease(tmp_path, _lease(state="stopping", host=host, pid=pid, heartbeat_ms=t - 60_000,
                                expires_at_ms=t - 30_000, stop_request_ms=t - 70_000))
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    r = cli("stop", str(tmp_path), "--timeout", "1", "--json")
    assert r.code == 4, r
    why = r.json()["reason_not_stopped"]
    expect = {"alive": "is still running", "dead": "is gone", "elsewhere": "cannot look"}[driver]
    assert expect in why and ("died" in why) == (driver == "dead"), why
    assert not (tmp_path / "_streamctl" / "stop.json").exists()


class _FakeQuery:
    id = "11111111-1111-1111-1111-111111111111"
    runId = "22222222-2222-2222-2222-222222222222"
    name = "fake"


def test_agent_rejects_remote_and_ignores_old_requests(tmp_path: Path) -> None:
    from streamctl.pipeline.agent import Agent

    with pytest.raises(ValueError, match="local file-system checkpoints only"):
        Agent(_FakeQuery(), "s3://bucket/chk")
    agent = Agent(_FakeQuery(), f"file://{tmp_path}", ttl_s=3)
    assert agent.checkpoint == str(tmp_path)
    agent._write()  # what attach() writes first
    lease = read_lease(Storage.open(str(tmp_path)))
    assert lease is not None and lease.state == "running" and lease.name == "fake" and lease.query_id == _FakeQuery.id
    assert lease.expires_at_ms == lease.heartbeat_ms + 3000
    assert agent._pending_request() is None
    folder = str(tmp_path / "_streamctl")
    old = {"version": 1, "requested_at_ms": lease.started_at_ms - 5000, "requested_by": {"host": "h", "pid": 1, "user": "u"},
           "reason": None}
    write_json_atomic(folder, "stop.json", old)  # left over from an earlier run: ignored
    assert agent._pending_request() is None
    write_json_atomic(folder, "stop.json", dict(old, requested_at_ms=lease.started_at_ms - 500))
    assert agent._pending_request() == lease.started_at_ms - 500
    (tmp_path / "_streamctl" / "stop.json").write_text("garbage")  # malformed: ignored, never fatal
    assert agent._pending_request() is None
    agent.release()
    agent.heartbeat(5)  # a released lease is never resurrected
    gone = read_lease(Storage.open(str(tmp_path)))
    assert gone is not None and gone.state == "released" and gone.last_batch is None and gone.released_at_ms is not None


@pytest.mark.parametrize("driver", ["alive", "elsewhere"])
def test_drop_sink_never_retires_under_a_driver_it_cannot_prove_gone(tmp_path: Path, cli: Any, driver: str) -> None:
    """An expired "stopping" lease whose driver still runs on this host: drop-sink refuses even with
    --assume-stopped; one on another host: refused without --assume-stopped (the operator's word)."""
    import socket

    t = now_ms()
    ck, out = tmp_path / "ck", tmp_path / "out"
    host = "elsewhere.example" if driver == "elsewhere" else socket.gethostname()
    for d in ("offsets", "commits", "out/_spark_metadata"):
        (ck / d if not d.startswith("out") else tmp_path / d).mkdir(parents=True)
    (ck / "metadata").write_text('{"id":"5f8a62a4-6c6e-4a1f-9d2b-0e6f3c1e7d11"}')
    _put_lease(ck, _lease(state="stopping", host=host, pid=os.getpid() if driver == "alive" else 4242,
                          heartbeat_ms=t - 60_000, expires_at_ms=t - 30_000))
    for flags in (("--safe",), ("--assume-stopped",)):
        r = cli("drop-sink", str(out), "--checkpoint", str(ck), *flags, "--execute", "--stop-timeout", "1")
        blocked = driver == "alive" or flags == ("--safe",)
        assert (r.code == 4) == blocked, (flags, r)
        if blocked:
            assert ("is still running" if driver == "alive" else "cannot look") in r.stderr, r

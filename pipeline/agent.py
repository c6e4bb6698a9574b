"""The streamctl agent: a lease that says "this query is alive", and a graceful stop on request.

A pipeline adds one line after ``start()``::

    from streamctl.pipeline.agent import attach
    query = df.writeStream.option("checkpointLocation", "/data/chk/orders").start()
    agent = attach(query, "/data/chk/orders")

The agent then

* writes ``<checkpoint>/_streamctl/lease.json`` (state ``running``: query id, run id, host, pid,
  heartbeat, expiry, last batch) and refreshes it every ``heartbeat_s`` and on every progress
  event, so ``streamctl`` can tell a live query (fresh lease) from a dead driver (expired lease);
* watches for ``<checkpoint>/_streamctl/stop.json`` (written by ``streamctl stop``). On a request
  newer than this run it sets the lease to ``stopping``, lets the micro-batch in flight finish and
  stops the query *between* batches, so that the newest ``offsets/N`` has its ``commits/N``
  (nothing for a restart to replay); then it releases the lease (``released``,
  ``stop_request_ms``) and deletes ``stop.json``. Once stopping has begun it completes even if
  the request is withdrawn;
* releases the lease when the query terminates for any other reason (user code calling
  ``query.stop()``, an error, an ``availableNow`` run that finished).

Why not just ``query.stop()``: observed with PySpark 4.1.1, ``stop()`` during a batch cancels
the batch's Spark job (``WriteToDataSourceV2Exec: ... is aborting``) and interrupts the stream
thread, leaving ``offsets/N`` without ``commits/N`` (an in-flight epoch that the next run replays).
The agent instead flips the query's internal state to TERMINATED without interrupting it
(``StreamExecution.state``, reached through py4j): the micro-batch loop checks that state only
between triggers, so the running batch completes and commits, and the loop then exits normally
(terminated event, no exception). Where that internal is not reachable (Spark Connect, another
Spark version), the agent falls back to waiting until no trigger is active and the newest
offsets and commits files agree, then calls ``query.stop()`` - a narrow race remains in that mode
(a trigger starting in the same few milliseconds).

Spark 4.2 and newer (checked on 4.3.0): ``MicroBatchExecution.runBatch`` interrupts its own thread
when the state is no longer ACTIVE once the batch is planned (after ``offsets/N`` is written and the
query planning is done), so a TERMINATED set while a batch is being planned leaves ``offsets/N``
without ``commits/N``. There the agent sets TERMINATED only where no batch is in that stretch:
either idle (no trigger active and offsets and commits agree, seen on two looks in a row, so the
loop waits for its next tick, and, with a processing-time trigger, far enough from that tick,
`TICK_MARGIN_MS`), or executing (a Spark job of the newest batch, planned and not committed, is
active: StreamExecution's job group is the run id and its job description names the batch). A
look and the switch are two calls, and the agent's thread can be held up between them (a loaded
driver), so after the switch the agent proves it landed where it looked: idle, no trigger has
started since and the logs have not moved; executing, that batch is still not committed. Where
the proof fails, it sets ACTIVE back at once (a batch being planned reaches the check after its
planning, long after that call) and waits for the next such moment. A job counts only when its
description names the batch: a parallel file listing while a batch is planned (many new files)
names itself instead. A job of the batch's planning that keeps the batch's description could
still be caught.

Limits: classic PySpark (py4j) sessions; local file-system checkpoints only (a path or a
``file://`` URI): ``attach`` raises ``ValueError`` for ``s3://``, ``hdfs://`` and other remote
URIs, because the lease is written with ``os.replace``.
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

from streamctl.formats.layout import COMMITS_DIR, LEASE_NAME, OFFSETS_DIR, STOP_NAME, STREAMCTL_DIR
from streamctl.inspectors.lease import LEASE_VERSION, now_ms, read_stop_request
from streamctl.inspectors.outputs import write_text_atomic
from streamctl.inspectors.storage import Storage

__all__ = ["Agent", "attach", "write_json_atomic", "now_ms"]

# On Spark 4.2+ the state switch waits for an idle moment seen twice (the trigger loop is in its
# wait, not between two triggers) and at least this long (or a fifth of the interval) before the
# next tick: a trigger that starts between the look and the switch would be interrupted.
TICK_MARGIN_MS = 100

log = logging.getLogger("streamctl.agent")

# StreamExecution's job description (getBatchDescriptionString) ends in "batch = N".
_BATCH_OF_JOB = re.compile(r"(?m)^batch = (\d+)\s*$")


class _Seen(NamedTuple):
    """Where the agent saw the stream thread before the state switch: "idle" (no trigger, the
    newest offsets committed) or "executing" (a job of the newest, uncommitted batch), and the
    newest batch in offsets/ and in commits/ then."""
    kind: str
    position: tuple[Optional[int], Optional[int]]

_TERMINATED_CLASSES = (
    "org.apache.spark.sql.execution.streaming.runtime.TERMINATED$",  # Spark 4.1
    "org.apache.spark.sql.execution.streaming.TERMINATED$",  # Spark 3.x / 4.0
)


def write_json_atomic(folder: str, name: str, doc: dict[str, Any]) -> None:
    """Write ``folder/name`` (JSON, one line) atomically: inspectors/outputs.py write_text_atomic."""
    os.makedirs(folder, exist_ok=True)
    write_text_atomic(os.path.join(folder, name), json.dumps(doc, sort_keys=False) + "\n")


def _newest(folder: str) -> Optional[int]:
    try:
        ids = [int(n) for n in os.listdir(folder) if n.isascii() and n.isdigit()]
    except FileNotFoundError:
        return None
    return max(ids) if ids else None


def _local_root(checkpoint: str | Path) -> str:
    st = Storage.open_local(str(checkpoint))
    if st is None:
        raise ValueError(f"{checkpoint}: the streamctl agent supports local file-system checkpoints only")
    return st.display


class Agent:
    """The lease writer and stop-request watcher of one running query. Create it with `attach`."""

    def __init__(self, query: Any, checkpoint: str | Path, *, heartbeat_s: float = 5.0, ttl_s: float = 30.0,
                 name: Optional[str] = None, poll_s: float = 0.5, spark: Any = None) -> None:
        if heartbeat_s <= 0 or ttl_s <= 0 or poll_s <= 0:
            raise ValueError("heartbeat_s, ttl_s and poll_s must be positive")
        self.query = query
        self.checkpoint = _local_root(checkpoint)
        self.folder = os.path.join(self.checkpoint, STREAMCTL_DIR)
        self.heartbeat_s = float(heartbeat_s)
        self.ttl_ms = int(ttl_s * 1000)
        self.poll_s = min(float(poll_s), self.heartbeat_s)
        self.query_id = str(query.id)
        self.run_id = str(query.runId)
        self._spark = spark
        self._lock = threading.RLock()
        self._stop_event = threading.Event()
        self._terminated = threading.Event()
        self._listener: Any = None
        self._thread: Optional[threading.Thread] = None
        started = now_ms()
        qname = name if name is not None else getattr(query, "name", None)
        self._lease: dict[str, Any] = {
            "version": LEASE_VERSION, "query_id": self.query_id, "run_id": self.run_id,
            "name": qname, "host": socket.gethostname(), "pid": os.getpid(),
            "started_at_ms": started, "heartbeat_ms": started, "expires_at_ms": started + self.ttl_ms,
            "last_batch": None, "state": "running", "released_at_ms": None, "stop_request_ms": None,
        }
        #: how the last requested stop went: None, "graceful" or "fallback"; and whether offsets == commits after it
        self.stop_mode: Optional[str] = None
        self.stopped_clean: Optional[bool] = None

    # -- the lease ------------------------------------------------------------------------
    @property
    def lease(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._lease)

    @property
    def state(self) -> str:
        with self._lock:
            return str(self._lease["state"])

    def _write(self, **changes: Any) -> None:
        with self._lock:
            if self._lease["state"] == "released" and changes.get("state") != "released":
                return  # never resurrect a released lease
            self._lease.update(changes)
            t = now_ms()
            if self._lease["state"] != "released":
                self._lease["heartbeat_ms"] = t
                self._lease["expires_at_ms"] = t + self.ttl_ms
            write_json_atomic(self.folder, LEASE_NAME, self._lease)

    def heartbeat(self, last_batch: Optional[int] = None) -> None:
        """Refresh the lease now (called by the thread and on progress events)."""
        with self._lock:
            if self._lease["state"] == "released":
                return
            changes: dict[str, Any] = {}
            if last_batch is not None and (self._lease["last_batch"] is None or last_batch >= self._lease["last_batch"]):
                changes["last_batch"] = int(last_batch)
            self._write(**changes)

    def release(self) -> None:
        """Mark the lease released (idempotent)."""
        with self._lock:
            if self._lease["state"] == "released":
                return
            self._write(state="released", released_at_ms=now_ms())

    # -- wiring ---------------------------------------------------------------------------
    def _start(self) -> None:
        self._write()
        self._add_listener()
        self._thread = threading.Thread(target=self._run, name=f"streamctl-agent-{self.query_id[:8]}", daemon=True)
        self._thread.start()

    def _session(self) -> Any:
        if self._spark is not None:
            return self._spark
        from pyspark.sql import SparkSession

        return SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()

    def _add_listener(self) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        agent = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                try:
                    p = event.progress
                    if str(p.id) == agent.query_id and str(p.runId) == agent.run_id:
                        agent.heartbeat(p.batchId)
                except Exception:  # never break Spark's listener bus
                    log.exception("streamctl agent: progress event")

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                try:
                    if str(event.id) == agent.query_id and str(event.runId) == agent.run_id:
                        agent._on_terminated()
                except Exception:
                    log.exception("streamctl agent: terminated event")

        self._listener = _Listener()
        self._session().streams.addListener(self._listener)

    def detach(self) -> None:
        """Remove the listener, stop the thread and release the lease (the query itself keeps
        running; streamctl then no longer sees it as live through the lease)."""
        self._stop_event.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=max(5.0, 2 * self.poll_s))
        self._remove_listener()
        self.release()

    def _remove_listener(self) -> None:
        if self._listener is None:
            return
        try:
            self._session().streams.removeListener(self._listener)
        except Exception:  # the session may already be gone
            pass
        self._listener = None

    def _on_terminated(self) -> None:
        self._terminated.set()
        with self._lock:
            stopping = self._lease["state"] == "stopping"
        if not stopping:  # a stop we started releases the lease itself, after checking the files
            self.release()

    # -- the thread -----------------------------------------------------------------------
    def _run(self) -> None:
        last_beat = time.monotonic()
        while not self._stop_event.wait(self.poll_s):
            try:
                if self.state == "released":
                    return
                try:
                    active = bool(self.query.isActive)
                except Exception:  # the session or the JVM is gone
                    active = False
                if not active:
                    self.release()
                    return
                request = self._pending_request()
                if request is not None:
                    self._stop_gracefully(request)
                    return
                if time.monotonic() - last_beat >= self.heartbeat_s:
                    self.heartbeat()
                    last_beat = time.monotonic()
            except Exception:
                log.exception("streamctl agent: heartbeat")

    def _pending_request(self) -> Optional[int]:
        """requested_at_ms of a stop request meant for this run, else None."""
        try:
            req = read_stop_request(Storage.open(self.checkpoint))
        except Exception as exc:  # a malformed request is ignored (and logged), never fatal
            log.warning("streamctl agent: ignoring stop request: %s", exc)
            return None
        if req is None or req.requested_at_ms < self._lease["started_at_ms"] - 1000:
            return None
        return req.requested_at_ms

    def _state_switch(self) -> Optional[tuple[Callable[[], bool], Callable[[], bool]]]:
        """Two calls: one sets StreamExecution.state ACTIVE -> TERMINATED without interrupting
        the stream thread (True when it did: the loop exits after the batch in flight commits),
        one sets it back (True when it did); None when this Spark has no such state. Everything
        but the compare-and-set itself is looked up here, ahead, so that each is one JVM call."""
        try:
            ref = self.query._jsq.streamingQuery().state()  # StreamingQueryWrapper -> MicroBatchExecution
            jlang = self._session()._jvm.java.lang
            for cls in _TERMINATED_CLASSES:
                try:
                    terminated = jlang.Class.forName(cls).getField("MODULE$").get(None)
                    active = jlang.Class.forName(cls.replace("TERMINATED$", "ACTIVE$")).getField("MODULE$").get(None)
                    break
                except Exception:
                    continue
            else:
                return None
        except Exception:
            return None

        def cas(expected: Any, new: Any) -> bool:
            try:
                return bool(ref.compareAndSet(expected, new))  # the case objects are singletons
            except Exception:
                return False
        return (lambda: cas(active, terminated)), (lambda: cas(terminated, active))

    def _thread_done(self) -> bool:
        """Whether the query's stream execution thread has exited (or the terminated event came)."""
        if self._terminated.wait(self.poll_s):
            return True
        try:
            return not bool(self.query._jsq.streamingQuery().queryExecutionThread().isAlive())
        except Exception:  # the JVM is gone, or the field is not reachable: rely on the event
            try:
                return bool(self.query._jsq.streamingQuery().exception() is not None)
            except Exception:
                return True

    def _trigger_active(self) -> Optional[bool]:
        """Whether a trigger is running (None: the status is not reachable)."""
        try:
            return bool(self.query.status.get("isTriggerActive"))
        except Exception:
            return None

    def _position(self) -> tuple[Optional[int], Optional[int]]:
        """The newest batch in offsets/ and in commits/."""
        return (_newest(os.path.join(self.checkpoint, OFFSETS_DIR)),
                _newest(os.path.join(self.checkpoint, COMMITS_DIR)))

    def _trigger_interval_ms(self) -> int:
        """The query's processing-time trigger interval in ms (0: none, or not reachable).
        Spark's ProcessingTimeExecutor starts a trigger at each multiple of it on the driver's
        clock (`nextBatchTime`)."""
        try:
            return max(int(self.query._jsq.streamingQuery().trigger().intervalMs()), 0)
        except Exception:
            return 0

    def _far_from_a_tick(self, interval_ms: int) -> bool:
        """Whether the next trigger of a processing-time loop is far enough away that the state
        switch lands before it: at least a fifth of the interval (at most 100 ms) to go."""
        if interval_ms <= 0:
            return True
        left = interval_ms - int(time.time() * 1000) % interval_ms
        return left >= min(interval_ms // 5, TICK_MARGIN_MS)

    def _interrupts_planned_batches(self) -> bool:
        """Whether this Spark interrupts a batch that starts after the state left ACTIVE (4.2+)."""
        try:
            major, minor = (int(x) for x in str(self._session().version).split(".")[:2])
        except Exception:
            return True  # unknown: waiting for an idle moment is safe on every version
        return (major, minor) >= (4, 2)

    def _running_batch(self, batch: int) -> bool:
        """Whether a Spark job of batch `batch` of this run is active. StreamExecution's job
        group is the run id and its job description ends in ``batch = N``. A job with another
        description does not count: a parallel file listing while the batch is planned sets its
        own ("Listing leaf files ..."), and it runs before the check that interrupts a batch."""
        try:
            sc = self._session().sparkContext
            tracker = sc.statusTracker()
            jobs = set(tracker.getActiveJobsIds()) & set(tracker.getJobIdsForGroup(self.run_id))
            if not jobs:
                return False
            store = sc._jsc.sc().statusStore()
        except Exception:
            return False
        for job in jobs:
            try:
                desc = store.job(job).description()
                text = str(desc.get()) if desc.isDefined() else ""
            except Exception:  # the job left the store meanwhile
                continue
            m = _BATCH_OF_JOB.search(text)
            if m is not None and int(m.group(1)) == batch:
                return True
        return False

    def _wait_until_idle(self, last_beat: float, or_executing: bool = False) -> tuple[Optional[str], Optional[_Seen]]:
        """Wait until no trigger is active and offsets and commits agree, or (`or_executing`) a
        job of the newest batch is active while that batch is planned and not committed
        (heartbeating meanwhile). Returns (None, what was seen) then; ("inactive", None) when the
        query ended, ("withdrawn", None) when the request was withdrawn (the lease is back to
        running), ("detached", None) when the agent is detached."""
        interval = self._trigger_interval_ms() if or_executing else 0
        idle_seen = False  # idle at the previous look too: the loop waits for its next tick
        while not self._stop_event.is_set():
            try:
                if not self.query.isActive:
                    return "inactive", None
            except Exception:
                return "inactive", None
            if self._pending_request() is None:  # the request was withdrawn: keep running
                with self._lock:
                    self._lease["stop_request_ms"] = None
                self._write(state="running")
                return "withdrawn", None
            trigger = self._trigger_active()
            position = self._position()
            idle = trigger is False and position[0] == position[1]
            if idle and (not or_executing or (idle_seen and self._far_from_a_tick(interval))):
                return None, _Seen("idle", position)
            idle_seen = idle
            planned, committed = position
            if (or_executing and planned is not None and (committed is None or planned > committed)
                    and self._running_batch(planned) and self._position() == position):
                return None, _Seen("executing", position)
            if time.monotonic() - last_beat >= self.heartbeat_s:
                self.heartbeat()
                last_beat = time.monotonic()
            time.sleep(0.01)
        return "detached", None

    def _still_between(self, seen: _Seen) -> bool:
        """After the state switch: whether the stream thread was, when it landed, where `seen`
        found it. Idle: no trigger has started since (a trigger that started before the switch
        would be running now; one that starts after it sees TERMINATED and runs nothing) and the
        logs have not moved. Executing: the batch seen is still planned and not committed, so the
        switch landed while it executed (past the check that interrupts a batch)."""
        if seen.kind == "idle" and self._trigger_active() is not False:
            return False
        return self._position() == seen.position

    def _switch_between_batches(self, switch: Callable[[], bool], unswitch: Callable[[], bool],
                                last_beat: float) -> Optional[str]:
        """Spark 4.2+: set TERMINATED only where no batch can be between its offsets and the
        check that interrupts it, and prove it after the switch; where the proof fails (the
        agent's thread was held up and the query moved on), set ACTIVE back at once and wait
        again. Returns None once switched (or once the loop ended, without an error, on a switch
        that was set back too late for it), else why not ("inactive", "withdrawn", "detached",
        "lost": the state was not ACTIVE)."""
        set_back = False
        while True:
            waited, seen = self._wait_until_idle(last_beat, or_executing=True)
            if waited == "inactive" and set_back and self._ended_without_error():
                return None
            if waited is not None or seen is None:
                return waited
            if not switch():
                return "lost"
            if self._still_between(seen):
                return None
            # A loop that ended meanwhile (it saw TERMINATED after its batch) may be left ACTIVE
            # by this; the next look finds it idle and switches it again.
            unswitch()
            set_back = True
            log.info("streamctl agent: the query moved on while the stop was being set; set back, waiting again")
            last_beat = time.monotonic()

    def _ended_without_error(self) -> bool:
        try:
            return self.query.exception() is None
        except Exception:
            return False

    def _stop_gracefully(self, requested_at_ms: int) -> None:
        self._write(state="stopping", stop_request_ms=requested_at_ms)
        last_beat = time.monotonic()
        switches = self._state_switch()
        if switches is not None and self._interrupts_planned_batches():
            waited = self._switch_between_batches(*switches, last_beat)
            if waited == "withdrawn":
                self._run_again()
                return
            switched = waited is None
        else:
            waited = None
            switched = switches is not None and switches[0]()
        if switched:
            self.stop_mode = "graceful"
            # the stream thread finishes the batch in flight, then exits its loop
            # (query.awaitTermination(t) cannot tell: it returns `not isActive`, already true.)
            while not self._thread_done():
                if time.monotonic() - last_beat >= self.heartbeat_s:
                    self.heartbeat()
                    last_beat = time.monotonic()
        elif waited is None or waited == "lost":
            self.stop_mode = "fallback"
            if self._wait_until_idle(last_beat)[0] == "withdrawn":
                self._run_again()
                return
        self._stop_query_beating(last_beat)
        committed = _newest(os.path.join(self.checkpoint, COMMITS_DIR))
        self.stopped_clean = _newest(os.path.join(self.checkpoint, OFFSETS_DIR)) == committed
        if not self.stopped_clean:
            log.warning("streamctl agent: the query stopped with an epoch in flight (Spark replays it on restart)")
        with self._lock:  # the last progress event may still be on Spark's listener bus
            if committed is not None and (self._lease["last_batch"] is None or committed > self._lease["last_batch"]):
                self._lease["last_batch"] = committed
        self.release()
        try:
            os.unlink(os.path.join(self.folder, STOP_NAME))
        except FileNotFoundError:
            pass
        self._remove_listener()

    def _stop_query_beating(self, last_beat: float) -> None:
        """query.stop() (a no-op after a graceful exit; it cleans up the query manager's entry),
        heartbeating while it runs: a stop that takes longer than the lease's ttl must not read as
        a dead driver (the lease left "stopping" and expired)."""
        done = threading.Event()

        def stop() -> None:
            try:
                self.query.stop()
            except Exception:
                log.exception("streamctl agent: query.stop()")
            finally:
                done.set()

        threading.Thread(target=stop, name="streamctl-agent-stop", daemon=True).start()
        while not done.wait(self.poll_s):
            if time.monotonic() - last_beat >= self.heartbeat_s:
                self.heartbeat()
                last_beat = time.monotonic()

    def _run_again(self) -> None:
        self._run()

    def __repr__(self) -> str:
        return f"Agent(query_id={self.query_id!r}, checkpoint={self.checkpoint!r}, state={self.state!r})"


def attach(query: Any, checkpoint: str | Path, *, heartbeat_s: float = 5.0, ttl_s: float = 30.0,
           name: Optional[str] = None, poll_s: float = 0.5, spark: Any = None) -> Agent:
    """Attach the streamctl agent to a started query whose checkpoint is `checkpoint`.

    Writes the lease (state ``running``) before returning, registers a StreamingQueryListener on
    the query's session (``spark``, default: the active session) and starts a daemon thread that
    refreshes the lease every `heartbeat_s` (expiry `ttl_s` after each refresh) and checks for a
    stop request every `poll_s`. Call ``agent.detach()`` to remove it without stopping the query.
    """
    agent = Agent(query, checkpoint, heartbeat_s=heartbeat_s, ttl_s=ttl_s, name=name, poll_s=poll_s, spark=spark)
    agent._start()
    return agent

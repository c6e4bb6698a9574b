"""The demo's orchestration (`streamctl demo`, commands/demo_cmd.py parses its options and renders):
a Tansu broker, the reference pipeline (pipeline/reference.py), its delivery check, streamctl's
inspection of the result as a subprocess, and the faults that break it the way incidents do.

Nothing heavy at import time (the standard library and formats/errors.py): PySpark,
kafka-python and the broker are imported where they run. Lines for the operator go through the
`Say` callbacks the command passes in.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional, Protocol

from streamctl.formats.checksum import crc_name
from streamctl.formats.errors import UsageError
from streamctl.formats.layout import COMMITS_DIR, LEASE_FILE, OFFSETS_DIR, STATE_DIR
from streamctl.formats.metadata import query_id_of

FAULTS: dict[str, str] = {
    "sink-ahead": "restore an older copy of the file sink's checkpoint: its newest offsets/commits batches "
                  "(with their hidden .crc files) are gone, the sink still has them",
    "lost-state-file": "delete a state file of the stateful (Delta) query that its restart needs",
    "commit-ahead": "delete the newest offsets file (and its .crc) of the coordinated sink's checkpoint",
    "stale-lease": "write an agent lease whose heartbeat is long past into the stateful query's checkpoint "
                   "(a driver that died)",
}


class BrokerUnavailable(RuntimeError):
    """The Tansu broker could not start (or kafka-python is missing): the demo cannot run."""


class Progress(Protocol):
    def advance(self, _item: Any = None) -> None: ...


class Say(Protocol):
    """Where the demo's lines go: `out` (stdout: what it found), `err` (stderr: what it is doing),
    `progress(label, total)` a context manager with `advance()`."""

    def out(self, line: str = "") -> None: ...

    def err(self, line: str) -> None: ...

    def progress(self, label: str, total: int) -> ContextManager[Progress]: ...


@dataclass(frozen=True)
class DemoRequest:
    root: Path  # a new or empty folder (`DemoRequest.of` makes it)
    events: int = 200
    batches: int = 5
    fault: Optional[str] = None
    keep_broker: bool = False
    iceberg: bool = False

    @classmethod
    def of(cls, directory: Optional[Path], events: int, batches: int, fault: Optional[str], keep_broker: bool,
           iceberg: bool) -> DemoRequest:
        """The request the options ask for, its folder made; UsageError names the bad option."""
        if iceberg:
            import importlib.util

            if importlib.util.find_spec("pyiceberg") is None:
                raise UsageError("--iceberg needs pyiceberg: pip install 'streamctl[iceberg]'")
        if fault is not None and fault not in fault_names():
            raise UsageError(f"unknown fault {fault!r}; known: {', '.join(fault_names())}")
        if events < 1 or events > 1_000_000:
            raise UsageError("invalid value for --events: must be 1..1000000")
        if batches < 1 or batches > events:
            raise UsageError("invalid value for --batches: must be 1..--events")
        if directory is not None:
            root = directory.expanduser().resolve()
            if root.exists() and (not root.is_dir() or any(root.iterdir())):
                raise UsageError(f"--dir {root}: must be a new or empty folder")
            root.mkdir(parents=True, exist_ok=True)
        else:
            import tempfile

            root = Path(tempfile.mkdtemp(prefix="streamctl-demo-")).resolve()
        return cls(root, events, batches, fault, keep_broker, iceberg)


def _has_agent() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("streamctl.pipeline.agent") is not None
    except (ImportError, ValueError):
        return False


def fault_names() -> list[str]:
    return [n for n in FAULTS if n != "stale-lease" or _has_agent()]


# --------------------------------------------------------------------------- the broker


def start_broker(log_path: Path) -> Any:
    """A running Tansu broker (streamctl.pipeline.broker); BrokerUnavailable when it cannot start."""
    from streamctl.pipeline.broker import TansuProcess, resolve_binary

    try:
        import kafka  # noqa: F401 - kafka-python, needed by the readiness probe
    except ImportError as exc:
        raise BrokerUnavailable(f"the demo needs kafka-python (pip install 'streamctl[demo]'): {exc}") from None
    try:
        binary = resolve_binary()
    except RuntimeError as exc:
        raise BrokerUnavailable(str(exc)) from None
    last: Optional[BaseException] = None
    for _attempt in range(3):  # the free port may be taken between probe and bind
        broker = TansuProcess(binary, log_path)
        try:
            broker.start()
            return broker
        except (RuntimeError, TimeoutError, OSError) as exc:
            last = exc
    raise BrokerUnavailable(f"could not start the Tansu broker: {last}")


# --------------------------------------------------------------------------- faults


def _drop_batch(folder: Path, batch: int) -> list[str]:
    gone = []
    for name in (str(batch), crc_name(str(batch))):
        p = folder / name
        if p.exists():
            p.unlink()
            gone.append(str(p))
    return gone


def _newest(folder: Path) -> Optional[int]:
    ids = [int(n) for n in os.listdir(folder) if n.isdigit()] if folder.is_dir() else []
    return max(ids) if ids else None


def _fault_sink_ahead(root: Path) -> list[str]:
    ckpt = root / "file_sink" / "checkpoint"
    newest = _newest(ckpt / COMMITS_DIR)
    if newest is None or newest < 1:
        raise RuntimeError("the file sink's checkpoint has fewer than two batches")
    drop = min(2, newest)  # keep at least batch 0
    gone: list[str] = []
    for b in range(newest - drop + 1, newest + 1):
        gone += _drop_batch(ckpt / OFFSETS_DIR, b) + _drop_batch(ckpt / COMMITS_DIR, b)
    return gone


def _fault_commit_ahead(root: Path) -> list[str]:
    ckpt = root / "coordinated" / "checkpoint"
    newest = _newest(ckpt / OFFSETS_DIR)
    if newest is None:
        raise RuntimeError("the coordinated sink's checkpoint has no offsets")
    return _drop_batch(ckpt / OFFSETS_DIR, newest)


def _fault_lost_state_file(root: Path) -> list[str]:
    ckpt = root / "delta" / "checkpoint"
    committed = _newest(ckpt / COMMITS_DIR)
    if committed is None:
        raise RuntimeError("the stateful checkpoint has no commits")
    version = committed + 1  # the state version a restart loads
    store = ckpt / STATE_DIR / "0" / "0"
    victims = sorted(p for p in store.iterdir() if p.is_file() and
                     (p.name.startswith(f"{version}_") or p.name.startswith(f"{version}.") or
                      p.name.startswith(f".{version}_") or p.name.startswith(f".{version}.")))
    if not victims:
        raise RuntimeError(f"{store}: no files of state version {version}")
    for p in victims:
        p.unlink()
    return [str(p) for p in victims]


def _fault_stale_lease(root: Path) -> list[str]:
    """A lease left by a driver that died 10 minutes ago (the agent's own format: inspectors/lease.py)."""
    import socket

    from streamctl.inspectors.lease import LEASE_VERSION, Lease
    from streamctl.pipeline.agent import write_json_atomic

    ckpt = root / "delta" / "checkpoint"
    qid = query_id_of(ckpt)
    now = int(time.time() * 1000)
    started, beat = now - 20 * 60_000, now - 10 * 60_000
    lease = Lease(version=LEASE_VERSION, query_id=qid, run_id="00000000-0000-0000-0000-000000000000",
                  name="demo_delta", host=socket.gethostname(), pid=2 ** 22 + 1, started_at_ms=started,
                  heartbeat_ms=beat, expires_at_ms=beat + 30_000, last_batch=_newest(ckpt / COMMITS_DIR),
                  state="running", released_at_ms=None, stop_request_ms=None)
    lease_file = ckpt / LEASE_FILE
    write_json_atomic(str(lease_file.parent), lease_file.name, lease.to_json())
    return [str(lease_file)]


# the query each fault damages: `diagnose` on it ends the fault's output with the exact next command
_FAULT_QUERY = {"sink-ahead": "file_sink", "lost-state-file": "delta", "commit-ahead": "coordinated",
                "stale-lease": "delta"}

_FAULT_FUNCS: dict[str, Callable[[Path], list[str]]] = {
    "sink-ahead": _fault_sink_ahead,
    "lost-state-file": _fault_lost_state_file,
    "commit-ahead": _fault_commit_ahead,
    "stale-lease": _fault_stale_lease,
}


# --------------------------------------------------------------------------- inspection


def _streamctl_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "streamctl"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "streamctl.cli.app"]


def _inspect(say: Say, args: list[str], quiet_period: Optional[str] = "0") -> int:
    """Run `streamctl ARGS` in a subprocess (its stdout and stderr go straight to our stdout); its exit code."""
    say.out("$ " + " ".join(["streamctl", *args]))
    env = dict(os.environ)
    if quiet_period is not None:  # the demo's checkpoints are seconds old, but nothing runs any more
        env["STREAMCTL_QUIET_PERIOD"] = quiet_period
    try:
        code = subprocess.run(_streamctl_cmd() + args, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                              timeout=300).returncode
    except (OSError, subprocess.SubprocessError) as exc:
        say.out(f"(could not run: {exc})")
        return -1
    say.out(f"(exit code {code})")
    say.out()
    return code


def _epochs_args(root: Path, bootstrap: Optional[str]) -> list[str]:
    from streamctl.pipeline.reference import ICEBERG, QUERIES, layout

    queries = QUERIES + ((ICEBERG,) if layout(root, ICEBERG)[0].exists() else ())
    args = ["inspect", "epochs", *[str(layout(root, q)[0]) for q in queries]]
    for q in queries:
        args += ["--sink", str(layout(root, q)[1])]
    if bootstrap:
        args += ["--bootstrap", bootstrap]
    return args


def _print_delivery(say: Say, report: dict[str, Any]) -> None:
    say.out("Delivery check (read from the sinks, outside Spark):")
    for name, label in (("file_sink", "file sink (parquet, files in _spark_metadata)"),
                        ("coordinated", "coordinated sink (files in _commits/*.json)"),
                        ("delta", "Delta table (aggregate per key)"),
                        ("iceberg", "Iceberg table (snapshots of the current ancestry)")):
        if name not in report:
            continue
        r = report[name]
        if "error" in r:
            say.out(f"  {label}: FAILED: {r['error']}")
        elif name == "delta":
            say.out(f"  {label}: {'ok' if r['ok'] else 'FAILED'}: {r['keys']} keys, counts sum to {r['count']} "
                    f"(want {report['events']}), table version {r['table_version']}"
                    + (f", wrong keys {r['wrong_keys']}" if r["wrong_keys"] else ""))
        else:
            extra = (f"{r['files']} files" if name == "file_sink" else f"{r['commit_records']} commit records"
                     if name == "coordinated" else f"snapshot {r['snapshot_id']}")
            say.out(f"  {label}: {'ok' if r['ok'] else 'FAILED'}: {r['rows']} rows from {extra}, "
                    f"{r['distinct']} distinct of {report['events']} events, missing {r['missing']}, "
                    f"duplicates {r['duplicates']}")
    say.out(f"delivery check: {'PASSED - every event exactly once' if report['ok'] else 'FAILED'}")
    say.out()


def stop_spark(spark: Any) -> None:
    """Stop every query, the session and its JVM now rather than at interpreter exit (best effort)."""
    try:
        for q in list(spark.streams.active):
            try:
                q.stop()
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        spark.stop()
    except Exception:  # noqa: BLE001
        pass
    try:
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if gateway is not None:
            gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    except Exception:  # noqa: BLE001
        pass


# --------------------------------------------------------------------------- the run


@dataclass
class Running:
    """What the demo started, for the command to stop at the end (also on Ctrl-C)."""
    broker: Any = None
    spark: Any = None
    finished: bool = False

    def stop(self, keep_broker: bool, say: Say) -> None:
        if self.spark is not None:
            stop_spark(self.spark)
            self.spark = None
        if self.broker is not None:
            if keep_broker and self.finished and self.broker.proc is not None:
                say.err(f"broker left running on {self.broker.bootstrap} (pid {self.broker.proc.pid}); "
                        f"stop it with: kill {self.broker.proc.pid}")
            else:
                self.broker.stop()
            self.broker = None


def run(request: DemoRequest, say: Say, running: Running, restore_sigint: Callable[[], object]) -> bool:
    """The whole demo; True when the delivery check passed. What it starts is in `running`
    (the caller stops it); `restore_sigint` puts the caller's SIGINT handler back after PySpark
    installs its own."""
    root, t_start = request.root, time.monotonic()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    say.err(f"demo folder: {root}")
    running.broker = broker = start_broker(root / "broker.log")
    bootstrap, topic = broker.bootstrap, "demo-events"
    say.err(f"Kafka broker (Tansu) on {bootstrap}, pid {broker.proc.pid if broker.proc else '?'}")

    from streamctl.pipeline.reference import (
        ICEBERG,
        QUERIES,
        create_topic,
        delivery_check,
        produce_events,
        run_reference,
    )
    from streamctl.pipeline.session import get_spark

    create_topic(bootstrap, topic)
    say.err(f"producing {request.events} events to topic {topic} (3 partitions), one record per request")
    with say.progress("producing", request.events) as bar:
        produced = produce_events(bootstrap, topic, request.events, on_sent=bar.advance)

    say.err("starting Spark (local[2]) ...")
    running.spark = get_spark("streamctl-demo")
    # PySpark's context installs its own SIGINT handler (it cancels jobs, and the interrupted
    # py4j call then surfaces as a Py4JError): put ours back so Ctrl-C is Ctrl-C.
    restore_sigint()

    def on_query(name: str, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            say.err(f"query {name}: running until caught up ({info['checkpoint']}) ...")
        else:
            say.err(f"query {name}: caught up at batch {info['last_batch']} in {info['seconds']}s, "
                    f"stopped via {info['stop']}")

    result = run_reference(running.spark, root, bootstrap, topic, batches=request.batches, events=request.events,
                           on_query=on_query, queries=QUERIES + ((ICEBERG,) if request.iceberg else ()))
    stop_spark(running.spark)
    running.spark = None

    say.out(f"Reference pipeline under {root} (topic {topic} on {bootstrap}, {request.events} events, "
            f"maxOffsetsPerTrigger {result['max_offsets_per_trigger']}):")
    for name, info in result["queries"].items():
        say.out(f"  {name:12s} checkpoint {info['checkpoint']}")
        say.out(f"  {'':12s} output     {info['output']}   (last batch {info['last_batch']}, stop: {info['stop']})")
    say.out()
    report = delivery_check(root, produced)
    _print_delivery(say, report)
    _inspect(say, _epochs_args(root, bootstrap))
    if request.fault is not None:
        _show_fault(say, root, request.fault, bootstrap)
    _next_steps(say, root, bootstrap, request.keep_broker)
    say.err(f"demo finished in {time.monotonic() - t_start:.0f}s")
    running.finished = True
    return bool(report["ok"])


def _show_fault(say: Say, root: Path, fault: str, bootstrap: str) -> None:
    say.out(f"Fault {fault}: {FAULTS[fault]}")
    for path in _FAULT_FUNCS[fault](root):
        say.out(f"  changed: {path}")
    say.out()
    quiet: Optional[str] = None if fault == "stale-lease" else "0"
    _inspect(say, _epochs_args(root, bootstrap), quiet_period=quiet)
    if fault == "lost-state-file":
        _inspect(say, ["inspect", "state", str(root / "delta" / "checkpoint")])
    if fault == "stale-lease":  # refuses (exit 4): the lease is stale, the driver is gone
        _inspect(say, ["stop", str(root / "delta" / "checkpoint"), "--timeout", "0"], quiet_period=None)
    if fault == "sink-ahead":
        fs = root / "file_sink"
        _inspect(say, ["inspect", "writers", str(fs / "checkpoint"), "--sink", str(fs / "output")])
    hit = root / _FAULT_QUERY[fault]
    say.out("What to do about it (diagnose ends with the exact next command):")
    _inspect(say, ["diagnose", str(hit / "checkpoint"), "--sink", str(hit / "output")], quiet_period=quiet)


def _next_steps(say: Say, root: Path, bootstrap: str, keep_broker: bool) -> None:
    ck = {q: root / q / "checkpoint" for q in ("file_sink", "coordinated", "delta")}
    say.out("Next, try:")
    say.out(f"  streamctl inspect writers {ck['coordinated']} --sink {root / 'coordinated' / 'output'}")
    say.out(f"  streamctl inspect sink {root / 'delta' / 'output'}")
    say.out(f"  streamctl inspect state {ck['delta']}")
    if keep_broker:
        say.out(f"  streamctl inspect kafka {ck['file_sink']} --bootstrap {bootstrap}")
        say.out(f"  streamctl kafka commit-offsets {ck['file_sink']} --group demo-file-sink --bootstrap {bootstrap}")
    else:
        say.out("  streamctl demo --keep-broker   (keeps the broker up for inspect kafka / kafka commit-offsets)")
    say.out(f"  streamctl kafka starting-offsets {ck['file_sink']}")
    say.out(f"  streamctl demo --fault sink-ahead   (also: {', '.join(n for n in fault_names() if n != 'sink-ahead')})")

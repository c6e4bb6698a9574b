"""Execution guarantees of `streamctl align`: crash at every journal step then
`--resume` / `--undo`, the lock (concurrent runs, a stale lock, `--break-lock`), refusal under a
live query, `--undo` refusing after Spark ran again, bad input, plan-only changing nothing.

Real PySpark where a delivery check is involved (tests/helpers/align_pipeline.py, kind "file"): one
pipeline is built per module and two snapshots of its whole folder (input + checkpoint + output)
are kept aside. The file sink's log holds absolute paths, so a snapshot is always restored IN
PLACE (same path), never used from a copy at another path.

The fault ("sink ahead"): the newest WAL entry `offsets/4`, and `commits/4`, `commits/3` (with
their `.N.crc`) are deleted, while the file sink committed batch 4. `align` rolls forward to 3
(writes `commits/3`) and rolls the sink back to 3 (moves `_spark_metadata/4` and its data file):
a short plan of both step kinds.

The CLI runs as a subprocess (the console script next to sys.executable) so that the test hooks
STREAMCTL_TEST_CRASH_AFTER / STREAMCTL_TEST_STEP_DELAY can end or slow a real process.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from helpers import align_pipeline
from helpers.paths import SPARK35, copy_spark35
from streamctl.operations.journal import CRASH_EXIT

STREAMCTL = Path(sys.executable).parent / "streamctl"
FIXTURE_CKPT = SPARK35 / "agg_hdfs" / "checkpoint"
INPUT_FILES = 5
spark_mark = pytest.mark.spark


ap = align_pipeline


# --------------------------------------------------------------------------- helpers


class Run:
    def __init__(self, args: list[str], code: int, stdout: str, stderr: str) -> None:
        self.args, self.code, self.stdout, self.stderr = args, code, stdout, stderr

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __repr__(self) -> str:
        return (f"Run({' '.join(self.args[1:])!r}, code={self.code}, stdout={self.stdout[-1500:]!r}, "
                f"stderr={self.stderr[-1500:]!r})")


def _env(home: Path, crash_after: Optional[int] = None, delay: Optional[float] = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STREAMCTL_") and k not in ("PYTHONSAFEPATH",)}
    env.update(STREAMCTL_QUIET_PERIOD="0", NO_COLOR="1", COLUMNS="200", HOME=str(home), XDG_CONFIG_HOME=str(home))
    if crash_after is not None:
        env["STREAMCTL_TEST_CRASH_AFTER"] = str(crash_after)
    if delay is not None:
        env["STREAMCTL_TEST_STEP_DELAY"] = str(delay)
    return env


class Cli:
    """`streamctl ...` as a real process (the console script of this venv)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)

    def argv(self, *args: str) -> list[str]:
        return [str(STREAMCTL), *args]

    def __call__(self, *args: str, crash_after: Optional[int] = None, delay: Optional[float] = None,
                 timeout: float = 120) -> Run:
        argv = self.argv(*args)
        p = subprocess.run(argv, env=_env(self.home, crash_after, delay), capture_output=True, text=True, timeout=timeout)
        return Run(argv, p.returncode, p.stdout, p.stderr)

    def popen(self, *args: str, delay: Optional[float] = None) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*args), env=_env(self.home, delay=delay), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


def digests(base: Path, skip_streamctl: bool = True) -> dict[str, str]:
    """relative path -> sha256 of every file below base (symlinks as their target text)."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(base):
        rel_dir = Path(dirpath).relative_to(base)
        if skip_streamctl and "_streamctl" in rel_dir.parts:
            dirs[:] = []
            continue
        if skip_streamctl:
            dirs[:] = [d for d in dirs if d != "_streamctl"]
        for f in files:
            p = Path(dirpath) / f
            if p.is_symlink():
                out[str(p.relative_to(base))] = "link:" + os.readlink(p)
            else:
                out[str(p.relative_to(base))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    gone = sorted(set(a) - set(b))
    new = sorted(set(b) - set(a))
    changed = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    return f"gone {gone}, new {new}, changed {changed}"


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected a one-line error, got {stderr!r}"
    assert "Traceback" not in stderr, stderr
    return lines[0]


def inject_sink_ahead(ckpt: Path) -> None:
    for rel in ("offsets/4", "offsets/.4.crc", "commits/4", "commits/.4.crc", "commits/3", "commits/.3.crc"):
        (ckpt / rel).unlink()


def backups_of(ckpt: Path) -> list[Path]:
    folder = ckpt / "_streamctl" / "backups"
    return sorted(folder.iterdir()) if folder.exists() else []


def journal_lines(backup: Path) -> list[dict[str, Any]]:
    out = []
    for line in (backup / "journal.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"event": "<torn>"})
    return out


class Lab(ap.Lab):
    """The module's pipeline and its two snapshots, restorable in place."""

    def restore(self, name: str) -> None:
        """Put the saved folder back at the SAME path (the sink log holds absolute paths)."""
        self.put_back(name)
        self.p.files = INPUT_FILES

    def restart(self, more: int = 2) -> dict[str, Any]:
        """The real query again, with `more` new input files; the delivery check of the result."""
        self.p.add_input(self.p.files, more)
        self.p.run()
        return self.p.delivery()


@pytest.fixture(scope="module")
def lab(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    root = tmp_path_factory.mktemp("align-ops")
    p = ap.build(root / "pipe", "file", spark, INPUT_FILES)
    assert sorted(int(n) for n in os.listdir(p.checkpoint / "commits") if n.isdigit()) == [0, 1, 2, 3, 4]
    lab = Lab(p, root / "snapshots")
    lab.save("clean")
    inject_sink_ahead(p.checkpoint)
    lab.save("faulty")
    return lab


@pytest.fixture(scope="module")
def run_cli(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    return Cli(tmp_path_factory.mktemp("cli-home"))


@pytest.fixture(scope="module")
def journal_records(lab: Lab, run_cli: Cli) -> int:
    """R: the number of journal records of one uninterrupted `align --execute` of the fault."""
    lab.restore("faulty")
    r = run_cli(*lab.align_args("--execute", "--json"))
    assert r.code == 0, r
    doc = r.json()
    assert doc["verified"] is True, doc
    n = len(journal_lines(Path(doc["backup"])))
    lab.restore("faulty")
    return n


PROMISED = {"planned": 3, "committed": 3, "sink_epoch": 3, "verdict": "aligned"}


def _positions(after: dict[str, Any]) -> dict[str, Any]:
    return {k: after.get(k) for k in PROMISED}


# --------------------------------------------------------------------------- 1. crash at every journal step


def crashed_align(lab: Lab, run_cli: Cli, n: int, failures: list[str]) -> Optional[Path]:
    """The faulty pipeline put back, then `align --execute` crashed right after journal record
    `n`: its backup folder; None (the failure noted) when the run did not crash there."""
    lab.restore("faulty")
    r = run_cli(*lab.align_args("--execute"), crash_after=n)
    if r.code != CRASH_EXIT:
        failures.append(f"N={n}: crash run exited {r.code}, expected {CRASH_EXIT}: {r!r}")
        return None
    (backup,) = backups_of(lab.ckpt)
    return backup


@spark_mark
def test_crash_at_every_step_then_resume_delivers_exactly_once(lab: Lab, run_cli: Cli, journal_records: int) -> None:
    R = journal_records
    assert R >= 6, R
    failures: list[str] = []
    kinds: dict[int, str] = {}
    timings: list[float] = []
    for n in range(1, R):
        t0 = time.monotonic()
        backup = crashed_align(lab, run_cli, n, failures)
        if backup is None:
            continue
        recs = journal_lines(backup)
        kinds[n] = recs[-1].get("event", "?") + (f":{recs[-1].get('action')}" if recs[-1].get("action") else "")
        if len(recs) != n:
            failures.append(f"N={n}: journal holds {len(recs)} records after a crash after record {n}")
        if not (lab.ckpt / "_streamctl" / "lock.json").exists():
            failures.append(f"N={n}: the crashed run left no lock")
        r = run_cli("align", "--resume", str(backup), "--json")
        if r.code != 0:
            failures.append(f"N={n}: --resume exited {r.code}: {r!r}")
            continue
        doc = r.json()
        if doc.get("verified") is not True or _positions(doc.get("after", {})) != PROMISED or doc.get("resumed") is not True:
            failures.append(f"N={n}: --resume result {doc.get('verified')} {doc.get('after')}, promised {PROMISED}")
        if (lab.ckpt / "_streamctl" / "lock.json").exists():
            failures.append(f"N={n}: --resume kept the lock")
        if recs and [x.get("event") for x in journal_lines(backup)][-1] != "verified":
            failures.append(f"N={n}: the journal does not end with 'verified' after --resume")
        try:
            d = lab.restart()
        except Exception as exc:  # noqa: BLE001 - report every N, not only the first
            failures.append(f"N={n}: the Spark restart failed: {type(exc).__name__}: {str(exc)[:500]}")
            continue
        if not d["ok"]:
            failures.append(f"N={n}: delivery check failed after crash + resume: {d}")
        timings.append(time.monotonic() - t0)
    print(f"R={R}; last record per N: {kinds}; seconds per N: {[round(t, 1) for t in timings]}")
    assert not failures, "\n".join(failures)


@spark_mark
def test_crash_at_every_step_then_undo_restores_exact_bytes(lab: Lab, run_cli: Cli, journal_records: int) -> None:
    R = journal_records
    lab.restore("faulty")
    want = digests(lab.base)
    failures: list[str] = []
    for n in range(1, R):
        backup = crashed_align(lab, run_cli, n, failures)
        if backup is None:
            continue
        r = run_cli("align", "--undo", str(backup), "--json")
        if r.code != 0:
            failures.append(f"N={n}: --undo exited {r.code}: {r!r}")
            continue
        if r.json().get("verified") is not True:
            failures.append(f"N={n}: --undo not verified: {r.stdout}")
        got = digests(lab.base)
        if got != want:
            failures.append(f"N={n}: after --undo the pipeline folder differs from before the operation: {diff(want, got)}")
        if (lab.ckpt / "_streamctl" / "lock.json").exists():
            failures.append(f"N={n}: --undo kept the lock")
    assert not failures, "\n".join(failures)

    # after an undo of a crashed run, a fresh align runs and Spark delivers exactly once
    n = R - 2
    lab.restore("faulty")
    assert run_cli(*lab.align_args("--execute"), crash_after=n).code == CRASH_EXIT
    (backup,) = backups_of(lab.ckpt)
    r = run_cli("align", "--undo", str(backup))
    assert r.code == 0, r
    assert digests(lab.base) == want
    r = run_cli(*lab.align_args("--execute", "--json"))
    assert r.code == 0, r
    assert r.json()["verified"] is True and _positions(r.json()["after"]) == PROMISED, r
    d = lab.restart()
    assert d["ok"], d


# --------------------------------------------------------------------------- 2. two runs at once


def _journal_done(ckpt: Path, step: int) -> bool:
    for b in backups_of(ckpt):
        if (b / "journal.jsonl").exists() and any(r.get("event") == "done" and r.get("step") == step
                                                  for r in journal_lines(b)):
            return True
    return False


@spark_mark
@pytest.mark.parametrize("start_second", ["lock_taken", "mid_operation"])
def test_concurrent_executes_one_wins_one_refused(lab: Lab, run_cli: Cli, start_second: str) -> None:
    """Two `align --execute` at once: the first (slowed by STREAMCTL_TEST_STEP_DELAY) holds the
    lock; the second must refuse (exit 4) naming the holder. `lock_taken`: the second starts as
    soon as lock.json exists; `mid_operation`: once the first has moved `_spark_metadata/4` (step
    3 of 6), when the half-done files happen to look aligned."""
    lab.restore("faulty")
    lock = lab.ckpt / "_streamctl" / "lock.json"
    # mid_operation starts the second run only once a done record is group-committed (about 2 s
    # in): the first run's slower steps leave it time to start a Python process on a busy machine
    first = run_cli.popen(*lab.align_args("--execute", "--json"), delay=0.5 if start_second == "lock_taken" else 1.5)
    try:
        deadline = time.monotonic() + 60
        while not lock.exists() or (start_second == "mid_operation" and not _journal_done(lab.ckpt, 2)):
            assert first.poll() is None, (first.returncode, first.communicate())
            assert time.monotonic() < deadline, f"the first run never reached {start_second}"
            time.sleep(0.02)
        while True:  # lock.json is created, then written: wait for its content
            try:
                holder = json.loads(lock.read_text())
                break
            except ValueError:
                assert time.monotonic() < deadline, "lock.json never got its content"
                time.sleep(0.02)
        second = run_cli(*lab.align_args("--execute", "--json"))
        still_running = first.poll() is None
        out1, err1 = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, (first.returncode, out1, err1)
    assert still_running, "the first run ended before the second finished: no overlap (slow machine?)"
    assert second.code == 4, (f"the second run exited {second.code} while {lock} was held by pid {first.pid} "
                              f"(expected 4 naming the holder): {second!r}")
    line = one_line(second.stderr)
    assert "lock.json" in line and f"pid {first.pid}" in line and str(holder["host"]) in line, line
    assert holder["pid"] == first.pid
    doc = json.loads(out1)
    assert doc["verified"] is True and _positions(doc["after"]) == PROMISED, doc
    assert len(backups_of(lab.ckpt)) == 1, backups_of(lab.ckpt)  # the refused run left no backup folder
    assert not lock.exists()
    r = run_cli("inspect", "epochs", str(lab.ckpt), "--sink", str(lab.out))
    assert r.code == 0, r  # aligned
    d = lab.restart()
    assert d["ok"], d


# --------------------------------------------------------------------------- 3. a stale lock


@spark_mark
def test_stale_lock_after_crash_needs_break_lock(lab: Lab, run_cli: Cli) -> None:
    lab.restore("faulty")
    r = run_cli(*lab.align_args("--execute"), crash_after=3)
    assert r.code == CRASH_EXIT, r
    lock = lab.ckpt / "_streamctl" / "lock.json"
    assert lock.exists()
    owner = json.loads(lock.read_text())
    assert owner["host"] == socket.gethostname()
    before = digests(lab.base, skip_streamctl=False)
    time.sleep(1.1)  # an age of at least one second
    r = run_cli(*lab.align_args("--execute"))
    assert r.code == 4, r
    line = one_line(r.stderr)
    assert f"pid {owner['pid']}" in line and owner["host"] in line and "--break-lock" in line, line
    assert " s ago" in line, line  # its age
    assert digests(lab.base, skip_streamctl=False) == before, "a refused run changed files"
    r = run_cli(*lab.align_args("--execute", "--break-lock", "--json"))
    assert r.code == 0, r
    assert r.json()["verified"] is True and _positions(r.json()["after"]) == PROMISED, r
    assert not lock.exists()
    d = lab.restart()
    assert d["ok"], d


# --------------------------------------------------------------------------- 4. a live query


def _start_live(p: Any) -> Any:
    """The pipeline's query with a processing-time trigger (it keeps running). The session is
    shared: its confs are put back once the query has started."""
    with p.confs():
        return p.writer().trigger(processingTime="500 milliseconds").start()


@spark_mark
def test_live_query_refuses_and_changes_nothing(lab: Lab, run_cli: Cli, tree_snapshot: Callable[[Path], Any]) -> None:
    from streamctl.inspectors.lease import lease_status, read_lease
    from streamctl.inspectors.storage import Storage
    from streamctl.pipeline.agent import attach, now_ms

    lab.restore("clean")  # every input file already committed: the running query writes nothing new
    q = _start_live(lab.p)
    agent = None
    try:
        agent = attach(q, lab.ckpt, heartbeat_s=0.5, ttl_s=30, spark=lab.p.spark)
        st = Storage.open(str(lab.ckpt))
        deadline = time.monotonic() + 60
        while True:
            lease = read_lease(st)
            if lease is not None and lease_status(lease, now_ms()) == "live" and q.lastProgress is not None:
                break
            assert q.isActive, q.exception()
            assert time.monotonic() < deadline, "no live lease"
            time.sleep(0.1)
        time.sleep(1.0)
        inject_sink_ahead(lab.ckpt)  # a fault align would repair, were the query not running
        before = digests(lab.base)
        before_meta = {k: v for k, v in tree_snapshot(lab.base).items() if "_streamctl" not in Path(k).parts}
        r = run_cli(*lab.align_args("--execute"))
        after = digests(lab.base)
        after_meta = {k: v for k, v in tree_snapshot(lab.base).items() if "_streamctl" not in Path(k).parts}
        assert q.isActive
    finally:
        q.stop()
        if agent is not None:
            agent.detach()
    assert r.code == 4, r
    line = one_line(r.stderr)
    assert "lease.json" in line, line
    assert "LIVE_QUERY" in line, f"the refusal does not name the finding code LIVE_QUERY: {line!r}"
    assert after == before, diff(before, after)
    assert after_meta == before_meta, diff(before_meta, after_meta)
    assert not (lab.ckpt / "_streamctl" / "lock.json").exists()
    assert backups_of(lab.ckpt) == []


# --------------------------------------------------------------------------- 5. undo after Spark ran again


@spark_mark
def test_undo_refuses_after_spark_ran_again(lab: Lab, run_cli: Cli, tree_snapshot: Callable[[Path], Any]) -> None:
    lab.restore("faulty")
    r = run_cli(*lab.align_args("--execute", "--json"))
    assert r.code == 0, r
    backup = r.json()["backup"]
    d = lab.restart()
    assert d["ok"], d
    before = digests(lab.base, skip_streamctl=False)
    before_meta = tree_snapshot(lab.base)
    r = run_cli("align", "--undo", backup)
    assert r.code == 4, r
    line = one_line(r.stderr)
    assert "undo refused" in line and "changed" in line, line
    assert digests(lab.base, skip_streamctl=False) == before
    assert tree_snapshot(lab.base) == before_meta
    assert lab.p.delivery()["ok"]


# --------------------------------------------------------------------------- 6. bad input


@pytest.fixture
def fixture_ckpt(tmp_path: Path) -> Path:
    dest = tmp_path / "agg_hdfs" / "checkpoint"
    copy_spark35(FIXTURE_CKPT, dest)
    return dest


def test_bad_input(fixture_ckpt: Path, tmp_path: Path, run_cli: Cli) -> None:
    before = digests(fixture_ckpt.parent, skip_streamctl=False)
    empty = tmp_path / "not-a-backup"
    empty.mkdir()

    r = run_cli("align", "--resume", str(empty))
    assert r.code == 3, r
    line = one_line(r.stderr)
    assert str(empty / "plan.json") in line, line
    r = run_cli("align", "--undo", str(empty / "journal.jsonl"))
    assert r.code == 3, r
    assert str(empty / "plan.json") in one_line(r.stderr)

    bad = tmp_path / "bad-plan"
    bad.mkdir()
    (bad / "plan.json").write_text('{"command": "align", ')
    r = run_cli("align", "--resume", str(bad))
    assert r.code == 3, r
    assert str(bad / "plan.json") in one_line(r.stderr)

    r = run_cli("align", str(fixture_ckpt), "--to", "999")
    assert r.code == 4, r
    assert "999" in one_line(r.stderr)
    r = run_cli("align", str(fixture_ckpt), "--to", "999", "--execute")
    assert r.code == 4, r
    one_line(r.stderr)
    r = run_cli("align", str(fixture_ckpt), "--to", "abc")
    assert r.code == 2, r
    assert "Traceback" not in r.stderr and "abc" in r.stderr
    r = run_cli("align", str(fixture_ckpt), "--resume", str(empty))
    assert r.code == 2, r
    assert "Traceback" not in r.stderr
    r = run_cli("align", "--resume", str(empty), "--undo", str(empty))
    assert r.code == 2, r
    assert "Traceback" not in r.stderr
    r = run_cli("align")
    assert r.code == 2, r
    assert "Traceback" not in r.stderr
    assert digests(fixture_ckpt.parent, skip_streamctl=False) == before
    assert os.listdir(empty) == []


@spark_mark
@pytest.mark.parametrize("spelling", ["absolute", "dotdot"])
def test_sink_log_naming_a_file_outside_the_sink_is_never_touched(lab: Lab, run_cli: Cli, tmp_path: Path,
                                                                 spelling: str) -> None:
    """`_spark_metadata/4` names a data file in another folder (an absolute URI, or one that
    climbs out of the sink root with `..`): the plan refuses or leaves it out; it is never moved."""
    from streamctl.formats.checksum import hadoop_crc

    lab.restore("faulty")
    log4 = lab.out / "_spark_metadata" / "4"
    lines = log4.read_text().split("\n")
    entry = json.loads(lines[1])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = elsewhere / "part-outside.json"
    outside.write_text('{"id":999,"key":"x"}\n')
    if spelling == "absolute":
        entry["path"] = outside.as_uri()
    else:
        entry["path"] = lab.out.as_uri() + "/" + os.path.relpath(outside, lab.out)
        assert "/../" in entry["path"]
    lines[1] = json.dumps(entry, separators=(",", ":"))
    content = "\n".join(lines).encode()
    log4.write_bytes(content)
    (lab.out / "_spark_metadata" / ".4.crc").write_bytes(hadoop_crc(content))
    outside_before = (hashlib.sha256(outside.read_bytes()).hexdigest(), outside.stat().st_mtime_ns)
    before = digests(lab.base, skip_streamctl=False)

    plan_run = run_cli(*lab.align_args("--json"))
    assert plan_run.code in (0, 4), plan_run
    assert "Traceback" not in plan_run.stderr
    if plan_run.code == 0:
        steps = plan_run.json()["plan"]["steps"]
        assert all(".." not in s["path"].split("/") and not s["path"].startswith("/") for s in steps), steps
        assert all(outside.name not in s["path"] for s in steps), steps
    else:
        line = one_line(plan_run.stderr)
        assert outside.name in line and "outside the sink root" in line, line
    assert digests(lab.base, skip_streamctl=False) == before

    r = run_cli(*lab.align_args("--execute", "--json"))
    assert r.code in (0, 4), r
    assert "Traceback" not in r.stderr
    if r.code == 4:
        one_line(r.stderr)
        assert digests(lab.base, skip_streamctl=False) == before, "a refused align changed files"
    assert outside.exists()
    assert (hashlib.sha256(outside.read_bytes()).hexdigest(), outside.stat().st_mtime_ns) == outside_before
    assert os.listdir(elsewhere) == [outside.name]


# --------------------------------------------------------------------------- 7. plan only


@spark_mark
def test_plan_only_changes_nothing_and_lists_every_step(lab: Lab, run_cli: Cli, tree_snapshot: Callable[[Path], Any]) -> None:
    lab.restore("faulty")
    batch4 = [json.loads(x)["path"] for x in (lab.out / "_spark_metadata" / "4").read_text().split("\n")[1:] if x.strip()]
    data4 = [Path(u.removeprefix("file://")).name for u in batch4]
    before_meta = tree_snapshot(lab.base)
    before = digests(lab.base, skip_streamctl=False)

    r = run_cli(*lab.align_args())
    assert r.code == 0, r
    assert "nothing changed" in r.stdout
    j = run_cli(*lab.align_args("--json"))
    assert j.code == 0, j
    assert tree_snapshot(lab.base) == before_meta
    assert digests(lab.base, skip_streamctl=False) == before
    assert not (lab.ckpt / "_streamctl").exists()

    doc = j.json()
    assert doc["kind"] == "AlignPlan" and doc["executed"] is False
    plan = doc["plan"]
    assert plan["classification"] == "exactly-once" and plan["target"] == 3 and plan["expected_verdict"] == "aligned"
    assert set(plan["roots"]) == {"checkpoint", "sink"}
    for s in plan["steps"]:
        assert s["action"] in ("move", "write"), s
        assert s["root"] in plan["roots"], s
        assert s["path"] and not s["path"].startswith("/") and ".." not in s["path"].split("/"), s
        assert s["reason"], s
        if s["action"] == "write":
            assert "content" in s or "content_base64" in s, s
    got = {(s["action"], s["root"], s["path"]) for s in plan["steps"]}
    want = {("write", "checkpoint", "commits/3"), ("write", "checkpoint", "commits/.3.crc"),
            ("move", "sink", "_spark_metadata/4"), ("move", "sink", "_spark_metadata/.4.crc")}
    want |= {("move", "sink", n) for n in data4} | {("move", "sink", f".{n}.crc") for n in data4}
    assert got == want, (got, want)
    assert len(plan["steps"]) == len(want)
    # the text plan shows the same steps, one line each
    for s in plan["steps"]:
        assert f"{s['root']}:{s['path']}" in r.stdout, s


def test_undo_of_a_torn_file_repair_puts_the_torn_file_back_verified(cli: Any, tmp_path: Path, layouts: Any) -> None:
    """align moves a torn (empty) uncommitted offsets/4 aside; its undo puts the very bytes back
    and verifies the positions as they stood on disk (the torn file counted), not as the plan saw
    them with the file set aside."""
    from helpers.trees import tree

    ck = layouts.build(tmp_path / "ck", planned=4, committed=3)
    (ck / "offsets" / "4").write_bytes(b"")
    before = tree(ck)
    done = cli("align", str(ck), "--execute", "--json")
    assert done.code == 0 and done.json()["verified"] is True, done
    assert not (ck / "offsets" / "4").exists()
    undo = cli("align", "--undo", done.json()["backup"], "--json")
    assert undo.code == 0 and undo.json()["verified"] is True, undo
    assert {k: v for k, v in tree(ck).items() if not k.startswith("_streamctl/")} == before

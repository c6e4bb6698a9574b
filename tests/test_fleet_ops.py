"""`streamctl trim` over a fleet: several checkpoints and glob patterns, one plan, each checkpoint
carried out through the one runner, the run record, --resume-run after a crash and --undo-run.
Checkpoints are copies of the PySpark 3.5 fixtures and layouts built by hand (no Spark run)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import layouts
from helpers import s3_fixtures as _s3f
from helpers.paths import SPARK35, copy_spark35
from streamctl.operations.fleet_run import sink_for
from streamctl.operations.journal import CRASH_EXIT

s3 = _s3f.s3  # the moto server, started by the one test that uses it
OLD = 1_700_000_000  # a time long past: no file of a fleet built here looks written by a running query


def _files(root: Path) -> dict[str, bytes]:
    """Every file of a tree but streamctl's own (`_streamctl/`: locks, backups, run records)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "_streamctl" not in p.parts}


def _age(root: Path) -> None:
    for p in root.rglob("*"):
        os.utime(p, (OLD, OLD), follow_symlinks=False)


def _fleet(tmp_path: Path) -> tuple[Path, Path]:
    """chk/ holds a_clean, b_clean (Spark-written, RocksDB and HDFS state), c_damaged (a state
    delta lost), d_live (its newest offsets file just written), e_misaligned (its file sink two
    epochs ahead; the sink named by the config's pipeline) and f_unreadable (offsets/3 empty).
    Returns (chk, config file)."""
    chk = tmp_path / "chk"
    copy_spark35(SPARK35 / "agg_rocksdb" / "checkpoint", chk / "a_clean", tmp_path / "in" / "a")
    copy_spark35(SPARK35 / "agg_hdfs" / "checkpoint", chk / "b_clean", tmp_path / "in" / "b")
    copy_spark35(SPARK35 / "agg_hdfs" / "checkpoint", chk / "c_damaged", tmp_path / "in" / "c")
    (chk / "c_damaged" / "state" / "0" / "0" / "4.delta").unlink()
    copy_spark35(SPARK35 / "agg_rocksdb" / "checkpoint", chk / "d_live", tmp_path / "in" / "d")
    layouts.checkpoint(chk / "e_misaligned", 3, 3, file_source=False)
    layouts.file_sink(tmp_path / "out" / "e", 5)
    copy_spark35(SPARK35 / "agg_hdfs" / "checkpoint", chk / "f_unreadable", tmp_path / "in" / "f")
    (chk / "f_unreadable" / "offsets" / "3").write_bytes(b"")
    _age(tmp_path)
    os.utime(chk / "d_live" / "offsets" / "3")  # now: within the quiet period
    config = tmp_path / "config.toml"
    config.write_text(f'[pipelines.e]\ncheckpoint = "{chk / "e_misaligned"}"\nsink = "{tmp_path / "out" / "e"}"\n')
    return chk, config


def _by_name(doc: dict) -> dict[str, dict]:
    return {Path(r["checkpoint"]).name: r for r in doc["checkpoints"]}


def test_the_fleet_plan_names_each_checkpoint_and_changes_nothing(cli, tmp_path):
    chk, config = _fleet(tmp_path)
    before = _files(chk)
    out = tmp_path / "plan.jsonl"
    r = cli("--config", str(config), "trim", f"{chk}/*", "--keep-epochs", "1", "--quiet-period", "600", "--json",
            "--output-jsonl", str(out), "--output-parquet", str(tmp_path / "plan.parquet"))
    assert r.code == 3, r.stderr  # the worst of the fleet: an unreadable checkpoint (3) over refusals (4)
    doc = json.loads(r.stdout)
    assert doc["kind"] == "TrimFleetPlan" and doc["executed"] is False
    rows = _by_name(doc)
    assert sorted(rows) == ["a_clean", "b_clean", "c_damaged", "d_live", "e_misaligned", "f_unreadable"]
    for name in ("a_clean", "b_clean"):
        assert rows[name]["status"] == "planned" and rows[name]["exit_code"] == 0
        assert rows[name]["kept"] == [3, 3] and rows[name]["delivery"] == "exactly-once"
        assert rows[name]["files"] > 0 and rows[name]["bytes"] > 0
    assert rows["c_damaged"]["status"] == "refused" and "STATE_UNRESTORABLE" in rows["c_damaged"]["reason"]
    assert rows["d_live"]["status"] == "refused" and rows["d_live"]["reason_code"] == "LIVE_QUERY"
    assert rows["e_misaligned"]["sink"] == str(tmp_path / "out" / "e")  # the pipeline's sink, by its checkpoint
    assert rows["e_misaligned"]["status"] == "refused" and "SINK_AHEAD" in rows["e_misaligned"]["reason"]
    assert rows["f_unreadable"]["status"] == "unreadable" and rows["f_unreadable"]["exit_code"] == 3
    assert "offsets/3" in rows["f_unreadable"]["reason"]
    s = doc["summary"]
    assert s["by_status"] == {"planned": 2, "refused": 3, "unreadable": 1}
    assert s["refused_by_reason"] == {"LIVE_QUERY": 1, "misaligned": 2} and s["exit_code"] == 3
    assert s["files"] == rows["a_clean"]["files"] + rows["b_clean"]["files"]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [Path(x["checkpoint"]).name for x in lines] == sorted(rows)
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "plan.parquet").to_pylist()
    assert [x["status"] for x in table] == [rows[n]["status"] for n in sorted(rows)]
    assert _files(chk) == before
    assert not any(p.name == "_streamctl" for p in chk.rglob("*"))  # no lock, no record: a plan changes nothing

    text = cli("--config", str(config), "trim", f"{chk}/*", "--keep-epochs", "1", "--quiet-period", "600")
    assert text.code == 3 and "None" not in text.stdout
    assert "2 to trim" in text.stdout and "3 refused, 1 unreadable" in text.stdout, text.stdout
    assert "refused (LIVE_QUERY): 1" in text.stdout and "refused (misaligned): 2" in text.stdout


def test_execute_trims_the_clean_ones_only_and_undo_run_restores_every_byte(cli, tmp_path):
    chk, config = _fleet(tmp_path)
    before = {p.name: _files(p) for p in chk.iterdir()}
    r = cli("--config", str(config), "trim", f"{chk}/*", "--keep-epochs", "1", "--quiet-period", "600",
            "--execute", "--workers", "3", "--json")
    assert r.code == 3, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "TrimFleetResult" and doc["executed"] is True
    rows = _by_name(doc)
    assert {n: rows[n]["status"] for n in rows} == {
        "a_clean": "done", "b_clean": "done", "c_damaged": "refused", "d_live": "refused",
        "e_misaligned": "refused", "f_unreadable": "unreadable"}
    for name in ("c_damaged", "d_live", "e_misaligned", "f_unreadable"):
        assert _files(chk / name) == before[name], name  # a refusal changes nothing
        assert not (chk / name / "_streamctl" / "backups").exists() and not (chk / name / "_streamctl" / "lock.json").exists()
    for name in ("a_clean", "b_clean"):
        assert len(_files(chk / name)) < len(before[name])
        assert Path(rows[name]["backup"]).is_dir() and not (chk / name / "_streamctl" / "lock.json").exists()
    record_path = Path(doc["run_record"])
    assert record_path.parent == chk / "a_clean" / "_streamctl" / "fleet-runs"  # the first checkpoint's
    record = json.loads(record_path.read_text())
    assert record["run_id"] == doc["run_id"] and record["command"] == "trim"
    assert {Path(e["checkpoint"]).name: e["status"] for e in record["checkpoints"]} == {
        n: rows[n]["status"] for n in rows}
    assert doc["summary"]["bytes"] == rows["a_clean"]["bytes"] + rows["b_clean"]["bytes"]

    undo = cli("trim", "--undo-run", str(record_path), "--json")
    assert undo.code == 0, undo.stderr
    undone = json.loads(undo.stdout)
    assert undone["kind"] == "TrimFleetUndo"
    assert sorted((Path(x["checkpoint"]).name, x["status"]) for x in undone["checkpoints"]) == [
        ("a_clean", "undone"), ("b_clean", "undone")]
    assert {p.name: _files(p) for p in chk.iterdir()} == before  # byte for byte, every checkpoint
    again = cli("trim", "--undo-run", str(record_path))
    assert again.code == 0 and "0 checkpoint(s) to put back" in again.stdout
    stale = json.loads(record_path.read_text())  # as a crash before the record's last save leaves it
    for e in stale["checkpoints"]:
        e["status"] = "done" if e["status"] == "undone" else e["status"]
    record_path.write_text(json.dumps(stale))
    once_more = cli("trim", "--undo-run", str(record_path))
    assert once_more.code == 0 and "2 undone" in once_more.stdout, once_more.stdout + once_more.stderr
    assert {p.name: _files(p) for p in chk.iterdir()} == before


def _clean_fleet(root: Path, names: str, inp: Path | None = None) -> Path:
    """Copies of one Spark-written checkpoint; with `inp`, all naming that one input folder (so
    their trims leave the same bytes)."""
    chk = root / "chk"
    for n in names:
        copy_spark35(SPARK35 / "agg_rocksdb" / "checkpoint", chk / n, inp or root / "in" / n)
    return chk


def test_a_fleet_run_killed_mid_way_resumes_as_a_whole_and_undoes_byte_for_byte(tmp_path):
    """The crash hook ends the process after the Nth journal record, in the middle of the second
    checkpoint's trim: the record says done / running / pending; --resume-run finishes the
    running one from its journal and runs the pending one, each as an uninterrupted trim leaves it."""
    exe = str(Path(sys.executable).with_name("streamctl"))
    env = {k: v for k, v in os.environ.items() if k != "STREAMCTL_TEST_CRASH_AFTER"}
    env.update(STREAMCTL_QUIET_PERIOD="0", STREAMCTL_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    ref = _clean_fleet(tmp_path / "ref", "a", tmp_path / "in")
    one = subprocess.run([exe, "trim", str(ref / "a"), "--keep-epochs", "1", "--execute", "--json"], env=env,
                         capture_output=True, text=True)
    assert one.returncode == 0, one.stderr
    records = len((Path(json.loads(one.stdout)["backup"]) / "journal.jsonl").read_text().splitlines())
    expected = _files(ref / "a")

    chk = _clean_fleet(tmp_path / "fleet", "abc", tmp_path / "in")
    original = {n: _files(chk / n) for n in "abc"}
    argv = [exe, "trim", f"{chk}/*", "--keep-epochs", "1", "--execute", "--workers", "1",
            "--run-dir", str(tmp_path / "runs")]
    crashed = subprocess.run(argv, env=dict(env, STREAMCTL_TEST_CRASH_AFTER=str(records + 2)),
                             capture_output=True, text=True)
    assert crashed.returncode == CRASH_EXIT, crashed.stderr
    (record_path,) = (tmp_path / "runs").iterdir()
    record = json.loads(record_path.read_text())
    # written before the first checkpoint started: every operation id and backup folder (the
    # statuses are saved about once a second, so a crash may leave them behind)
    assert [e["backup"] for e in record["checkpoints"]] == [
        str(chk / n / "_streamctl" / "backups" / e["op_id"]) for n, e in zip("abc", record["checkpoints"], strict=True)]
    assert (chk / "a" / "_streamctl" / "lock.json").exists() is False
    assert (chk / "b" / "_streamctl" / "lock.json").exists()  # the crashed trim's lock stays
    # c as a crash while it was being planned leaves it: its lock (its process gone), no plan yet
    import socket

    gone = subprocess.Popen(["true"])
    gone.wait()
    c_op = record["checkpoints"][2]["op_id"]
    (chk / "c" / "_streamctl").mkdir()
    (chk / "c" / "_streamctl" / "lock.json").write_text(json.dumps(
        {"command": "trim", "host": socket.gethostname(), "op_id": c_op, "pid": gone.pid, "started_ms": 1}))

    resumed = subprocess.run([exe, "trim", "--resume-run", str(record_path), "--json"], env=env,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(resumed.stdout)
    assert doc["kind"] == "TrimFleetResumed"
    assert [(Path(r["checkpoint"]).name, r["status"]) for r in doc["checkpoints"]][-2:] == [("b", "done"), ("c", "done")]
    assert doc["checkpoints"][-1]["op_id"] == c_op  # the same operation, its lock taken over
    for n in "abc":
        assert _files(chk / n) == expected, n
        assert not (chk / n / "_streamctl" / "lock.json").exists()
    assert [e["status"] for e in json.loads(record_path.read_text())["checkpoints"]] == ["done"] * 3

    undo = subprocess.run([exe, "trim", "--undo-run", str(record_path)], env=env, capture_output=True, text=True)
    assert undo.returncode == 0, undo.stderr
    assert "3 undone" in undo.stdout, undo.stdout
    for n in "abc":
        assert _files(chk / n) == original[n], n


def test_one_plain_checkpoint_keeps_the_single_checkpoint_path(cli, tmp_path):
    chk = _clean_fleet(tmp_path, "a")
    r = cli("trim", str(chk / "a"), "--keep-epochs", "1", "--json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["kind"] == "TrimPlan"
    fleet = cli("trim", str(chk / "a"), "--keep-epochs", "1", "--workers", "1", "--json")
    assert json.loads(fleet.stdout)["kind"] == "TrimFleetPlan"  # a fleet flag: a fleet of one


@pytest.mark.parametrize("args, message", [
    (["{chk}/nothing-*"], "no checkpoint folder matches"),
    (["{chk}/*", "--sink", "/x"], "--sink-pattern"),
    (["{chk}/*", "--backup-dir", "/x"], "--backup-dir"),
    (["{chk}/*", "--workers", "0"], "--workers"),
    (["{chk}/missing", "{chk}/a"], "not a folder (missing)"),  # the record's default place: never created
    (["--resume-run", "{chk}/a/metadata"], "not a fleet run record"),
    (["--undo-run", "{chk}/missing.json"], "cannot read the fleet run record"),
    (["--resume-run", "{chk}/a/metadata", "--undo-run", "{chk}/a/metadata"], "cannot be combined"),
])
def test_bad_fleet_input_is_one_line_exit_2_and_changes_nothing(cli, tmp_path, args, message):
    chk = _clean_fleet(tmp_path, "a")
    before = _files(tmp_path)
    r = cli("trim", *[a.format(chk=chk) for a in args], "--execute")
    assert r.code == 2, (r.stdout, r.stderr)
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert _files(tmp_path) == before and not (chk / "a" / "_streamctl").exists() and not (chk / "missing").exists()


def test_sink_pattern():
    assert sink_for("/data/chk/orders", "../../out/{name}") == "/data/out/orders"
    assert sink_for("/data/chk/orders/", "{checkpoint}/../sink") == "/data/chk/sink"
    assert sink_for("/data/chk/orders", "/mnt/out/{name}") == "/mnt/out/orders"
    assert (sink_for("s3://b/chk/orders?endpoint_override=h:9&scheme=http", "../../out/{name}")
            == "s3://b/out/orders?endpoint_override=h:9&scheme=http")


def test_align_over_a_fleet_realigns_each_and_undo_run_restores(cli, tmp_path):
    """align takes the same fleet path: a checkpoint behind its sink rolls forward, one ahead of it
    rolls back, an aligned one has nothing to do; --undo-run puts both back byte for byte."""
    chk, out = tmp_path / "chk", tmp_path / "out"
    for name, (planned, committed, sink) in {"a": (5, 3, 5), "b": (4, 4, 4), "c": (3, 3, 5)}.items():
        layouts.checkpoint(chk / name, planned, committed)
        layouts.file_sink(out / name, sink)
    before = _files(tmp_path)
    plan = cli("align", f"{chk}/?", "--sink-pattern", "../../out/{name}", "--json")
    assert plan.code == 0, plan.stderr
    rows = _by_name(plan.json())
    assert plan.json()["kind"] == "AlignFleetPlan"
    assert {n: (r["status"], r["strategy"], r["target"]) for n, r in rows.items()} == {
        "a": ("planned", "roll_forward", 5), "b": ("nothing_to_do", "none", 4), "c": ("planned", "rollback", 3)}
    assert rows["a"]["sink"] == str(out / "a")
    r = cli("align", f"{chk}/?", "--sink-pattern", "../../out/{name}", "--execute", "--run-dir", str(tmp_path / "runs"))
    assert r.code == 0, r.stderr
    assert "2 aligned, 1 with nothing to do" in r.stdout and "None" not in r.stdout, r.stdout
    (record,) = (tmp_path / "runs").iterdir()
    assert cli("inspect", "epochs", str(chk / "a"), "--sink", str(out / "a")).code == 0
    undo = cli("align", "--undo-run", str(record))
    assert undo.code == 0 and "2 undone" in undo.stdout, undo.stdout
    assert {k: v for k, v in _files(tmp_path).items() if not k.startswith("runs/")} == before


def test_a_fleet_run_shows_its_progress_on_a_terminal_only(tmp_path):
    from helpers.terminal import run_in_pty

    exe = str(Path(sys.executable).with_name("streamctl"))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "STREAMCTL_TEST_CRASH_AFTER")}
    env.update(STREAMCTL_QUIET_PERIOD="0", TERM="xterm", COLUMNS="200", STREAMCTL_TEST_STEP_DELAY="0.05",
               STREAMCTL_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    chk = _clean_fleet(tmp_path / "tty", "ab")
    seen = run_in_pty([exe, "trim", f"{chk}/*", "--keep-epochs", "1", "--execute", "--workers", "1"], env, timeout=120)
    assert "1/2 checkpoints" in seen and "0 refused, 0 failed" in seen, seen[-2000:]
    assert f"{chk / 'a'}: " in seen and "files/s" in seen, seen[-2000:]  # the checkpoint under way: its meter
    assert "2 trimmed" in seen
    chk = _clean_fleet(tmp_path / "pipe", "ab")
    piped = subprocess.run([exe, "trim", f"{chk}/*", "--keep-epochs", "1", "--execute"], env=env,
                           capture_output=True, text=True)
    assert piped.returncode == 0 and "checkpoints," not in piped.stderr and "files/s" not in piped.stderr
    assert "2 trimmed" in piped.stdout


def _objects(fs, prefix: str) -> dict[str, bytes]:
    import pyarrow.fs as pafs

    out = {}
    for info in fs.get_file_info(pafs.FileSelector(f"chk/{prefix}", recursive=True)):
        if info.type == pafs.FileType.File and "/_streamctl/" not in info.path:
            with fs.open_input_stream(info.path) as fh:
                out[info.path] = fh.read()
    return out


def test_a_fleet_on_s3_trims_resumes_its_record_there_and_undoes(cli, s3, tmp_path):
    """The same run on the S3 API (moto in server mode): the pattern is listed through the store,
    the run record is written beside the first checkpoint on the store, undo restores every object."""
    from helpers.s3_fixtures import s3_uri, upload

    fs, port = s3
    chk = _clean_fleet(tmp_path, "ab")
    for n in "ab":
        upload(fs, chk / n, f"fleet/{n}")
    before = _objects(fs, "fleet")
    pattern = s3_uri(port, "fleet/*")
    r = cli("trim", pattern, "--keep-epochs", "1", "--execute", "--json")
    assert r.code == 0, r.stderr
    doc = r.json()
    assert [x["status"] for x in doc["checkpoints"]] == ["done", "done"]
    assert doc["run_record"] == s3_uri(port, "fleet/a/_streamctl/fleet-runs/" + doc["run_id"] + ".json")
    assert len(_objects(fs, "fleet")) < len(before)
    undo = cli("trim", "--undo-run", doc["run_record"], "--json")
    assert undo.code == 0, undo.stderr
    assert [x["status"] for x in undo.json()["checkpoints"]] == ["undone", "undone"]
    assert _objects(fs, "fleet") == before


def test_a_match_that_is_a_symlink_out_of_the_pattern_folder_is_refused(cli, tmp_path):
    chk = _clean_fleet(tmp_path, "a")
    other = _clean_fleet(tmp_path / "elsewhere", "x")
    (chk / "b").symlink_to(other / "x")
    before = _files(tmp_path)
    r = cli("trim", f"{chk}/*", "--keep-epochs", "1", "--execute")
    assert r.code == 2 and "symlink out of" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert _files(tmp_path) == before and not (chk / "a" / "_streamctl").exists()
    assert not (other / "x" / "_streamctl").exists()


def test_ctrl_c_mid_fleet_names_the_resume_of_the_run(tmp_path):
    import signal
    import time

    exe = str(Path(sys.executable).with_name("streamctl"))
    env = {k: v for k, v in os.environ.items() if k != "STREAMCTL_TEST_CRASH_AFTER"}
    env.update(STREAMCTL_QUIET_PERIOD="0", STREAMCTL_TEST_STEP_DELAY="0.05", STREAMCTL_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    chk = _clean_fleet(tmp_path, "abc", tmp_path / "in")
    runs = tmp_path / "runs"
    proc = subprocess.Popen([exe, "trim", f"{chk}/*", "--keep-epochs", "1", "--execute", "--workers", "1",
                             "--run-dir", str(runs)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (chk / "b" / "_streamctl" / "backups").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    (record_path,) = runs.iterdir()
    assert f"--resume-run {record_path}" in err and len(err.strip().splitlines()) == 1, err
    statuses = [e["status"] for e in json.loads(record_path.read_text())["checkpoints"]]
    assert statuses[0] == "done" and statuses[2] == "pending", statuses
    env.pop("STREAMCTL_TEST_STEP_DELAY")
    resumed = subprocess.run([exe, "trim", "--resume-run", str(record_path)], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert [e["status"] for e in json.loads(record_path.read_text())["checkpoints"]] == ["done"] * 3
    assert _files(chk / "a") == _files(chk / "b") == _files(chk / "c")


def test_a_refusal_names_its_reason_code_and_a_failed_spark_job_its_reason_in_one_line():
    from streamctl.inspectors.fleet import spark_reason
    from streamctl.operations.lock import LockHeld
    from streamctl.operations.plan import Refused

    assert Refused("/data/chk/pay: LIVE_QUERY: its newest log file changed 3 s ago").code == "LIVE_QUERY"
    assert Refused("s3://b/chk: RETIRED: drop-sink retired it").code == "RETIRED"
    assert Refused("/data/chk: nothing committed yet: nothing to trim").code == ""
    assert Refused("/data/chk: LIVE_QUERY: ...", code="misaligned").code == "misaligned"
    assert LockHeld("/data/chk: held by align", {}).code == "locked"
    # what Py4J says when a Python worker dies inside a task (PySpark 4.3, local mode)
    text = ("An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 0.0 failed 1 "
            "times, most recent failure: Lost task 1.0 in stage 0.0 (TID 1) (192.0.2.2 executor driver): "
            "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider setting "
            "'spark.python.worker.faulthandler.enabled'\n\tat org.apache.spark.api.python.X(X.scala:1)\n"
            "Caused by: java.io.EOFException\n")
    assert spark_reason(text) == "Task 1 in stage 0.0 failed 1 times: Python worker exited unexpectedly (crashed)"
    assert spark_reason("") == "no reason given"

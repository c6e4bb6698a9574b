"""`streamctl trim` (and align's plan) over a fleet with `--engine spark`: each checkpoint's own operation inside a
Spark task (the test session reused), the same rows as the local engine, the run record written
by the driver, so `--undo-run` on the local engine puts a Spark run back byte for byte."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import layouts
from helpers.paths import SPARK35, copy_spark35

OLD = 1_700_000_000  # a time long past: nothing here looks written by a running query


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "_streamctl" not in p.parts}


def _fleet(tmp_path: Path) -> tuple[Path, Path]:
    """a_clean, b_clean (Spark-written, RocksDB and HDFS state), e_misaligned (its file sink two
    epochs ahead, named by the config's pipeline), f_unreadable (offsets/3 empty)."""
    chk = tmp_path / "chk"
    copy_spark35(SPARK35 / "agg_rocksdb" / "checkpoint", chk / "a_clean", tmp_path / "in" / "a")
    copy_spark35(SPARK35 / "agg_hdfs" / "checkpoint", chk / "b_clean", tmp_path / "in" / "b")
    layouts.checkpoint(chk / "e_misaligned", 3, 3, file_source=False)
    layouts.file_sink(tmp_path / "out" / "e", 5)
    copy_spark35(SPARK35 / "agg_hdfs" / "checkpoint", chk / "f_unreadable", tmp_path / "in" / "f")
    (chk / "f_unreadable" / "offsets" / "3").write_bytes(b"")
    for p in tmp_path.rglob("*"):
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    config = tmp_path / "config.toml"
    config.write_text(f'[pipelines.e]\ncheckpoint = "{chk / "e_misaligned"}"\nsink = "{tmp_path / "out" / "e"}"\n')
    return chk, config


def _rows(doc: dict) -> dict[str, dict]:
    return {Path(r["checkpoint"]).name: r for r in doc["checkpoints"]}


STATUSES = {"a_clean": "done", "b_clean": "done", "e_misaligned": "refused", "f_unreadable": "unreadable"}


@pytest.mark.spark
def test_spark_engine_plans_and_trims_as_the_local_engine_and_undo_run_restores(cli, spark, tmp_path):
    chk, config = _fleet(tmp_path)
    before = {p.name: _files(p) for p in chk.iterdir()}
    base = ["--config", str(config), "trim", f"{chk}/*", "--keep-epochs", "1", "--quiet-period", "600", "--json"]
    local = cli(*base)
    on_spark = cli(*base, "--engine", "spark", "--master", "local[1]", "--workers", "2")
    assert on_spark.code == local.code == 3, on_spark.stderr
    assert json.loads(on_spark.stdout) == json.loads(local.stdout)  # the same plan, row for row
    assert _rows(json.loads(local.stdout))["a_clean"]["status"] == "planned"
    assert {p.name: _files(p) for p in chk.iterdir()} == before
    assert not any(p.name == "_streamctl" for p in chk.rglob("*"))  # a plan changes nothing
    align = ["--config", str(config), "align", f"{chk}/*", "--quiet-period", "600", "--json"]
    align_local, align_spark = cli(*align), cli(*align, "--engine", "spark", "--workers", "3")
    assert align_spark.code == align_local.code and json.loads(align_spark.stdout) == json.loads(align_local.stdout)
    assert _rows(json.loads(align_spark.stdout))["a_clean"]["status"] == "nothing_to_do"  # aligned already

    r = cli(*base, "--execute", "--engine", "spark", "--master", "local[1]", "--workers", "2",
            "--run-dir", str(tmp_path / "runs"))
    assert r.code == 3, r.stderr
    doc = json.loads(r.stdout)
    rows = _rows(doc)
    assert doc["kind"] == "TrimFleetResult" and {n: x["status"] for n, x in rows.items()} == STATUSES
    for name in ("e_misaligned", "f_unreadable"):
        assert _files(chk / name) == before[name], name  # a refusal changes nothing
        assert not (chk / name / "_streamctl").exists(), name
    for name in ("a_clean", "b_clean"):
        assert len(_files(chk / name)) < len(before[name])
        assert Path(rows[name]["backup"]).is_dir() and not (chk / name / "_streamctl" / "lock.json").exists()
    # the driver wrote the record: every row's outcome, as the local engine records it
    (record_path,) = (tmp_path / "runs").iterdir()
    assert str(record_path) == doc["run_record"]
    record = json.loads(record_path.read_text())
    assert {Path(e["checkpoint"]).name: e["status"] for e in record["checkpoints"]} == STATUSES
    assert {Path(e["checkpoint"]).name: e["backup"] for e in record["checkpoints"]} == {
        n: x["backup"] for n, x in rows.items()}

    undo = cli("trim", "--undo-run", str(record_path), "--json")  # the local engine puts back a Spark run
    assert undo.code == 0, undo.stderr
    assert sorted((n, x["status"]) for n, x in _rows(json.loads(undo.stdout)).items()) == [
        ("a_clean", "undone"), ("b_clean", "undone")]
    assert {p.name: _files(p) for p in chk.iterdir()} == before  # byte for byte, every checkpoint

    # and the Spark engine takes the record up too: nothing left to put back
    again = cli("trim", "--undo-run", str(record_path), "--engine", "spark")
    assert again.code == 0 and "0 checkpoint(s) to put back" in again.stdout, again.stdout + again.stderr


def test_engine_and_master_are_checked_before_anything_changes(cli, tmp_path):
    chk, config = _fleet(tmp_path)
    before = {p.name: _files(p) for p in chk.iterdir()}
    bad = cli("--config", str(config), "trim", f"{chk}/*", "--engine", "dask", "--execute")
    assert bad.code == 2 and "invalid value for --engine: 'dask' (choose from local, spark)" in bad.stderr
    lone = cli("--config", str(config), "trim", f"{chk}/*", "--master", "local[1]", "--execute")
    assert lone.code == 2 and "--master is the Spark master of --engine spark" in lone.stderr
    assert {p.name: _files(p) for p in chk.iterdir()} == before
    assert not any(p.name == "_streamctl" for p in chk.rglob("*"))


@pytest.mark.spark
def test_a_spark_task_killed_mid_fleet_names_the_resume_and_the_run_resumes_on_spark(cli, spark, tmp_path):
    """The crash hook ends a Python worker right after a journal record, inside a Spark task (its
    own Spark in a subprocess, so the hook reaches the workers): the job fails as a whole, no row
    comes back; the command says so in one line, exit 5, naming --resume-run. The resume, on the
    Spark engine, finishes every checkpoint, the one whose trim the crash cut included (its lock,
    held by the dead worker's pid, taken over), and --undo-run puts all of them back byte for byte."""
    import subprocess
    import sys

    from streamctl.operations.journal import CRASH_EXIT

    chk = tmp_path / "chk"
    for n in "abcd":
        copy_spark35(SPARK35 / "agg_rocksdb" / "checkpoint", chk / n, tmp_path / "in")
    original = {n: _files(chk / n) for n in "abcd"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCTL_TEST_")}
    env.update(STREAMCTL_QUIET_PERIOD="0", STREAMCTL_CONFIG=str(tmp_path / "none.toml"), PYSPARK_PYTHON=sys.executable,
               STREAMCTL_TEST_CRASH_AFTER="12")  # in the second checkpoint's trim of a task (9 records each)
    (tmp_path / "none.toml").write_text("")
    exe = str(Path(sys.executable).with_name("streamctl"))
    crashed = subprocess.run([exe, "trim", f"{chk}/*", "--keep-epochs", "1", "--execute", "--engine", "spark",
                              "--master", "local[1]", "--workers", "2", "--run-dir", str(tmp_path / "runs")],
                             env=env, capture_output=True, text=True, timeout=600)
    (record_path,) = (tmp_path / "runs").iterdir()
    said = [line for line in crashed.stderr.splitlines() if line.startswith("streamctl:")]
    assert crashed.returncode == 5 != CRASH_EXIT, crashed.stderr[-3000:]
    assert said == [f"streamctl: the Spark job failed: {said[0].split('failed: ', 1)[1].split(';')[0]}; the "
                    "checkpoints its tasks reached may be part-way: resume the fleet run with: streamctl trim "
                    f"--resume-run {record_path} (or undo it with --undo-run)"], said
    assert "Python worker exited unexpectedly" in said[0] and "Traceback" not in crashed.stderr
    locked = [n for n in "abcd" if (chk / n / "_streamctl" / "lock.json").exists()]
    assert len(locked) == 1, locked  # the checkpoint the crash cut keeps its lock

    resumed = cli("trim", "--resume-run", str(record_path), "--engine", "spark", "--workers", "2", "--json")
    assert resumed.code == 0, resumed.stderr
    assert {Path(r["checkpoint"]).name: r["status"] for r in json.loads(resumed.stdout)["checkpoints"]} == dict.fromkeys(
        "abcd", "done")
    trimmed = _files(chk / "a")
    for n in "abcd":
        assert _files(chk / n) == trimmed and len(trimmed) < len(original[n]), n  # each as one uninterrupted trim
        assert not (chk / n / "_streamctl" / "lock.json").exists(), n
    undo = cli("trim", "--undo-run", str(record_path))
    assert undo.code == 0 and "4 undone" in undo.stdout, undo.stdout + undo.stderr
    assert {n: _files(chk / n) for n in "abcd"} == original

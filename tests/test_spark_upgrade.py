"""Upgrade and downgrade between Spark lines (docs/model.md#spark-lines), judged
by real restarts on both lines: the PySpark 3.5 leg's own session, and the newest line's venv in
a subprocess (tests/helpers/spark_line_job.py). `inspect epochs --target-spark` must predict each restart.

- Up: checkpoints PySpark 3.5 writes (aggregation, deduplication, a stream-stream join; HDFS and
  RocksDB state) restart on the newest line: SPARK_LINE_CHECKED, exit 0.
- Down: the newest line writes checkpoint format 2 (`commits` v2) and offsets v2; PySpark 3.5
  refuses both (UnsupportedLogVersion): SPARK_LINE_REFUSES, exit 1.
"""
from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from helpers.paths import TESTS

pytestmark = [pytest.mark.spark, pytest.mark.spark35]

JOB = TESTS / "helpers" / "spark_line_job.py"  # also run as a script, in the newest line's venv
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def _job_module() -> Any:
    from helpers import spark_line_job

    return spark_line_job


def _newest_python() -> str:
    """The newest line's interpreter: `./dev test` runs that leg first in .venv."""
    py = os.environ.get("STREAMCTL_NEWEST_PYTHON") or str(TESTS.parent / ".venv" / "bin" / "python")
    out = subprocess.run([py, "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True, text=True)
    assert out.returncode == 0 and int(out.stdout.split(".")[0]) >= 4, (py, out.stdout, out.stderr)
    return py


def _on_newest(jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    py = _newest_python()
    env = dict(os.environ, PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py)
    env.pop("SPARK_HOME", None)
    proc = subprocess.run([py, str(JOB), json.dumps(jobs)], capture_output=True, text=True, env=env, timeout=600)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(results) == len(jobs), proc.stderr[-3000:]
    return {r["base"]: r for r in results}


def test_inspect_predicts_restarts_across_spark_lines(spark, cli, tmp_path):
    import pyspark

    assert pyspark.__version__.startswith("3.5."), pyspark.__version__
    job = _job_module()
    up = {f"{kind}_{store}": (kind, provider) for kind in job.KINDS for store, provider in (("hdfs", HDFS), ("rocksdb", ROCKSDB))}
    for name, (kind, provider) in up.items():  # written by 3.5
        r = job.run(spark, {"kind": kind, "base": str(tmp_path / name), "files": [0, 3],
                            "confs": {"spark.sql.streaming.stateStore.providerClass": provider}})
        assert r["ok"], r
    for name in up:
        r = cli("inspect", "epochs", str(tmp_path / name / "checkpoint"), "--target-spark", "4.3", "--quiet-period", "0", "--json")
        found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
        assert r.code == 0 and "SPARK_LINE_CHECKED" in found and "SPARK_LINE_REFUSES" not in found, (name, found)
        assert found["SPARK_LINE_CHECKED"]["written_at_least"] is None, found  # 3.5 adds no 4.x conf key

    down = {"format2": {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
                        "spark.sql.streaming.stateStore.providerClass": ROCKSDB},
            "offsets2": {"spark.sql.streaming.offsetLog.formatVersion": "2"}}
    jobs = [{"kind": kind, "base": str(tmp_path / name), "files": [3, 2], "confs": {}} for name, (kind, _p) in up.items()]
    jobs += [{"kind": "dedup", "base": str(tmp_path / name), "files": [0, 3], "confs": confs} for name, confs in down.items()]
    results = _on_newest(jobs)  # the 3.5 checkpoints restarted on the newest line; two written there
    for name in up:
        assert results[str(tmp_path / name)]["ok"], results[str(tmp_path / name)]
    for name in down:
        assert results[str(tmp_path / name)]["ok"], results[str(tmp_path / name)]
        ck = tmp_path / name / "checkpoint"
        r = cli("inspect", "epochs", str(ck), "--target-spark", "3.5", "--quiet-period", "0", "--json")
        found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
        assert r.code == 1 and "SPARK_LINE_REFUSES" in found, (name, found)
        want = "commits/" if name == "format2" else "offsets/"
        assert any(want in f for f in found["SPARK_LINE_REFUSES"]["files"]), found
        assert found["SPARK_LINE_REFUSES"]["written_at_least"] == "4.1", found
        newest = cli("inspect", "epochs", str(ck), "--target-spark", "4.3", "--quiet-period", "0")
        assert newest.code == 0 and "SPARK_LINE_CHECKED" in newest.stdout, newest.stdout
        # the oracle: PySpark 3.5 restarts it
        r = job.run(spark, {"kind": "dedup", "base": str(tmp_path / name), "files": [3, 1], "confs": {}})
        assert not r["ok"] and "UnsupportedLogVersion" in r["error"] and want in r["error"], r

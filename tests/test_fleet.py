"""Fleet scans (`inspect epochs` over glob patterns): glob expansion, the thread-pool and Spark
engines, JSON-lines and Parquet outputs, --watch and --metrics-file (Prometheus text format),
and globs over S3 on a real moto server. Real checkpoints from tests/fixtures/spark-corpus, no mocks."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import s3_fixtures as _os
from helpers.paths import CORPUS, SPARK35, copy_spark35
from streamctl.inspectors import fleet
from streamctl.inspectors.metrics import format_metrics

CORPUS_CHECKPOINTS = ("checkpoint-version-2.1.0", "checkpoint-version-2.4.0-streaming-join",
                      "checkpoint-version-3.5.1-streaming-deduplication", "checkpoint-version-4.0.0/rocksdb/agg")



@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    """tmp/chk/<name> for four corpus checkpoints and the two Spark 3.5 fixtures, plus a stray
    file that a `*` must not pick up."""
    root = tmp_path / "chk"
    root.mkdir()
    for rel in CORPUS_CHECKPOINTS:
        shutil.copytree(CORPUS / rel, root / rel.replace("/", "-"))
    for name in ("agg_hdfs", "agg_rocksdb"):
        copy_spark35(SPARK35 / name / "checkpoint", root / name, root.parent / f"{root.name}-input")
    (root / "README").write_text("not a checkpoint\n")
    return root


def folders(root: Path) -> list[str]:
    return sorted(str(p) for p in root.iterdir() if p.is_dir())


# ------------------------------------------------------------------------------------ globs


def test_glob_expands_to_every_checkpoint_folder(cli, fleet_dir):
    by_glob = cli("inspect", "epochs", f"{fleet_dir}/*", "--json")
    by_list = cli("inspect", "epochs", *folders(fleet_dir), "--json")
    assert by_glob.code == by_list.code and by_glob.code in (0, 1, 3), by_glob
    assert by_glob.json() == by_list.json()
    assert [q["checkpoint"] for q in by_glob.json()["queries"]] == folders(fleet_dir)
    assert fleet.expand([f"{fleet_dir}/agg_*", str(fleet_dir / "README"), "a-pipeline-name"]) == [
        str(fleet_dir / "agg_hdfs"), str(fleet_dir / "agg_rocksdb"), str(fleet_dir / "README"), "a-pipeline-name"]


def test_glob_matching_nothing_is_exit_2_one_line(cli, fleet_dir):
    r = cli("inspect", "epochs", f"{fleet_dir}/nothing-*", "--json")
    assert r.code == 2, r
    assert r.stderr == f"streamctl: no checkpoint folder matches {fleet_dir}/nothing-*\n"
    assert r.json() == {"api_version": "streamctl/v1", "kind": "Error", "code": 2, "error": "usage",
                        "message": f"no checkpoint folder matches {fleet_dir}/nothing-*"}  # --json: one document
    r = cli("inspect", "epochs", f"{fleet_dir}/README*")  # matches a file only
    assert r.code == 2 and r.stderr.count("\n") == 1


def test_threads_and_sequential_give_identical_records(cli, fleet_dir):
    targets = [fleet.Target(p) for p in folders(fleet_dir)]
    sequential = [q.to_record() for q in fleet.run_local(targets, workers=1, quiet_period_s=0)]
    threaded = [q.to_record() for q in fleet.run_local(targets, workers=8, quiet_period_s=0)]
    assert threaded == sequential and [r["checkpoint"] for r in threaded] == [t.checkpoint for t in targets]
    one = cli("inspect", "epochs", f"{fleet_dir}/*", "--workers", "1", "--json")
    many = cli("inspect", "epochs", f"{fleet_dir}/*", "--workers", "16", "--json")
    assert one.code == many.code and one.stdout == many.stdout
    # threads only pay off on object stores: local disks default to one checkpoint after another
    assert fleet.default_workers(remote=False) == 1 and fleet.default_workers(remote=True) >= 4
    assert cli("inspect", "epochs", f"{fleet_dir}/*", "--workers", "0").code == 2
    assert cli("inspect", "epochs", f"{fleet_dir}/*", "--engine", "flink").code == 2


# ----------------------------------------------------------------------------------- outputs


def test_jsonl_and_parquet_outputs_read_back(cli, fleet_dir, tmp_path):
    import pyarrow.parquet as pq

    jsonl, parquet = tmp_path / "fleet.jsonl", tmp_path / "fleet.parquet"
    r = cli("inspect", "epochs", f"{fleet_dir}/*", "--json", "--output-jsonl", str(jsonl), "--output-parquet", str(parquet))
    queries = r.json()["queries"]
    lines = jsonl.read_text().splitlines()
    assert [json.loads(line) for line in lines] == queries and len(lines) == len(folders(fleet_dir))
    table = pq.read_table(parquet)
    assert table.column_names == list(fleet.PARQUET_COLUMNS)
    import pyarrow as pa

    assert pa.types.is_list(table.schema.field("error_codes").type)
    assert table.schema.field("error_codes").type.value_type == pa.string()
    rows = table.to_pylist()
    assert [json.loads(row.pop("record_json")) for row in rows] == queries
    for row, q in zip(rows, queries, strict=True):
        assert row == {
            "checkpoint": q["checkpoint"], "query_id": q["query_id"], "planned": q["planned"],
            "committed": q["committed"], "state_epoch": q["state_epoch"], "verdict": q["verdict"],
            "sink_epoch": None, "findings_count": len(q["findings"]),
            "error_codes": sorted({f["code"] for f in q["findings"] if f["severity"] == "error"})}
    assert any(row["error_codes"] for row in rows) and any(row["committed"] is None for row in rows)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # atomic writes leave nothing behind
    r = cli("inspect", "epochs", f"{fleet_dir}/*", "--output-jsonl", str(tmp_path / "no-such-dir" / "x.jsonl"))
    assert r.code == 2 and "folder does not exist" in r.stderr


# ----------------------------------------------------------------------- metrics and --watch

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def parse_prometheus(text: str) -> dict[tuple[str, frozenset], float]:
    """A strict reader of the text exposition format: HELP/TYPE comments before each family,
    one family per name, label values unescaped; every line must parse."""
    assert text.endswith("\n")
    out: dict[tuple[str, frozenset], float] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if parts[1] == "TYPE":
                assert parts[2] not in typed and parts[3] in ("gauge", "counter"), line
                typed.add(parts[2])
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels_text, value = m.groups()
        assert name in typed, f"{name} has no TYPE line before its samples"
        labels = {}
        pos = 0
        while labels_text and pos < len(labels_text):
            lm = _LABEL.match(labels_text, pos)
            assert lm, f"bad labels in {line!r}"
            labels[lm.group(1)] = re.sub(r'\\(.)', lambda e: {"n": "\n"}.get(e.group(1), e.group(1)), lm.group(2))
            pos = lm.end()
        key = (name, frozenset(labels.items()))
        assert key not in out, f"duplicate series {line!r}"
        out[key] = float(value)
    return out


def series(metrics: dict, name: str, **labels: str) -> float:
    return metrics[(name, frozenset(labels.items()))]


def test_metrics_escape_label_values_and_skip_unknown_positions():
    nasty = 'C:\\chk\\"orders"\nnew line'
    report = {"queries": [{"checkpoint": nasty, "query_id": None, "planned": 7, "committed": None, "state_epoch": None,
                           "stateful": False, "sink": {"kind": "delta", "epoch": 6}, "verdict": "misaligned",
                           "kafka": {"lag": 42, "topics": {"t\"1": {"lag": 40}, "t2": {"lag": 2}}},
                           "findings": [{"code": "SINK_BEHIND", "severity": "error"}, {"code": "LOG_GAP", "severity": "error"},
                                        {"code": "LOG_GAP", "severity": "error"}]}],
              "findings": [{"code": "QUERY_ID_CLASH", "severity": "error"}]}
    text = format_metrics(report, 1700000000.5, 0.25)
    m = parse_prometheus(text)
    q = {"checkpoint": nasty, "query_id": ""}
    assert series(m, "streamctl_epoch_planned", **q) == 7
    assert series(m, "streamctl_sink_epoch", **q) == 6
    assert series(m, "streamctl_kafka_lag", **q) == 42
    assert series(m, "streamctl_kafka_topic_lag", topic='t"1', **q) == 40
    assert series(m, "streamctl_findings", code="LOG_GAP", severity="error", **q) == 2
    assert series(m, "streamctl_findings", code="QUERY_ID_CLASH", severity="error", checkpoint="", query_id="") == 1
    assert series(m, "streamctl_verdict", verdict="misaligned", **q) == 1
    assert series(m, "streamctl_verdict", verdict="aligned", **q) == 0
    assert series(m, "streamctl_inspect_timestamp_seconds") == 1700000000.5
    assert not [k for k in m if k[0] in ("streamctl_epoch_committed", "streamctl_state_epoch")]
    assert '\\n' in text and "\nnew line" not in text  # the raw line feed never reaches the file


def test_watch_twice_with_metrics_file_matching_the_json_report(cli, fleet_dir, tmp_path):
    prom = tmp_path / "textfile" / "streamctl.prom"
    prom.parent.mkdir()
    r = cli("inspect", "epochs", f"{fleet_dir}/*", "--watch", "--watch-count", "2", "--interval", "0.1",
            "--metrics-file", str(prom), "--format", "plain")
    assert r.code in (1, 3), r
    assert len(re.findall(r"^refresh \d at .* UTC, every 0.1 s; Ctrl-C to stop$", r.stdout, re.M)) == 2
    assert r.stdout.count("query id") == 2 and r.stderr == ""
    assert sorted(os.listdir(prom.parent)) == ["streamctl.prom"]
    m = parse_prometheus(prom.read_text())
    doc = cli("inspect", "epochs", f"{fleet_dir}/*", "--json").json()
    assert series(m, "streamctl_checkpoints") == len(doc["queries"]) == 6
    assert abs(series(m, "streamctl_inspect_timestamp_seconds") - time.time()) < 120
    for q in doc["queries"]:
        labels = {"checkpoint": q["checkpoint"], "query_id": q["query_id"] or ""}
        for name, value in (("streamctl_epoch_planned", q["planned"]), ("streamctl_epoch_committed", q["committed"]),
                            ("streamctl_state_epoch", q["state_epoch"])):
            key = (name, frozenset(labels.items()))
            assert (m.get(key) if key in m else None) == value, (name, q["checkpoint"])
        for verdict in ("aligned", "recoverable", "misaligned", "unreadable"):
            assert series(m, "streamctl_verdict", verdict=verdict, **labels) == (verdict == q["verdict"])
        counts: dict[tuple[str, str], int] = {}
        for f in q["findings"]:
            counts[(f["code"], f["severity"])] = counts.get((f["code"], f["severity"]), 0) + 1
        got = {(dict(k[1])["code"], dict(k[1])["severity"]): v for k, v in m.items()
               if k[0] == "streamctl_findings" and dict(k[1])["checkpoint"] == q["checkpoint"]}
        assert got == counts
    # --json with --watch: one document per line and refresh
    r = cli("inspect", "epochs", f"{fleet_dir}/agg_*", "--watch", "--watch-count", "2", "--interval", "0.1", "--json")
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(docs) == 2 and docs[0] == docs[1] and r.code == 0


def test_watch_stops_on_ctrl_c_with_exit_130_and_no_traceback(tmp_path):
    prom = tmp_path / "m.prom"
    env = dict(os.environ, NO_COLOR="1", STREAMCTL_QUIET_PERIOD="0", STREAMCTL_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    program = Path(sys.executable).parent / "streamctl"
    proc = subprocess.Popen([str(program), "inspect", "epochs", str(SPARK35 / "agg_hdfs" / "checkpoint"), "--watch",
                             "--interval", "0.2", "--metrics-file", str(prom)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 60
        while not prom.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert prom.exists()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in out + err and "refresh 1 at" in out
    assert "streamctl_epoch_committed" in prom.read_text()


# ------------------------------------------------------------------------------ Spark engine


@pytest.mark.spark
def test_spark_engine_gives_the_records_of_the_local_engine(cli, spark, fleet_dir, tmp_path):
    local = cli("inspect", "epochs", f"{fleet_dir}/*", "--json", "--output-jsonl", str(tmp_path / "local.jsonl"))
    on_spark = cli("inspect", "epochs", f"{fleet_dir}/*", "--engine", "spark", "--json",
                   "--output-jsonl", str(tmp_path / "spark.jsonl"))
    assert on_spark.code == local.code, on_spark
    assert on_spark.json() == local.json()
    assert (tmp_path / "spark.jsonl").read_text() == (tmp_path / "local.jsonl").read_text()
    # the test session was reused (no second JVM) and is still running
    from pyspark.sql import SparkSession

    assert SparkSession.getActiveSession() is spark
    assert spark.sparkContext.parallelize([1, 2]).count() == 2
    runner = fleet.SparkRunner()
    assert not runner.owned and runner.spark is spark
    records = runner.run([fleet.Target(f) for f in folders(fleet_dir)], quiet_period_s=0)
    assert records == [json.loads(line) for line in (tmp_path / "local.jsonl").read_text().splitlines()]
    assert runner.run([fleet.Target(f) for f in folders(fleet_dir)], quiet_period_s=0, tasks=2) == records


def test_spark_engine_refuses_kafka(cli):
    r = cli("inspect", "epochs", str(SPARK35 / "agg_hdfs" / "checkpoint"), "--engine", "spark", "--bootstrap", "b:9092")
    assert r.code == 2 and "--engine spark does not ask Kafka brokers" in r.stderr


# ------------------------------------------------------------------------------ object stores

s3 = _os.s3


@pytest.mark.skipif(_os.moto_server is None, reason="moto[server] is installed by ./dev test")
def test_glob_over_s3(cli, s3):
    fs, port = s3
    for name in ("agg_hdfs", "agg_rocksdb"):
        _os.upload(fs, SPARK35 / name / "checkpoint", f"fleet/{name}")
        _os.upload(fs, SPARK35 / name / "checkpoint", f"fleet/nested/{name}")
    with fs.open_output_stream("chk/fleet/README") as out:
        out.write(b"not a checkpoint")
    opts = f"?endpoint_override=127.0.0.1:{port}&scheme=http"
    r = cli("inspect", "epochs", f"s3://chk/fleet/*/{opts}", "--json")
    assert r.code == 3, r  # fleet/nested is a folder but not a checkpoint
    doc = r.json()
    assert [q["checkpoint"] for q in doc["queries"]] == [
        f"s3://chk/fleet/agg_hdfs{opts}", f"s3://chk/fleet/agg_rocksdb{opts}", f"s3://chk/fleet/nested{opts}"]
    nested = doc["queries"][2]
    assert nested["verdict"] == "unreadable" and "not a Spark checkpoint" in nested["findings"][0]["message"]
    r = cli("inspect", "epochs", f"s3://chk/fleet/agg_*{opts}", f"s3://chk/fleet/*/agg_hdfs{opts}", "--json")
    remote = r.json()["queries"]
    assert [q["checkpoint"] for q in remote] == [
        f"s3://chk/fleet/agg_hdfs{opts}", f"s3://chk/fleet/agg_rocksdb{opts}", f"s3://chk/fleet/nested/agg_hdfs{opts}"]
    assert r.json()["findings"][0]["code"] == "QUERY_ID_CLASH"  # the same checkpoint uploaded twice
    local = {q["query_id"]: q for q in cli("inspect", "epochs", str(SPARK35 / "*" / "checkpoint"), "--json").json()["queries"]}
    for q in remote:
        for key in ("query_id", "planned", "committed", "state_epoch", "common_window"):
            assert q[key] == local[q["query_id"]][key], key
    r = cli("inspect", "epochs", f"s3://chk/fleet/none-*{opts}")
    assert r.code == 2 and r.stderr == f"streamctl: no checkpoint folder matches s3://chk/fleet/none-*{opts}\n"


def test_spark_tasks_default_groups_checkpoints_by_the_clusters_parallelism():
    from streamctl.inspectors.fleet import default_tasks

    assert default_tasks(1000, 2) == 4  # local[2]: two tasks per core, 250 checkpoints each
    assert default_tasks(1000, 64) == 128  # grows with the executors
    assert default_tasks(3, 64) == 3  # never more tasks than checkpoints
    assert default_tasks(100_000, 2) == 200  # at most 500 checkpoints per task
    assert default_tasks(1, 0) == 1


def test_spark_tasks_below_one_is_a_usage_error(cli, tmp_path):
    r = cli("inspect", "epochs", str(tmp_path), "--engine", "spark", "--spark-tasks", "0")
    assert r.code == 2, r

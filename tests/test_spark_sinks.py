"""Real PySpark file-sink output against its checkpoint: restored older checkpoints (sink ahead),
lost sink log entries (sink behind), a compaction point between them, copied pipelines."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.trees import copy_tree

pytestmark = pytest.mark.spark


def inspect(cli, chk: Path, sink: Path) -> tuple[int, dict]:
    r = cli("inspect", "epochs", str(chk), "--sink", str(sink), "--json")
    assert "Traceback" not in r.stderr, r
    return r.code, r.json()["queries"][0]


def drop_batches(folder: Path, above: int) -> None:
    """Delete batch files above `above` with their hidden checksums, as a careful operator would."""
    for f in list(folder.iterdir()):
        stem = f.name.lstrip(".").split(".")[0]
        if stem.isdigit() and int(stem) > above:
            f.unlink()


def test_file_sink_ahead_behind_and_in_flight(cli, fresh_copy):
    chk = fresh_copy("stateless_file_sink")
    out = chk.parent / "output"
    code, q = inspect(cli, chk, out)
    assert code == 0 and q["sink"]["epoch"] == 5 and q["verdict"] == "aligned"

    # an older copy of the checkpoint restored while the sink went on
    restored = chk.parent / "restored"
    copy_tree(chk, restored)
    drop_batches(restored / "offsets", 3)
    drop_batches(restored / "commits", 3)
    code, q = inspect(cli, restored, out)
    (f,) = q["findings"]
    assert code == 1 and f["code"] == "SINK_AHEAD" and f["skipped"] == [4, 5]

    # Spark replays the in-flight epoch the sink already holds: fine
    drop_batches(chk / "commits", 4)
    code, q = inspect(cli, chk, out)
    assert code == 0 and [f["code"] for f in q["findings"]] == ["IN_FLIGHT"]

    # the sink lost its newest entries
    chk2 = fresh_copy("stateless_file_sink")
    out2 = chk2.parent / "output"
    drop_batches(out2 / "_spark_metadata", 3)
    code, q = inspect(cli, chk2, out2)
    (f,) = q["findings"]
    assert code == 1 and f["code"] == "SINK_BEHIND" and f["missing"] == [4, 5]


def test_compaction_point_between_checkpoint_and_sink(cli, spark, tmp_path):
    """A file sink with compactInterval=3: the sink compacts at 2 and 5; a checkpoint restored
    to batch 3 sits between compaction 2 and the newest batch."""
    from streamctl.fixtures.example_runs import read_input, write_inputs

    inp, out, chk = tmp_path / "input", tmp_path / "output", tmp_path / "checkpoint"
    write_inputs(inp, 0, 7)
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "3")
    try:
        q = (read_input(spark, inp).writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(chk)).trigger(availableNow=True).start())
        q.awaitTermination()
    finally:
        spark.conf.unset("spark.sql.streaming.fileSink.log.compactInterval")
    names = sorted(p.name for p in (out / "_spark_metadata").iterdir() if not p.name.startswith("."))
    assert "2.compact" in names and "5.compact" in names
    r = cli("inspect", "sink", str(out), "--json")
    rec = r.json()["sink"]
    assert r.code == 0 and rec["compactions"] == [2, 5] and rec["epoch"] == 6
    five = next(e for e in rec["epochs"] if e["epoch"] == 5)
    assert len(five["files"]) == 6  # the compaction holds every file of batches 0..5
    drop_batches(chk / "offsets", 3)
    drop_batches(chk / "commits", 3)
    code, q = inspect(cli, chk, out)
    (f,) = q["findings"]
    assert code == 1 and f["code"] == "SINK_AHEAD" and f["skipped"] == [4, 5, 6]


def test_checkpoint_and_sink_copied_into_a_second_pipeline(cli, spark_checkpoints, tmp_path):
    src = spark_checkpoints["stateless_file_sink"]
    second = tmp_path / "second"
    copy_tree(src.parent, second)
    r = cli("inspect", "epochs", str(src), str(second / "checkpoint"),
            "--sink", str(src.parent / "output"), "--sink", str(second / "output"), "--json")
    doc = r.json()
    assert r.code == 1 and [f["code"] for f in doc["findings"]] == ["QUERY_ID_CLASH"]
    assert json.loads((second / "checkpoint/metadata").read_text())["id"] == doc["queries"][0]["query_id"]
    first, copy = doc["queries"]
    assert first["verdict"] == "aligned" and not first["findings"], first
    # the copy's log still names the original's data files: its readers see none of them
    (f,) = copy["findings"]
    assert f["code"] == "SINK_FILES_MISSING" and f["old_roots"] == [str(src.parent / "output")], f
    assert f["moved_count"] == f["missing_count"] > 0 and f["lost_count"] == 0, f


def test_delta_table_written_by_foreach_batch_with_txn(cli, fresh_copy):
    chk = fresh_copy("delta_foreach_batch")
    out = chk.parent / "output"
    code, q = inspect(cli, chk, out)
    assert code == 0 and q["sink"] == {"kind": "delta", "uri": str(out), "epoch": 5} and q["verdict"] == "aligned"
    r = cli("inspect", "sink", str(out), "--app-id", q["query_id"], "--json")
    assert r.json()["sink"]["table_version"] == 5
    # an older copy of the checkpoint restored under a table that went on
    drop_batches(chk / "offsets", 2)
    drop_batches(chk / "commits", 2)
    code, q = inspect(cli, chk, out)
    (f,) = q["findings"]
    assert code == 1 and f["code"] == "SINK_AHEAD" and f["skipped"] == [3, 4, 5]
    # a copied pipeline keyed by another app id has written nothing: behind
    r = cli("inspect", "epochs", str(chk), "--sink", str(out), "--app-id", "another-app", "--json")
    assert r.code == 1 and [f["code"] for f in r.json()["queries"][0]["findings"]] == ["SINK_BEHIND"]


def test_coordinated_sink_writers_and_a_crashed_epoch(cli, fresh_copy):
    chk = fresh_copy("coordinated_sink")
    out = chk.parent / "output"
    r = cli("inspect", "writers", str(chk), "--sink", str(out), "--json")
    q = r.json()["queries"][0]
    assert r.code == 0 and q["sink"]["epoch"] == 5 and q["common_window"] == [0, 5]
    sink_writers = [w for w in q["writers"] if w["kind"] == "sink_writer"]
    assert [(w["writer"], w["first"], w["last"], w["status"]) for w in sink_writers] == [
        ("sink/writer-0", 0, 5, "ok"), ("sink/writer-1", 0, 5, "ok")]
    # epoch 5 crashed after its tasks staged their parts: no commit record, staging left,
    # and the checkpoint never committed batch 5 (Spark replays it)
    record = json.loads((out / "_commits/5.json").read_text())
    (out / "_staging/5").mkdir(parents=True, exist_ok=True)
    for w in record["writers"]:
        for f in w["files"]:
            (out / f).rename(out / "_staging/5" / Path(f).name)
    (out / "_commits/5.json").unlink()
    drop_batches(chk / "commits", 4)
    code, q = inspect(cli, chk, out)
    found = {f["code"]: f for f in q["findings"]}
    assert code == 0 and q["verdict"] == "recoverable" and q["sink"]["epoch"] == 4
    assert set(found) == {"IN_FLIGHT", "SINK_ORPHANS"} and "uncommitted epoch(s) 5" in found["SINK_ORPHANS"]["message"]
    # the same sink under a checkpoint that did commit 5: the sink is behind
    code, q = inspect(cli, fresh_copy("coordinated_sink"), out)
    assert code == 1 and "SINK_BEHIND" in [f["code"] for f in q["findings"]]

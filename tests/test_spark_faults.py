"""Real PySpark 4.1 checkpoints (see streamctl.fixtures.examples), inspected as written and then
damaged the way operators and crashes damage them (docs/model.md#findings)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers.paths import SPARK35, copy_spark35
from helpers.trees import copy_tree, wait_quiet

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]

STATEFUL = ("agg_hdfs", "agg_rocksdb", "agg_rocksdb_v2", "join_hdfs", "dedup_rocksdb")


def epochs(cli, *paths: Path) -> tuple[int, dict]:
    r = cli("inspect", "epochs", *map(str, paths), "--json")
    assert "Traceback" not in r.stderr
    return r.code, r.json()


def codes(q: dict) -> list[str]:
    return sorted(f["code"] for f in q["findings"])


def state_files(chk: Path, op: int, part: int, version: int, store: str | None = None) -> list[Path]:
    """Every file of one state version (delta/snapshot/zip/changelog, with or without unique id,
    plus checksum companions)."""
    d = chk / "state" / str(op) / str(part) / (store or "")
    out = []
    for f in d.iterdir():
        if f.is_file():
            head = f.name.lstrip(".").split(".", 1)[0].split("_", 1)[0]
            if head == str(version):
                out.append(f)
    return out


def test_every_real_checkpoint_is_aligned(cli, spark_checkpoints):
    code, doc = epochs(cli, *spark_checkpoints.values())
    assert code == 0, json.dumps(doc, indent=1)[:3000]
    for q in doc["queries"]:
        assert q["verdict"] == "aligned", q
        assert q["planned"] == q["committed"]
        assert q["retained"]["offsets"][0] == 0
        assert q["query_id"] and q["common_window"] is not None
        name = Path(q["checkpoint"]).parent.name
        if name in STATEFUL:
            assert q["state_epoch"] == q["committed"], name
            assert q["common_window"][1] == q["committed"]
        else:
            assert q["stateful"] is False and q["state_epoch"] is None


@pytest.mark.spark4
def test_real_state_layouts(cli, spark_checkpoints):
    docs = {}
    for name in STATEFUL:
        r = cli("inspect", "state", str(spark_checkpoints[name]), "--json")
        assert r.code == 0, r
        docs[name] = r.json()
    hdfs = docs["agg_hdfs"]["operators"][0]
    assert hdfs["provider"] == "hdfs" and hdfs["num_partitions"] == 4 and hdfs["name"] == "stateStoreSave"
    assert all(s["chain"] == "ok" and s["durable_version"] == 8 for s in hdfs["stores"])
    rocks = docs["agg_rocksdb"]["operators"][0]
    assert rocks["provider"] == "rocksdb" and all(s["newest_snapshot"] for s in rocks["stores"])
    v2 = docs["agg_rocksdb_v2"]
    assert v2["checkpoint_format"] == 2 and all(s["unique_ids"] for s in v2["operators"][0]["stores"])
    join = docs["join_hdfs"]["operators"][0]
    assert join["name"] == "symmetricHashJoin" and len(join["stores"]) == 16
    assert set(join["store_names"]) == {"left-keyToNumValues", "left-keyWithIndexToValue",
                                        "right-keyToNumValues", "right-keyWithIndexToValue"}


@pytest.mark.parametrize("name", ["agg_hdfs", "agg_rocksdb", pytest.param("agg_rocksdb_v2", marks=pytest.mark.spark4), "join_hdfs"])
def test_deleting_a_state_file_the_restart_needs(cli, fresh_copy, name):
    chk = fresh_copy(name)
    store = "left-keyWithIndexToValue" if name == "join_hdfs" else None
    victims = state_files(chk, 0, 2, 8, store)
    assert victims
    for f in victims:
        f.unlink()
    code, doc = epochs(cli, chk)
    q = doc["queries"][0]
    assert code == 1 and q["verdict"] == "misaligned"
    (f,) = [f for f in q["findings"] if f["code"] == "STATE_UNRESTORABLE"]
    (bad,) = f["stores"]
    assert (bad["partition"], bad["store"]) == (2, store or "default")
    assert bad["missing"] and "8" in bad["missing"][-1]
    assert q["state_epoch"] is not None and q["state_epoch"] < q["committed"]
    assert {w["writer"]: w["status"] for w in q["writers"]}[f"state/0/2{'/' + store if store else ''}"] == "behind"


def test_deleting_the_newest_offsets_file_is_commit_ahead(cli, fresh_copy):
    chk = fresh_copy("agg_hdfs")
    (chk / "offsets/7").unlink()
    code, doc = epochs(cli, chk)
    q = doc["queries"][0]
    assert code == 1 and "COMMIT_AHEAD" in codes(q)
    assert (q["planned"], q["committed"]) == (6, 7)


def test_uncommitted_newest_batch_is_in_flight(cli, fresh_copy):
    chk = fresh_copy("agg_rocksdb")
    (chk / "commits/7").unlink()
    (chk / "commits/.7.crc").unlink()
    code, doc = epochs(cli, chk)
    q = doc["queries"][0]
    assert code == 0 and codes(q) == ["IN_FLIGHT"] and q["verdict"] == "recoverable"
    (chk / "commits/6").unlink()
    (chk / "commits/.6.crc").unlink()
    code, doc = epochs(cli, chk)
    assert code == 1 and "WAL_AHEAD" in codes(doc["queries"][0])


def test_gap_in_offsets(cli, fresh_copy):
    chk = fresh_copy("stateless_file_sink")
    (chk / "offsets/3").unlink()
    code, doc = epochs(cli, chk)
    (f,) = doc["queries"][0]["findings"]
    assert code == 1 and (f["code"], f["log"], f["missing"]) == ("LOG_GAP", "offsets", [3])


def test_temp_files_and_stray_versions_are_orphans(cli, fresh_copy):
    chk = fresh_copy("agg_hdfs")
    part = chk / "state/0/1"
    shutil.copy(part / "8.delta", part / "12.delta")
    (part / ".9.delta.3f1e2d4c-0000-1111-2222-333344445555.tmp").write_bytes(b"LZ4Block")
    (chk / "offsets/.8.3f1e2d4c-0000-1111-2222-333344445555.tmp").write_text("v1\n")
    code, doc = epochs(cli, chk)
    q = doc["queries"][0]
    assert code == 0 and q["verdict"] == "aligned" and q["planned"] == 7
    (f,) = q["findings"]
    assert f["code"] == "STATE_ORPHANS" and f["severity"] == "warning"
    assert sorted(Path(p).name for p in f["files"]) == [".9.delta.3f1e2d4c-0000-1111-2222-333344445555.tmp", "12.delta"]


@pytest.mark.spark4
def test_unnamed_unique_id_is_an_orphan_and_named_one_is_required(cli, fresh_copy):
    chk = fresh_copy("agg_rocksdb_v2")
    named = [f for f in state_files(chk, 0, 1, 8) if f.name.endswith(".changelog")]
    assert len(named) == 1
    shutil.copy(named[0], named[0].with_name("8_00000000-dead-beef-0000-000000000000.changelog"))
    code, doc = epochs(cli, chk)
    (f,) = doc["queries"][0]["findings"]
    assert f["code"] == "STATE_ORPHANS" and f["files"][0].endswith("8_00000000-dead-beef-0000-000000000000.changelog")
    named[0].unlink()
    code, doc = epochs(cli, chk)
    (f,) = [f for f in doc["queries"][0]["findings"] if f["code"] == "STATE_UNRESTORABLE"]
    assert f["stores"][0]["missing"] == [named[0].name]


def test_missing_partition_folder(cli, fresh_copy):
    chk = fresh_copy("dedup_rocksdb")
    shutil.rmtree(chk / "state/0/3")
    code, doc = epochs(cli, chk)
    (f,) = [f for f in doc["queries"][0]["findings"] if f["code"] == "STATE_PARTITION_MISSING"]
    assert code == 1 and f["missing_partitions"] == [3] and f["num_partitions"] == 4


def test_copied_checkpoint_shares_the_query_id(cli, spark_checkpoints, tmp_path):
    src = spark_checkpoints["agg_hdfs"]
    copy = tmp_path / "copied-checkpoint"
    copy_tree(src, copy)
    code, doc = epochs(cli, src, copy)
    assert code == 1 and [f["code"] for f in doc["findings"]] == ["QUERY_ID_CLASH"]


def test_corrupt_commit_file_is_unreadable(cli, fresh_copy, tree_snapshot):
    chk = fresh_copy("join_hdfs")
    data = (chk / "commits/7").read_bytes()
    (chk / "commits/7").write_bytes(data[: len(data) // 2])
    before = tree_snapshot(chk)
    code, doc = epochs(cli, chk)
    (f,) = [f for f in doc["queries"][0]["findings"] if f["code"] == "UNREADABLE"]
    assert code == 3 and f["path"] == str(chk / "commits/7")
    assert tree_snapshot(chk) == before




@pytest.mark.parametrize("name", ["agg_hdfs", "agg_rocksdb"])
def test_pyspark_3_5_checkpoints(cli, name, tmp_path):
    """Checkpoints written by PySpark 3.5 (scripts/make_spark35_fixture.sh) read the same way (a
    copy whose file source's log names an input folder that exists here)."""
    chk = copy_spark35(SPARK35 / name / "checkpoint", tmp_path / name / "checkpoint")
    code, doc = epochs(cli, chk)
    q = doc["queries"][0]
    assert code == 0 and q["verdict"] == "aligned", q
    assert (q["planned"], q["committed"], q["state_epoch"]) == (3, 3, 3)
    r = cli("inspect", "state", str(chk), "--json")
    op = r.json()["operators"][0]
    assert op["provider"] == ("hdfs" if name == "agg_hdfs" else "rocksdb")
    assert op["metadata_version"] is None and op["num_partitions_source"] == "offsets_conf"
    assert len(op["stores"]) == 2 and all(s["durable_version"] == 4 for s in op["stores"])


def test_spark_agrees_with_the_verdicts(cli, spark, spark_checkpoints, fresh_copy):
    """What inspect says is what a restart of the real query does: an in-flight checkpoint
    (recoverable) replays its batch and is aligned again; one whose replay needs a deleted state
    file (unrestorable) fails."""
    from streamctl.fixtures.examples import rerun_agg

    chk = fresh_copy("agg_rocksdb")
    (chk / "commits/7").unlink()  # by hand, the way operators do it: the hidden .7.crc stays
    code, doc = epochs(cli, chk)
    assert code == 1 and codes(doc["queries"][0]) == ["IN_FLIGHT", "STALE_CHECKSUM"]
    with pytest.raises(Exception, match="Multiple streaming queries are concurrently using"):
        rerun_agg(spark, chk, spark_checkpoints["agg_rocksdb"].parent / "input", "agg_rocksdb")

    chk = fresh_copy("agg_rocksdb")
    (chk / "commits/7").unlink()
    (chk / "commits/.7.crc").unlink()
    assert epochs(cli, chk)[1]["verdict"] == "recoverable"
    rerun_agg(spark, chk, spark_checkpoints["agg_rocksdb"].parent / "input", "agg_rocksdb")
    # the state store maintenance thread may still upload a zip and its SSTs (or clean old ones)
    # right after the query stopped: judge the checkpoint once it is quiet, not midway
    wait_quiet(chk.parent)
    code, doc = epochs(cli, chk)
    assert code == 0 and doc["verdict"] == "aligned" and doc["queries"][0]["committed"] == 7, doc["queries"][0]["findings"]

    chk = fresh_copy("agg_hdfs")
    (chk / "commits/7").unlink()  # batch 7 is replayed: it loads state version 7
    (chk / "commits/.7.crc").unlink()
    for f in state_files(chk, 0, 2, 7):
        f.unlink()
    code, doc = epochs(cli, chk)
    assert code == 1 and "STATE_UNRESTORABLE" in codes(doc["queries"][0])
    with pytest.raises(Exception) as info:
        rerun_agg(spark, chk, spark_checkpoints["agg_hdfs"].parent / "input", "agg_hdfs")
    assert "7.delta" in str(info.value)

"""Smoke tests: the checkpoints that real PySpark runs (streamctl.fixtures.examples) leave behind,
and the committed PySpark 3.5 fixture. Assert only what Spark itself guarantees; snapshot
versions depend on maintenance timing, so only their presence is checked."""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from helpers.paths import SPARK35

PARTITIONS = range(4)
JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _spark_41() -> bool:
    try:
        import pyspark
    except ImportError:
        return False
    return pyspark.__version__.startswith("4.1.")


SPARK_41 = _spark_41()


def batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.is_file() and p.name.isdigit())


def log_json(path: Path) -> tuple[str, list[dict]]:
    """A `v1`/`v2` header line followed by JSON lines."""
    version, *rest = path.read_text().splitlines()
    return version, [json.loads(line) for line in rest if line.strip()]


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def operator_metadata(ckpt: Path) -> dict:
    version, (meta,) = log_json(ckpt / "state" / "0" / "_metadata" / "metadata")
    assert version == "v1"
    return meta




@pytest.mark.spark
def test_every_scenario_finished_cleanly(spark_checkpoints: dict[str, Path]) -> None:
    assert set(spark_checkpoints) == {
        "stateless_file_sink", "agg_hdfs", "agg_rocksdb", "agg_rocksdb_v2", "join_hdfs", "dedup_rocksdb",
        "coordinated_sink", "delta_foreach_batch",
    }
    for name, ckpt in spark_checkpoints.items():
        assert ckpt == ckpt.parent / "checkpoint" and ckpt.parent.name == name
        assert re.fullmatch(r'\{"id":"' + UUID + r'"\}', (ckpt / "metadata").read_text())
        offsets, commits = batch_ids(ckpt / "offsets"), batch_ids(ckpt / "commits")
        assert offsets == commits == list(range(len(offsets))), name
        assert len(offsets) >= 6, name
        version, (meta, *sources) = log_json(ckpt / "offsets" / str(offsets[-1]))
        assert version == "v1" and sources and all("logOffset" in s for s in sources)
        assert meta["conf"]["spark.sql.shuffle.partitions"] == "4"
        # Hadoop's hidden checksum sidecars next to the log files
        assert (ckpt / "offsets" / f".{offsets[-1]}.crc").is_file()


@pytest.mark.spark
def test_stateless_file_sink(spark_checkpoints: dict[str, Path]) -> None:
    ckpt = spark_checkpoints["stateless_file_sink"]
    assert not (ckpt / "state").exists()
    last = batch_ids(ckpt / "offsets")[-1]
    assert last == 5
    sink_log = ckpt.parent / "output" / "_spark_metadata"
    assert batch_ids(sink_log) == list(range(last + 1))
    version, entries = log_json(sink_log / str(last))
    assert version == "v1" and entries and all(e["action"] == "add" for e in entries)
    assert all((ckpt.parent / "output" / Path(e["path"]).name).is_file() for e in entries)


@pytest.mark.spark
def test_agg_hdfs_deltas_with_checksum_companions(spark_checkpoints: dict[str, Path]) -> None:
    ckpt = spark_checkpoints["agg_hdfs"]
    last = batch_ids(ckpt / "commits")[-1]
    provider = log_json(ckpt / "offsets" / str(last))[1][0]["conf"]["spark.sql.streaming.stateStore.providerClass"]
    assert provider.endswith("HDFSBackedStateStoreProvider")
    meta = operator_metadata(ckpt)
    assert meta["operatorInfo"]["operatorName"] == "stateStoreSave"
    assert meta["stateStoreInfo"] == [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": 4}]
    assert (ckpt / "state" / "0" / "0" / "_metadata" / "schema").is_file()
    for p in PARTITIONS:
        store = ckpt / "state" / "0" / str(p)
        files = names(store)
        for v in range(1, last + 2):  # version = batch + 1
            assert f"{v}.delta" in files, (p, v)
            assert f".{v}.delta.crc" in files, (p, v)  # Hadoop's hidden sidecar
            # 4.1: a visible Spark checksum companion (with its own hidden sidecar); 4.3 writes it
            # only with checkpoint format 2 (spark.sql.streaming.checkpoint.fileChecksum.enabled:
            # "only enabled when STATE_STORE_CHECKPOINT_FORMAT_VERSION >= 2"); this scenario is format 1
            assert ({f"{v}.delta.crc", f".{v}.delta.crc.crc"} <= files) == SPARK_41, (p, v)
        if SPARK_41:
            companion = json.loads((store / "1.delta.crc").read_text())
            assert companion["algorithm"] == "CRC32C"
            assert companion["mainFileSize"] == (store / "1.delta").stat().st_size
        assert any(f.endswith(".snapshot") for f in files), p
        assert (store / "1.delta").read_bytes()[:8] == b"LZ4Block"


@pytest.mark.spark
def test_agg_rocksdb_changelogs_and_zips(spark_checkpoints: dict[str, Path]) -> None:
    ckpt = spark_checkpoints["agg_rocksdb"]
    last = batch_ids(ckpt / "commits")[-1]
    assert log_json(ckpt / "commits" / str(last))[0] == "v1"
    for p in PARTITIONS:
        store = ckpt / "state" / "0" / str(p)
        files = names(store)
        assert {f"{v}.changelog" for v in range(1, last + 2)} <= files, p
        zips = sorted(store.glob("*.zip"))
        assert zips, p
        with zipfile.ZipFile(zips[-1]) as zf:
            header, body = zf.read("metadata").decode().split("\n", 1)
        assert header == "v1" and "sstFiles" in json.loads(body)


@pytest.mark.spark
def test_agg_rocksdb_v2_commit_names_the_unique_ids(spark_checkpoints: dict[str, Path]) -> None:
    ckpt = spark_checkpoints["agg_rocksdb_v2"]
    last = batch_ids(ckpt / "commits")[-1]
    version, (commit,) = log_json(ckpt / "commits" / str(last))
    assert version == "v2"
    ids = commit["stateUniqueIds"]["0"]
    assert len(ids) == 4 and all(len(per_partition) == 1 for per_partition in ids)
    for p in PARTITIONS:
        store = ckpt / "state" / "0" / str(p)
        files = names(store)
        # the state matching commits/N is version N+1, named <version>_<uuid>
        assert f"{last + 1}_{ids[p][0]}.changelog" in files
        assert all(re.fullmatch(r"\d+_" + UUID + r"\.(changelog|zip)(\.crc)?", f) for f in files if not f.startswith((".", "SSTs", "_")))
        assert not any(re.fullmatch(r"\d+\.(changelog|zip)", f) for f in files)


@pytest.mark.spark
def test_join_has_the_four_named_stores(spark_checkpoints: dict[str, Path]) -> None:
    ckpt = spark_checkpoints["join_hdfs"]
    last = batch_ids(ckpt / "commits")[-1]
    assert sorted(names(ckpt / "sources")) == ["0", "1"]
    meta = operator_metadata(ckpt)
    assert meta["operatorInfo"]["operatorName"] == "symmetricHashJoin"
    assert [s["storeName"] for s in meta["stateStoreInfo"]] == list(JOIN_STORES)
    for p in PARTITIONS:
        assert names(ckpt / "state" / "0" / str(p)) == set(JOIN_STORES)
        for store in JOIN_STORES:
            files = names(ckpt / "state" / "0" / str(p) / store)
            assert {f"{v}.delta" for v in range(1, last + 2)} <= files, (p, store)
    assert log_json(ckpt / "commits" / str(last))[1][0]["nextBatchWatermarkMs"] > 0


@pytest.mark.spark
def test_dedup_rocksdb(spark_checkpoints: dict[str, Path]) -> None:
    ckpt = spark_checkpoints["dedup_rocksdb"]
    last = batch_ids(ckpt / "commits")[-1]
    assert operator_metadata(ckpt)["operatorInfo"]["operatorName"] == "dedupe"
    for p in PARTITIONS:
        assert f"{last + 1}.changelog" in names(ckpt / "state" / "0" / str(p))


@pytest.mark.spark
def test_fresh_copy_is_independent(spark_checkpoints: dict[str, Path], fresh_copy) -> None:
    original = spark_checkpoints["agg_hdfs"]
    copy = fresh_copy("agg_hdfs")
    assert copy != original and copy.name == "checkpoint" and copy.parent.name == "agg_hdfs"
    assert (copy.parent / "input").is_dir()
    (copy / "commits" / "0").unlink()
    assert (original / "commits" / "0").is_file()
    assert fresh_copy("agg_hdfs") != copy
    with pytest.raises(KeyError):
        fresh_copy("nope")


# --------------------------------------------------------------------------- committed 3.5 fixture


def test_spark35_fixture_layout() -> None:
    readme = (SPARK35 / "README.md").read_text()
    assert re.search(r"pyspark 3\.5\.\d+", readme)
    for name, suffix in (("agg_hdfs", "delta"), ("agg_rocksdb", "changelog")):
        ckpt = SPARK35 / name / "checkpoint"
        assert batch_ids(ckpt / "offsets") == batch_ids(ckpt / "commits") == [0, 1, 2, 3]
        assert not (ckpt.parent / "input").exists()
        assert not (ckpt / "state" / "0" / "_metadata").exists()  # operator metadata is 4.0+
        for p in (0, 1):
            files = names(ckpt / "state" / "0" / str(p))
            assert {f"{v}.{suffix}" for v in range(1, 5)} <= files
            assert not any(f.endswith(".crc") and not f.startswith(".") for f in files)  # no 4.1 companions
    assert list((SPARK35 / "agg_rocksdb" / "checkpoint" / "state" / "0" / "0").glob("*.zip"))


@pytest.mark.spark
def test_dev_examples_builds_a_scenario_and_inspects_it(tmp_path: Path) -> None:
    """`./dev examples` runs `python -m streamctl.fixtures.examples --inspect`: here on one scenario
    in its own process (the session fixture `spark_checkpoints` builds every scenario with the
    same builders in-process)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, NO_COLOR="1")
    r = subprocess.run([sys.executable, "-m", "streamctl.fixtures.examples", "--dir", str(tmp_path),
                        "--only", "stateless_file_sink", "--inspect"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "$ streamctl inspect epochs" in r.stdout and "verdict: aligned" in r.stdout
    assert "file 5" in r.stdout  # the file sink's epoch in the sink column
    assert "(exit code 0)" in r.stdout and "Traceback" not in r.stdout + r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stateless_file_sink"]

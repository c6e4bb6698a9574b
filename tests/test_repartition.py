"""Spark's own offline state repartition (PySpark 4.2+, `spark._streamingCheckpointManager.repartition`)
and "never repair what a restart reads".

Each test runs a real PySpark 4.3 query (tests/helpers/align_pipeline.py), runs Spark's repartition on its
checkpoint, and checks first what a repartitioned checkpoint must not lead to (a wrong finding, a
plan that moves state a restart reads, align refusing a SINK_BEHIND, an IN_FLIGHT verdict for a
checkpoint Spark refuses to start from). Then `align` repairs it and the same query restarts
through the file sink's next compaction (compactInterval 3) with the delivery check: every id
exactly once. The standing test of that rule runs align and trim on every clean example checkpoint
the suite builds and checks that neither plans to move anything a restart reads; its second half
does the same on every pipeline shape of tests/helpers/align_pipeline.py and restarts the query after
both, with the delivery check.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers.trees import wait_quiet

pytestmark = [pytest.mark.spark]




def _needs_repartition(spark: Any) -> None:
    if not hasattr(spark, "_streamingCheckpointManager"):
        pytest.skip("Spark's offline state repartition needs PySpark 4.2+ (this leg runs an older line)")


def _inspect(cli: Any, p: Any, sink: bool) -> tuple[int, dict, set[str]]:
    args = ["inspect", "epochs", str(p.checkpoint), "--json"] + (["--sink", str(p.output)] if sink else [])
    r = cli(*args)
    assert "Traceback" not in r.stderr, r
    q = r.json()["queries"][0]
    return r.code, q, {f["code"] for f in q["findings"]}


def _align(cli: Any, p: Any, sink: bool, execute: bool) -> Any:
    args = ["align", str(p.checkpoint), "--json"] + (["--sink", str(p.output)] if sink else [])
    r = cli(*args, *(["--execute"] if execute else []))
    assert "Traceback" not in r.stderr, r
    return r


def _offsets_metadata(p: Any, batch: int) -> tuple[str, dict]:
    """`offsets/<batch>`'s version line and metadata JSON (line 2 in v1 and v2 alike)."""
    import json

    lines = (p.checkpoint / f"offsets/{batch}").read_text().split("\n")
    return lines[0], json.loads(lines[1])


def _partitions(p: Any, batch: int) -> int:
    return int(_offsets_metadata(p, batch)[1]["conf"]["spark.sql.shuffle.partitions"])


def _restart_through_compaction(cli: Any, p: Any, files: int, compaction: int, committed: int) -> None:
    """Restart with `files` more input files through the file sink's compaction at batch
    `compaction`: every id exactly once in the sink, and the checkpoint aligned at `committed`."""
    p.add_input(p.files, files)
    p.run()
    assert (p.output / f"_spark_metadata/{compaction}.compact").exists()
    d = p.delivery()
    assert d["ok"], d
    code, q, _ = _inspect(cli, p, sink=True)
    assert code == 0 and q["committed"] == committed, q["findings"]


def _state_steps(plan: dict) -> list[str]:
    return [s["path"] for s in plan["steps"] if s["root"] == "checkpoint" and s["path"].startswith("state/")]


@pytest.mark.spark4
@pytest.mark.parametrize("offsets_version", ["1", "2"])
def test_finished_repartition_with_file_sink(spark: Any, cli: Any, tmp_path: Path, align_pipeline: Any,
                                             offsets_version: str) -> None:
    """On offsets log v1 and v2 (`spark.sql.streaming.offsetLog.formatVersion`, 4.3.0). On v2 the
    repartition batch is told the same way (its conf's partition count): Spark's runner copies the
    last committed batch's `OffsetSeqMetadataV2` with only that key changed, so the optional
    `controlBatchInfo` is not the marker (4.3.0 never writes it)."""
    ap = align_pipeline
    _needs_repartition(spark)
    confs = {"spark.sql.streaming.offsetLog.formatVersion": offsets_version}
    p = ap.build(tmp_path, "dedup_rocksdb", spark, 3, extra_confs=confs)  # batches 0, 1, 2 (2.compact)
    new = 2 * _partitions(p, 2)
    spark._streamingCheckpointManager.repartition(str(p.checkpoint), new)
    assert (p.checkpoint / "commits/3").exists() and _partitions(p, 3) == new
    (version, meta), (_, before) = _offsets_metadata(p, 3), _offsets_metadata(p, 2)
    assert version == f"v{offsets_version}" and "controlBatchInfo" not in meta, meta
    for m in (meta, before):
        del m["conf"]["spark.sql.shuffle.partitions"]
    assert meta == before, (meta, before)  # a copy of the last committed batch's metadata
    assert (p.checkpoint / f"state/0/{new - 1}").is_dir() and not (p.output / "_spark_metadata/3").exists()

    # symptom 1: the new partitions are what a restart reads, never STATE_ORPHANS
    code, q, codes = _inspect(cli, p, sink=False)
    assert code == 0 and "REPARTITION_BATCH" in codes and "STATE_ORPHANS" not in codes, q["findings"]
    op = q["stateful"] and (cli("inspect", "state", str(p.checkpoint), "--json").json())
    assert op["operators"][0]["num_partitions"] == new, op
    plan = _align(cli, p, sink=False, execute=False)
    assert plan.code == 0 and _state_steps(plan.json()["plan"]) == [], plan.stdout

    # symptom 2: the file sink's log has no entry for the repartition batch
    code, q, codes = _inspect(cli, p, sink=True)
    assert code == 1 and "SINK_REPARTITION_HOLE" in codes and "SINK_BEHIND" not in codes, q["findings"]
    r = _align(cli, p, sink=True, execute=False)
    assert r.code == 0, r.stdout + r.stderr
    pl = r.json()["plan"]
    assert pl["classification"] == "exactly-once", pl
    assert sorted(s["path"] for s in pl["steps"]) == ["_spark_metadata/.3.crc", "_spark_metadata/3"], pl["steps"]
    done = _align(cli, p, sink=True, execute=True)
    assert done.code == 0 and done.json()["verified"] is True, done.stdout + done.stderr
    assert (p.output / "_spark_metadata/3").read_bytes() == b"v1"

    # the restart runs through the sink log's next compaction (batch 5) with 8 state partitions
    _restart_through_compaction(cli, p, files=3, compaction=5, committed=6)

    # item 3 on the repartitioned shape: trim keeps what a restart reads, and the restart proves it
    parts = sorted(x.name for x in (p.checkpoint / "state/0").iterdir() if x.name.isdigit())
    done = cli("trim", str(p.checkpoint), "--sink", str(p.output), "--keep-epochs", "1", "--execute", "--json")
    assert done.code == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert sorted(x.name for x in (p.checkpoint / "state/0").iterdir() if x.name.isdigit()) == parts
    p.add_input(p.files, 1)
    p.run()
    d = p.delivery()
    assert d["ok"], d


@pytest.mark.spark4
def test_repartition_hole_below_the_newest_batches_on_checkpoint_format_2(spark: Any, cli: Any, tmp_path: Path,
                                                                          align_pipeline: Any) -> None:
    """A repartition batch whose sink entry is missing while the query ran on past it (the file
    sink's log keeps the hole until its next compaction, where the query dies) is recognised at
    any age within the log's retained window, not only among the two newest batches; here on
    checkpoint format 2 (state unique ids) with a compaction interval of 5."""
    ap = align_pipeline
    _needs_repartition(spark)
    confs = {"spark.sql.streaming.fileSink.log.compactInterval": "5",
             "spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}
    p = ap.build(tmp_path, "dedup_rocksdb", spark, 5, extra_confs=confs)  # batches 0..4 (4.compact)
    new = 2 * _partitions(p, 4)
    key = "spark.sql.streaming.stateStore.checkpointFormatVersion"  # Spark's rewriter checks the session's
    saved = spark.conf.get(key, None)
    spark.conf.set(key, "2")
    try:
        spark._streamingCheckpointManager.repartition(str(p.checkpoint), new)
    finally:
        spark.conf.unset(key) if saved is None else spark.conf.set(key, saved)
    assert _partitions(p, 5) == new and (p.checkpoint / "commits/5").exists()
    p.add_input(p.files, 3)  # batches 6, 7, 8: the query runs on past the hole at 5
    p.run()
    wait_quiet(p.base)  # the state maintenance thread may still upload a snapshot
    assert not (p.output / "_spark_metadata/5").exists() and (p.output / "_spark_metadata/8").exists()

    code, q, codes = _inspect(cli, p, sink=True)
    assert code == 1 and q["checkpoint_format"] == 2, q
    assert "SINK_REPARTITION_HOLE" in codes and "LOG_GAP" not in codes and "REPARTITION_BATCH" in codes, q["findings"]
    r = _align(cli, p, sink=True, execute=True)
    assert r.code == 0 and r.json()["verified"] is True, r.stdout + r.stderr
    assert sorted(s["path"] for s in r.json()["plan"]["steps"]) == ["_spark_metadata/.5.crc", "_spark_metadata/5"]

    _restart_through_compaction(cli, p, files=2, compaction=9, committed=10)  # 9.compact reads 5


@pytest.mark.spark4
def test_repartition_hole_before_the_first_compaction_needs_the_interval(spark: Any, cli: Any, tmp_path: Path,
                                                                         align_pipeline: Any) -> None:
    """Before the sink log's first compaction nothing on disk shows its interval, so whether the
    repartition batch needs a plain or a `.compact` entry is unknown: align refuses naming the flag
    that supplies it, refuses an interval the log's files contradict, and with the right one
    writes the entry; the restart then runs through the compaction that reads it."""
    ap = align_pipeline
    _needs_repartition(spark)
    confs = {"spark.sql.streaming.fileSink.log.compactInterval": "10"}  # Spark's default
    p = ap.build(tmp_path, "dedup_rocksdb", spark, 3, extra_confs=confs)  # batches 0..2, no .compact yet
    spark._streamingCheckpointManager.repartition(str(p.checkpoint), 2 * _partitions(p, 2))
    assert (p.checkpoint / "commits/3").exists() and not (p.output / "_spark_metadata/3").exists()
    code, q, codes = _inspect(cli, p, sink=True)
    assert code == 1 and "SINK_REPARTITION_HOLE" in codes, q["findings"]

    r = _align(cli, p, sink=True, execute=False)
    assert r.code == 4 and "--sink-compact-interval" in r.stderr, r.stdout + r.stderr
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--sink-compact-interval", "3")
    assert r.code == 4 and "does not fit _spark_metadata/2" in r.stderr, r.stdout + r.stderr
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--sink-compact-interval", "10", "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r.stdout + r.stderr
    assert sorted(s["path"] for s in r.json()["plan"]["steps"]) == ["_spark_metadata/.3.crc", "_spark_metadata/3"]

    _restart_through_compaction(cli, p, files=6, compaction=9, committed=9)  # 9.compact reads 3


@pytest.mark.spark4
@pytest.mark.parametrize("kind", ["dedup_file", "dedup_offsets_v2"])  # offsets log v1, v2
def test_unfinished_repartition(spark: Any, cli: Any, tmp_path: Path, align_pipeline: Any, kind: str) -> None:
    ap = align_pipeline
    _needs_repartition(spark)
    p = ap.Pipeline(tmp_path, kind, spark)  # HDFS provider: Spark's repartition fails
    p.add_input(0, 2)
    p.run()
    wait_quiet(p.base)
    with pytest.raises(Exception, match="STATE_REPARTITION_INVALID_CHECKPOINT"):
        spark._streamingCheckpointManager.repartition(str(p.checkpoint), 2 * _partitions(p, 1))
    assert (p.checkpoint / "offsets/2").exists() and not (p.checkpoint / "commits/2").exists()
    assert _offsets_metadata(p, 2)[0] == ("v2" if kind == "dedup_offsets_v2" else "v1")

    # symptom 3: not IN_FLIGHT/recoverable: Spark refuses to start from it
    code, q, codes = _inspect(cli, p, sink=True)
    assert code == 1 and q["verdict"] == "misaligned", q
    assert "REPARTITION_UNFINISHED" in codes and "IN_FLIGHT" not in codes, q["findings"]
    with pytest.raises(Exception, match="STREAMING_UNFINISHED_REPARTITION_DETECTED"):
        p.run()

    r = _align(cli, p, sink=True, execute=False)
    assert r.code == 0, r.stdout + r.stderr
    pl = r.json()["plan"]
    assert pl["classification"] == "exactly-once" and pl["target"] == 1, pl
    moved = [s["path"] for s in pl["steps"]]
    assert "offsets/2" in moved and "offsets/.2.crc" in moved, moved
    assert not [m for m in moved if m.startswith("state/0/") and not m.split("/")[-1].lstrip(".").startswith("3.")], moved
    assert any("_streamingCheckpointManager.repartition(" in n for n in pl["notes"]), pl["notes"]
    done = _align(cli, p, sink=True, execute=True)
    assert done.code == 0 and done.json()["verified"] is True, done.stdout + done.stderr

    p.add_input(p.files, 2)  # batches 2 (2.compact) and 3
    p.run()
    assert (p.output / "_spark_metadata/2.compact").exists()
    d = p.delivery()
    assert d["ok"], d


def _layout(ckpt: Path) -> dict[str, list[str]]:
    """Every state partition folder and the state files of each (what a restart may open)."""
    out: dict[str, list[str]] = {}
    state = ckpt / "state"
    for part in sorted(state.glob("*/*")) if state.is_dir() else []:
        if part.is_dir() and part.name.isdigit():
            out[str(part.relative_to(ckpt))] = sorted(p.name for p in part.rglob("*") if p.is_file())
    return out


@pytest.mark.spark_lines
def test_align_and_trim_never_move_what_a_restart_reads(spark_checkpoints: dict[str, Path], fresh_copy: Any,
                                                         cli: Any) -> None:
    """Item 3, the standing test: on the clean checkpoint of every query shape the suite builds
    (HDFS/RocksDB, checkpoint format 1/2, aggregate, join, dedup, stateless, three sink kinds),
    `align` plans nothing and `trim` moves no partition folder and no file of a version a restart
    restores: after both, every store still restores the restart's version and nothing else
    changed in the state layout but old versions below the kept window."""
    for name in sorted(spark_checkpoints):
        ckpt = fresh_copy(name)
        before = _layout(ckpt)
        r = cli("align", str(ckpt), "--json")
        assert r.code == 0 and "Traceback" not in r.stderr, (name, r.stdout, r.stderr)
        assert [s for s in r.json()["plan"]["steps"] if s["path"].startswith("state/")] == [], (name, r.stdout)
        done = cli("trim", str(ckpt), "--keep-epochs", "1", "--execute", "--json")
        assert done.code == 0 and "Traceback" not in done.stderr, (name, done.stdout, done.stderr)
        after = _layout(ckpt)
        assert sorted(after) == sorted(before), (name, "a partition folder moved")
        state = cli("inspect", "state", str(ckpt), "--json").json()
        assert state["verdict"] in ("aligned", "recoverable"), (name, state["findings"])
        for op in state["operators"]:
            for s in op["stores"]:
                assert s["chain"] == "ok" and not s["missing"], (name, s)


@pytest.mark.spark_lines
@pytest.mark.parametrize("kind", [
    "file", "dedup_file", "dedup_rocksdb",
    pytest.param("coordinated", marks=pytest.mark.spark4),  # a Python data source sink (Spark 4)
    pytest.param("tws", marks=pytest.mark.spark4), pytest.param("tws_v2", marks=pytest.mark.spark4),
    pytest.param("tws_pandas", marks=pytest.mark.spark4), pytest.param("dedup_offsets_v2", marks=pytest.mark.spark4),
    pytest.param("named_source", marks=pytest.mark.spark4)])
def test_align_and_trim_then_restart_deliver_on_every_pipeline_shape(spark: Any, cli: Any, tmp_path: Path,
                                                                     align_pipeline: Any, kind: str) -> None:
    """Item 3 with the delivery check: on a clean checkpoint of every query shape of
    tests/helpers/align_pipeline.py (stateless file sink, dedup on HDFS and RocksDB, the coordinated sink,
    transformWithState on checkpoint format 1 and 2 and in pandas, offsets log v2, a named source),
    `align --execute` changes nothing a restart
    reads and `trim --keep-epochs 1 --execute` moves no partition folder; the restart after both
    reads every state store and delivers every id exactly once. One pipeline per shape: two
    batches, then after align and trim one more, the file sink's first compaction (batch 2)."""
    ap = align_pipeline
    p = ap.build(tmp_path, kind, spark, 2)
    if kind in ("dedup_offsets_v2", "named_source"):  # Spark wrote the `<sourceId>:<offset>` grammar
        sid = "orders" if kind == "named_source" else "0"
        assert (p.checkpoint / "offsets/1").read_text().split("\n")[::2] == ["v2", sid + ':{"logOffset":1}'], kind
    before = _layout(p.checkpoint)
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--execute", "--json")
    assert r.code == 0 and "Traceback" not in r.stderr, (kind, r.stdout, r.stderr)
    assert _layout(p.checkpoint) == before, (kind, "align changed the state of a clean checkpoint")
    done = cli("trim", str(p.checkpoint), "--sink", str(p.output), "--keep-epochs", "1", "--execute", "--json")
    assert done.code == 0 and done.json()["verified"] is True, (kind, done.stdout, done.stderr)
    assert sorted(_layout(p.checkpoint)) == sorted(before), (kind, "a partition folder moved")
    p.add_input(p.files, 1)
    p.run()
    d = p.delivery()
    assert d["ok"], (kind, d)
    code, q, codes = _inspect(cli, p, sink=True)
    assert code == 0 and q["committed"] == 2, (kind, q["findings"])
    if kind == "named_source":
        assert [(x["source"], x["kind"]) for x in q["sources"]] == [("orders", "file")], q["sources"]


@pytest.mark.spark_lines
@pytest.mark.spark4  # edits the operator metadata, which Spark writes from 4.0 on
def test_disagreeing_layout_sources_refuse(fresh_copy: Any, cli: Any, tree_snapshot: Any) -> None:
    """A partition folder beyond the offsets conf's count that the operator metadata still counts:
    the sources disagree, so the folder is not STATE_ORPHANS and align/trim refuse (exit 4),
    naming them, with nothing changed. (The disagreement is made by editing the real
    checkpoint's operator metadata: no Spark operation writes this state.)"""
    import json
    import shutil

    ckpt = fresh_copy("agg_hdfs")
    meta = ckpt / "state/0/_metadata/metadata"
    head, body = meta.read_text().split("\n", 1)
    doc = json.loads(body)
    n = doc["stateStoreInfo"][0]["numPartitions"]
    doc["stateStoreInfo"][0]["numPartitions"] = n + 1
    meta.write_text(head + "\n" + json.dumps(doc))
    (ckpt / "state/0/.metadata.crc").unlink(missing_ok=True)
    (ckpt / "state/0/_metadata/.metadata.crc").unlink(missing_ok=True)
    shutil.copytree(ckpt / "state/0/0", ckpt / f"state/0/{n}")
    r = cli("inspect", "epochs", str(ckpt), "--json")
    q = r.json()["queries"][0]
    codes = {f["code"]: f for f in q["findings"]}
    assert "STATE_LAYOUT_CONFLICT" in codes and "STATE_ORPHANS" not in codes, q["findings"]
    assert codes["STATE_LAYOUT_CONFLICT"]["sources"] == {"offsets_conf": n, "operator_metadata": n + 1}
    before = tree_snapshot(ckpt)
    for args in (("align", str(ckpt)), ("trim", str(ckpt))):
        res = cli(*args)
        assert res.code == 4 and "Traceback" not in res.stderr, (args, res.stdout, res.stderr)
        assert "STATE_LAYOUT_CONFLICT" in res.stderr and "offsets_conf says" in res.stderr, res.stderr
    assert tree_snapshot(ckpt) == before

"""Moved and copied sink folders, judged by real reads and a real restart
(docs/model.md#moved-and-copied-sinks).

A file sink's log names its data files by absolute path. A real PySpark query (kind
``dedup_file``: a file source, ``dropDuplicates``, a JSON file sink) runs over four input files;
then its checkpoint and sink are moved (or copied) to a new folder, the input staying where it
was. The oracle is Spark itself: a batch read of the moved sink (``spark.read.json``) silently
skips every logged file outside the sink's own path, and after ``align --execute`` it returns every id
once; the restarted query then delivers every id exactly once. A partitioned parquet sink checks
the partition folders and the row count from the footers.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from helpers.trees import copy_tree, move_tree, remove_tree, wait_quiet

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]

FILES = 4  # batches 0..3, ids 0..19


@pytest.fixture(scope="module")
def ap(align_pipeline: Any) -> Any:
    """tests/helpers/align_pipeline.py (conftest's session fixture)."""
    return align_pipeline


def _digests(folder: Path) -> dict[str, str]:
    return {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file() and "_streamctl" not in f.parts}


def _read_ids(spark: Any, out: Path) -> Counter[int]:
    """What a batch reader of the sink sees (through its `_spark_metadata` log)."""
    return Counter(int(r["id"]) for r in spark.read.schema("id BIGINT, key STRING").json(str(out)).collect())


def _relocated(ap: Any, spark: Any, tmp_path: Path, how: str) -> tuple[Any, Any]:
    """(the original pipeline, the pipeline at its new place): checkpoint and sink moved or
    copied to tmp_path/new, the input left where it was."""
    p = ap.build(tmp_path / "old", "dedup_file", spark, FILES)
    new_base = tmp_path / "new" / p.base.name
    new_base.mkdir(parents=True)
    for sub in ("checkpoint", "output"):
        if how == "move":
            move_tree(p.base / sub, new_base / sub)
        else:
            copy_tree(p.base / sub, new_base / sub)
    q = ap.Pipeline(tmp_path / "new", "dedup_file", spark)
    q.input, q.files = p.input, p.files
    return p, q


def test_moved_sink_is_found_and_its_log_rewritten(ap, spark, cli, tmp_path):
    p, q = _relocated(ap, spark, tmp_path, "move")
    assert sum(_read_ids(spark, q.output).values()) == 0  # the oracle: readers see none of the moved files

    r = cli("inspect", "epochs", str(q.checkpoint), "--sink", str(q.output), "--json")
    found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
    assert r.code == 1 and "SINK_FILES_MISSING" in found, found
    f = found["SINK_FILES_MISSING"]
    data_files = [x for x in (q.output).iterdir() if x.name.startswith("part-")]
    assert f["moved_count"] == f["missing_count"] == len(data_files) and f["lost_count"] == 0, f
    assert f["rows"] == 20 and f["old_roots"] == [str(p.output)], f  # 20 ids, one JSON line each
    assert "batch read" in f["message"] and "align rewrites" in f["message"]

    d = cli("diagnose", str(q.checkpoint), "--sink", str(q.output), "--json")
    assert d.code == 1 and d.json()["next"]["action"] == "align", d.json()["next"]

    before = _digests(q.base)
    plan = cli("align", str(q.checkpoint), "--sink", str(q.output), "--json")
    assert plan.code == 0, plan
    steps = plan.json()["plan"]["steps"]
    assert steps and all(s["action"] == "write" and s["root"] == "sink" for s in steps), steps
    assert _digests(q.base) == before  # a plan changes nothing

    done = cli("align", str(q.checkpoint), "--sink", str(q.output), "--execute", "--json")
    assert done.code == 0 and done.json()["verified"], done
    for rel in [s["path"] for s in steps if not s["path"].endswith(".crc")]:
        text = (q.output / rel).read_text()
        assert str(p.output) not in text and str(q.output) in text, rel
    assert _read_ids(spark, q.output) == Counter(range(20))  # every id once, through the rewritten log

    r = cli("inspect", "epochs", str(q.checkpoint), "--sink", str(q.output), "--json")
    assert r.code == 0 and r.json()["queries"][0]["verdict"] == "aligned", r.json()["queries"][0]["findings"]

    q.add_input(FILES, 2)  # the real restart at the new place: batches 4, 5 (the next compaction)
    q.run()
    assert q.delivery()["ok"], q.delivery()
    assert _read_ids(spark, q.output) == Counter(q.expected_ids())


def test_copied_sink_is_found_and_undo_puts_the_log_back(ap, spark, cli, tmp_path):
    """A copy whose original is still in place: its readers see none of the original's files
    either (only files below the sink's own path count)."""
    p, q = _relocated(ap, spark, tmp_path, "copy")
    assert sum(_read_ids(spark, q.output).values()) == 0  # the oracle
    assert _read_ids(spark, p.output) == Counter(range(20))  # the original reads its own

    r = cli("inspect", "epochs", str(q.checkpoint), "--sink", str(q.output), "--json")
    f = {x["code"]: x for x in r.json()["queries"][0]["findings"]}.get("SINK_FILES_MISSING")
    assert r.code == 1 and f is not None and f["old_roots"] == [str(p.output)] and f["lost_count"] == 0, r.json()

    before = _digests(q.output)
    done = cli("align", str(q.checkpoint), "--sink", str(q.output), "--execute", "--json")
    assert done.code == 0 and done.json()["verified"], done
    remove_tree(p.base / "output")  # the original goes: the copy does not need it
    assert _read_ids(spark, q.output) == Counter(range(20))

    undone = cli("align", "--undo", done.json()["backup"], "--json")
    assert undone.code == 0, undone
    assert _digests(q.output) == before  # byte for byte


def test_moved_partitioned_parquet_sink(spark, cli, tmp_path):
    """partitionBy folders (`key=k1/part-...parquet`): the relative path keeps them; rows come
    from the parquet footers. Here a batch read fails outright (reading the moved files' footers)."""
    src, out, ck = tmp_path / "in", tmp_path / "a" / "out", tmp_path / "a" / "ck"
    src.mkdir()
    for i in range(3):
        (src / f"part-{i}.json").write_text("".join(json.dumps({"id": i * 10 + j, "key": f"k{j % 2}"}) + "\n"
                                                    for j in range(4)))
    (spark.readStream.schema("id BIGINT, key STRING").option("maxFilesPerTrigger", 1).json(str(src))
     .writeStream.format("parquet").partitionBy("key").option("path", str(out)).option("checkpointLocation", str(ck))
     .trigger(availableNow=True).start().awaitTermination())
    dest = tmp_path / "b"
    move_tree(tmp_path / "a", dest)
    out2, ck2 = dest / "out", dest / "ck"
    with pytest.raises(Exception, match="does not exist"):  # the oracle: partition inference keeps the old paths
        spark.read.parquet(str(out2)).count()

    r = cli("inspect", "epochs", str(ck2), "--sink", str(out2), "--json")
    f = {x["code"]: x for x in r.json()["queries"][0]["findings"]}.get("SINK_FILES_MISSING")
    assert r.code == 1 and f is not None and f["rows"] == 12 and f["old_roots"] == [str(out)], r.json()
    done = cli("align", str(ck2), "--sink", str(out2), "--execute", "--json")
    assert done.code == 0 and done.json()["verified"], done
    rows = spark.read.parquet(str(out2)).collect()
    assert sorted(r["id"] for r in rows) == [i * 10 + j for i in range(3) for j in range(4)]
    assert {r["key"] for r in rows} == {"k0", "k1"}


def test_files_deleted_by_hand_are_named_and_align_refuses(ap, spark, cli, tmp_path):
    p = ap.build(tmp_path, "dedup_file", spark, FILES)
    victim = sorted(x for x in p.output.iterdir() if x.name.startswith("part-"))[0]
    victim.unlink()
    crc = victim.with_name(f".{victim.name}.crc")
    if crc.exists():
        crc.unlink()
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--json")
    f = {x["code"]: x for x in r.json()["queries"][0]["findings"]}.get("SINK_FILES_MISSING")
    assert r.code == 1 and f is not None and f["lost_count"] == 1 and victim.name in f["examples"][0], r.json()
    before = _digests(p.base)
    a = cli("align", str(p.checkpoint), "--sink", str(p.output), "--execute")
    assert a.code == 4 and victim.name in a.stderr and "exist" in a.stderr, a
    assert _digests(p.base) == before


def test_input_moved_with_the_checkpoint_fails_the_restart_until_align_rewrites_the_source_log(ap, spark, cli, tmp_path):
    """The whole pipeline folder (input, checkpoint, sink) moved: `sources/0/` keeps the input's
    old absolute paths, and the restart calls `getBatch` on the newest batch even when it is
    committed; Spark refuses the logged files outside the query's path (`Wrong basePath`). The
    oracle is that restart, on a copy; then align rewrites the source's log (and the sink's),
    and the restarted query delivers every id exactly once: no moved input file is read again
    (docs/model.md#moved-input)."""
    p = ap.build(tmp_path / "old", "dedup_file", spark, FILES)
    (tmp_path / "new").mkdir()
    move_tree(p.base, tmp_path / "new" / p.base.name)
    q = ap.Pipeline(tmp_path / "new", "dedup_file", spark)
    q.files = p.files
    ap.remove_with_companions(q.checkpoint / "commits", "3")  # and a crash before batch 3's commit: it is replayed

    trial = ap.Pipeline(tmp_path / "trial", "dedup_file", spark)  # the restart, as the operator would try it
    copy_tree(q.base, trial.base)
    trial.files = q.files
    with pytest.raises(Exception, match="Wrong basePath"):
        trial.run()

    r = cli("inspect", "epochs", str(q.checkpoint), "--sink", str(q.output), "--json")
    found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
    assert r.code == 1 and "SOURCE_MOVED" in found and "SOURCE_NOT_REPLAYABLE" not in found, found
    f = found["SOURCE_MOVED"]
    assert f["old_folder"] == str(p.input) and f["new_folder"] == str(q.input), f
    assert f["old_base"] == str(p.base) and f["new_base"] == str(q.base), f

    r = cli("align", str(q.checkpoint), "--sink", str(q.output), "--quiet-period", "0", "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r.stdout + r.stderr
    assert str(p.input) not in (q.checkpoint / "sources" / "0" / "3").read_text()
    r = cli("inspect", "epochs", str(q.checkpoint), "--sink", str(q.output), "--quiet-period", "0", "--json")
    assert r.code == 0 and {x["code"] for x in r.json()["queries"][0]["findings"]} <= {"IN_FLIGHT"}, r.stdout

    q.add_input(q.files, 2)
    q.run()
    d = q.delivery()
    assert d["ok"], d


def test_a_gone_input_folder_with_no_moved_copy_is_source_gone(ap, spark, cli, tmp_path):
    """A retention job deleted the input folder (found nowhere beside the checkpoint): SOURCE_GONE,
    not SOURCE_MOVED. The oracle: a restart on that path fails to start (`Path does not exist`);
    once the folder exists again the finding is gone and the restart delivers every id once."""
    p = ap.build(tmp_path, "dedup_file", spark, 2)
    shutil.rmtree(p.input)
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--quiet-period", "0", "--json")
    codes = {f["code"] for f in r.json()["queries"][0]["findings"]}
    assert r.code == 1 and "SOURCE_GONE" in codes and "SOURCE_MOVED" not in codes, r.stdout
    with pytest.raises(Exception, match="PATH_NOT_FOUND|Path does not exist"):
        p.run()
    wait_quiet(p.base)
    p.input.mkdir()
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--quiet-period", "0", "--json")
    assert r.code == 0, r.stdout
    p.add_input(2, 1)
    p.run()
    assert p.delivery()["ok"], p.delivery()


def test_a_new_sink_root_is_spelled_as_spark_spells_its_store() -> None:
    """A logged path rewritten to the sink's new place keeps the log's spelling on one kind of
    store, and takes Spark's spelling of the new store across kinds (a sink copied between the
    local disk and S3, or between two stores): `file:///...` locally, `s3a://bucket/...` on S3,
    `gs://bucket/...` on GCS, Azure's URI as named; never pyarrow's `anonymous@` or credentials."""
    from streamctl.inspectors.placement import new_root_spelling, norm_uri
    from streamctl.inspectors.storage import Storage

    local, s3 = Storage("/data/new out", local_root="/data/new out"), Storage("s3://bucket/new/out")
    assert new_root_spelling("file:///data/old/part-0.json", local) == "file:///data/new%20out"
    assert new_root_spelling("/data/old/part-0.json", local) == "/data/new out"
    assert new_root_spelling("s3a://other/old/part-0.json", local) == "file:///data/new%20out"
    assert new_root_spelling("s3a://other/old/part-0.json", s3) == "s3a://bucket/new/out"
    assert new_root_spelling("s3://other/old/part-0.json", s3) == "s3://bucket/new/out"
    assert new_root_spelling("file:///data/old/part-0.json", s3) == "s3a://bucket/new/out"
    gcs = Storage("gs://anonymous@bucket/new/out?endpoint_override=127.0.0.1:1&scheme=http")
    abfs = Storage("abfs://box@acct.dfs.core.windows.net/new/out?enable_tls=false")
    assert new_root_spelling("s3a://other/old/part-0.json", gcs) == "gs://bucket/new/out"
    assert new_root_spelling("gs://other/old/part-0.json", abfs) == "abfs://box@acct.dfs.core.windows.net/new/out"
    assert new_root_spelling("abfss://c@a.dfs.core.windows.net/old/p", Storage("s3://k:s@bucket/o")) == "s3a://bucket/o"
    # Hadoop's Path.toString (transformWithState's schema paths): not encoded, `file:/` locally
    assert new_root_spelling("file:/data/old/state/0", local, encoded=False) == "file:/data/new out"
    assert new_root_spelling("s3a://other/old/state/0", local, encoded=False) == "file:/data/new out"
    assert new_root_spelling("file:/data/old/state/0", s3, encoded=False) == "s3a://bucket/new/out"
    assert norm_uri("s3a://anonymous@bucket/k") == "s3://bucket/k" == norm_uri("s3://bucket/k")
    assert norm_uri("abfs://box@acct.dfs.core.windows.net/k") == "abfs://box@acct.dfs.core.windows.net/k"

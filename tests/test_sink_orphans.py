"""Orphan files of a file sink: data files a failed or aborted batch wrote into the sink
folder that `_spark_metadata` never listed (docs/formats/sinks.md#orphan-files).

A real PySpark query (tests/helpers/align_pipeline.py, kind ``file``) runs over four input files; then a
crashed attempt's leftovers are put beside its data files: a copy of a data file under a new
name, older than the log's newest batch file. The oracle is Spark: the sink's log reader never
sees it; a reader of the plain folder (a glob path bypasses the log) does. `inspect` reports it
(SINK_ORPHANS, warning), align moves it to the backup, undo puts it back, and the restarted query
delivers every id exactly once. A file newer than the newest batch file (a running batch's) is
never judged.
"""
from __future__ import annotations

import os
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark]

FILES = 4


@pytest.fixture(scope="module")
def ap(align_pipeline: Any) -> Any:
    return align_pipeline


def _ids(spark: Any, path: str) -> Counter[int]:
    return Counter(int(r["id"]) for r in spark.read.schema("id BIGINT, key STRING").json(path).collect())


def _orphan(out: Path, age_s: float) -> Path:
    """A leftover of a crashed task attempt: a data file under a new name, `age_s` older than now."""
    src = sorted(out.glob("part-*.json"))[0]
    dest = out / f"part-00000-{uuid.uuid4()}-c000.json"
    shutil.copyfile(src, dest)
    t = time.time() - age_s
    os.utime(dest, (t, t))
    return dest


def test_orphan_file_is_reported_moved_aside_and_undone(ap, spark, cli, tmp_path):
    p = ap.build(tmp_path, "file", spark, FILES)
    orphan = _orphan(p.output, 3600)
    assert _ids(spark, str(p.output)) == Counter(range(FILES * ap.ROWS))  # the log's readers: not seen
    plain = _ids(spark, str(p.output / "*.json"))  # a reader of the plain folder: seen twice
    assert sum(plain.values()) > FILES * ap.ROWS

    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--json")
    found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
    assert "SINK_ORPHANS" in found and found["SINK_ORPHANS"]["severity"] == "warning", found
    assert found["SINK_ORPHANS"]["count"] == 1 and orphan.name in found["SINK_ORPHANS"]["files"][0], found
    s = cli("inspect", "sink", str(p.output), "--json")
    assert any(f["code"] == "SINK_ORPHANS" for f in s.json()["findings"]), s.json()

    done = cli("align", str(p.checkpoint), "--sink", str(p.output), "--execute", "--json")
    assert done.code == 0 and done.json()["verified"], done
    assert [s["path"] for s in done.json()["plan"]["steps"] if s["action"] == "move"][0] == orphan.name
    assert not orphan.exists()
    assert _ids(spark, str(p.output / "*.json")) == Counter(range(FILES * ap.ROWS))  # the plain folder agrees now

    undone = cli("align", "--undo", done.json()["backup"], "--json")
    assert undone.code == 0 and orphan.exists(), undone
    done = cli("align", str(p.checkpoint), "--sink", str(p.output), "--execute", "--json")
    assert done.code == 0 and not orphan.exists()

    p.add_input(FILES, 2)
    p.run()
    assert p.delivery()["ok"], p.delivery()


def test_unlisted_file_newer_than_the_newest_batch_is_not_judged(ap, spark, cli, tmp_path):
    """A running batch writes its data files before its log entry: a file newer than the newest
    batch file may be one, so it is never reported nor moved."""
    p = ap.build(tmp_path, "file", spark, FILES)
    fresh = _orphan(p.output, -5)  # newer than every log file
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--json", "--quiet-period", "0")
    assert "SINK_ORPHANS" not in {f["code"] for f in r.json()["queries"][0]["findings"]}, r.json()
    a = cli("align", str(p.checkpoint), "--sink", str(p.output), "--json", "--quiet-period", "0")
    assert a.code == 0 and not a.json()["plan"]["steps"] and fresh.exists(), a


def test_drop_sink_takes_orphans_with_the_log(ap, spark, cli, tmp_path):
    """drop-sink retires `_spark_metadata/`: from then on every reader of the folder sees its files
    as data. The orphan goes to the archive with the log, so a plain read returns each id once."""
    p = ap.build(tmp_path, "file", spark, FILES)
    orphan = _orphan(p.output, 3600)
    r = cli("drop-sink", str(p.output), "--checkpoint", str(p.checkpoint), "--assume-stopped", "--execute", "--json")
    assert r.code == 0, r
    moved = [s["path"] for s in r.json()["plan"]["steps"] if s["root"] == "sink"]
    assert "_spark_metadata" in moved and orphan.name in moved, moved
    assert not orphan.exists() and not (p.output / "_spark_metadata").exists()
    assert _ids(spark, str(p.output)) == Counter(range(FILES * ap.ROWS))  # now a plain folder: each id once


def test_trim_moves_orphans_to_its_backup(ap, spark, cli, tmp_path):
    p = ap.build(tmp_path, "file", spark, FILES)
    orphan = _orphan(p.output, 3600)
    r = cli("trim", str(p.checkpoint), "--sink", str(p.output), "--keep-epochs", "2", "--execute", "--json")
    assert r.code == 0 and r.json()["verified"], r
    assert orphan.name in [s["path"] for s in r.json()["plan"]["steps"]] and not orphan.exists()
    assert r.json()["plan"]["after"]["reclaimable"]["staging"]["files"] == 1
    assert _ids(spark, str(p.output / "*.json")) == Counter(range(FILES * ap.ROWS))

"""The delivery check of `streamctl align` (docs/model.md#the-delivery-check) for every fault family
(numbered below): each test runs a real PySpark query (tests/helpers/align_pipeline.py), damages its checkpoint or
sink the way the fault happens in production, checks that `inspect epochs` names the fault, that
the plan changes nothing and is exactly-once, executes it (verified), then restarts the same query
with more input and checks that the sink holds every id exactly once (for the dedup kinds that is
also the stateful result of an undisturbed run: a lost state entry would let a repeated id through).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import align_pipeline
from helpers.trees import copy_tree

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]


ap = align_pipeline
Pipeline = ap.Pipeline


# -- helpers -------------------------------------------------------------------------------------
build = ap.build  # a pipeline run over its first input files and checked


def inspect(cli: Any, p: Any) -> tuple[int, dict, set[str]]:
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--json")
    assert "Traceback" not in r.stderr, r
    doc = r.json()
    q = doc["queries"][0]
    codes = {f["code"] for f in q["findings"]} | {f["code"] for f in doc.get("findings", [])}
    return r.code, q, codes


def plan(cli: Any, p: Any, tree_snapshot: Any, *extra: str) -> dict:
    """`align` without --execute: a plan, and not one byte changed below the pipeline."""
    before = tree_snapshot(p.base)
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--json", *extra)
    assert "Traceback" not in r.stderr, r
    assert tree_snapshot(p.base) == before, "align without --execute changed files"
    assert r.code == 0, r
    doc = r.json()
    assert doc["kind"] == "AlignPlan" and doc["executed"] is False, doc
    return doc["plan"]


def exactly_once_plan(cli: Any, p: Any, tree_snapshot: Any, code: str, strategy: str, target: int) -> tuple[dict, dict]:
    """The damage is seen (exit 1, finding `code`) and the plan mends it exactly-once: `strategy`
    to epoch `target`. Returns the inspection's query record and the plan."""
    rc, q, codes = inspect(cli, p)
    assert rc == 1 and code in codes, q["findings"]
    pl = plan(cli, p, tree_snapshot)
    assert pl["classification"] == "exactly-once" and pl["strategy"] == strategy and pl["target"] == target, pl
    return q, pl


def execute(cli: Any, p: Any, *extra: str) -> dict:
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--execute", "--json", *extra)
    assert "Traceback" not in r.stderr, r
    assert r.code == 0, r
    doc = r.json()
    assert doc["verified"] is True, doc
    return doc


def restart(p: Any, more: int = 2) -> dict:
    """The same real query, restarted with `more` new input files: every id exactly once."""
    p.add_input(p.files, more)
    p.run()
    d = p.delivery()
    assert d["ok"], d
    return d


def steps(pl: dict, action: str | None = None, root: str | None = None) -> list[str]:
    return [s["path"] for s in pl["steps"] if (action is None or s["action"] == action) and (root is None or s["root"] == root)]


def restore_older_checkpoint(p: Any, tmp_path: Path, second_run_files: int) -> None:
    """Copy the checkpoint aside, let the query go on (the sink advances), put the old copy back."""
    aside = tmp_path / f"{p.kind}-checkpoint-copy"
    copy_tree(p.checkpoint, aside)
    p.add_input(p.files, second_run_files)
    p.run()
    copy_tree(aside, p.checkpoint, replace=True)


def assert_sink_holds(p: Any, last_epoch: int) -> None:
    """Stateless kinds read one input file per batch: after a sink rollback to `last_epoch` the
    sink's own log must name exactly the rows of batches 0..last_epoch, each once."""
    want = sorted(n for i in range(last_epoch + 1) for n in p.ids_of(i))
    got = sorted(p.sink_ids())
    assert got == want, {"extra": sorted(set(got) - set(want)), "missing": sorted(set(want) - set(got)),
                         "duplicated": sorted({n for n in got if got.count(n) > 1})}


def sink_log_names(p: Any) -> list[str]:
    return sorted(n.name for n in (p.output / "_spark_metadata").iterdir() if not n.name.startswith("."))


# -- 1. a lost state file --------------------------------------------------------------------------
@pytest.mark.parametrize("kind,suffix", [("dedup_file", "delta"), ("dedup_rocksdb", "changelog")])
def test_lost_state_file_rolls_back(cli, spark, tmp_path, tree_snapshot, kind, suffix):
    p = build(tmp_path, kind, spark, 5)  # batches 0..4: C = 4, state version 5 is needed
    store = p.checkpoint / "state/0/1"
    assert ap.remove_with_companions(store, f"5.{suffix}")
    for snap in ("5.snapshot", "5.zip"):  # a snapshot of version 5 would still restore it
        ap.remove_with_companions(store, snap)
    q, pl = exactly_once_plan(cli, p, tree_snapshot, "STATE_UNRESTORABLE", "rollback", 3)
    assert "commits/4" in steps(pl, "move", "checkpoint")
    execute(cli, p)
    restart(p)


# -- 2. log gaps ------------------------------------------------------------------------------------
def test_commit_log_gap_is_rebuilt(cli, spark, tmp_path, tree_snapshot):
    p = build(tmp_path, "dedup_file", spark, 5)
    ap.remove_with_companions(p.checkpoint / "commits", "2")
    code, q, codes = inspect(cli, p)
    assert code == 1 and "LOG_GAP" in codes, q["findings"]
    pl = plan(cli, p, tree_snapshot)
    assert pl["classification"] == "exactly-once" and pl["target"] == 4, pl
    assert "commits/2" in steps(pl, "write", "checkpoint"), pl["steps"]
    execute(cli, p)
    assert (p.checkpoint / "commits/2").read_text().startswith("v1\n")
    restart(p)


def test_offsets_gap_narrows_the_retained_window(cli, spark, tmp_path, tree_snapshot):
    p = build(tmp_path, "dedup_file", spark, 5)  # P = 4
    ap.remove_with_companions(p.checkpoint / "offsets", "1")
    code, q, codes = inspect(cli, p)
    assert code == 1 and "LOG_GAP" in codes, q["findings"]
    pl = plan(cli, p, tree_snapshot)
    assert pl["classification"] == "exactly-once" and pl["target"] == 4, pl
    moved = steps(pl, "move", "checkpoint")
    assert {"offsets/0", "commits/0", "commits/1"} <= set(moved), moved
    assert not any(m in moved for m in ("offsets/2", "offsets/3", "offsets/4", "commits/4")), moved
    execute(cli, p)
    assert sorted(n.name for n in (p.checkpoint / "offsets").iterdir() if not n.name.startswith(".")) == ["2", "3", "4"]
    restart(p)


# -- 3. commit log ahead of the WAL ----------------------------------------------------------------
def test_commit_ahead_rolls_back(cli, spark, tmp_path, tree_snapshot):
    p = build(tmp_path, "dedup_file", spark, 5)
    ap.remove_with_companions(p.checkpoint / "offsets", "4")  # P = 3, C = 4
    q, pl = exactly_once_plan(cli, p, tree_snapshot, "COMMIT_AHEAD", "rollback", 3)
    execute(cli, p)
    restart(p)


# -- 4. WAL ahead of the commit log: complete the commit --------------------------------------------
def test_wal_ahead_rolls_forward(cli, spark, tmp_path, tree_snapshot):
    p = build(tmp_path, "file", spark, 5)
    for b in ("4", "3"):
        ap.remove_with_companions(p.checkpoint / "commits", b)  # C = 2, P = 4, sink at 4
    code, q, codes = inspect(cli, p)
    assert code == 1 and {"WAL_AHEAD", "SINK_AHEAD"} <= codes, q["findings"]
    pl = plan(cli, p, tree_snapshot)
    assert pl["classification"] == "exactly-once" and pl["strategy"] == "roll_forward" and pl["target"] == 4, pl
    assert {"commits/3", "commits/4"} <= set(steps(pl, "write", "checkpoint")), pl["steps"]
    assert not steps(pl, root="sink"), pl["steps"]
    execute(cli, p)
    restart(p)


# -- 5. sink ahead after a checkpoint restore -------------------------------------------------------
def test_file_sink_ahead_after_restore(cli, spark, tmp_path, tree_snapshot):
    p = build(tmp_path, "file", spark, 3)  # batches 0..2 (2.compact)
    restore_older_checkpoint(p, tmp_path, 2)  # the sink went on to 4
    assert sink_log_names(p) == ["0", "1", "2.compact", "3", "4"]
    q, pl = exactly_once_plan(cli, p, tree_snapshot, "SINK_AHEAD", "rollback", 2)
    assert q["sink"]["epoch"] == 4 and q["committed"] == 2, q
    assert {"_spark_metadata/3", "_spark_metadata/4"} <= set(steps(pl, "move", "sink")), pl["steps"]
    execute(cli, p)
    assert sink_log_names(p) == ["0", "1", "2.compact"]
    assert_sink_holds(p, 2)
    restart(p, 1)


def test_file_sink_ahead_across_a_compaction(cli, spark, tmp_path, tree_snapshot):
    p = build(tmp_path, "file", spark, 4)  # batches 0..3
    restore_older_checkpoint(p, tmp_path, 2)  # the sink went on to 5 (5.compact)
    assert "5.compact" in sink_log_names(p)
    q, pl = exactly_once_plan(cli, p, tree_snapshot, "SINK_AHEAD", "rollback", 3)
    assert q["sink"]["epoch"] == 5 and q["committed"] == 3, q
    assert {"_spark_metadata/4", "_spark_metadata/5.compact"} <= set(steps(pl, "move", "sink")), pl["steps"]
    execute(cli, p)
    assert sink_log_names(p) == ["0", "1", "2.compact", "3"]
    assert_sink_holds(p, 3)
    restart(p, 1)


@pytest.mark.spark4
def test_coordinated_sink_ahead_after_restore(cli, spark, tmp_path, tree_snapshot):
    p = build(tmp_path, "coordinated", spark, 3)
    restore_older_checkpoint(p, tmp_path, 2)
    q, pl = exactly_once_plan(cli, p, tree_snapshot, "SINK_AHEAD", "rollback", 2)
    assert q["sink"]["epoch"] == 4 and q["committed"] == 2, q
    assert {"_commits/3.json", "_commits/4.json"} <= set(steps(pl, "move", "sink")), pl["steps"]
    execute(cli, p)
    assert sorted(f.name for f in (p.output / "_commits").glob("*.json")) == ["0.json", "1.json", "2.json"]
    assert_sink_holds(p, 2)
    restart(p, 1)


CLEANUP = {"spark.sql.streaming.fileSink.log.cleanupDelay": "0",
           "spark.sql.streaming.fileSink.log.deletion": "true",
           # the sink log keeps the compaction that covers the newest minBatchesToRetain batches
           # (the harness's 100 would keep everything)
           "spark.sql.streaming.minBatchesToRetain": "3"}


@pytest.mark.parametrize("first,second,targets", [(5, 4, [1, 2, 3, 4]), (4, 5, [0, 1, 2, 3])],
                         ids=["restored-at-4", "restored-at-3"])
def test_file_sink_ahead_with_compacted_batch_files_deleted(cli, spark, tmp_path, tree_snapshot, first, second, targets):
    """cleanupDelay=0, minBatchesToRetain=3: compaction 8 deletes the sink log files of batches
    below 5 (2.compact, 3, 4). Left are 5.compact (batches 0..5 merged), 6, 7 and 8.compact.
    Restored at 4 the checkpoint needs 2.compact + 3 + 4; restored at 3, 2.compact + 3. Inside
    5.compact the files of the batches to keep cannot be told apart from those of the batches to
    roll back (nothing on disk says which batch wrote a file), and the restored checkpoint holds
    no batch after the restore to roll forward to. So align refuses (exit 4), with and without
    --execute, nothing changes, and it offers every roll back in `targets` as not possible, naming
    what is missing: the sink log files Spark deleted, or (restored at 4, to batch 1) offsets/0,
    which Spark's WAL retention removed."""
    restored = first - 1
    p = build(tmp_path, "file", spark, first, extra_confs=CLEANUP)  # batches 0..first-1
    restore_older_checkpoint(p, tmp_path, second)  # the sink went on to batch 8
    assert sink_log_names(p) == ["5.compact", "6", "7", "8.compact"], sink_log_names(p)
    code, q, codes = inspect(cli, p)
    assert code == 1 and "SINK_AHEAD" in codes and q["committed"] == restored, q["findings"]
    before = tree_snapshot(p.base)
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--json")
    assert "Traceback" not in r.stderr, r
    assert tree_snapshot(p.base) == before, "a refused plan changed files"
    doc = r.json()
    assert r.code == 4 and doc["kind"] == "AlignRefusal", doc
    assert "no exactly-once realignment exists" in doc["reason"], doc
    options = doc["options"]
    assert [(o["strategy"], o["target"], o["feasible"]) for o in options] == [("rollback", t, False) for t in targets], options
    for o in options:
        if o["target"] >= 2:  # the log from 2.compact up to the target, deleted after 5.compact
            lacking = ", ".join(["2.compact"] + [str(b) for b in range(3, o["target"] + 1)])
            assert o["why"].startswith(f"_spark_metadata/ lacks {lacking} needed to stop at batch {o['target']}: "
                                       "Spark deleted them after _spark_metadata/5.compact"), o
        else:  # restored at 4 Spark kept offsets/1.. only; restored at 3 the log of 0 and 1 is gone too
            early = {4: {1: "offsets/0 is missing"},
                     3: {0: "_spark_metadata/ lacks 0 needed", 1: "_spark_metadata/ lacks 0, 1 needed"}}[restored]
            assert o["why"].startswith(early[o["target"]]), o
    r2 = cli("align", str(p.checkpoint), "--sink", str(p.output), "--execute", "--json")
    assert r2.code == 4 and r2.json()["kind"] == "AlignRefusal", r2
    assert tree_snapshot(p.base) == before, "a refused --execute changed files"


# -- 6. sink behind (restored from an older backup) -------------------------------------------------
def test_file_sink_behind_rolls_back(cli, spark, tmp_path, tree_snapshot):
    p = build(tmp_path, "dedup_file", spark, 5)  # batches 0..4 (4 is not a compaction)
    log = p.output / "_spark_metadata"
    aside = tmp_path / "sink-aside"
    aside.mkdir()
    lines = (log / "4").read_text().split("\n")[1:]
    for line in filter(None, (x.strip() for x in lines)):
        from urllib.parse import unquote, urlparse

        data = Path(unquote(urlparse(json.loads(line)["path"]).path))
        shutil.move(str(data), aside / data.name)
        crc = data.parent / f".{data.name}.crc"
        if crc.exists():
            shutil.move(str(crc), aside / crc.name)
    for n in ("4", ".4.crc"):
        shutil.move(str(log / n), aside / n)
    q, pl = exactly_once_plan(cli, p, tree_snapshot, "SINK_BEHIND", "rollback", 3)
    assert q["sink"]["epoch"] == 3, q["findings"]
    execute(cli, p)
    restart(p)


# -- 7. a coordinated sink's writers misaligned -----------------------------------------------------
@pytest.mark.spark4
def test_coordinated_writer_missing_rolls_back(cli, spark, tmp_path, tree_snapshot):
    p = build(tmp_path, "coordinated", spark, 5)
    rec = json.loads((p.output / "_commits/3.json").read_text())
    victim = next(f for w in rec["writers"] for f in w["files"])
    (p.output / victim).unlink()
    q, pl = exactly_once_plan(cli, p, tree_snapshot, "SINK_WRITER_MISSING", "rollback", 2)
    execute(cli, p)
    restart(p)


# -- 8. orphans ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dedup_file", pytest.param("coordinated", marks=pytest.mark.spark4)])
def test_orphans_are_moved_to_the_backup(cli, spark, tmp_path, tree_snapshot, kind):
    p = build(tmp_path, kind, spark, 5)  # P = C = 4
    planted: dict[str, tuple[str, Path]] = {}  # what -> (root, path)
    if kind == "dedup_file":
        store = p.checkpoint / "state/0/0"
        shutil.copyfile(store / "5.delta", store / "9.delta")  # a version above P + 1
        (store / ".7.delta.abc.tmp").write_bytes(b"half a delta")
        planted = {"state/0/0/9.delta": ("checkpoint", store / "9.delta"),
                   "state/0/0/.7.delta.abc.tmp": ("checkpoint", store / ".7.delta.abc.tmp")}
        want = "STATE_ORPHANS"
    else:
        staged = p.output / "_staging/99"
        staged.mkdir(parents=True)
        (staged / "part-00000-0-orphan.jsonl").write_text('{"id": 999999, "key": "k0"}\n')
        planted = {"_staging/99/part-00000-0-orphan.jsonl": ("sink", staged / "part-00000-0-orphan.jsonl")}
        want = "SINK_ORPHANS"
    code, q, codes = inspect(cli, p)
    assert want in codes, q["findings"]
    pl = plan(cli, p, tree_snapshot)
    assert pl["classification"] == "exactly-once" and pl["target"] == 4, pl
    moved = {(s["root"], s["path"]) for s in pl["steps"] if s["action"] == "move"}

    def covers(path: str, rel: str) -> bool:  # the file itself, or a folder holding it
        return path == rel or rel.startswith(path + "/")

    for rel, (root, _) in planted.items():
        assert any(r == root and covers(path, rel) for r, path in moved), (rel, moved)
    doc = execute(cli, p)
    backup = Path(doc["backup"])
    assert backup.is_relative_to(p.checkpoint / "_streamctl/backups"), backup
    manifest = json.loads((backup / "manifest.json").read_text())
    listed = {(m["root"], m["path"]): m for m in manifest["files"]}
    for rel, (root, path) in planted.items():
        assert not path.exists(), path
        assert (backup / "files" / root / rel).exists(), (backup, rel)
        entry = next(m for (r, pth), m in listed.items() if r == root and covers(pth, rel))
        assert entry["action"] == "moved" and entry["sha256"], entry
        if entry["path"] == rel:
            import hashlib

            assert entry["sha256"] == hashlib.sha256((backup / "files" / root / rel).read_bytes()).hexdigest()
    _, q, codes = inspect(cli, p)
    assert want not in codes and q["verdict"] == "aligned", q["findings"]
    restart(p)


# -- a Delta sink cannot be rolled back ------------------------------------------------------------
@pytest.mark.spark4
def test_delta_sink_ahead_refuses(cli, spark, tmp_path, tree_snapshot):
    from streamctl.fixtures.examples import build_delta_foreach_batch

    chk = build_delta_foreach_batch(spark, tmp_path)  # batches 0..5, the table has txn version 5
    out = chk.parent / "output"
    # the checkpoint as it was after batch 2 (an older copy restored): the table went on
    for folder in (chk / "offsets", chk / "commits", chk / "sources/0"):
        for f in list(folder.iterdir()):
            stem = f.name.lstrip(".").split(".")[0]
            if stem.isdigit() and int(stem) > 2:
                f.unlink()
    r = cli("inspect", "epochs", str(chk), "--sink", str(out), "--json")
    q = r.json()["queries"][0]
    assert r.code == 1 and "SINK_AHEAD" in {f["code"] for f in q["findings"]}, q["findings"]
    before = tree_snapshot(chk.parent)
    r = cli("align", str(chk), "--sink", str(out))
    assert r.code == 4, r
    assert "--to" in r.stderr and "loss" in r.stderr and "--allow-loss" in r.stderr, r.stderr
    r = cli("align", str(chk), "--sink", str(out), "--execute", "--json")
    assert r.code == 4 and r.json()["kind"] == "AlignRefusal" and r.json()["options"], r
    assert tree_snapshot(chk.parent) == before
    r = cli("align", str(chk), "--sink", str(out), "--allow-loss", "--json")
    assert r.code == 0, r
    pl = r.json()["plan"]
    assert pl["classification"] == "loss" and set(pl["loss"]) >= {3, 4, 5}, pl
    assert tree_snapshot(chk.parent) == before

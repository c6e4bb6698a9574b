"""`streamctl trim` with real Spark: trim, restart, delivery check; a kept rollback still works."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from helpers.paths import SPARK35, copy_spark35
from helpers.trees import copy_tree, remove_tree, wait_quiet
from streamctl.operations.journal import CRASH_EXIT

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]


# Spark's state maintenance thread outlives the query in this driver and writes HDFS snapshots
# shortly after it: a test that proves a plan changes nothing first waits this long without a change
SETTLE_S = 1.5


def _backup_bytes(backup: Path) -> tuple[int, int]:
    files = [p for p in (backup / "files").rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


@pytest.mark.parametrize("kind", ["dedup_rocksdb", pytest.param("dedup_rocksdb_v2", marks=pytest.mark.spark4), "dedup_file", "file"])
def test_trim_then_restart_and_a_kept_rollback_deliver_exactly_once(cli, spark, tmp_path, tree_snapshot, kind, align_pipeline):
    ap = align_pipeline
    v2 = kind.endswith("_v2")
    p = ap.Pipeline(tmp_path, kind.removesuffix("_v2"), spark, name=kind,
                    extra_confs={"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"} if v2 else None)
    p.add_input(0, 8)
    p.run()
    wait_quiet(tmp_path, SETTLE_S, 30)
    args = [str(p.checkpoint), "--sink", str(p.output), "--keep-epochs", "3"]
    before = tree_snapshot(tmp_path)
    plan = cli("trim", *args, "--json")
    assert plan.code == 0, plan.stderr
    assert tree_snapshot(tmp_path) == before  # a plan changes nothing
    doc = plan.json()["plan"]
    sizes = doc["after"]["reclaimable"]
    assert doc["after"]["oldest_rollback"] == 5
    assert sizes["offsets"]["files"] > 0 and sizes["commits"]["files"] > 0
    if kind != "file":
        assert sizes["state"]["files"] > 0
    if kind == "file":
        assert sizes["sink_log"]["files"] > 0  # log history superseded by the compaction at 5

    seen = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--reclaimable", "--keep-epochs", "3", "--json")
    assert seen.code == 0, seen.stderr
    reclaim = seen.json()["queries"][0]["reclaimable"]
    assert reclaim["by_category"] == sizes and reclaim["oldest_kept_epoch"] == 5
    assert reclaim["bytes"] == sum(v["bytes"] for v in sizes.values()) > 0
    table = cli("inspect", "epochs", str(p.checkpoint), "--reclaimable", "--keep-epochs", "3")
    assert "reclaimable" in table.stdout and f"{reclaim['files'] - sizes['sink_log']['files']} files" in table.stdout
    assert cli("inspect", "epochs", str(p.checkpoint), "--json").json()["queries"][0]["reclaimable"] is None

    done = cli("trim", *args, "--execute", "--json")
    assert done.code == 0, done.stderr
    result = done.json()
    assert result["verified"] is True
    files, size = _backup_bytes(Path(result["backup"]))
    assert files == sum(v["files"] for v in sizes.values())
    assert size == sum(v["bytes"] for v in sizes.values())
    assert not (p.checkpoint / "offsets" / "0").exists() and (p.checkpoint / "offsets" / "4").exists()

    # every kept rollback point still works: from the trimmed state (restored in place: the logs
    # hold absolute paths), roll back to X, restart with more input, check delivery
    trimmed = tmp_path.parent / f"{tmp_path.name}-trimmed"
    copy_tree(p.base, trimmed)
    for x in (5, 6, 7):
        copy_tree(trimmed, p.base, replace=True)
        p.files = 8
        back = cli("align", str(p.checkpoint), "--sink", str(p.output), "--to", str(x), "--execute", "--json")
        assert back.code == 0, (x, back.stderr)
        assert back.json()["plan"]["classification"] == "exactly-once"
        p.add_input(8, 2)
        p.run()
        wait_quiet(tmp_path, SETTLE_S, 30)  # Spark's maintenance thread must be done before the next restore
        report = p.delivery()
        assert report["ok"], (x, report)
        assert cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output)).code == 0


def test_trim_refuses_a_misaligned_checkpoint_and_undo_restores(cli, spark, tmp_path, tree_snapshot, align_pipeline):
    ap = align_pipeline
    p = ap.Pipeline(tmp_path, "dedup_file", spark)
    p.add_input(0, 5)
    p.run()
    wait_quiet(tmp_path, SETTLE_S, 30)
    done = cli("trim", str(p.checkpoint), "--keep-epochs", "2", "--execute", "--json")
    assert done.code == 0, done.stderr
    backup = done.json()["backup"]
    undo = cli("trim", "--undo", backup, "--json")
    assert undo.code == 0, undo.stderr
    assert (p.checkpoint / "offsets" / "0").exists() and (p.checkpoint / "state" / "0" / "0" / "1.delta").exists()
    (p.checkpoint / "commits" / "4").unlink()
    (p.checkpoint / "offsets" / "4").unlink()  # P == C: still aligned; now break it
    (p.checkpoint / "state" / "0" / "1" / "4.delta").unlink()
    snap = tree_snapshot(tmp_path)
    refused = cli("trim", str(p.checkpoint), "--execute")
    assert refused.code == 4 and "align" in refused.stderr
    assert tree_snapshot(tmp_path) == snap


FIXTURE = SPARK35 / "agg_rocksdb" / "checkpoint"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "_streamctl" not in p.parts}


def test_a_trim_killed_at_any_journal_record_resumes_to_the_same_result(tmp_path):
    """Crash injection (the test-only hook) after every journal record, then --resume: the
    checkpoint ends byte-identical to an uninterrupted trim, and verified."""
    import os
    import subprocess

    exe = str(Path(sys.executable).with_name("streamctl"))
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0")
    ref = tmp_path / "ref"
    copy_spark35(FIXTURE, ref)
    out = subprocess.run([exe, "trim", str(ref), "--keep-epochs", "1", "--execute", "--json"], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    records = len((Path(json.loads(out.stdout)["backup"]) / "journal.jsonl").read_text().splitlines())
    expected = _files(ref)
    assert records >= 5  # start, a begin_chunk and a done_chunk per group commit, finished, verified
    for n in sorted({1, 2, 3, records // 2, records - 2, records - 1} | set(range(1, records, 6))):
        ck = tmp_path / f"crash-{n}"
        copy_spark35(FIXTURE, ck)
        crashed = subprocess.run([exe, "trim", str(ck), "--keep-epochs", "1", "--execute"],
                                 env=dict(env, STREAMCTL_TEST_CRASH_AFTER=str(n)), capture_output=True, text=True)
        assert crashed.returncode == CRASH_EXIT, (n, crashed.stderr)
        (backup,) = (ck / "_streamctl" / "backups").iterdir()
        assert (ck / "_streamctl" / "lock.json").exists()  # the crashed run's lock stays
        if n == 1:
            again = subprocess.run([exe, "trim", str(ck), "--keep-epochs", "1", "--execute"], env=env,
                                   capture_output=True, text=True)
            assert again.returncode == 4 and "--break-lock" in again.stderr
        resumed = subprocess.run([exe, "trim", "--resume", str(backup), "--json"], env=env, capture_output=True, text=True)
        assert resumed.returncode == 0, (n, resumed.stderr)
        assert json.loads(resumed.stdout)["verified"] is True
        assert _files(ck) == expected, n
        assert not (ck / "_streamctl" / "lock.json").exists()


def test_a_long_trim_shows_files_bytes_rate_and_eta_on_a_terminal_only(tmp_path):
    """The throttled meter (files done, bytes, rate, eta) goes to stderr when it is a terminal;
    piped or with --json nothing is shown."""
    import os
    import subprocess

    exe = str(Path(sys.executable).with_name("streamctl"))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "STREAMCTL_TEST_CRASH_AFTER")}
    env.update(STREAMCTL_QUIET_PERIOD="0", STREAMCTL_TEST_STEP_DELAY="0.05", TERM="xterm", COLUMNS="200")
    from helpers.terminal import run_in_pty  # stdout and stderr on one pseudo-terminal

    seen = {}
    for mode in ("tty", "pipe", "tty-json"):
        ck = tmp_path / mode
        copy_spark35(FIXTURE, ck)
        argv = [exe, "trim", str(ck), "--keep-epochs", "1", "--execute"] + (["--json"] if mode == "tty-json" else [])
        if mode == "pipe":
            p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, p.stderr[-2000:]
            seen[mode] = p.stderr
        else:
            seen[mode] = run_in_pty(argv, env, timeout=120)
        assert (ck / "_streamctl" / "backups").is_dir() and not (ck / "offsets" / "0").exists(), (mode, seen[mode][-2000:])
    assert "files/s" in seen["tty"] and "eta" in seen["tty"] and " MB" in seen["tty"], seen["tty"][-2000:]
    assert "files/s" not in seen["pipe"] and "files/s" not in seen["tty-json"]


@pytest.mark.spark4
def test_trim_purge_never_deletes_through_a_staging_symlink(cli, spark, tmp_path, tree_snapshot, align_pipeline):
    """A symlink out of the root on a real coordinated sink: `_staging` is a symlink to a folder outside
    the sink holding staging-like epoch folders. `trim --execute --purge` must not delete there:
    the plan refuses (exit 4) naming the path that leaves the sink, and nothing changes."""
    ap = align_pipeline
    import os

    p = ap.Pipeline(tmp_path, "coordinated", spark)
    p.add_input(0, 4)
    p.run()
    wait_quiet(tmp_path, SETTLE_S, 30)
    outside = tmp_path / "not-the-sink"
    for epoch in (0, 1):
        (outside / str(epoch)).mkdir(parents=True)
        (outside / str(epoch) / "keep.txt").write_text("not streamctl's")
    staging = p.output / "_staging"
    remove_tree(staging)
    os.symlink(outside, staging)
    before = tree_snapshot(tmp_path)
    r = cli("trim", str(p.checkpoint), "--sink", str(p.output), "--keep-epochs", "1", "--execute", "--purge", "--json")
    assert r.code == 4, r
    assert "_staging" in r.stderr + r.stdout and "outside" in (r.stderr + r.stdout).lower(), r
    assert tree_snapshot(tmp_path) == before
    assert sorted(p.name for p in outside.rglob("keep.txt")) == ["keep.txt", "keep.txt"]

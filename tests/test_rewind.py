"""Rewind by wall-clock time and savepoints, with real Spark: align --to TIME between two batches,
a savepoint kept through trim and rewound to, a time before the kept window refused, a broken
savepoint named; each rewind restarted and delivery-checked. One pipeline is built per module and
put back in place for each test (its logs name absolute paths)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from helpers.trees import copy_tree, wait_quiet

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]

SETTLE_S = 1.5  # Spark's maintenance thread may still write a snapshot after the query stopped
BATCHES = 4


def batch_ms(checkpoint: Path, b: int) -> int:
    return int(json.loads((checkpoint / "offsets" / str(b)).read_text().splitlines()[1])["batchTimestampMs"])


def in_zone(ms: int, hours: int, minutes: int = 0) -> str:
    """The instant `ms` written in a zone of that offset (with milliseconds), as an operator would."""
    zone = timezone(timedelta(hours=hours, minutes=minutes if hours >= 0 else -minutes))
    return datetime.fromtimestamp(ms / 1000, tz=zone).isoformat(timespec="milliseconds")


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture(scope="module")
def built(spark: Any, tmp_path_factory: pytest.TempPathFactory, align_pipeline: Any) -> tuple[Any, Path]:
    """A deduplicating query into a file sink, BATCHES batches (one per input file), and a pristine copy."""
    root = tmp_path_factory.mktemp("rewind")
    p = align_pipeline.Pipeline(root, "dedup_file", spark)
    p.add_input(0, BATCHES)
    p.run()
    wait_quiet(p.base, SETTLE_S, 30)
    pristine = root / "pristine"
    copy_tree(p.base, pristine)
    return p, pristine


@pytest.fixture
def pipe(built: tuple[Any, Path]) -> Any:
    p, pristine = built
    copy_tree(pristine, p.base, replace=True)
    p.files = BATCHES
    return p


def restart_and_check(p: Any, more: int) -> None:
    p.add_input(p.files, more)
    p.run()
    wait_quiet(p.base, SETTLE_S, 30)
    report = p.delivery()
    assert report["ok"], report


def test_rewind_to_a_time_between_two_batches_replays_every_later_batch_exactly_once(cli, pipe):
    p = pipe
    ck, out = str(p.checkpoint), str(p.output)
    t1, t2 = batch_ms(p.checkpoint, 1), batch_ms(p.checkpoint, 2)
    assert t1 < t2
    between = in_zone((t1 + t2) // 2, 5, 30)  # Asia/Kolkata's offset: the same instant as in UTC

    seen = cli("inspect", "epochs", ck, "--json").json()["queries"][0]
    assert seen["planned_time"] == iso(batch_ms(p.checkpoint, BATCHES - 1)) == seen["committed_time"]
    assert seen["oldest_kept"] == 0 and seen["oldest_time"] == iso(batch_ms(p.checkpoint, 0))
    text = cli("inspect", "epochs", ck, "-o", "plain").stdout
    assert f"committed {BATCHES - 1} at {seen['committed_time']}" in text and "None" not in text

    plan = cli("align", ck, "--sink", out, "--to", between)
    assert plan.code == 0, plan
    assert f"is epoch 1 (started {iso(t1)}); epoch 2 (started {iso(t2)}) and every later batch runs again" in plan.stdout
    assert "target epoch 1" in plan.stdout and "delivery: exactly-once" in plan.stdout
    done = cli("align", ck, "--sink", out, "--to", between, "--execute", "--json")
    assert done.code == 0, done
    doc = done.json()
    assert doc["verified"] is True and doc["plan"]["target"] == 1
    assert doc["plan"]["after"]["rewind"] == {"to": between, "time": iso((t1 + t2) // 2), "window": [0, BATCHES - 1],
                                              "epoch": 1, "epoch_time": iso(t1), "next_epoch": 2, "next_time": iso(t2)}
    assert not (p.checkpoint / "commits" / "2").exists() and not (p.output / "_spark_metadata" / "2").exists()
    restart_and_check(p, 1)  # batches 2.. replayed into the sink once, plus a new file


def test_a_savepoint_survives_trim_and_a_rewind_to_it_delivers_exactly_once(cli, pipe, monkeypatch):
    p = pipe
    ck, out = str(p.checkpoint), str(p.output)
    monkeypatch.chdir(p.checkpoint.parent)  # named relative to the working folder: shown as every command shows it
    made = cli("savepoint", "create", p.checkpoint.name, "before-deploy", "--sink", out, "--json")
    assert made.code == 0, made
    sp = made.json()
    assert sp["kind"] == "Savepoint" and sp["epoch"] == BATCHES - 1 and sp["action"] == "created"
    assert sp["checkpoint"] == ck, sp
    assert sp["batch_time"] == iso(batch_ms(p.checkpoint, BATCHES - 1))
    assert sp["sink"] == {"kind": "file", "uri": out, "position": {"log_batch": BATCHES - 1}}
    assert (p.checkpoint / "_streamctl" / "savepoints" / "before-deploy.json").is_file()
    assert not (p.checkpoint / "_streamctl" / "lock.json").exists()
    again = cli("savepoint", "create", ck, "before-deploy")
    assert again.code == 2 and "--replace" in again.stderr

    p.add_input(p.files, 6)  # the deploy: six more batches
    p.run()
    wait_quiet(p.base, SETTLE_S, 30)
    trim = cli("trim", ck, "--sink", out, "--keep-epochs", "2", "--execute", "--json")
    assert trim.code == 0, trim
    plan = trim.json()["plan"]
    assert plan["after"]["oldest_rollback"] == BATCHES - 1  # not 8: the savepoint is kept
    assert plan["after"]["savepoints"] == [{"name": "before-deploy", "epoch": BATCHES - 1, "status": "intact", "missing": []}]
    assert any("savepoint(s) before-deploy (epoch 3)" in n for n in plan["notes"])
    assert not (p.checkpoint / "offsets" / "0").exists() and (p.checkpoint / "offsets" / str(BATCHES - 2)).exists()
    listed = cli("savepoint", "list", ck)
    assert listed.code == 0 and "before-deploy" in listed.stdout and "intact" in listed.stdout

    back = cli("align", ck, "--to", "savepoint:before-deploy", "--execute", "--json")  # the savepoint names the sink
    assert back.code == 0, back
    doc = back.json()
    assert doc["verified"] is True and doc["plan"]["target"] == BATCHES - 1
    assert doc["plan"]["classification"] == "exactly-once" and doc["plan"]["roots"]["sink"] == out
    assert doc["plan"]["after"]["rewind"]["savepoint"] == "before-deploy"
    restart_and_check(p, 1)
    gone = cli("savepoint", "delete", ck, "before-deploy")
    assert gone.code == 0 and not (p.checkpoint / "_streamctl" / "savepoints" / "before-deploy.json").exists()
    assert "no savepoints" in cli("savepoint", "list", ck).stdout


def test_a_time_outside_the_kept_window_is_refused_and_nothing_changes(cli, pipe, tree_snapshot):
    p = pipe
    ck, out = str(p.checkpoint), str(p.output)
    t0 = batch_ms(p.checkpoint, 0)
    before = in_zone(t0 - 3_600_000, -8)  # an hour before the first batch, written in US Pacific time
    snap = tree_snapshot(p.base)
    for args in (("align", ck, "--sink", out, "--to", before, "--execute"), ("trim", ck, "--keep-rollback-to", before),
                 ("kafka", "starting-offsets", ck, "--epoch", before)):
        r = cli(*args)
        assert r.code == 4, (args, r)
        assert "before the kept window" in r.stderr and f"epochs 0..{BATCHES - 1}" in r.stderr and iso(t0) in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    refused = cli("align", ck, "--to", before, "--json")
    assert refused.code == 4 and refused.json()["kind"] == "AlignRefusal"
    no_zone = cli("align", ck, "--to", "2026-11-26T02:55:00")
    assert no_zone.code == 2 and "has no zone" in no_zone.stderr
    future = cli("savepoint", "create", ck, "later", "--at", "2099-01-01T00:00:00Z")
    assert future.code == 4 and "in the future" in future.stderr
    for args, words in ((("align", ck, "--to", "2026-13-01T00:00:00Z"), "month"),
                        (("trim", ck, "--keep-rollback-to", "2026-11-26T02:55:00"), "has no zone"),
                        (("trim", ck, "--keep-rollback-to", "yesterday"), "an epoch number or an ISO-8601 time"),
                        (("kafka", "starting-offsets", ck, "--epoch", "2026-11-26 02:55"), "has no zone"),
                        (("savepoint", "create", ck, "x", "--at", "2026-11-26T02:55:00+5"), "not an ISO-8601 time"),
                        (("align", ck, "--to", "savepoint:nope", "--execute"), "has no savepoint nope"),
                        (("align", ck, "--to", "savepoint:a/b"), "invalid savepoint name"),
                        (("savepoint", "delete", ck, "nope"), "no savepoint nope")):
        r = cli(*args)
        assert r.code == 2 and words in r.stderr, (args, r)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert tree_snapshot(p.base) == snap


def test_a_broken_savepoint_is_listed_and_refused_by_name(cli, pipe, tree_snapshot):
    p = pipe
    ck = str(p.checkpoint)
    at = in_zone(batch_ms(p.checkpoint, 1), 0)
    made = cli("savepoint", "create", ck, "early", "--at", at, "--json")
    assert made.code == 0 and made.json()["epoch"] == 1, made
    (p.checkpoint / "commits" / "1").unlink()  # lost by hand
    listed = cli("savepoint", "list", ck, "--json").json()
    assert listed["kind"] == "SavepointList"
    (entry,) = listed["savepoints"]
    assert entry["status"] == "broken" and entry["missing"] == ["commits/1"]
    assert "broken: commits/1" in cli("savepoint", "list", ck, "-o", "plain").stdout
    snap = tree_snapshot(p.base)
    r = cli("align", ck, "--to", "savepoint:early", "--execute")
    assert r.code == 4 and "savepoint early (epoch 1) is broken: commits/1" in r.stderr, r
    missing = cli("align", ck, "--to", "savepoint:nope")
    assert missing.code == 2 and "no savepoint nope (savepoints: early)" in missing.stderr
    assert tree_snapshot(p.base) == snap


def test_a_rewind_names_the_savepoints_it_breaks_its_undo_restores_them_and_copy_carries_them(
        cli, pipe, spark, align_pipeline, tree_snapshot):
    """Two savepoints (epochs 1 and 3): a rewind to the older names the newer as broken (plan and
    JSON), its undo puts every file back and the newer is intact again; a copy carries both with the
    sink's new URI, and a rewind at the new place restarts exactly once; at the old place the same
    rewind and a restart run epoch 3 again, so the newer savepoint is broken (another batch 3)."""
    p = pipe
    ck, out = str(p.checkpoint), str(p.output)
    for name, epoch in (("sp1", "1"), ("sp3", str(BATCHES - 1))):
        assert cli("savepoint", "create", ck, name, "--epoch", epoch, "--sink", out).code == 0
    snap = tree_snapshot(p.base)

    plan = cli("align", ck, "--to", "savepoint:sp1", "--json").json()["plan"]
    assert plan["target"] == 1 and plan["after"]["savepoints_lost"] == [{"name": "sp3", "epoch": BATCHES - 1}]
    assert any(n.startswith(f"breaks savepoint(s) sp3 (epoch {BATCHES - 1})") for n in plan["notes"])
    done = cli("align", ck, "--to", "savepoint:sp1", "--execute", "--json")
    assert done.code == 0 and done.json()["verified"] is True, done
    status = {s["name"]: s for s in cli("savepoint", "list", ck, "--json").json()["savepoints"]}
    assert status["sp1"]["status"] == "intact" and status["sp3"]["status"] == "broken"
    assert f"commits/{BATCHES - 1}" in status["sp3"]["missing"]
    undo = cli("align", "--undo", done.json()["backup"], "--json")
    assert undo.code == 0, undo
    wait_quiet(p.base, 0.2, 10)
    after = {k: v for k, v in tree_snapshot(p.base).items() if "_streamctl/backups" not in str(k)}
    assert after == snap
    assert all(s["intact"] for s in cli("savepoint", "list", ck, "--json").json()["savepoints"])

    new_base = p.base.parent / "copied"
    copied = cli("copy", ck, str(new_base / "checkpoint"), "--sink", out, "--sink-dest", str(new_base / "output"),
                 "--keep-epochs", "1", "--execute", "--json")
    assert copied.code == 0, copied
    assert copied.json()["plan"]["after"]["savepoints"] == [
        {"name": "sp1", "epoch": 1, "carried": True, "why": "its restore files are copied, its sink's URI the new place's"},
        {"name": "sp3", "epoch": BATCHES - 1, "carried": True,
         "why": "its restore files are copied, its sink's URI the new place's"}]
    there = cli("savepoint", "list", str(new_base / "checkpoint"), "--json").json()["savepoints"]
    assert [(s["name"], s["status"], s["sink"]["uri"]) for s in there] == [
        ("sp1", "intact", str(new_base / "output")), ("sp3", "intact", str(new_base / "output"))]
    moved = align_pipeline.Pipeline(p.base.parent, "dedup_file", spark, name="copied")
    moved.input, moved.files = p.input, p.files  # the copy reads the old input folder (no --source-path)
    back = cli("align", str(new_base / "checkpoint"), "--to", "savepoint:sp1", "--execute", "--json")
    assert back.code == 0 and back.json()["plan"]["roots"]["sink"] == str(new_base / "output"), back
    moved.run()
    wait_quiet(moved.base, SETTLE_S, 30)
    assert moved.delivery()["ok"], moved.delivery()

    assert cli("align", ck, "--to", "savepoint:sp1", "--execute").code == 0
    restart_and_check(p, 1)
    (sp3,) = [s for s in cli("savepoint", "list", ck, "--json").json()["savepoints"] if s["name"] == "sp3"]
    assert sp3["status"] == "broken" and sp3["missing"][0].startswith(
        f"offsets/{BATCHES - 1} as pinned (epoch {BATCHES - 1} ran again"), sp3


def test_trim_keeps_a_rollback_time_and_a_savepoint_then_a_rewind_to_that_time_restarts_exactly_once(cli, pipe):
    """Eight batches, a savepoint at batch 5: trim --keep-rollback-to a time after the savepoint
    keeps the savepoint's epoch (the earlier point wins); executed with a time between batches 2
    and 3 it keeps epoch 2; align --to that time (written in another zone) restarts exactly once
    and breaks the savepoint (named in the plan, listed broken after the restart); a time before the
    trimmed window is refused."""
    p = pipe
    ck, out = str(p.checkpoint), str(p.output)
    p.add_input(p.files, 4)
    p.run()
    wait_quiet(p.base, SETTLE_S, 30)
    t = [batch_ms(p.checkpoint, b) for b in range(8)]
    made = cli("savepoint", "create", ck, "mid", "--at", in_zone(t[5], 9), "--sink", out, "--json")
    assert made.code == 0 and made.json()["epoch"] == 5, made

    later = cli("trim", ck, "--sink", out, "--keep-epochs", "1", "--keep-rollback-to", in_zone((t[6] + t[7]) // 2, 0),
                "--json").json()["plan"]
    assert later["after"]["oldest_rollback"] == 5 and later["after"]["savepoints"][0]["status"] == "intact"
    assert any(n.startswith("--keep-rollback-to ") and "is epoch 6" in n for n in later["notes"])
    between = (t[2] + t[3]) // 2
    trim = cli("trim", ck, "--sink", out, "--keep-epochs", "1", "--keep-rollback-to", in_zone(between, 2), "--execute",
               "--json")
    assert trim.code == 0 and trim.json()["verified"] is True, trim
    assert trim.json()["plan"]["after"]["oldest_rollback"] == 2
    assert not (p.checkpoint / "offsets" / "0").exists() and (p.checkpoint / "offsets" / "2").exists()
    assert cli("savepoint", "list", ck, "--json").json()["savepoints"][0]["status"] == "intact"

    back = cli("align", ck, "--sink", out, "--to", in_zone(between, -7), "--execute", "--json")
    assert back.code == 0 and back.json()["plan"]["target"] == 2, back
    assert back.json()["plan"]["after"]["savepoints_lost"] == [{"name": "mid", "epoch": 5}]
    restart_and_check(p, 1)
    (mid,) = cli("savepoint", "list", ck, "--json").json()["savepoints"]
    assert mid["status"] == "broken" and mid["missing"][0].startswith("offsets/5")  # gone, or another batch 5
    early = cli("align", ck, "--sink", out, "--to", in_zone((t[0] + t[1]) // 2, 0))
    assert early.code == 4 and "before the kept window" in early.stderr, early

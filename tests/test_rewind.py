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


def test_a_savepoint_survives_trim_and_a_rewind_to_it_delivers_exactly_once(cli, pipe):
    p = pipe
    ck, out = str(p.checkpoint), str(p.output)
    made = cli("savepoint", "create", ck, "before-deploy", "--sink", out, "--json")
    assert made.code == 0, made
    sp = made.json()
    assert sp["kind"] == "Savepoint" and sp["epoch"] == BATCHES - 1 and sp["action"] == "created"
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

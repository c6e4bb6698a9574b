"""Times as operators write them (inspectors/rewind_time.py) and savepoint names and files
(formats/savepoint.py): no Spark needed."""
from __future__ import annotations

import json

import pytest

from streamctl.formats.errors import LogParseError, UsageError
from streamctl.formats.savepoint import Savepoint, check_name, parse_savepoint, serialize_savepoint
from streamctl.inspectors.rewind_time import check_epoch_or_time, iso, looks_like_time, parse_time

UTC_0255 = 1795661700000  # 2026-11-26T02:55:00Z


@pytest.mark.parametrize("text", [
    "2026-11-26T02:55:00Z", "2026-11-26T02:55Z", "2026-11-26 02:55:00z", "2026-11-26T08:25:00+05:30",
    "2026-11-25T18:55:00-08:00", "2026-11-26T04:55:00+0200", "2026-11-26T02:55:00.000Z", "2026-11-26T02:55:00,000000Z",
])
def test_a_time_in_any_zone_is_the_same_instant(text):
    assert parse_time(text, "--to") == UTC_0255


def test_milliseconds_and_iso_round_trip():
    ms = parse_time("2026-11-26T08:25:00.123456+05:30", "--to")
    assert ms == UTC_0255 + 123
    assert iso(ms) == "2026-11-26T02:55:00.123Z"
    assert parse_time(iso(ms), "--to") == ms
    assert iso(None) == "unknown"


@pytest.mark.parametrize("text, words", [
    ("2026-11-26T02:55:00", "has no zone"), ("2026-11-26 02:55", "has no zone"),
    ("2026-13-26T02:55:00Z", "month"), ("2026-11-26", "not an ISO-8601 time"), ("yesterday", "not an ISO-8601 time"),
    ("2026-11-26T02:55:00+5", "not an ISO-8601 time"),
])
def test_a_time_without_a_zone_or_no_time_is_a_usage_error(text, words):
    with pytest.raises(UsageError) as exc:
        parse_time(text, "--to")
    assert words in str(exc.value) and "--to" in str(exc.value) and "\n" not in str(exc.value)


def test_epoch_or_time_flags_check_before_reading():
    check_epoch_or_time(None, "--epoch")
    check_epoch_or_time("12", "--epoch")
    check_epoch_or_time("2026-11-26T02:55:00Z", "--epoch")
    assert looks_like_time("2026-11-26T02:55:00") and not looks_like_time("12")
    for bad in ("2026-11-26T02:55:00", "latest", "-1"):
        with pytest.raises(UsageError):
            check_epoch_or_time(bad, "--keep-rollback-to")


@pytest.mark.parametrize("name", ["before-deploy", "a", "v1.2_3", "x" * 64])
def test_savepoint_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 65, "a/b", "..", ".", "a b", "ü"])
def test_bad_savepoint_names_are_usage_errors(name):
    with pytest.raises(UsageError):
        check_name(name)


def test_a_savepoint_file_round_trips_and_a_bad_one_names_its_path():
    sp = Savepoint("pre", "q-1", 7, "2026-11-26T02:55:00.000Z", UTC_0255, "2026-11-26T03:00:00.000Z", UTC_0255 + 300000,
                   {"kind": "file", "uri": "/out", "position": {"log_batch": 7}},
                   [{"source": 0, "starting_offsets": '{"t":{"0":5}}'}])
    assert parse_savepoint(serialize_savepoint(sp), "/chk/_streamctl/savepoints/pre.json") == sp
    for data, words in ((b"{", "savepoint"), (b'{"format": 9}', "unsupported savepoint format"),
                        (b'{"format": 1, "name": "pre", "epoch": -1, "created_ms": 0}', "'epoch'")):
        with pytest.raises(LogParseError) as exc:
            parse_savepoint(data, "/chk/_streamctl/savepoints/pre.json")
        assert "/chk/_streamctl/savepoints/pre.json" in str(exc.value) and words in str(exc.value)


def test_kafka_positions_and_a_savepoint_at_a_time_name_the_same_epoch(cli, layouts, tmp_path):
    """A Kafka query whose batches started a minute apart: a time between batches 2 and 3 names
    epoch 2 for starting-offsets, retention-floor and a savepoint (which records epoch 2's offsets)."""
    chk = layouts.checkpoint(tmp_path / "chk", 4, 4)
    start = 1700000000000  # 2023-11-14T22:13:20Z
    for b in range(5):
        kafka = json.dumps({"orders": {"0": 7 + b, "1": 9 + b}})
        (chk / "offsets" / str(b)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{start + b * 60000},"conf":{{}}}}\n{kafka}')
    between = "2023-11-14T23:45:50+01:30"  # 22:15:50Z: batch 2 started 22:15:20Z, batch 3 22:16:20Z
    r = cli("kafka", "starting-offsets", str(chk), "--epoch", between, "--json")
    assert r.code == 0, r
    doc = r.json()
    assert doc["epoch"] == 2 and doc["sources"] == [{"source": 0, "starting_offsets": '{"orders": {"0": 9, "1": 11}}'}]
    floor = cli("kafka", "retention-floor", str(chk), "--keep-epochs", "1", "--keep-rollback-to", between, "--json")
    assert floor.code == 0, floor
    assert floor.json()["oldest_kept_epoch"] == 2 and floor.json()["from_offsets_of"] == 1
    made = cli("savepoint", "create", str(chk), "incident", "--at", between, "--json")
    assert made.code == 0, made
    sp = made.json()
    assert sp["epoch"] == 2 and sp["batch_time"] == "2023-11-14T22:15:20.000Z" and sp["kafka"] == doc["sources"]
    trim = cli("trim", str(chk), "--keep-epochs", "1", "--json")
    assert trim.code == 0, trim
    plan = trim.json()["plan"]
    assert plan["after"]["oldest_rollback"] == 2 and plan["after"]["savepoints"][0]["name"] == "incident"
    r = cli("trim", str(chk), "--keep-epochs", "1", "--keep-rollback-to", "2023-11-14T22:15:50")
    assert r.code == 2 and "has no zone" in r.stderr


def test_a_savepoint_of_an_older_epoch_names_the_delta_version_that_wrote_it(cli, layouts, tmp_path):
    """A Delta sink written by deltalake with a `txn` per epoch (the table's version v holds epoch
    v - 2 here: two commits came first): a savepoint of an older epoch records the table version
    whose commit wrote that epoch, the newest epoch's the current version."""
    import pyarrow as pa
    from deltalake import write_deltalake

    chk = layouts.checkpoint(tmp_path / "chk", 6, 6)
    table = tmp_path / "table"
    for _ in range(2):
        write_deltalake(str(table), pa.table({"batch": [-1], "value": [0]}), mode="append")
    layouts.delta_table(table, layouts.QID, range(0, 7))
    for epoch, version in ((3, 5), (6, 8)):
        r = cli("savepoint", "create", str(chk), f"at{epoch}", "--epoch", str(epoch), "--sink", str(table), "--json")
        assert r.code == 0, r
        assert r.json()["sink"]["position"] == {"txn_app_id": layouts.QID, "txn_version": epoch, "table_version": version}


def test_savepoint_create_and_delete_take_the_lock_and_change_nothing_when_refused(cli, layouts, tmp_path, tree_snapshot):
    import os
    import socket

    chk = layouts.checkpoint(tmp_path / "chk", 4, 4)
    lock = chk / "_streamctl" / "lock.json"
    lock.parent.mkdir()
    lock.write_text(json.dumps({"op_id": "align-x", "command": "align", "host": socket.gethostname(), "pid": os.getpid(),
                                "started_ms": 0}))
    snap = tree_snapshot(chk)
    r = cli("savepoint", "create", str(chk), "pre")
    assert r.code == 4 and "lock.json is held by align" in r.stderr, r
    assert tree_snapshot(chk) == snap
    lock.unlink()
    assert cli("savepoint", "create", str(chk), "pre", "--epoch", "3").code == 0
    assert json.loads((chk / "_streamctl" / "savepoints" / "pre.json").read_text())["epoch"] == 3
    replaced = cli("savepoint", "create", str(chk), "pre", "--replace", "--json")
    assert replaced.code == 0 and replaced.json()["action"] == "replaced" and replaced.json()["epoch"] == 4
    assert sorted(p.name for p in (chk / "_streamctl" / "savepoints").iterdir()) == ["pre.json"]  # no temp file left
    for args, code in ((("create", str(chk), "x", "--epoch", "9"), 4), (("create", str(chk), "x", "--epoch", "1", "--at",
                        "2023-11-14T22:13:20Z"), 2), (("delete", str(chk), "nope"), 2), (("create", str(chk), "a b"), 2)):
        r = cli("savepoint", *args)
        assert r.code == code and len(r.stderr.strip().splitlines()) == 1, (args, r)
    assert cli("savepoint", "delete", str(chk), "pre").code == 0
    assert not (chk / "_streamctl" / "savepoints" / "pre.json").exists() and not (chk / "_streamctl" / "lock.json").exists()
    assert "no savepoints" in cli("savepoint", "list", str(chk)).stdout

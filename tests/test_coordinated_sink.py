"""streamctl's coordinated sink (streamctl.pipeline.coordinated_sink) and the two sink scenarios of
streamctl.fixtures.examples (coordinated_sink, delta_foreach_batch): the commit protocol on its
own (no Spark), then real PySpark runs, replays and injected crashes."""
from __future__ import annotations

import json
import os
import re
import uuid
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from streamctl.pipeline import coordinated_sink as cs  # noqa: E402

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
RECORD_KEYS = ["version", "epoch", "query_id", "committed_at_ms", "num_writers", "writers", "rows"]
WRITER_KEYS = ["partition", "attempt", "rows", "files"]


# --------------------------------------------------------------------------- helpers


def files_under(root: Path) -> list[str]:
    """Every file below root, relative and '/'-separated (hidden ones included)."""
    if not root.exists():
        return []
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def records(out: Path) -> dict[int, dict]:
    return {int(p.stem): json.loads(p.read_text()) for p in (out / "_commits").glob("*.json")}


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def input_rows(inp: Path) -> list[dict]:
    return [row for f in sorted(inp.glob("*.json")) for row in jsonl(f)]


def as_sink_row(row: dict) -> tuple:
    """An input row as the coordinated sink writes it (TIMESTAMP -> UTC ISO string with offset)."""
    return row["key"], row["value"], row["ts"] + "+00:00"


def check_record(out: Path, epoch: int, rec: dict, query_id: str | None, num_writers: int) -> list[dict]:
    """The record's shape and that every file it names exists with the rows it claims;
    returns the epoch's rows."""
    assert list(rec) == RECORD_KEYS, rec
    assert rec["version"] == 1 and rec["epoch"] == epoch and rec["query_id"] == query_id
    assert isinstance(rec["committed_at_ms"], int) and rec["committed_at_ms"] > 1_600_000_000_000
    assert rec["num_writers"] == len(rec["writers"]) == num_writers
    assert [w["partition"] for w in rec["writers"]] == sorted(w["partition"] for w in rec["writers"])
    rows = []
    for w in rec["writers"]:
        assert list(w) == WRITER_KEYS, w
        got = 0
        for f in w["files"]:
            m = re.fullmatch(rf"data/epoch={epoch}/part-(\d{{5}})-(\d+)-{UUID}\.jsonl", f)
            assert m and int(m[1]) == w["partition"] and int(m[2]) == w["attempt"], f
            lines = jsonl(out / f)
            got += len(lines)
            rows += lines
        assert got == w["rows"], (epoch, w)
    assert rec["rows"] == sum(w["rows"] for w in rec["writers"]) == len(rows)
    return rows


def drop_commit(ckpt: Path, batch: int) -> None:
    """Delete commits/<batch> and its hidden Hadoop checksum, so Spark replays the batch."""
    (ckpt / "commits" / str(batch)).unlink()
    (ckpt / "commits" / f".{batch}.crc").unlink()


def batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def query_id(ckpt: Path) -> str:
    from streamctl.fixtures.examples import query_id as qid

    return qid(ckpt)


# --------------------------------------------------------------------------- protocol, no Spark


def stage(out: Path, epoch: int, partition: int, rows: list[dict], attempt: int = 0,
          query: str | None = "q-1") -> cs.CoordinatedCommitMessage:
    """What write() leaves behind for one task: a staged file (none for no rows) and its message."""
    files = []
    if rows:
        rel = f"_staging/{epoch}/part-{partition:05d}-{attempt}-{uuid.uuid4()}.jsonl"
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("".join(json.dumps(r) + "\n" for r in rows))
        files.append(rel)
    return cs.CoordinatedCommitMessage(partition, attempt, len(rows), files, epoch, query)


def writer(out: Path, **faults) -> cs.CoordinatedSinkWriter:
    from pyspark.sql.types import StructType

    return cs.CoordinatedSinkWriter(str(out), StructType([]), **faults)


def test_commit_publishes_and_writes_one_record(tmp_path):
    out = tmp_path / "sink"
    msgs = [stage(out, 3, 1, [{"a": 1}, {"a": 2}]), stage(out, 3, 0, [{"a": 3}]), stage(out, 3, 2, [])]
    writer(out).commit(msgs, 3)
    rec = records(out)[3]
    assert [w["partition"] for w in rec["writers"]] == [0, 1, 2]
    assert rec["writers"][2] == {"partition": 2, "attempt": 0, "rows": 0, "files": []}
    assert check_record(out, 3, rec, "q-1", 3) == [{"a": 3}, {"a": 1}, {"a": 2}]
    assert files_under(out) == sorted(["_commits/3.json"] + [f for w in rec["writers"] for f in w["files"]])
    assert not (out / "_staging" / "3").exists()


def test_commit_of_a_committed_epoch_drops_the_replayed_files(tmp_path):
    out = tmp_path / "sink"
    writer(out).commit([stage(out, 0, 0, [{"a": 1}])], 0)
    before = (out / "_commits" / "0.json").read_bytes(), files_under(out)
    replay = [stage(out, 0, 0, [{"a": 1}]), stage(out, 0, 1, [])]
    writer(out).commit(replay, 0)
    assert ((out / "_commits" / "0.json").read_bytes(), files_under(out)) == before
    assert not (out / "_staging" / "0").exists()


def test_record_written_meanwhile_wins(tmp_path, monkeypatch):
    """The record is linked into place without overwriting: if another commit of the epoch won
    the race, its record stays and our temp file is discarded."""
    out = tmp_path / "sink"
    real_link = os.link

    def racing_link(src, dst):
        Path(dst).write_text('{"epoch": 0, "winner": true}')
        return real_link(src, dst)

    monkeypatch.setattr(cs.os, "link", racing_link)
    writer(out).commit([stage(out, 0, 0, [{"a": 1}])], 0)
    assert json.loads((out / "_commits" / "0.json").read_text()) == {"epoch": 0, "winner": True}
    assert os.listdir(out / "_commits") == ["0.json"]


def test_the_sinks_reader_reads_committed_files_and_fails_where_inspect_says_unreadable(tmp_path):
    from streamctl.formats.errors import LogParseError

    out = tmp_path / "sink"
    assert cs.committed_files(str(out)) == []
    writer(out).commit([stage(out, 0, 0, [{"a": 1}]), stage(out, 0, 1, [{"a": 2}])], 0)
    writer(out).commit([stage(out, 1, 0, [{"a": 3}])], 1)
    stage(out, 2, 0, [{"a": 4}])  # staged, never committed: not data
    (out / "_commits" / ".2.json.x.tmp").write_text("{}")
    got = cs.committed_files(str(out))
    assert [jsonl(Path(f)) for f in got] == [[{"a": 1}], [{"a": 2}], [{"a": 3}]]
    good = (out / "_commits" / "1.json").read_text()
    rec = json.loads(good)
    bad = {"rows -7": {**rec, "rows": -7}, "version -7": {**rec, "version": -7}, "epoch 0 in 1.json": {**rec, "epoch": 0},
           "num_writers -7": {**rec, "num_writers": -7},
           "partition -7": {**rec, "writers": [{**rec["writers"][0], "partition": -7}]},
           "a file outside its epoch": {**rec, "writers": [{**rec["writers"][0], "files": ["../../etc/passwd"]}]}}
    for why, broken in bad.items():
        (out / "_commits" / "1.json").write_text(json.dumps(broken))
        with pytest.raises(LogParseError, match="1.json"):
            cs.committed_files(str(out))
        want = "SINK_WRITER_MISSING" if why == "a file outside its epoch" else "UNREADABLE"
        assert [f.code for f in read_sink(out).findings if f.code != "SINK_ORPHANS"] == [want], why
    (out / "_commits" / "1.json").write_text(good)
    Path(got[-1]).unlink()
    with pytest.raises(FileNotFoundError, match="1.json"):
        cs.committed_files(str(out))
    assert [f.code for f in read_sink(out).findings if f.code != "SINK_ORPHANS"] == ["SINK_WRITER_MISSING"]


def read_sink(out: Path):
    from streamctl.inspectors.sinks import read_sink

    return read_sink(str(out))


def test_commit_refuses_messages_of_another_epoch(tmp_path):
    out = tmp_path / "sink"
    with pytest.raises(RuntimeError, match="staged epoch 4, but Spark commits epoch 5"):
        writer(out).commit([stage(out, 4, 0, [{"a": 1}])], 5)
    msg = stage(out, 5, 0, [{"a": 1}])
    msg.files = ["data/epoch=5/../../elsewhere.jsonl"]
    with pytest.raises(ValueError, match="not a staging file of epoch 5"):
        writer(out).commit([msg], 5)
    assert not (out / "_commits").exists()


def test_abort_removes_the_epochs_staging(tmp_path):
    out = tmp_path / "sink"
    msgs = [stage(out, 2, 0, [{"a": 1}]), None]
    (out / "_staging" / "2" / "part-00001-0-leftover.jsonl").write_text("{}\n")  # a failed task's file
    writer(out).abort(msgs, 2)
    assert not (out / "_staging" / "2").exists() and files_under(out) == []


def test_injected_faults(tmp_path):
    out = tmp_path / "sink"
    msgs = [stage(out, 7, 0, [{"a": 1}]), stage(out, 7, 1, [{"a": 2}])]
    w = writer(out, crash_before_commit_epoch=7)
    with pytest.raises(cs.InjectedFault, match="crashBeforeCommitEpoch=7"):
        w.commit(msgs, 7)
    w.abort(msgs, 7)  # Spark aborts after a failed commit; the simulated dead driver does not
    assert files_under(out) == sorted(f for m in msgs for f in m.files)
    w.abort([msgs[0], None], 7)  # an abort after a task failure still cleans up
    assert files_under(out) == []

    msgs = [stage(out, 8, 0, [{"a": 1}]), stage(out, 8, 1, [{"a": 2}])]
    w = writer(out, fail_after_publish_epoch=8)
    with pytest.raises(cs.InjectedFault, match="failAfterPublishEpoch=8"):
        w.commit(msgs, 8)
    w.abort(msgs, 8)
    assert [f.split("/")[:2] for f in files_under(out)] == [["data", "epoch=8"]] * 2
    assert not (out / "_commits").exists()


def test_options_and_paths(tmp_path):
    assert cs.local_path("/a/b/../c") == "/a/c"
    assert cs.local_path("file:///a/b%20c") == "/a/b c"
    assert cs.local_path("file:/a/b") == "/a/b"
    for bad in ("", None, "relative/dir", "s3a://bucket/x", "hdfs://nn/x", "file://host/x"):
        with pytest.raises(ValueError):
            cs.local_path(bad)
    from pyspark.sql.types import StructType

    ds = cs.CoordinatedSinkDataSource({"PATH": f"file://{tmp_path}", "crashbeforecommitepoch": "4"})
    w = ds.streamWriter(StructType([]), False)
    assert (w.path, w.crash_before_commit_epoch, w.fail_after_publish_epoch) == (str(tmp_path), 4, None)
    with pytest.raises(ValueError, match="failAfterPublishEpoch"):
        cs.CoordinatedSinkDataSource({"path": str(tmp_path), "failAfterPublishEpoch": "x"}).streamWriter(
            StructType([]), False)
    with pytest.raises(RuntimeError, match="no TaskContext"):
        w.write(iter([]))


def test_row_conversion():
    import datetime as dt
    from decimal import Decimal

    from pyspark.sql import Row
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DateType,
        DecimalType,
        DoubleType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    inner = StructType([StructField("t", TimestampType()), StructField("n", LongType())])
    schema = StructType([
        StructField("ts", TimestampType()), StructField("ntz", TimestampNTZType()), StructField("d", DateType()),
        StructField("dec", DecimalType(10, 2)), StructField("b", BinaryType()), StructField("x", DoubleType()),
        StructField("s", inner), StructField("arr", ArrayType(inner)),
        StructField("m", MapType(LongType(), StringType())), StructField("none", StringType()),
    ])
    local = dt.datetime(2024, 1, 1, 12, 30, 5, 123000)  # PySpark's naive local-time TIMESTAMP value
    utc = local.astimezone(dt.timezone.utc).isoformat()
    row = Row(ts=local, ntz=dt.datetime(2024, 1, 1, 12, 30), d=dt.date(2024, 2, 29), dec=Decimal("1.50"),
              b=b"\x00\xff", x=float("nan"), s=Row(t=local, n=3), arr=[Row(t=None, n=1)], m={1: "a"}, none=None)
    assert json.loads(cs._row_line(row, schema)) == {
        "ts": utc, "ntz": "2024-01-01T12:30:00", "d": "2024-02-29", "dec": "1.50", "b": "AP8=", "x": "NaN",
        "s": {"t": utc, "n": 3}, "arr": [{"t": None, "n": 1}], "m": {"1": "a"}, "none": None,
    }
    assert utc.endswith("+00:00")


# --------------------------------------------------------------------------- real Spark runs


@pytest.mark.spark
def test_coordinated_sink_scenario(spark_checkpoints):
    ckpt = spark_checkpoints["coordinated_sink"]
    out, inp = ckpt.parent / "output", ckpt.parent / "input"
    assert batch_ids(ckpt / "offsets") == batch_ids(ckpt / "commits") == list(range(6))
    recs = records(out)
    assert sorted(recs) == list(range(6))
    assert sorted(os.listdir(out / "_commits")) == sorted(f"{e}.json" for e in range(6))  # no temp files
    rows = []
    for epoch, rec in recs.items():
        rows += check_record(out, epoch, rec, query_id(ckpt), 2)
        assert [w["partition"] for w in rec["writers"]] == [0, 1]
        assert all(w["rows"] > 0 and len(w["files"]) == 1 for w in rec["writers"])
    named = sorted(f for rec in recs.values() for w in rec["writers"] for f in w["files"])
    assert files_under(out / "data") == [f[len("data/"):] for f in named]  # nothing unnamed in data/
    assert files_under(out / "_staging") == [] and os.listdir(out / "_staging") == []
    # Every input row exactly once, timestamps as UTC ISO strings.
    expected = input_rows(inp)
    assert len(expected) == 48
    assert Counter((r["key"], r["value"], r["ts"]) for r in rows) == Counter(map(as_sink_row, expected))


@pytest.mark.spark
def test_delta_foreach_batch_scenario(spark_checkpoints):
    from deltalake import DeltaTable

    ckpt = spark_checkpoints["delta_foreach_batch"]
    out, inp = ckpt.parent / "output", ckpt.parent / "input"
    assert batch_ids(ckpt / "offsets") == batch_ids(ckpt / "commits") == list(range(6))
    table = DeltaTable(str(out))
    assert table.version() == 5
    assert table.transaction_version(query_id(ckpt)) == 5
    assert table.transaction_version("some-other-app") is None
    data = table.to_pyarrow_table()
    expected = input_rows(inp)
    assert data.num_rows == len(expected) == 48
    got = Counter(zip(data["key"].to_pylist(), data["value"].to_pylist(),
                      (t.strftime("%Y-%m-%dT%H:%M:%S") for t in data["ts"].to_pylist()), strict=True))
    assert got == Counter((r["key"], r["value"], r["ts"]) for r in expected)
    log = [json.loads(line) for line in (out / "_delta_log" / "00000000000000000005.json").read_text().splitlines()]
    txn = [a["txn"] for a in log if "txn" in a]
    assert len(txn) == 1 and txn[0]["appId"] == query_id(ckpt) and txn[0]["version"] == 5
    assert isinstance(txn[0].get("lastUpdated"), int)


@pytest.mark.spark
def test_coordinated_replayed_epoch_is_not_duplicated(spark, spark_checkpoints, fresh_copy):
    from streamctl.fixtures.examples import rerun_sink

    ckpt = fresh_copy("coordinated_sink")
    out = ckpt.parent / "output"
    drop_commit(ckpt, 5)
    before = {f: (out / f).read_bytes() for f in files_under(out)}
    rerun_sink(spark, "coordinated_sink", ckpt, spark_checkpoints["coordinated_sink"].parent / "input", out)
    assert batch_ids(ckpt / "commits") == list(range(6))  # Spark really re-ran batch 5
    after = {f: (out / f).read_bytes() for f in files_under(out)}
    assert after == before  # the replay's staged files were dropped, the record untouched
    assert os.listdir(out / "_staging") == []


@pytest.mark.spark
def test_delta_replayed_batch_is_skipped(spark, spark_checkpoints, fresh_copy):
    from deltalake import DeltaTable

    from streamctl.fixtures.examples import rerun_sink

    ckpt = fresh_copy("delta_foreach_batch")
    out = ckpt.parent / "output"
    drop_commit(ckpt, 5)
    rerun_sink(spark, "delta_foreach_batch", ckpt, spark_checkpoints["delta_foreach_batch"].parent / "input", out)
    assert batch_ids(ckpt / "commits") == list(range(6))
    table = DeltaTable(str(out))
    assert table.version() == 5 and table.transaction_version(query_id(ckpt)) == 5
    assert table.to_pyarrow_table().num_rows == 48
    with pytest.raises(ValueError, match="takes no sink options"):
        rerun_sink(spark, "delta_foreach_batch", ckpt, out, out, crashBeforeCommitEpoch=6)


def uncommit_last(ckpt: Path, out: Path, epoch: int) -> None:
    """Put a built coordinated_sink copy back into the state just before epoch `epoch` (its last)
    was committed: offsets/<epoch> present, no commits/<epoch>, no record, no data for it."""
    import shutil

    drop_commit(ckpt, epoch)
    (out / "_commits" / f"{epoch}.json").unlink()
    shutil.rmtree(out / "data" / f"epoch={epoch}")


@pytest.mark.spark
def test_crash_before_commit_then_restart(spark, spark_checkpoints, fresh_copy):
    """crashBeforeCommitEpoch=5: the query fails with the batch's files in _staging/5/ and no
    record; a restart without the option replays batch 5 and commits it exactly once."""
    from streamctl.fixtures.examples import rerun_sink

    ckpt = fresh_copy("coordinated_sink")
    out, inp = ckpt.parent / "output", spark_checkpoints["coordinated_sink"].parent / "input"
    uncommit_last(ckpt, out, 5)

    with pytest.raises(Exception, match="crashBeforeCommitEpoch=5"):
        rerun_sink(spark, "coordinated_sink", ckpt, inp, out, crashBeforeCommitEpoch=5)
    assert batch_ids(ckpt / "offsets") == list(range(6)) and batch_ids(ckpt / "commits") == list(range(5))
    crashed = files_under(out / "_staging")
    assert len(crashed) == 2 and all(re.fullmatch(rf"5/part-0000[01]-0-{UUID}\.jsonl", f) for f in crashed)
    assert sorted(records(out)) == list(range(5)) and not (out / "data" / "epoch=5").exists()

    rerun_sink(spark, "coordinated_sink", ckpt, inp, out)
    assert batch_ids(ckpt / "commits") == list(range(6))
    recs = records(out)
    assert sorted(recs) == list(range(6))
    rows = check_record(out, 5, recs[5], query_id(ckpt), 2)
    assert Counter(map(as_sink_row, input_rows(inp)[40:])) == Counter((r["key"], r["value"], r["ts"]) for r in rows)
    named = sorted(f.split("/")[-1] for w in recs[5]["writers"] for f in w["files"])
    assert files_under(out / "data" / "epoch=5") == named
    assert not {c.split("/")[-1] for c in crashed} & set(named)
    # The crashed attempt's staged files are orphans now: no record names them, and commit(5)
    # removes _staging/5/ only when empty (layout rule), so they stay for an operator to delete.
    assert files_under(out / "_staging") == crashed
    assert sum(r["rows"] for r in recs.values()) == 48


@pytest.mark.spark
def test_fail_after_publish_then_restart(spark, spark_checkpoints, fresh_copy):
    """failAfterPublishEpoch=5: files published to data/epoch=5/ without a record; the restart
    publishes the replay's files and a record naming only those."""
    from streamctl.fixtures.examples import rerun_sink

    ckpt = fresh_copy("coordinated_sink")
    out, inp = ckpt.parent / "output", spark_checkpoints["coordinated_sink"].parent / "input"
    uncommit_last(ckpt, out, 5)

    with pytest.raises(Exception, match="failAfterPublishEpoch=5"):
        rerun_sink(spark, "coordinated_sink", ckpt, inp, out, failAfterPublishEpoch=5)
    published = files_under(out / "data" / "epoch=5")
    assert len(published) == 2 and sorted(records(out)) == list(range(5))
    assert files_under(out / "_staging") == []
    assert batch_ids(ckpt / "commits") == list(range(5))

    rerun_sink(spark, "coordinated_sink", ckpt, inp, out)
    rec = records(out)[5]
    assert check_record(out, 5, rec, query_id(ckpt), 2) and rec["rows"] == 8
    named = sorted(f.split("/")[-1] for w in rec["writers"] for f in w["files"])
    assert sorted(set(files_under(out / "data" / "epoch=5")) - set(named)) == published  # unrecorded orphans

"""Real-time mode (`writeStream.trigger(realTime=...)`, PySpark 4.1+) on the newest PySpark.

What a real-time query can run here: Spark 4.3's real-time mode reads only sources that implement
`SupportsRealTimeMode` — the Kafka connector (`spark-sql-kafka-0-10`, not shipped in PySpark's jars)
and `LowLatencyMemoryStream` (in `spark-sql`; no Python data source class implements it; the rate
and file sources fail with `STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED`); it writes only to
the sinks of `RealTimeModeAllowlist` (console, memory, foreach, Kafka: a file sink fails with
`STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST`), in update mode only
(`OUTPUT_MODE_NOT_SUPPORTED` for append). So the query here is a real Spark
`LowLatencyMemoryStream` (driven through py4j, hence restarts within the session) -> optional
`dropDuplicates` -> a Python `foreach` writer that writes one file per (epoch, partition) when the
partition's epoch closes cleanly: a replayed epoch overwrites its files, and the delivery check
reads the files of the committed epochs.

What it writes (observed, 4.3.0): offsets `v1` written when a batch *ends* (a stopped or crashed
batch leaves no `offsets/N`), commits `v2` (stateful: `stateUniqueIds`; Spark's real-time soft
defaults turn on RocksDB, changelog checkpointing and checkpoint format 2, none of them in the
offsets conf), temp files of the interrupted batch in the state folders. A stateless query runs
with async progress tracking on by default (`spark.sql.streaming.realTimeMode.
asyncProgressTrackingByDefault.enabled`): the batch duration exceeds its persistence interval, so
both logs hold every batch.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.spark4]  # real-time mode: Spark 4.1+

REPEATS = [0, 1, 2]


class _EpochFiles:
    """A `foreach` writer: the rows of one (epoch, partition) go to `<epoch>-<partition>.json`,
    written atomically when the partition's epoch closes without error (a replay overwrites)."""

    def __init__(self, out: str) -> None:
        self.out = out

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.path = os.path.join(self.out, f"{epoch_id}-{partition_id}.json")
        self.rows: list[int] = []
        return True

    def process(self, row: Any) -> None:
        self.rows.append(int(row.id))

    def close(self, error: Any) -> None:
        if error is None and self.rows:
            with open(self.path + ".tmp", "w") as fh:
                json.dump(self.rows, fh)
            os.replace(self.path + ".tmp", self.path)


class RealTimePipeline:
    """One real-time query over a `LowLatencyMemoryStream` of ids; `run` adds ids and runs the
    query until `batches` more batches are committed, then stops it."""

    def __init__(self, spark: Any, base: Path, dedup: bool) -> None:
        jvm = spark._jvm
        self.spark, self.jvm, self.dedup = spark, jvm, dedup
        self.stream = jvm.org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream.singlePartition(
            spark._jsparkSession, jvm.org.apache.spark.sql.Encoders.INT())
        self.checkpoint, self.output = base / "checkpoint", base / "output"
        self.output.mkdir(parents=True)
        self.sent: list[int] = []

    def _add(self, ids: list[int]) -> None:
        batch = self.jvm.java.util.ArrayList()
        for i in ids:
            batch.add(i)
        self.stream.addData(self.jvm.scala.jdk.javaapi.CollectionConverters.asScala(batch))
        self.sent += ids

    def committed(self) -> int:
        folder = self.checkpoint / "commits"
        ids = [int(n) for n in os.listdir(folder) if n.isdigit()] if folder.is_dir() else []
        return max(ids, default=-1)

    def run(self, ids: list[int], batches: int, timeout_s: float = 120) -> None:
        from pyspark.sql import DataFrame

        target = self.committed() + batches
        df = DataFrame(self.stream.toDF(), self.spark).withColumnRenamed("value", "id")
        if self.dedup:
            df = df.dropDuplicates(["id"])
        # 1 shuffle partition: a pipelined stage group needs source + shuffle partitions task slots
        # at once (CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT), and the shared session has local[2]
        # and 2 s batches (Spark's minimum is 5 s unless lowered; async progress tracking, on for
        # the stateless query, still persists every batch: its interval is 1 s)
        confs = {"spark.sql.shuffle.partitions": "1", "spark.sql.streaming.realTimeMode.minBatchDuration": "2000"}
        saved = {k: self.spark.conf.get(k, None) for k in confs}
        for k, v in confs.items():
            self.spark.conf.set(k, v)
        try:
            q = (df.writeStream.foreach(_EpochFiles(str(self.output))).outputMode("update")
                 .option("checkpointLocation", str(self.checkpoint)).trigger(realTime="2 seconds").start())
        finally:
            for k, v in saved.items():
                self.spark.conf.unset(k) if v is None else self.spark.conf.set(k, v)
        try:
            self._add(ids)
            deadline = time.monotonic() + timeout_s
            while self.committed() < target and time.monotonic() < deadline and q.isActive:
                time.sleep(0.5)
        finally:
            q.stop()
        assert q.exception() is None, q.exception()
        assert self.committed() >= target, (self.committed(), target)

    def delivery(self) -> dict[str, Any]:
        """Every id sent arrives as often as the query must deliver it (once with dropDuplicates,
        as often as sent without), counting only the files of committed epochs."""
        committed = self.committed()
        got: Counter[int] = Counter()
        for name in os.listdir(self.output):
            epoch = name.split("-", 1)[0]
            if name.endswith(".json") and epoch.isdigit() and int(epoch) <= committed:
                got.update(json.loads((self.output / name).read_text()))
        want = Counter(set(self.sent)) if self.dedup else Counter(self.sent)
        return {"ok": got == want, "missing": sorted((want - got).elements()), "extra": sorted((got - want).elements())}


def _inspect(cli: Any, ckpt: Path) -> dict:
    r = cli("inspect", "epochs", str(ckpt), "--json")
    assert r.code == 0 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    return r.json()["queries"][0]


def _state_layout(ckpt: Path) -> dict[str, list[str]]:
    """Partition folder -> the files a restart may read (temp files excluded)."""
    out: dict[str, list[str]] = {}
    for part in sorted((ckpt / "state").glob("*/*")) if (ckpt / "state").is_dir() else []:
        if part.is_dir() and part.name.isdigit():
            out[str(part.relative_to(ckpt))] = sorted(
                str(p.relative_to(part)) for p in part.rglob("*")
                if p.is_file() and not p.name.endswith((".tmp", ".tmp.crc")))  # a temp file's hidden crc too
    return out


@pytest.fixture
def realtime(spark: Any, tmp_path: Path) -> Iterator[Any]:
    yield lambda dedup: RealTimePipeline(spark, tmp_path / ("dedup" if dedup else "stateless"), dedup)


@pytest.mark.parametrize("dedup", [True, False], ids=["dropDuplicates", "stateless"])
def test_realtime_checkpoint_reads_right_and_align_trim_keep_what_restart_reads(cli: Any, realtime: Any,
                                                                                  dedup: bool) -> None:
    """A real real-time query (two committed batches or more), stopped: `inspect` reads it
    aligned at its newest commit (format 2 when stateful, RocksDB per the offsets conf);
    `align --execute` moves no state a restart reads, `trim --keep-epochs 1 --execute` is
    verified; the restart of the same query commits more batches and delivers every id as the
    query must (dropDuplicates: exactly once, the repeats dropped across the restart)."""
    p = realtime(dedup)
    p.run(list(range(0, 20)) + REPEATS, batches=2)
    q = _inspect(cli, p.checkpoint)
    codes = {f["code"] for f in q["findings"]}
    assert q["verdict"] == "aligned" and q["planned"] == q["committed"] == p.committed(), q
    assert codes <= {"STATE_ORPHANS"}, q["findings"]  # only the interrupted batch's temp files
    assert q["stateful"] is dedup and q["checkpoint_format"] == 2, q
    orphans = [f for finding in q["findings"] for f in finding.get("files", [])]
    assert all(f.endswith(".tmp") for f in orphans), orphans
    before = _state_layout(p.checkpoint)
    r = cli("align", str(p.checkpoint), "--execute", "--json")
    assert r.code == 0 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    assert _state_layout(p.checkpoint) == before, "align moved state a restart reads"
    r = cli("trim", str(p.checkpoint), "--keep-epochs", "1", "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, (r.stdout, r.stderr)
    assert sorted(_state_layout(p.checkpoint)) == sorted(before), "trim moved a partition folder"
    committed = p.committed()
    p.run(list(range(20, 40)) + REPEATS, batches=2)
    d = p.delivery()
    assert d["ok"], d
    q = _inspect(cli, p.checkpoint)
    assert q["verdict"] == "aligned" and q["committed"] >= committed + 2, q

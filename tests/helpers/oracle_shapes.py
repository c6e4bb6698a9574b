"""The query shapes of the restart oracle (tests/helpers/oracle.py): small real PySpark queries
whose three folders (input, checkpoint, sink) are named separately, so that a case can move any
of them and restart the query on the new paths.

Every file shape reads JSON files from ``input/a`` (the join also ``input/b``), one file per batch
(``maxFilesPerTrigger`` 1). File ``i`` holds ids ``i*ROWS .. i*ROWS+ROWS-1`` with event times in
the ten-second window ``i`` (``BASE_TS + 10*i + j``). A Kafka shape (``source="kafka"``) reads a
topic of two partitions through streamctl's Python Kafka source instead: its "file" ``i`` is
``ROWS`` JSON records produced to the topic (tests/helpers/oracle_kafka.py), one file per batch
(``maxOffsetsPerTrigger``), and its input folder only names the topic. Its result is read back the way a reader of
the sink sees it (:meth:`Shape.rows`), as a multiset of rows: the oracle compares it with an
undisturbed run over the same input, which is what "every record exactly once, stateful results
equal" means for every shape at once.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

ROWS = 4
# a Kafka shape's run ends when no batch came for this long, short of the topic's end (the first
# batch of a run takes seconds more: the restart's watchdog, oracle.RESTART_TIMEOUT_S, is longer)
KAFKA_IDLE_S = (25.0, 8.0)  # (before the first batch, after a batch)
# the next version of a query an operator deploys on the old checkpoint: a stateful operator
# added or removed, the deduplication key changed, the input read under another path
# (a Kafka shape's: the topic read under another name, a copy of it, instead of the path)
CHANGES = ("op_added", "op_removed", "key_changed", "source_path", "topic_renamed")
BASE_TS = 1_700_000_000  # seconds: the event time of file 0's first row
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_BASE_CONFS = {
    "spark.sql.streaming.fileSink.log.compactInterval": "3",
    "spark.sql.streaming.fileSource.log.compactInterval": "3",
    "spark.sql.streaming.minBatchesToRetain": "100",
    "spark.sql.shuffle.partitions": "2",
    FORMAT: "1",
    PROVIDER: HDFS,
    CHANGELOG: "false",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
}


@dataclass(frozen=True)
class Layout:
    """Where a pipeline's three folders are (each may be moved on its own)."""

    input: Path
    checkpoint: Path
    output: Path

    @classmethod
    def under(cls, base: Path) -> Layout:
        return cls(base / "input", base / "checkpoint", base / "output")

    def roots(self) -> tuple[Path, ...]:
        return (self.input, self.checkpoint, self.output)


@dataclass(frozen=True)
class Shape:
    """One query shape: how its query is built and its sink read.

    op: ``select`` (stateless), ``dedup``, ``window`` (a windowed count with a watermark),
    ``join`` (stream-stream inner join on id); sink: ``file`` (JSON file sink, `_spark_metadata`),
    ``delta`` (foreachBatch into a Delta table with a txn per batch) or ``coordinated``
    (streamctl's coordinated sink, two writers); reader: extra options of the file source
    (``cleanSource``)."""

    name: str
    op: str = "select"
    source: str = "files"  # "files" (JSON files in input/) or "kafka" (a topic, streamctl's source)
    sink: str = "file"
    confs: dict[str, str] = field(default_factory=dict)
    reader: dict[str, str] = field(default_factory=dict)
    spark4: bool = False  # needs a Spark 4 feature (checkpoint format 2, Python data sources)
    app_id: str = ""  # a Delta writer's fixed txn app id (Delta's txnAppId), else the query id

    @property
    def stateful(self) -> bool:
        return self.op != "select"

    @property
    def sources(self) -> tuple[str, ...]:
        return ("a", "b") if self.op == "join" else ("a",)

    # -- input ------------------------------------------------------------------------------
    def kafka_rows(self, i: int) -> list[dict]:
        """Kafka "file" i: exactly ROWS records (a batch is ROWS offsets); a dedup shape's last
        record of every file but the first repeats the previous file's first id, with its key
        (whichever of the two a batch keeps, the result is the same)."""
        ids = [i * ROWS + j for j in range(ROWS)]
        if self.op == "dedup" and i > 0:
            ids[-1] = (i - 1) * ROWS
        return [{"id": n, "key": f"k{n % 3}", "ts": BASE_TS + 10 * i + j, "side": "a"} for j, n in enumerate(ids)]

    def add_input(self, lay: Layout, start: int, count: int) -> None:
        """Input files start..start+count-1 in every source folder, each with a fixed mtime (an
        hour ago plus its number: the same bytes and times in every copy of a case); for a Kafka
        shape, produced to its topic unless the topic holds them already."""
        if self.source == "kafka":
            from helpers import oracle_kafka

            loc = oracle_kafka.ensure_topic(lay.input, self.name)
            oracle_kafka.produce_files(loc["topic"], start, count, self.kafka_rows, ROWS)
            return
        base_mtime = time.time() - 3600
        for src in self.sources:
            folder = lay.input / src
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(start, start + count):
                rows = [{"id": i * ROWS + j, "key": f"k{(i * ROWS + j) % 3}", "ts": BASE_TS + 10 * i + j,
                         "side": src} for j in range(ROWS)]
                if self.op == "dedup" and i > 0:
                    # a repeat the state must remember, with the first one's key: a roll back
                    # re-plans the batches after the one it replays (Spark merges what the source
                    # log lists), and whichever of the two a batch keeps, the result is the same
                    first = (i - 1) * ROWS
                    rows.append(dict(rows[0], id=first, key=f"k{first % 3}"))
                path, tmp = folder / f"part-{i:05d}.json", folder / f".part-{i:05d}.json.tmp"
                tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
                os.utime(tmp, (base_mtime + i, base_mtime + i))
                tmp.rename(path)

    # -- the query ----------------------------------------------------------------------------
    def frame(self, spark: Any, lay: Layout, change: str = "") -> Any:
        """The query's streaming DataFrame, or (`change`, one of CHANGES) the next version of
        the query an operator deploys on the same checkpoint."""
        from pyspark.sql import functions as F

        def read(src: str) -> Any:
            if self.source == "kafka":
                return self._kafka(spark, lay, change)
            r = spark.readStream.schema("id BIGINT, key STRING, ts BIGINT, side STRING").option("maxFilesPerTrigger", 1)
            for k, v in self.reader.items():
                r = r.option(k, v.replace("{input}", str(lay.input)))
            # source_path: the same folder under another name (a symlink), as after a remount
            base = lay.input.parent / "input-link" if change == "source_path" else lay.input
            return r.json(str(base / src))

        df = read("a")
        op = "select" if change == "op_removed" else self.op
        if change == "op_added":
            df = df.dropDuplicates(["id"])
        if op == "dedup":
            df = df.dropDuplicates(["key"] if change == "key_changed" else ["id"]).select("id", "key")
        elif op == "window":
            df = (df.withColumn("t", F.col("ts").cast("timestamp")).withWatermark("t", "2 seconds")
                  .groupBy(F.window("t", "10 seconds")).count()
                  .select(F.col("window.start").cast("long").alias("start"), "count"))
        elif op == "join":
            right = read("b").select(F.col("id").alias("rid"), F.col("key").alias("rkey"))
            df = df.select("id", "key").join(right, F.col("id") == F.col("rid"), "inner").select("id", "key", "rkey")
        else:
            df = df.select("id", "key")
        return df

    def _kafka(self, spark: Any, lay: Layout, change: str) -> Any:
        """The topic through streamctl's Kafka source, one file (ROWS offsets) per batch, the
        records' JSON values as columns; `topic_renamed`: the topic's copy under another name."""
        from pyspark.sql import functions as F

        from helpers import oracle_kafka
        from streamctl.pipeline.kafka_source import SHORT_NAME, register

        loc = oracle_kafka.location(lay.input)
        topic = loc["topic"] + ("-renamed" if change == "topic_renamed" else "")
        register(spark)
        raw = (spark.readStream.format(SHORT_NAME).option("kafka.bootstrap.servers", loc["bootstrap"])
               .option("subscribe", topic).option("startingOffsets", "earliest")
               .option("maxOffsetsPerTrigger", ROWS).option("pollTimeoutMs", 20000).load())
        return (raw.select(F.from_json(F.col("value").cast("string"), "id BIGINT, key STRING, ts BIGINT, side STRING")
                           .alias("r")).select("r.*"))

    def writer(self, spark: Any, lay: Layout, query_name: str, change: str = "") -> Any:
        df = self.frame(spark, lay, change)
        if self.sink == "delta":
            w = df.writeStream.foreachBatch(_delta_batch(lay, self.app_id))
        elif self.sink == "coordinated":
            from streamctl.pipeline.coordinated_sink import SHORT_NAME, register

            register(spark)
            w = df.repartition(2).writeStream.format(SHORT_NAME).option("path", str(lay.output))
        else:
            w = df.writeStream.format("json").option("path", str(lay.output))
        return (w.outputMode("append").option("checkpointLocation", str(lay.checkpoint))
                .queryName(query_name).trigger(availableNow=True))

    def changes(self) -> tuple[str, ...]:
        """The changes of CHANGES this shape's query can take."""
        out = ["topic_renamed"] if self.source == "kafka" else ["source_path"]
        if self.op in ("select", "dedup"):
            out.append("op_added")
        if self.stateful:
            out.append("op_removed")
        if self.op == "dedup":
            out.append("key_changed")
        return tuple(c for c in CHANGES if c in out)

    def input_rows(self, start: int, count: int) -> int:
        """How many rows input files start..start+count-1 hold, over every source."""
        if self.source == "kafka":
            return ROWS * count
        per = [ROWS + (1 if self.op == "dedup" and i > 0 else 0) for i in range(start, start + count)]
        return sum(per) * len(self.sources)

    def all_confs(self) -> dict[str, str]:
        return dict(_BASE_CONFS, **self.confs)

    def run(self, spark: Any, lay: Layout, query_name: str = "oracle", change: str = "") -> Any:
        """Start the query (availableNow) with the shape's confs, wait for its end and return it;
        raise what Spark raises. The session's confs are put back after."""
        from streamctl.pipeline.session import scenario_confs

        with scenario_confs(spark, self.all_confs()):
            if self.source == "kafka":
                return self._run_kafka(spark, lay, query_name, change)
            q = self.writer(spark, lay, query_name, change).start()
            q.awaitTermination()
            return q

    def _run_kafka(self, spark: Any, lay: Layout, query_name: str, change: str) -> Any:
        """availableNow over a Python data source with maxOffsetsPerTrigger runs one bounded batch
        only (pipeline/kafka_source.py): the query runs on a short processing-time trigger instead
        and is stopped once a batch has reached the topic's end offsets, or once no batch came for
        KAFKA_IDLE_S (what a restart that catches up and then waits does); raise what Spark raises."""
        from helpers import oracle_kafka

        topic = oracle_kafka.location(lay.input)["topic"] + ("-renamed" if change == "topic_renamed" else "")
        target = oracle_kafka.end_offsets(topic)
        q = self.writer(spark, lay, query_name, change).trigger(processingTime="100 milliseconds").start()
        seen, last_change = 0, time.monotonic()
        try:
            while q.isActive:
                progress = q.recentProgress
                if len(progress) != seen:
                    seen, last_change = len(progress), time.monotonic()
                    ends = [p["sources"][0]["endOffset"] for p in progress if p["sources"]]
                    if ends and _offsets_json(ends[-1]) == target:
                        break
                if time.monotonic() - last_change > KAFKA_IDLE_S[1 if seen else 0]:
                    break
                time.sleep(0.1)
        finally:
            if q.isActive:
                q.stop()
        q.awaitTermination()  # raises the query's exception, if any
        return q

    # -- the sink, as its readers see it --------------------------------------------------------
    def rows(self, lay: Layout) -> Counter:
        """The sink's rows as a reader of the sink at `lay.output` sees them: a file sink's log
        entries under the sink's own path (Spark's batch reader skips the others), a Delta
        table's current version, the coordinated sink's committed records."""
        # a named pipe in the log blocks a reader that opens it: every record of the coordinated
        # sink, every Delta commit here (no checkpoint yet); a file sink's reader opens only the
        # newest compaction and the batches after it (logged_sink_paths checks those; observed
        # 4.3.0: a pipe where an older batch file was, `spark.read` reads every row)
        logs = {"delta": "_delta_log", "coordinated": "_commits"}.get(self.sink)
        for f in (lay.output / logs).glob("*") if logs and (lay.output / logs).is_dir() else ():
            if not f.name.startswith(".") and not f.is_file() and not f.is_dir():
                raise OSError(f"{f}: not a regular file")
        if self.sink == "delta":
            from deltalake import DeltaTable

            if not (lay.output / "_delta_log").exists():
                return Counter()
            table = DeltaTable(str(lay.output)).to_pyarrow_table()
            return Counter(tuple(sorted(r.items())) for r in table.to_pylist())
        if self.sink == "coordinated":
            # the sink's own reader: it reads every record with the parse `inspect sink` uses
            from streamctl.formats.coordinated_log import committed_files

            return Counter(r for path in committed_files(str(lay.output)) for r in _json_rows(Path(path)))
        return Counter(r for path in file_sink_paths(lay.output) for r in _json_rows(Path(path)))


def _offsets_json(value: Any) -> Any:
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


def _json_rows(path: Path) -> list[tuple]:
    with open(path) as fh:
        return [tuple(sorted(json.loads(line).items())) for line in fh if line.strip()]


def file_sink_paths(output: Path) -> list[str]:
    """The data files a file sink's `_spark_metadata/` commits that lie under `output` and exist:
    what Spark's batch reader of the sink reads (it skips the others)."""
    from helpers.align_pipeline import logged_sink_paths

    log = output / "_spark_metadata"
    if not log.is_dir():
        return []
    root = os.path.realpath(output) + os.sep
    return [p for p in logged_sink_paths(log) if os.path.realpath(p).startswith(root) and os.path.isfile(p)]


def _delta_batch(lay: Layout, fixed_app_id: str = "") -> Callable[[Any, int], None]:
    """foreachBatch: append to the Delta table with txn(appId=query id, or `fixed_app_id`,
    version=batch id), skipping batches the table already has (what Delta's txnAppId/txnVersion
    writer options do)."""
    ckpt, out = str(lay.checkpoint), str(lay.output)

    def write_batch(batch_df: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
        from deltalake.exceptions import TableNotFoundError

        app_id = fixed_app_id
        if not app_id:
            with open(os.path.join(ckpt, "metadata")) as fh:
                app_id = json.loads(fh.read())["id"]
        try:
            done = DeltaTable(out).transaction_version(app_id)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:
            return
        write_deltalake(out, batch_df.toArrow(), mode="append", commit_properties=CommitProperties(
            app_transactions=[Transaction(app_id=app_id, version=batch_id, last_updated=int(time.time() * 1000))]))

    return write_batch


_ROCKS = {PROVIDER: ROCKSDB}
SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("stateless"),
    Shape("stateless_cleansource", reader={"cleanSource": "archive", "sourceArchiveDir": "{input}/../archive"}),
    Shape("dedup_hdfs", op="dedup"),
    Shape("dedup_rocksdb", op="dedup", confs=dict(_ROCKS, **{CHANGELOG: "false"})),
    Shape("dedup_rocksdb_changelog", op="dedup", confs=dict(_ROCKS, **{CHANGELOG: "true"})),
    Shape("dedup_rocksdb_v2", op="dedup", confs=dict(_ROCKS, **{CHANGELOG: "true", FORMAT: "2"}), spark4=True),
    Shape("window_nodata", op="window"),
    Shape("window", op="window", confs={"spark.sql.streaming.noDataMicroBatches.enabled": "false"}),
    Shape("join_hdfs", op="join"),
    Shape("delta", sink="delta", spark4=True),
    Shape("coordinated", sink="coordinated", spark4=True),
    Shape("kafka_dedup", op="dedup", source="kafka", spark4=True),
    # records read again show only where nothing drops them
    Shape("kafka_stateless", source="kafka", spark4=True),
)}


def with_confs(shape: Shape, **confs: str) -> Shape:
    return replace(shape, confs=dict(shape.confs, **confs))

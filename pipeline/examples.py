"""Real PySpark runs that produce streaming checkpoints for streamctl to inspect.

    python -m streamctl.pipeline.examples [--dir DIR] [--inspect]

Every scenario ``build_<name>(spark, root)`` writes ``root/<name>/{input,checkpoint,output}``
and returns the checkpoint. Input: one small JSON file per micro-batch (8 rows, keys k0..k7,
which hash to all 4 shuffle partitions), read with ``maxFilesPerTrigger=1`` and
``trigger(availableNow=True)``; each scenario runs twice (a restart on the same checkpoint), the
second run after more files were added. Session: local[2], 4 shuffle partitions,
minDeltasForSnapshot=3, maintenanceInterval=200ms, minBatchesToRetain default (100, so nothing
is purged).

Observed with PySpark 4.1.1 (local filesystem):

* Every checkpoint: ``metadata`` (``{"id":"<uuid>"}``), ``offsets/N`` and ``commits/N``
  for N = 0..last (no gaps, commits == offsets after a clean finish), ``sources/<n>/<k>``
  (file-source log, ``v1`` + ``{"path":...,"timestamp":...,"batchId":k}``; its ids are the
  source's own, i.e. ``logOffset`` values, so no-data batches add none). Each of these files has a
  hidden Hadoop sidecar ``.<name>.crc`` (``.metadata.crc``, ``offsets/.3.crc``, ...).
* ``offsets/N``: ``v1``, the metadata line (``batchWatermarkMs``, ``batchTimestampMs``, ``conf``
  with providerClass, rocksdb.formatVersion=5, encodingFormat=unsaferow, shuffle.partitions=4,
  join.stateFormatVersion=2, compression.codec=lz4, ...) and one ``{"logOffset":k}`` line per
  source. ``checkpointFormatVersion`` and the changelog flag are NOT in that conf.
* ``commits/N``: ``v1`` + ``{"nextBatchWatermarkMs":...}``; with checkpoint format 2 it is
  ``v2`` + ``{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["<uuid>"],["<uuid>"],...]}}``
  (per operator, one list per partition, one id per store).
* State files get BOTH kinds of crc: a visible Spark checksum companion ``<file>.crc`` (JSON:
  ``{"algorithm":"CRC32C","value":...,"mainFileSize":...,"timestampMs":...,"creator":{...}}``)
  next to every ``.delta``/``.snapshot``/``.changelog``/``.zip``, plus hidden Hadoop sidecars
  for the file and for the companion: ``.1.delta.crc`` and ``.1.delta.crc.crc``. SST files
  (``SSTs/<n>-<uuid>.sst``), ``_metadata/metadata`` and ``_metadata/schema`` get only the hidden
  Hadoop sidecar.
* Operator metadata v1 at ``state/0/_metadata/metadata`` (``v1`` + JSON; operatorName
  ``stateStoreSave`` / ``symmetricHashJoin`` / ``dedupe``); schema file per store at
  ``state/0/0/_metadata/schema`` (``state/0/0/<store>/_metadata/schema`` for the join), header
  ``v2``. No ``_metadata/v2/`` and no ``_stateSchema/`` (those are transformWithState only).

Scenarios (batches = offsets/commits ids; state versions = batch + 1):

* ``stateless_file_sink``: 3+3 files -> batches 0..5; no ``state/``; parquet sink at
  ``output/`` with ``output/_spark_metadata/0..5`` (``v1`` + one ``"action":"add"`` JSON line
  per part file) and hidden ``.part-*.parquet.crc``.
* ``agg_hdfs``: 4+4 files -> batches 0..7; ``state/0/{0..3}/{1..8}.delta``, snapshots
  ``4.snapshot`` and ``8.snapshot`` (written by maintenance; the exact versions depend on timing).
* ``agg_rocksdb``: 4+4 -> batches 0..7; ``state/0/{0..3}/{1..8}.changelog`` plus ``3.zip`` and
  ``6.zip`` (v - last snapshot >= 3), ``SSTs/`` (may be empty or hold ``<n>-<uuid>.sst``); the
  zip holds CURRENT, MANIFEST-*, OPTIONS-*, ``*.log`` and ``metadata`` (``v1`` + JSON with
  sstFiles, numKeys, numInternalKeys, columnFamilyMapping, columnFamilyTypeMap,
  maxColumnFamilyId). Changelogs are LZ4Block-framed; format-1 changelogs have no header.
* ``agg_rocksdb_v2``: same with ``<v>_<uuid>.changelog`` for v = 1..8 and ``3_<uuid>.zip``,
  ``6_<uuid>.zip`` (the zip shares the uuid of that version's changelog); the changelog starts with
  ``writeUTF("v3")`` and a lineage JSON ``[{"version":..,"checkpointUniqueId":..},...]``.
  ``commits/7`` names the uuids of ``8_<uuid>.changelog`` per partition.
* ``join_hdfs``: left/right inputs 3+3 files each -> batches 0..7 (3 and 7 are no-data batches
  that only advance the watermark and evict state); ``sources/0`` and ``sources/1``;
  ``state/0/{0..3}/{left,right}-{keyToNumValues,keyWithIndexToValue}/{1..8}.delta`` (+ snapshots
  at 4 and 8); nonzero ``batchWatermarkMs``/``nextBatchWatermarkMs``.
* ``dedup_rocksdb``: 3+3 files -> batches 0..7 (3 and 7 no-data); RocksDB format 1 changelog
  layout as ``agg_rocksdb`` (zips 3 and 6) with real SST files under ``SSTs/``.
* ``coordinated_sink``: 3+3 files -> ``repartition(2)`` -> streamctl's coordinated sink
  (``streamctl.pipeline.coordinated_sink``, a Python data source) -> batches 0..5; no ``state/``
  and nothing sink-specific in the checkpoint (Spark keeps no Python-sink log). ``output/``:
  ``_commits/0.json`` .. ``_commits/5.json`` (one line, ``{"version":1,"epoch":N,"query_id":
  "<metadata id>","committed_at_ms":...,"num_writers":2,"writers":[{"partition":0,"attempt":0,
  "rows":4,"files":["data/epoch=N/part-00000-0-<uuid>.jsonl"]},{"partition":1,...}],"rows":8}``),
  ``data/epoch=N/part-00000-0-<uuid>.jsonl`` and ``part-00001-0-<uuid>.jsonl`` (4 JSON lines each,
  ``{"key":"k3","value":7,"ts":"2024-01-01T00:00:10+00:00"}``) and an empty ``_staging/``; no
  hidden ``.crc`` files (plain ``os`` writes). The first run takes ~8 s even on a warm session
  (Python data-source planning and commit workers).
* ``delta_foreach_batch``: 3+3 files -> ``foreachBatch`` appending each batch with the
  ``deltalake`` package (delta-rs, not Spark's Delta) -> batches 0..5. ``output/`` is a Delta
  table: ``_delta_log/00000000000000000000.json`` .. ``...05.json`` (table version N = batch N;
  ``commitInfo``, one ``add`` of 8 rows, ``{"txn":{"appId":"<metadata id>","version":N,
  "lastUpdated":<ms>}}``) and ``part-00000-<uuid>-c000.snappy.parquet`` data files; no
  ``_last_checkpoint``. A batch is skipped when ``transaction_version(<query id>) >= N``.

build_all takes ~95 s on an idle 2-core machine (~130 s under load); the join is the slowest
(``coordinated_sink`` ~14 s, ``delta_foreach_batch`` ~4 s of that).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from streamctl.pipeline.session import CHANGELOG as _CHANGELOG
from streamctl.pipeline.session import CKPT_FORMAT as _CKPT_FORMAT
from streamctl.pipeline.session import PROVIDER as _PROVIDER
from streamctl.pipeline.session import get_spark
from streamctl.pipeline.session import scenario_confs as _confs

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "SCENARIOS",
    "STATEFUL_SCENARIOS",
    "get_spark",
    "build_all",
    "build_stateless_file_sink",
    "build_agg_hdfs",
    "build_agg_rocksdb",
    "build_agg_rocksdb_v2",
    "build_join_hdfs",
    "build_dedup_rocksdb",
    "build_coordinated_sink",
    "build_delta_foreach_batch",
    "rerun_agg",
    "rerun_sink",
    "write_input_files",
    "query_id",
    "main",
]

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

_BASE_TS = _dt.datetime(2024, 1, 1, 0, 0, 0)
_SCHEMA_DDL = "key STRING, value BIGINT, ts TIMESTAMP"
_ROWS_PER_FILE = 8
_NUM_KEYS = 8  # k0..k7 hash to all 4 shuffle partitions (k7 -> 0, k5 -> 3)

def _log(msg: str) -> None:
    print(f"[examples] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- input data


def _row(i: int, j: int, ts_shift: int = 0) -> dict:
    ts = _BASE_TS + _dt.timedelta(seconds=i * 10 + j + ts_shift)
    return {
        "key": f"k{(i * 3 + j) % _NUM_KEYS}",
        "value": (i * 7 + j * 3) % 11,
        "ts": ts.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _write_inputs(folder: Path, start: int, count: int, ts_shift: int = 0) -> None:
    """Write input files start..start+count-1, one per future micro-batch.

    Modification times increase with the file index so the file source (oldest first,
    maxFilesPerTrigger=1) reads them in order.
    """
    folder.mkdir(parents=True, exist_ok=True)
    base_mtime = time.time() - 3600
    for i in range(start, start + count):
        path = folder / f"part-{i:05d}.json"
        tmp = folder / f".part-{i:05d}.json.tmp"  # hidden: the file source ignores it
        tmp.write_text("".join(json.dumps(_row(i, j, ts_shift)) + "\n" for j in range(_ROWS_PER_FILE)))
        os.utime(tmp, (base_mtime + i, base_mtime + i))
        tmp.rename(path)


def _read(spark: "SparkSession", folder: Path) -> "DataFrame":
    return spark.readStream.schema(_SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(str(folder))


def _layout(root: Path, name: str) -> tuple[Path, Path, Path]:
    base = root / name
    return base / "checkpoint", base / "input", base / "output"


def _run(make_writer: Callable[[], object], name: str, run_no: int) -> None:
    """Start the query (availableNow) and wait until it has processed every file."""
    t0 = time.monotonic()
    query = make_writer().start()  # type: ignore[attr-defined]
    query.awaitTermination()
    exc = query.exception()
    if exc is not None:  # pragma: no cover - awaitTermination already raises
        raise RuntimeError(f"{name} run {run_no} failed: {exc}")
    batch = query.lastProgress["batchId"] if query.lastProgress else None
    _log(f"{name}: run {run_no} done, last batch {batch} ({time.monotonic() - t0:.1f}s)")


def _two_runs(
    name: str,
    inputs: list[tuple[Path, int]],
    make_writer: Callable[[], object],
    first: int,
    second: int,
) -> None:
    """Run 1 over `first` files per input; add `second` files per input; run 2 (a restart)."""
    for folder, shift in inputs:
        _write_inputs(folder, 0, first, shift)
    _run(make_writer, name, 1)
    for folder, shift in inputs:
        _write_inputs(folder, first, second, shift)
    _run(make_writer, name, 2)


# --------------------------------------------------------------------------- scenarios


def build_stateless_file_sink(spark: "SparkSession", root: Path) -> Path:
    """select/filter -> parquet file sink (append); 6 batches over 2 runs."""
    name = "stateless_file_sink"
    ckpt, inp, out = _layout(Path(root), name)
    from pyspark.sql import functions as F

    def writer():
        df = _read(spark, inp).filter(F.col("value") % 3 != 0).select("key", "value", "ts")
        return (
            df.writeStream.format("parquet")
            .outputMode("append")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .queryName(name)
            .trigger(availableNow=True)
        )

    with _confs(spark, {}):
        _two_runs(name, [(inp, 0)], writer, 3, 3)
    return ckpt


def _agg_writer(spark: "SparkSession", name: str, inp: Path, ckpt: Path):
    from pyspark.sql import functions as F

    def writer():
        df = _read(spark, inp).groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("total"))
        return (
            df.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(ckpt))
            .queryName(name)
            .trigger(availableNow=True)
        )

    return writer


def _build_agg(spark: "SparkSession", root: Path, name: str, confs: dict[str, str]) -> Path:
    ckpt, inp, _ = _layout(Path(root), name)
    with _confs(spark, confs):
        _two_runs(name, [(inp, 0)], _agg_writer(spark, name, inp, ckpt), 4, 4)
    return ckpt


_AGG_CONFS: dict[str, dict[str, str]] = {
    "agg_hdfs": {_PROVIDER: HDFS_PROVIDER, _CKPT_FORMAT: "1"},
    "agg_rocksdb": {_PROVIDER: ROCKSDB_PROVIDER, _CHANGELOG: "true", _CKPT_FORMAT: "1"},
    "agg_rocksdb_v2": {_PROVIDER: ROCKSDB_PROVIDER, _CHANGELOG: "true", _CKPT_FORMAT: "2"},
}


def rerun_agg(spark: "SparkSession", checkpoint: Path, input_dir: Path, name: str) -> None:
    """Restart an aggregation scenario's query on `checkpoint` (a copy made by the tests) with
    the scenario's confs and let it finish (availableNow). `input_dir` must be the folder the
    checkpoint was built from: the file-source log records absolute input paths. Raises what
    Spark raises: the tests use it to check that a verdict matches what a restart really does."""
    with _confs(spark, _AGG_CONFS[name]):
        _run(_agg_writer(spark, name, Path(input_dir), Path(checkpoint)), name, 3)


def build_agg_hdfs(spark: "SparkSession", root: Path) -> Path:
    """groupBy(key).agg(count, sum) -> noop (update); HDFS provider, format 1; 8 batches."""
    return _build_agg(spark, root, "agg_hdfs", _AGG_CONFS["agg_hdfs"])


def build_agg_rocksdb(spark: "SparkSession", root: Path) -> Path:
    """Same aggregation; RocksDB provider with changelog checkpointing, format 1; 8 batches."""
    return _build_agg(spark, root, "agg_rocksdb", _AGG_CONFS["agg_rocksdb"])


def build_agg_rocksdb_v2(spark: "SparkSession", root: Path) -> Path:
    """Same aggregation; RocksDB + changelog + checkpointFormatVersion=2; 8 batches."""
    return _build_agg(spark, root, "agg_rocksdb_v2", _AGG_CONFS["agg_rocksdb_v2"])


def build_join_hdfs(spark: "SparkSession", root: Path) -> Path:
    """Stream-stream inner join with watermarks and a time-range condition -> noop (append); HDFS."""
    name = "join_hdfs"
    ckpt, inp, _ = _layout(Path(root), name)
    left_in, right_in = inp / "left", inp / "right"
    from pyspark.sql import functions as F

    def writer():
        left = (
            _read(spark, left_in)
            .select(F.col("key").alias("lkey"), F.col("value").alias("lvalue"), F.col("ts").alias("lts"))
            .withWatermark("lts", "10 seconds")
        )
        right = (
            _read(spark, right_in)
            .select(F.col("key").alias("rkey"), F.col("value").alias("rvalue"), F.col("ts").alias("rts"))
            .withWatermark("rts", "10 seconds")
        )
        cond = (
            (F.col("lkey") == F.col("rkey"))
            & (F.col("rts") >= F.col("lts") - F.expr("INTERVAL 5 SECONDS"))
            & (F.col("rts") <= F.col("lts") + F.expr("INTERVAL 5 SECONDS"))
        )
        return (
            left.join(right, cond, "inner")
            .writeStream.format("noop")
            .outputMode("append")
            .option("checkpointLocation", str(ckpt))
            .queryName(name)
            .trigger(availableNow=True)
        )

    with _confs(spark, {_PROVIDER: HDFS_PROVIDER, _CKPT_FORMAT: "1"}):
        _two_runs(name, [(left_in, 0), (right_in, 2)], writer, 3, 3)
    return ckpt


def build_dedup_rocksdb(spark: "SparkSession", root: Path) -> Path:
    """withWatermark(ts).dropDuplicates(key, value) -> noop (append); RocksDB + changelog, format 1."""
    name = "dedup_rocksdb"
    ckpt, inp, _ = _layout(Path(root), name)

    def writer():
        df = _read(spark, inp).withWatermark("ts", "10 seconds").dropDuplicates(["key", "value"])
        return (
            df.writeStream.format("noop")
            .outputMode("append")
            .option("checkpointLocation", str(ckpt))
            .queryName(name)
            .trigger(availableNow=True)
        )

    with _confs(spark, {_PROVIDER: ROCKSDB_PROVIDER, _CHANGELOG: "true", _CKPT_FORMAT: "1"}):
        _two_runs(name, [(inp, 0)], writer, 3, 3)
    return ckpt


# --------------------------------------------------------------------------- sink scenarios


def write_input_files(folder: Path, start: int, count: int) -> None:
    """Write input files ``part-<start>.json`` .. (8 rows each, the scenarios' schema) into
    `folder`, one per future micro-batch (modification times increase with the index)."""
    _write_inputs(Path(folder), start, count)


def query_id(checkpoint: Path) -> str:
    """The streaming query id recorded in ``<checkpoint>/metadata``."""
    return json.loads((Path(checkpoint) / "metadata").read_text(encoding="utf-8"))["id"]


def _coordinated_writer(spark: "SparkSession", name: str, inp: Path, ckpt: Path, out: Path,
                        options: dict[str, object]):
    from streamctl.pipeline.coordinated_sink import SHORT_NAME, register

    register(spark)

    def writer():
        w = (
            _read(spark, inp)
            .repartition(2)
            .writeStream.format(SHORT_NAME)
            .outputMode("append")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .queryName(name)
            .trigger(availableNow=True)
        )
        for key, value in options.items():
            w = w.option(key, str(value))
        return w

    return writer


def _delta_batch_fn(ckpt: Path, out: Path) -> Callable[["DataFrame", int], None]:
    """foreachBatch function: append the batch to the Delta table at `out` with a
    ``txn(appId=<query id>, version=<batch id>)``, skipping batches the table already has
    (what Delta's txnAppId/txnVersion writer options do, docs/formats/sinks.md#delta)."""

    def write_batch(batch_df: "DataFrame", batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
        from deltalake.exceptions import TableNotFoundError

        app_id = query_id(ckpt)  # written before the first batch runs
        try:
            done = DeltaTable(str(out)).transaction_version(app_id)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:
            _log(f"delta_foreach_batch: skipping batch {batch_id} (table has txn version {done})")
            return
        write_deltalake(
            str(out),
            batch_df.toArrow(),
            mode="append",
            commit_properties=CommitProperties(app_transactions=[
                Transaction(app_id=app_id, version=batch_id, last_updated=int(time.time() * 1000))]),
        )

    return write_batch


def _delta_writer(spark: "SparkSession", name: str, inp: Path, ckpt: Path, out: Path,
                  options: dict[str, object]):
    if options:
        raise ValueError(f"{name} takes no sink options, got {sorted(options)}")

    def writer():
        return (
            _read(spark, inp)
            .select("key", "value", "ts")
            .writeStream.foreachBatch(_delta_batch_fn(ckpt, out))
            .option("checkpointLocation", str(ckpt))
            .queryName(name)
            .trigger(availableNow=True)
        )

    return writer


_SINK_WRITERS = {"coordinated_sink": _coordinated_writer, "delta_foreach_batch": _delta_writer}


def rerun_sink(
    spark: "SparkSession",
    name: str,
    checkpoint: Path,
    input_dir: Path,
    output_dir: Path,
    **options: object,
) -> None:
    """Restart the ``coordinated_sink`` or ``delta_foreach_batch`` query on `checkpoint` writing to
    `output_dir` (copies made by the tests) and let it finish (availableNow). `options` are extra
    sink options, e.g. ``crashBeforeCommitEpoch=6`` or ``failAfterPublishEpoch=6`` for the
    coordinated sink (the Delta scenario takes none). `input_dir` must be the folder the
    checkpoint was built from: the file-source log records absolute input paths, and on restart
    Spark re-reads the last committed batch's files relative to it ("Wrong basePath" otherwise).
    Raises what Spark raises (StreamingQueryException when the query fails)."""
    try:
        make = _SINK_WRITERS[name]
    except KeyError:
        raise ValueError(f"rerun_sink: {name!r} is not one of {sorted(_SINK_WRITERS)}") from None
    with _confs(spark, {}):
        _run(make(spark, name, Path(input_dir), Path(checkpoint), Path(output_dir), options), name, 3)


def _build_sink(spark: "SparkSession", root: Path, name: str) -> Path:
    ckpt, inp, out = _layout(Path(root), name)
    with _confs(spark, {}):
        _two_runs(name, [(inp, 0)], _SINK_WRITERS[name](spark, name, inp, ckpt, out, {}), 3, 3)
    return ckpt


def build_coordinated_sink(spark: "SparkSession", root: Path) -> Path:
    """repartition(2) -> streamctl's coordinated sink (pipeline.coordinated_sink); 6 batches."""
    return _build_sink(spark, root, "coordinated_sink")


def build_delta_foreach_batch(spark: "SparkSession", root: Path) -> Path:
    """Plain rows -> foreachBatch appending to a Delta table (deltalake) with txn(queryId, batchId)."""
    return _build_sink(spark, root, "delta_foreach_batch")


# --------------------------------------------------------------------------- Kafka scenario
#
# Not in SCENARIOS: it needs a broker (tests: the kafka_broker fixture of tests/kafka_fixtures.py).
# ``kafka_agg``: topic (3 partitions, created if missing) with 24 records, then 16 more ->
# streamctl-kafka source (pipeline.kafka_source; startingOffsets=earliest, maxOffsetsPerTrigger=8)
# -> groupBy(key).count() -> noop (update); batches 0..2 and 3..4 on a fresh topic. Python
# sources get no admission control in PySpark 4.1, and availableNow calls latestOffset() once
# (one bounded batch), so each run uses a 100 ms processing-time trigger and is stopped once
# commits/N exists for an offsets/N reaching the end offsets seen at its start
# (kafka_source.run_until_caught_up). offsets/N's source line is the reader's json.dumps:
# ``{"<topic>": {"0": 14, "1": 13, "2": 13}}`` after run 2 (record i goes to partition i % 3);
# nothing under sources/ (Python source). ~20 s per run on a busy 2-core machine (a run's first
# batch ~8 s while Python workers start, then ~1-2 s per batch).

KAFKA_AGG_RECORDS = (24, 16)
KAFKA_AGG_MAX_OFFSETS = 8
_KAFKA_PARTITIONS = 3


def produce_kafka_records(bootstrap: str, topic: str, start: int, count: int) -> None:
    """Produce records ``start..start+count-1`` (key ``k<i % 8>``, value ``{"i": i, "value": ...}``)
    to partition ``i % 3`` of `topic`, creating the topic (3 partitions) if missing. One record
    per produce request: Tansu's latest offset is wrong after a multi-record request."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="streamctl-examples")
    try:
        if topic not in admin.list_topics():
            try:
                admin.create_topics([NewTopic(topic, _KAFKA_PARTITIONS, 1)])
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="streamctl-examples", linger_ms=0)
    try:
        for i in range(start, start + count):
            value = json.dumps({"i": i, "value": (i * 7) % 11}).encode()
            producer.send(topic, key=f"k{i % _NUM_KEYS}".encode(), value=value,
                          partition=i % _KAFKA_PARTITIONS).get(timeout=30)
    finally:
        producer.close()


def _kafka_agg_run(spark: "SparkSession", name: str, ckpt: Path, options: dict[str, str], run_no: int) -> None:
    from pyspark.sql import functions as F

    from streamctl.pipeline.kafka_source import SHORT_NAME, current_end_offsets, register, run_until_caught_up

    register(spark)
    target = current_end_offsets(options)

    def start():
        df = spark.readStream.format(SHORT_NAME).options(**options).load()
        return (
            df.groupBy(F.col("key").cast("string").alias("key")).count()
            .writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(ckpt))
            .queryName(name)
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    t0 = time.monotonic()
    query = run_until_caught_up(start, ckpt, target, timeout_s=300)
    batch = query.lastProgress["batchId"] if query.lastProgress else None
    _log(f"{name}: run {run_no} done, last batch {batch} ({time.monotonic() - t0:.1f}s)")


def build_kafka_agg(spark: "SparkSession", root: Path, bootstrap: str, topic: str) -> Path:
    """Kafka topic -> streamctl-kafka (maxOffsetsPerTrigger=8) -> groupBy(key).count() -> noop
    (update); two runs with more records produced in between. Returns root/kafka_agg/checkpoint."""
    name = "kafka_agg"
    ckpt, _, _ = _layout(Path(root), name)
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(KAFKA_AGG_MAX_OFFSETS),
        "pollTimeoutMs": "60000",
    }
    first, second = KAFKA_AGG_RECORDS
    with _confs(spark, {}):
        produce_kafka_records(bootstrap, topic, 0, first)
        _kafka_agg_run(spark, name, ckpt, options, 1)
        produce_kafka_records(bootstrap, topic, first, second)
        _kafka_agg_run(spark, name, ckpt, options, 2)
    return ckpt


#: name -> builder, in build order.
SCENARIOS: dict[str, Callable[["SparkSession", Path], Path]] = {
    "stateless_file_sink": build_stateless_file_sink,
    "agg_hdfs": build_agg_hdfs,
    "agg_rocksdb": build_agg_rocksdb,
    "agg_rocksdb_v2": build_agg_rocksdb_v2,
    "join_hdfs": build_join_hdfs,
    "dedup_rocksdb": build_dedup_rocksdb,
    "coordinated_sink": build_coordinated_sink,
    "delta_foreach_batch": build_delta_foreach_batch,
}

#: Scenarios whose checkpoint has a state/ folder.
STATEFUL_SCENARIOS = ("agg_hdfs", "agg_rocksdb", "agg_rocksdb_v2", "join_hdfs", "dedup_rocksdb")


def build_all(spark: "SparkSession", root: Path, only: "list[str] | None" = None) -> dict[str, Path]:
    """Run every scenario (or those named in `only`) into root/<name>/{checkpoint,input,output};
    return name -> checkpoint."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    result: dict[str, Path] = {}
    t0 = time.monotonic()
    for name, build in SCENARIOS.items():
        if only is not None and name not in only:
            continue
        t1 = time.monotonic()
        result[name] = build(spark, root)
        _log(f"{name}: built in {time.monotonic() - t1:.1f}s -> {result[name]}")
    _log(f"all scenarios built in {time.monotonic() - t0:.1f}s")
    return result


# --------------------------------------------------------------------------- CLI


def _streamctl_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "streamctl"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("streamctl")
    if found:
        return [found]
    return [sys.executable, "-c", "from streamctl.cli.app import main; main()"]


def _run_inspect(args: list[str]) -> int:
    cmd = _streamctl_cmd() + args
    print(f"$ streamctl {' '.join(args)}", flush=True)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"(could not run: {exc})", flush=True)
        return -1
    sys.stdout.write(proc.stdout)
    if proc.stdout and not proc.stdout.endswith("\n"):
        sys.stdout.write("\n")
    print(f"(exit code {proc.returncode})\n", flush=True)
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamctl.pipeline.examples",
        description="Build example Structured Streaming checkpoints with real PySpark queries.",
    )
    parser.add_argument("--dir", type=Path, default=None, help="Output folder (default: a new temp dir).")
    parser.add_argument(
        "--inspect", action="store_true", help="Afterwards run `streamctl inspect epochs/state` on them."
    )
    parser.add_argument("--only", default=None, help="Comma-separated scenario names (default: all).")
    args = parser.parse_args(argv)
    only = None if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(only or ()) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")

    root = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="streamctl-examples-"))
    root = root.resolve()
    _log(f"building example checkpoints under {root}")
    spark = get_spark()
    try:
        checkpoints = build_all(spark, root, only)
    finally:
        spark.stop()

    print(f"Example checkpoints under {root}:")
    for name, path in checkpoints.items():
        print(f"  {name:22s} {path}")
    print(flush=True)

    if args.inspect:
        _run_inspect(["inspect", "epochs", *[str(p) for p in checkpoints.values()]])
        with_sinks = [n for n in ("stateless_file_sink", "delta_foreach_batch", "coordinated_sink") if n in checkpoints]
        sink_args = [a for n in with_sinks for a in ("--sink", str(checkpoints[n].parent / "output"))]
        _run_inspect(["inspect", "epochs", *[str(checkpoints[n]) for n in with_sinks], *sink_args])
        if "coordinated_sink" in checkpoints:
            chk = checkpoints["coordinated_sink"]
            _run_inspect(["inspect", "writers", str(chk), "--sink", str(chk.parent / "output")])
        for name in STATEFUL_SCENARIOS:
            if name in checkpoints:
                _run_inspect(["inspect", "state", str(checkpoints[name])])
        print("Next, try for example:\n"
              f"  streamctl inspect sink {checkpoints.get('stateless_file_sink', root).parent / 'output'}\n"
              f"  streamctl inspect epochs {root}/*/checkpoint --json\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The reference pipeline of ``streamctl demo``: one Kafka topic, three queries, three sinks.

    from streamctl.pipeline.reference import produce_events, run_reference, delivery_check
    events = produce_events(bootstrap, "demo", 200)
    result = run_reference(spark, root, bootstrap, "demo", batches=5)
    report = delivery_check(root, events)          # report["ok"] is True when every sink is exact

Every query reads the topic with streamctl's Python Kafka source (``streamctl-kafka``,
``startingOffsets=earliest``, ``maxOffsetsPerTrigger`` = ceil(events / batches), so each query
takes about ``batches`` micro-batches) and runs with a 100 ms processing-time trigger until it has
committed a batch reaching the topic's end offsets (``kafka_runs.run_until_caught_up``), then is
stopped between batches (through ``streamctl.pipeline.agent`` when that module is available: a
stop request the agent honours after the batch in flight commits; otherwise ``query.stop()``
once caught up, when no batch is running). Queries run one after the other, each with its own
session confs (``session.scenario_confs``):

``root/file_sink/{checkpoint,output}``
    stateless: the value JSON parsed into ``i, key, value`` plus ``topic, partition, offset`` ->
    parquet file sink (append). Spark's ``output/_spark_metadata`` log names the committed files.
``root/coordinated/{checkpoint,output}``
    the same stateless rows -> ``repartition(2)`` -> streamctl's coordinated sink (JSON lines;
    ``output/_commits/<epoch>.json`` names the committed files).
``root/delta/{checkpoint,output}``
    stateful: ``groupBy(key)`` -> ``count(*) AS n, sum(value) AS total`` with RocksDB, changelog
    checkpointing and state checkpoint format 2, output mode ``complete`` -> ``foreachBatch`` that
    **overwrites** the Delta table (deltalake / delta-rs) with the whole aggregate of the batch, in a
    commit carrying ``txn(appId=<query id>, version=<batch id>)``; a batch whose id is not above the
    table's txn version for the query is skipped (a replay). So after a clean run the table *is*
    the aggregate of everything read: one row per key, and the delivery check compares it with
    the aggregate of the produced events directly (with ``append`` of per-batch updates one would
    have to take the newest row per key first).

``delivery_check(root, events)`` verifies exactly-once delivery from outside Spark: pyarrow reads
only the parquet files the file sink's log lists (the newest ``N.compact`` plus later batches),
the coordinated sink's rows come only from files its commit records name, and the Delta table is
read with deltalake.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from streamctl.formats.layout import STOP_FILE
from streamctl.formats.metadata import query_id_of

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "QUERIES",
    "ICEBERG",
    "NUM_KEYS",
    "PARTITIONS",
    "event",
    "create_topic",
    "produce_events",
    "run_reference",
    "delivery_check",
    "layout",
]

#: query name -> folder under root (each holds checkpoint/ and output/), in run order.
QUERIES = ("file_sink", "coordinated", "delta")
#: the optional fourth query (``streamctl demo --iceberg``; needs pyiceberg, the `iceberg` extra)
ICEBERG = "iceberg"
NUM_KEYS = 8
PARTITIONS = 3
VALUE_SCHEMA = "i BIGINT, key STRING, value BIGINT"

_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
_CKPT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"
_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def layout(root: Path, name: str) -> tuple[Path, Path]:
    """(checkpoint, output) of query `name` under `root`."""
    base = Path(root) / name
    return base / "checkpoint", base / "output"


# --------------------------------------------------------------------------- events


def event(i: int) -> dict[str, Any]:
    """Event number `i`: key ``k<i % 8>``, value ``(i * 7) % 11``; produced to partition i % 3."""
    return {"i": i, "key": f"k{i % NUM_KEYS}", "value": (i * 7) % 11}


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS, timeout_s: float = 15.0) -> None:
    """Create `topic` (if missing) and wait until its metadata shows every partition."""
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="streamctl-demo-admin", request_timeout_ms=10000)
    try:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        except TopicAlreadyExistsError:
            pass
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="streamctl-demo-meta",
                             enable_auto_commit=False, allow_auto_create_topics=False)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            consumer.topics()
            if sorted(consumer.partitions_for_topic(topic) or ()) == list(range(partitions)):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic!r}: metadata does not show {partitions} partitions")
            time.sleep(0.1)
    finally:
        consumer.close()


def produce_events(bootstrap: str, topic: str, count: int, start: int = 0,
                   on_sent: Optional[Callable[[int], None]] = None) -> list[dict[str, Any]]:
    """Produce events ``start..start+count-1`` (JSON values, key bytes = the event's key) to
    partition ``i % 3``, ONE record per produce request (Tansu's latest offset is wrong after a
    multi-record request). Calls ``on_sent(i)`` after each. Returns the events."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="streamctl-demo-producer", linger_ms=0,
                             acks=1, request_timeout_ms=10000, allow_auto_create_topics=False)
    events = []
    try:
        for i in range(start, start + count):
            ev = event(i)
            producer.send(topic, key=ev["key"].encode(), value=json.dumps(ev).encode(),
                          partition=i % PARTITIONS).get(timeout=30)
            events.append(ev)
            if on_sent is not None:
                on_sent(i)
    finally:
        producer.close(timeout=5)
    return events


# --------------------------------------------------------------------------- queries


def _agent_module() -> Any:
    try:
        from streamctl.pipeline import agent
    except ImportError:
        return None
    return agent if hasattr(agent, "attach") else None


class _Stoppable:
    """A started query whose ``stop()`` goes through the streamctl agent: a stop request that the
    agent honours between batches (the batch in flight commits first). Everything else is the
    query's. Falls back to ``query.stop()`` if the agent has not released its lease in time."""

    def __init__(self, query: Any, checkpoint: Path, agent_mod: Any, spark: Any) -> None:
        self._query = query
        self._checkpoint = Path(checkpoint)
        self._mod = agent_mod
        self.agent = agent_mod.attach(query, str(checkpoint), heartbeat_s=1.0, ttl_s=10.0, poll_s=0.1, spark=spark)
        self.stop_mode: Optional[str] = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._query, name)

    def stop(self) -> None:
        import getpass
        import socket

        if self.agent.state == "released" or not self._query.isActive:
            self._query.stop()
            self.agent.release()
            return
        request = {"version": 1, "requested_at_ms": self._mod.now_ms(),
                   "requested_by": {"host": socket.gethostname(), "pid": os.getpid(), "user": getpass.getuser()},
                   "reason": "streamctl demo: caught up"}
        stop_file = self._checkpoint / STOP_FILE
        self._mod.write_json_atomic(str(stop_file.parent), stop_file.name, request)
        deadline = time.monotonic() + 60
        while self.agent.state != "released" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stop_mode = getattr(self.agent, "stop_mode", None) or "agent"
        if self._query.isActive:  # the agent did not manage: stop it ourselves
            self.stop_mode = "query.stop()"
            self._query.stop()
        try:
            stop_file.unlink()
        except FileNotFoundError:
            pass


def _stateless(spark: SparkSession, options: dict[str, str]) -> Any:
    from pyspark.sql import functions as F

    from streamctl.pipeline.kafka_options import SHORT_NAME

    df = spark.readStream.format(SHORT_NAME).options(**options).load()
    parsed = F.from_json(F.col("value").cast("string"), VALUE_SCHEMA)
    return df.select(parsed.alias("e"), "topic", "partition", "offset").select(
        "e.i", "e.key", "e.value", "topic", "partition", "offset")


def _delta_batch_fn(checkpoint: Path, output: Path) -> Callable[[Any, int], None]:
    def write_batch(batch_df: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
        from deltalake.exceptions import TableNotFoundError

        app_id = query_id_of(checkpoint)
        try:
            done = DeltaTable(str(output)).transaction_version(app_id)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:
            return  # a replay of a batch the table already has
        write_deltalake(
            str(output),
            batch_df.toArrow().sort_by("key"),  # one execution: an orderBy would re-run the stateful plan
            mode="overwrite",
            commit_properties=CommitProperties(app_transactions=[
                Transaction(app_id=app_id, version=batch_id, last_updated=int(time.time() * 1000))]),
        )

    return write_batch


def _iceberg_catalog(root: Path) -> Any:
    """The demo's Iceberg catalog: pyiceberg's SQL catalog on SQLite beside the table."""
    from pyiceberg.catalog.sql import SqlCatalog

    base = layout(root, ICEBERG)[1].parent
    return SqlCatalog("demo", uri=f"sqlite:///{base / 'catalog.db'}", warehouse=f"file://{base}")


def _iceberg_last_epoch(table: Any, app_id: str) -> Optional[int]:
    """The query's newest epoch along the current snapshot's ancestry (Iceberg's SparkWrite
    `findLastCommittedEpochId`); the summary keys are the format owner's (inspectors/iceberg.py)."""
    from streamctl.formats.iceberg import EPOCH_ID, QUERY_ID

    snap = table.metadata.current_snapshot()
    while snap is not None:
        props = snap.summary.additional_properties if snap.summary is not None else {}
        if props.get(QUERY_ID) == app_id:
            return int(props[EPOCH_ID])
        snap = table.metadata.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return None


def _iceberg_batch_fn(root: Path, checkpoint: Path, output: Path) -> Callable[[Any, int], None]:
    """foreachBatch that commits each batch to an Iceberg table as Iceberg's Spark streaming sink
    does (its `StreamingAppend`): one append per epoch whose snapshot summary carries the query id
    and the epoch, skipped when the query already committed that epoch or a later one along the
    current ancestry. pyiceberg writes it (no Iceberg runtime exists for Spark 4 on PyPI)."""
    def write_batch(batch_df: Any, batch_id: int) -> None:
        from pyiceberg.exceptions import NoSuchTableError

        app_id = query_id_of(checkpoint)
        data = batch_df.toArrow()
        catalog = _iceberg_catalog(root)
        try:
            table = catalog.load_table("demo.events")
        except NoSuchTableError:
            catalog.create_namespace_if_not_exists("demo")
            table = catalog.create_table("demo.events", schema=data.schema, location=f"file://{output}")
        done = _iceberg_last_epoch(table, app_id)
        if done is not None and done >= batch_id:
            return  # a replay of an epoch the table already has
        from streamctl.formats.iceberg import EPOCH_ID, QUERY_ID

        table.append(data.cast(table.schema().as_arrow()),
                     snapshot_properties={QUERY_ID: app_id, EPOCH_ID: str(batch_id)})

    return write_batch


def _writer(spark: SparkSession, name: str, options: dict[str, str], root: Path) -> tuple[Callable[[], Any], dict[str, str]]:
    """(make the DataStreamWriter, session confs) of query `name`."""
    from pyspark.sql import functions as F

    ckpt, out = layout(root, name)
    if name == "file_sink":
        def make() -> Any:
            return (_stateless(spark, options).writeStream.format("parquet").outputMode("append")
                    .option("path", str(out)))
        return make, {}
    if name == "coordinated":
        from streamctl.pipeline.coordinated_sink import SHORT_NAME, register

        register(spark)

        def make() -> Any:
            return (_stateless(spark, options).repartition(2).writeStream.format(SHORT_NAME)
                    .outputMode("append").option("path", str(out)))
        return make, {}
    if name == "delta":
        def make() -> Any:
            agg = _stateless(spark, options).groupBy("key").agg(
                F.count(F.lit(1)).alias("n"), F.sum("value").alias("total"))
            return agg.writeStream.outputMode("complete").foreachBatch(_delta_batch_fn(ckpt, out))
        return make, {_PROVIDER: _ROCKSDB, _CHANGELOG: "true", _CKPT_FORMAT: "2"}
    if name == ICEBERG:
        def make() -> Any:
            return _stateless(spark, options).writeStream.outputMode("append").foreachBatch(
                _iceberg_batch_fn(root, ckpt, out))
        return make, {}
    raise ValueError(f"unknown reference query {name!r}; known: {', '.join(QUERIES + (ICEBERG,))}")


def run_reference(
    spark: SparkSession,
    root: Path,
    bootstrap: str,
    topic: str,
    batches: int = 5,
    events: Optional[int] = None,
    timeout_s: float = 300.0,
    use_agent: bool = True,
    on_query: Optional[Callable[[str, str, dict[str, Any]], None]] = None,
    queries: tuple[str, ...] = QUERIES,
) -> dict[str, Any]:
    """Run the three reference queries over `topic` (everything produced so far), one after the
    other, each until caught up, then stop it between batches. `events` (the number of records in
    the topic; looked up when None) and `batches` set ``maxOffsetsPerTrigger``.
    ``on_query(name, "start"|"done", info)`` reports progress. Returns
    ``{"queries": {name: {"checkpoint", "output", "last_batch", "seconds", "stop"}}, "target": ...}``."""
    from streamctl.pipeline.kafka_client import current_end_offsets
    from streamctl.pipeline.kafka_runs import run_until_caught_up
    from streamctl.pipeline.kafka_source import register
    from streamctl.pipeline.session import scenario_confs as _confs

    root = Path(root)
    register(spark)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
               "pollTimeoutMs": "60000"}
    target = current_end_offsets(options)
    if events is None:
        events = sum(off for parts in target.values() for off in parts.values())
    options["maxOffsetsPerTrigger"] = str(max(1, math.ceil(events / max(1, batches))))
    agent_mod = _agent_module() if use_agent else None
    result: dict[str, Any] = {"target": target, "max_offsets_per_trigger": int(options["maxOffsetsPerTrigger"]),
                              "agent": agent_mod is not None, "queries": {}}
    for name in queries:
        ckpt, out = layout(root, name)
        make, confs = _writer(spark, name, options, root)
        info: dict[str, Any] = {"checkpoint": str(ckpt), "output": str(out)}
        if on_query is not None:
            on_query(name, "start", info)
        t0 = time.monotonic()
        handles: list[Any] = []

        def start(make: Callable[[], Any] = make, ckpt: Path = ckpt, name: str = name, handles: list[Any] = handles) -> Any:
            query = (make().option("checkpointLocation", str(ckpt)).queryName(f"demo_{name}")
                     .trigger(processingTime="100 milliseconds").start())
            handle = _Stoppable(query, ckpt, agent_mod, spark) if agent_mod is not None else query
            handles.append(handle)
            return handle

        with _confs(spark, confs):
            query = run_until_caught_up(start, ckpt, target, timeout_s=timeout_s)
        progress = query.lastProgress
        info.update(seconds=round(time.monotonic() - t0, 1),
                    last_batch=progress["batchId"] if progress else None,
                    stop=getattr(query, "stop_mode", None) or "query.stop()")
        result["queries"][name] = info
        if on_query is not None:
            on_query(name, "done", info)
    return result


# --------------------------------------------------------------------------- delivery check


def _file_sink_files(output: Path) -> list[Path]:
    """The parquet files Spark's file-sink log lists as committed (newest compaction + later)."""
    from urllib.parse import unquote, urlparse

    from streamctl.formats.file_sink_log import live_files
    from streamctl.inspectors.sinks import list_file_sink_log
    from streamctl.inspectors.storage import Storage

    st = Storage.open(str(output))
    log = list_file_sink_log(st)  # the one reader of _spark_metadata/'s layout
    first = log.compactions[-1] if log.compactions else 0
    live = live_files(log.read(st, b).entries for b in log.ids if b >= first)
    out = []
    for uri in live:
        parsed = urlparse(uri)
        out.append(Path(unquote(parsed.path)) if parsed.scheme in ("file", "") else Path(uri))
    return sorted(out)


def _coordinated_rows(output: Path) -> tuple[list[dict[str, Any]], int]:
    """(rows of the files named by the commit records, number of records)."""
    from streamctl.formats.coordinated_log import (
        COORD_COMMITS,
        commit_record_name,
        epoch_of_record_name,
        parse_commit_record,
        record_writers,
    )
    from streamctl.inspectors.storage import Storage

    rows: list[dict[str, Any]] = []
    st = Storage.open(str(output))
    epochs = sorted(e for e in (epoch_of_record_name(x.name) for x in st.list_dir(COORD_COMMITS) or [] if not x.is_dir)
                    if e is not None)
    for e in epochs:
        rel = f"{COORD_COMMITS}/{commit_record_name(e)}"
        doc = parse_commit_record(st.read(rel), st.uri(rel), e)
        for w in record_writers(doc):
            for data_rel in w.files:
                with open(output / data_rel, encoding="utf-8") as fh:
                    rows.extend(json.loads(line) for line in fh if line.strip())
    return rows, len(epochs)


def _exactly_once(got_ids: list[int], produced: list[int]) -> dict[str, Any]:
    got = Counter(got_ids)
    want = Counter(produced)
    missing = sorted(i for i in want if got[i] < want[i])
    dupes = sorted(i for i in got if got[i] > want.get(i, 0) and i in want)
    unknown = sorted(i for i in got if i not in want)
    return {"rows": len(got_ids), "distinct": len(got), "missing": len(missing), "duplicates": len(dupes),
            "unexpected": len(unknown), "missing_ids": missing[:20], "duplicate_ids": dupes[:20],
            "ok": not missing and not dupes and not unknown}


def delivery_check(root: Path, produced: list[dict[str, Any]]) -> dict[str, Any]:
    """Check what the sinks under `root` hold against the `produced` events (the three, and the
    Iceberg table when the demo ran with --iceberg: its rows, read by pyiceberg, every event
    exactly once).

    * ``file_sink``: rows of the parquet files the sink log lists (pyarrow), every event exactly once;
    * ``coordinated``: rows of the files the ``_commits/*.json`` records name, every event exactly once;
    * ``delta``: the table (deltalake) equals the aggregate of the events: per key count and sum.

    Returns ``{"file_sink": {...}, "coordinated": {...}, "delta": {...}, "ok": bool}``; a sink that
    cannot be read gets ``{"ok": False, "error": "..."}``."""
    root = Path(root)
    ids = [int(e["i"]) for e in produced]
    report: dict[str, Any] = {"events": len(produced)}

    try:
        import pyarrow.parquet as pq

        files = _file_sink_files(layout(root, "file_sink")[1])
        got: list[int] = []
        for f in files:
            got.extend(int(v) for v in pq.read_table(f, columns=["i"]).column("i").to_pylist())
        report["file_sink"] = dict(_exactly_once(got, ids), files=len(files))
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        report["file_sink"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    try:
        rows, records = _coordinated_rows(layout(root, "coordinated")[1])
        report["coordinated"] = dict(_exactly_once([int(r["i"]) for r in rows], ids), commit_records=records)
    except Exception as exc:  # noqa: BLE001
        report["coordinated"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    try:
        from deltalake import DeltaTable

        table = DeltaTable(str(layout(root, "delta")[1]))
        data = table.to_pyarrow_table().to_pylist()
        have = {r["key"]: (int(r["n"]), int(r["total"])) for r in data}
        want_n: Counter = Counter(e["key"] for e in produced)
        want_sum: Counter = Counter()
        for e in produced:
            want_sum[e["key"]] += int(e["value"])
        want = {k: (want_n[k], want_sum[k]) for k in want_n}
        wrong = sorted(k for k in set(want) | set(have) if have.get(k) != want.get(k))
        report["delta"] = {"table_version": table.version(), "keys": len(have), "rows": len(data),
                           "count": sum(n for n, _ in have.values()), "wrong_keys": wrong,
                           "ok": not wrong and len(data) == len(have)}
    except Exception as exc:  # noqa: BLE001
        report["delta"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    ran: tuple[str, ...] = QUERIES
    if layout(root, ICEBERG)[0].exists():  # the demo ran with --iceberg
        ran = QUERIES + (ICEBERG,)
        try:
            table = _iceberg_catalog(root).load_table("demo.events")
            got = [int(v) for v in table.scan().to_arrow().column("i").to_pylist()]
            report[ICEBERG] = dict(_exactly_once(got, ids), snapshot_id=table.metadata.current_snapshot_id)
        except Exception as exc:  # noqa: BLE001
            report[ICEBERG] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    report["ok"] = all(report[k].get("ok") for k in ran)
    return report

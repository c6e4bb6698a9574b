"""streamctl's Kafka source: a PySpark 4.x Python data source (streaming reader) built on
kafka-python, writing Spark's Kafka offset JSON into the checkpoint.

    from streamctl.pipeline.kafka_source import register
    register(spark)
    df = (spark.readStream.format("streamctl-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", 100)
          .load())

Schema (fixed): ``topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY,
value BINARY``. ``key``/``value`` are the raw record bytes (NULL for a null key or value), as in
Spark's own Kafka source: cast them (``CAST(key AS STRING)``) or decode them yourself.
``timestamp`` is the record timestamp (milliseconds since the epoch, as a UTC instant; NULL when
the record has none).

Offsets
-------

Every offset (``initialOffset``, ``latestOffset``, the ``end`` of each batch) is Spark's Kafka
offset JSON (docs/formats/checkpoint.md#kafka-offset-json): ``{"<topic>": {"<partition>": <next offset to read>, ...}, ...}``,
topics sorted by name, partitions sorted by number (as JSON strings), each value the exclusive
end: the batch read offsets ``start`` .. ``end - 1``. The Python worker serialises it with
``json.dumps`` defaults (docs/formats/checkpoint.md#python-data-source-offsets), so ``offsets/<batch>`` holds exactly e.g.
``{"orders": {"0": 23, "1": 57, "2": 40}}`` (a space after every ``:`` and ``,``). Offsets are
concrete: ``-1``/``-2`` never appear there.

Options
-------

* ``kafka.bootstrap.servers`` (required): ``host:port[,host:port...]``.
* ``kafka.<property>``: passed to kafka-python's ``KafkaConsumer``. A Kafka property name maps to
  the kafka-python setting with ``.`` replaced by ``_`` (``kafka.security.protocol`` ->
  ``security_protocol``, ``kafka.sasl.mechanism`` -> ``sasl_mechanism``,
  ``kafka.sasl.plain.username`` / ``kafka.sasl.plain.password``, ``kafka.ssl.cafile``,
  ``kafka.request.timeout.ms``, ``kafka.client.id``, ``kafka.group.id``, ...); values are converted
  to the setting's type (int, bool; ``kafka.api.version`` as ``2.5.0``). Also understood:
  ``kafka.sasl.jaas.config`` with Kafka's ``PlainLoginModule``/``ScramLoginModule``
  (``username="..." password="..."``), ``kafka.ssl.endpoint.identification.algorithm`` (empty
  disables hostname checks), ``kafka.ssl.truststore.location`` with
  ``kafka.ssl.truststore.type=PEM`` (-> ``ssl_cafile``) and ``kafka.ssl.key.password``. A property
  kafka-python does not know is an error (its name is reported, never its value). The source
  manages these itself and refuses them: ``key.deserializer``, ``value.deserializer``,
  ``enable.auto.commit``, ``auto.offset.reset``.
* Exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a Python regular
  expression that must match the whole topic name) or ``assign`` (JSON ``{"t": [0, 1]}``).
* ``startingOffsets``: ``latest`` (default, as in Spark), ``earliest``, or JSON
  ``{"t": {"0": 23, "1": -2}}`` (``-2`` earliest, ``-1`` latest). Partitions of a subscribed
  topic missing from the JSON start at earliest; a partition named there that does not exist is
  an error. Only used when a query starts without a checkpoint.
* ``maxOffsetsPerTrigger``: at most this many offsets per micro-batch, summed over all partitions,
  split across the partitions in proportion to what each has available (largest remainders get
  the leftover units, so the batch takes exactly ``min(limit, available)``).
* ``pollTimeoutMs`` (default 120000): how long one task may take to read its offset range, and
  the timeout of the driver's offset look-ups.
* ``failOnDataLoss`` (default ``true``): see below.

Spark's options ``endingOffsets``, ``startingTimestamp``, ``startingOffsetsByTimestamp``,
``minOffsetsPerTrigger``, ``maxTriggerDelay``, ``includeHeaders`` and ``kafka.*`` consumer
interceptors are not supported and raise an error; other unknown options are ignored.

How it runs (PySpark 4.1.1, observed)
-------------------------------------

* A fresh query: Spark calls ``latestOffset()`` first, then ``initialOffset()`` (the start of
  batch 0), then ``partitions(initial, end)``.
* A restarted query: before anything else Spark calls ``partitions(X, X)`` with ``X`` the end of
  the last batch in ``offsets/`` (``AcceptsLatestSeenOffset``, under every trigger), then
  ``latestOffset()``; a batch that was logged but not committed is re-run with its logged
  offsets.
* The reader therefore takes the previous end from the last ``partitions(start, end)`` call and
  bounds ``latestOffset()`` by ``maxOffsetsPerTrigger`` from there; before any such call (a fresh
  query) it bounds from ``initialOffset()``.
* ``initialOffset()`` is resolved once per reader (per query run) and cached. Spark does **not**
  persist it for Python sources (nothing under ``sources/``): if a query stops after writing
  ``offsets/0`` but before ``commits/0``, the re-run of batch 0 calls ``initialOffset()`` again.
  With ``earliest`` (and no retention clean-up) or explicit JSON offsets that is the same start;
  with ``latest`` it is the end offsets *at the restart*, so records produced between the first
  start and the restart inside batch 0's range are skipped (or, if the new start lies beyond the
  logged end of batch 0, the batch counts as data loss, see below). Use ``earliest`` or JSON
  offsets when batch 0 must replay exactly.
* ``Trigger.AvailableNow``: PythonMicroBatchStream has no admission control, so Spark wraps it
  (``AvailableNowMicroBatchStreamWrapper``) and calls ``latestOffset()`` exactly once when the run
  starts, then runs batches up to that offset. Without ``maxOffsetsPerTrigger`` that is one batch
  with everything available at the start (correct, just not split). With it, the run reads only
  **one** bounded batch and stops. To process all available data in several bounded batches use
  :func:`run_until_caught_up` (a processing-time trigger, stopped once the checkpoint has
  committed a batch that reaches the end offsets seen at the start).
* New partitions of subscribed topics (or new topics matching ``subscribePattern``) appear in
  ``latestOffset()`` and are read from their earliest offset (looked up when the batch is
  planned).
* ``commit(end)`` only logs (offsets are never committed to a consumer group).
* Each task (``read``) creates its own ``KafkaConsumer`` with ``assign`` + ``seek(start)`` and
  closes it when done. It polls until it has offset ``end - 1`` (or its position passed it:
  compacted topics and transaction markers leave gaps), for at most ``pollTimeoutMs``.

Data loss (``failOnDataLoss=true``, the default, raises; ``false`` logs a warning and goes on):
records in a batch's range that no longer exist (the partition's earliest offset is past them:
retention or a deleted and recreated topic), a batch whose end is below its start, a partition
that vanished between the start and the end of a batch, a read that cannot reach ``end`` because
the partition's end offset is now lower. A read that merely times out raises a ``TimeoutError``
regardless.

No option value is ever put into an exception or log message (passwords are kafka.* options).
"""
from __future__ import annotations

import json
import logging
from typing import Any, Iterator, Mapping, Optional, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from streamctl.formats.kafka_offsets import SparkOffsets, flat, parse_kafka_offsets, spark_shape
from streamctl.pipeline.kafka_client import DataLossError, OffsetClient, current_end_offsets, read_range
from streamctl.pipeline.kafka_options import EARLIEST, LATEST, SHORT_NAME, KafkaSourceOptions, consumer_config
from streamctl.pipeline.kafka_runs import last_committed_source_offset, offsets_reached, run_until_caught_up

# Spark's Python workers unpickle the reader and its partitions by module and name: the data
# source's classes stay here, in this module; the options, the broker access and the run helpers
# are their own modules, their public names re-exported for the users of this one.
__all__ = [
    "SHORT_NAME",
    "SCHEMA",
    "KafkaDataSource",
    "KafkaStreamReader",
    "KafkaInputPartition",
    "KafkaSourceOptions",
    "DataLossError",
    "register",
    "consumer_config",
    "rate_limit",
    "current_end_offsets",
    "offsets_reached",
    "last_committed_source_offset",
    "run_until_caught_up",
]

SCHEMA = "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY"

_log = logging.getLogger("streamctl.pipeline.kafka_source")  # the source's one logger, whichever module logs

Offsets = SparkOffsets  # Spark's Kafka offset JSON: formats/kafka_offsets.py


# --------------------------------------------------------------------------- offsets


def rate_limit(start: Mapping[tuple[str, int], int], latest: Mapping[tuple[str, int], int],
               limit: Optional[int]) -> dict[tuple[str, int], int]:
    """The end offsets of a batch taking at most `limit` offsets from `start` towards `latest`
    (both keyed by (topic, partition); every key of `latest` must be in `start`).

    The batch takes exactly min(limit, available) offsets: each partition gets its proportional
    share floor(limit * avail / total), and the leftover units go to the largest remainders (ties
    in topic/partition order). A partition whose start is past its latest offset keeps the latest
    offset (partitions() reports that as data loss)."""
    if limit is None:
        return dict(latest)
    avail = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(avail.values())
    if total <= limit:
        return dict(latest)
    take: dict[tuple[str, int], int] = {}
    rems = []
    for tp in sorted(avail):
        q, r = divmod(limit * avail[tp], total)
        take[tp] = q
        rems.append((-r, tp))
    leftover = limit - sum(take.values())
    for _r, tp in sorted(rems)[:leftover]:
        take[tp] += 1
    return {tp: (start[tp] + take[tp] if avail[tp] > 0 else latest[tp]) for tp in latest}


def _positions(offsets: Any, which: str) -> dict[tuple[str, int], int]:
    """A batch's offsets as {(topic, partition): offset}; a clear error for an offset this source
    never writes (the checkpoint's offsets line of another source kind at this source's place: a
    file source's `{"logOffset": n}`), instead of a failure deep in the planning."""
    if offsets and parse_kafka_offsets(json.dumps(offsets)) is None:  # {}: no partition yet
        raise ValueError(f"{SHORT_NAME}: the batch's {which} offset {json.dumps(offsets)[:200]} is not a Kafka "
                         "source's (topic -> partition -> offset): the checkpoint's offsets at this source's place "
                         "were written by another kind of source; start this query on a new checkpoint")
    return flat(offsets)


# --------------------------------------------------------------------------- data source


class KafkaInputPartition(InputPartition):
    """One topic-partition's offset range [start, end) of a micro-batch."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic!r}, {self.partition}, {self.start}, {self.end})"


class KafkaDataSource(DataSource):
    """``spark.readStream.format("streamctl-kafka")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> KafkaStreamReader:
        return KafkaStreamReader(KafkaSourceOptions(self.options))


def register(spark: Any) -> None:
    """Register the source under the short name ``streamctl-kafka`` in this session."""
    spark.dataSource.register(KafkaDataSource)


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, opts: KafkaSourceOptions) -> None:
        self.opts = opts
        self._client: Optional[OffsetClient] = None
        self._initial: Optional[Offsets] = None
        self._last_end: Optional[Offsets] = None  # end of the last partitions() call

    def __getstate__(self) -> dict[str, Any]:  # the driver's consumer never travels
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    @property
    def client(self) -> OffsetClient:
        if self._client is None:
            self._client = OffsetClient(self.opts)
        return self._client

    # -- offsets (driver, in the streaming source's Python worker)

    def initialOffset(self) -> Offsets:
        if self._initial is None:
            self._initial = self._resolve_initial()
            _log.info("%s: initial offsets %s", SHORT_NAME, json.dumps(self._initial))
        return self._initial

    def _resolve_initial(self) -> Offsets:
        tps = self.client.topic_partitions()
        start = self.opts.starting
        if start == "earliest":
            return spark_shape(self.client.earliest(tps))
        if start == "latest":
            return spark_shape(self.client.latest(tps))
        known = set(tps)
        if self.opts.assign is not None or self.opts.subscribe is not None:
            allowed = {t for t, _ in tps} | set(self.opts.assign or {}) | set(self.opts.subscribe or [])
            stray = sorted(set(start) - allowed)
            if stray:
                raise ValueError(f"{SHORT_NAME}: startingOffsets names topics the source does not read: {stray}")
        wanted = {(t, p): off for t, parts in start.items() for p, off in parts.items()}
        missing = sorted(tp for tp in wanted if tp not in known)
        if missing:
            raise ValueError(f"{SHORT_NAME}: startingOffsets names partitions that do not exist: {missing}")
        earliest = self.client.earliest(tps)
        need_latest = [tp for tp, off in wanted.items() if off == LATEST]
        latest = self.client.latest(need_latest)
        out = {}
        for tp in tps:
            off = wanted.get(tp, EARLIEST)
            out[tp] = earliest[tp] if off == EARLIEST else latest[tp] if off == LATEST else off
        return spark_shape(out)

    def latestOffset(self) -> Offsets:  # type: ignore[override]  # the no-argument form of 4.0-4.2; 4.3 runs it too (tests/test_kafka_source.py)
        tps = self.client.topic_partitions()
        latest = self.client.latest(tps)
        if self.opts.max_offsets is None:
            return spark_shape(latest)
        base = flat(self._last_end if self._last_end is not None else self.initialOffset())
        new = [tp for tp in tps if tp not in base]
        if new:
            base.update(self.client.earliest(new))
        return spark_shape(rate_limit(base, latest, self.opts.max_offsets))

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[KafkaInputPartition]:
        self._last_end = end
        s, e = _positions(start, "start"), _positions(end, "end")
        gone = sorted(tp for tp in s if tp not in e)
        if gone:
            self._data_loss(f"partitions {gone} were read before but are no longer in the batch's end offsets")
        new = sorted(tp for tp in e if tp not in s)
        if new:
            s.update(self.client.earliest(new))
        out = []
        for tp in sorted(e):
            lo, hi = s[tp], e[tp]
            if hi < lo:
                self._data_loss(f"{tp[0]}-{tp[1]}: batch end offset {hi} is below its start offset {lo} "
                                "(topic recreated, or startingOffsets=latest re-resolved on a batch-0 replay)")
            elif lo < hi:
                out.append(KafkaInputPartition(tp[0], tp[1], lo, hi))
        return out

    def _data_loss(self, msg: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{SHORT_NAME}: possible data loss: {msg}. Set failOnDataLoss=false to go on.")
        _log.warning("%s: possible data loss: %s", SHORT_NAME, msg)

    def commit(self, end: Offsets) -> None:
        _log.debug("%s: commit %s", SHORT_NAME, json.dumps(end))

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- data (executors: a fresh reader unpickled in a Python worker)

    def read(self, partition: KafkaInputPartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]  # ours are KafkaInputPartitions
        return read_range(self.opts, partition)

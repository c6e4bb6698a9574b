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

import datetime as _dt
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from streamctl.formats.kafka_offsets import SparkOffsets, flat, spark_shape

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

SHORT_NAME = "streamctl-kafka"
SCHEMA = "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY"

EARLIEST = -2
LATEST = -1

_log = logging.getLogger("streamctl.pipeline.kafka_source")

Offsets = SparkOffsets  # Spark's Kafka offset JSON: formats/kafka_offsets.py

#: Spark Kafka options this source does not implement (lower case, as Spark hands options over).
_UNSUPPORTED = {
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "includeheaders": "includeHeaders",
}
_KNOWN = {"subscribe", "subscribepattern", "assign", "startingoffsets", "maxoffsetspertrigger",
          "polltimeoutms", "failondataloss", "path"}

#: kafka-python settings the source sets itself, or that are not plain strings.
_MANAGED = {
    "key_deserializer", "value_deserializer", "enable_auto_commit", "auto_offset_reset",
    "consumer_timeout_ms", "kafka_client", "selector", "socket_options", "ssl_context",
    "partition_assignment_strategy", "default_offset_commit_callback", "metric_reporters",
    "sasl_oauth_token_provider", "interceptor_classes",
}
_JAVA_ONLY = {
    "key.deserializer", "value.deserializer", "enable.auto.commit", "auto.offset.reset",
    "interceptor.classes",
}


class DataLossError(RuntimeError):
    """Records a batch should read no longer exist (failOnDataLoss=true)."""


# --------------------------------------------------------------------------- options


def _parse_bool(name: str, raw: str) -> bool:
    value = str(raw).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(f"{SHORT_NAME}: option {name!r} must be true or false")


def _jaas_credentials(raw: str) -> dict[str, str]:
    """username/password of a PlainLoginModule / ScramLoginModule JAAS line."""
    if not re.search(r"(PlainLoginModule|ScramLoginModule)\s+required", raw):
        raise ValueError(
            f"{SHORT_NAME}: option 'kafka.sasl.jaas.config' is supported only for Kafka's "
            "PlainLoginModule or ScramLoginModule (use kafka.sasl.plain.username/password)")
    found = dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', raw))
    if "username" not in found or "password" not in found:
        raise ValueError(f"{SHORT_NAME}: option 'kafka.sasl.jaas.config' needs username=\"...\" and password=\"...\"")
    return {"sasl_plain_username": found["username"], "sasl_plain_password": found["password"]}


def consumer_config(kafka_options: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python ``KafkaConsumer`` kwargs from Kafka property names (without the ``kafka.``
    prefix, any case). Raises ValueError naming the offending property, never its value."""
    from kafka import KafkaConsumer

    defaults = KafkaConsumer.DEFAULT_CONFIG
    props = {str(k).lower(): v for k, v in kafka_options.items()}
    cfg: dict[str, Any] = {}
    truststore_type = str(props.pop("ssl.truststore.type", "")).upper()
    for name, raw in props.items():
        label = f"kafka.{name}"
        if name in _JAVA_ONLY:
            raise ValueError(f"{SHORT_NAME}: option {label!r} is not supported: the source manages it")
        if name == "sasl.jaas.config":
            cfg.update(_jaas_credentials(str(raw)))
            continue
        if name == "ssl.endpoint.identification.algorithm":
            cfg["ssl_check_hostname"] = bool(str(raw).strip())
            continue
        if name == "ssl.truststore.location":
            if truststore_type != "PEM":
                raise ValueError(
                    f"{SHORT_NAME}: option {label!r} needs kafka.ssl.truststore.type=PEM (JKS/PKCS12 "
                    "stores are not readable by kafka-python); or use kafka.ssl.cafile")
            cfg["ssl_cafile"] = str(raw)
            continue
        if name == "ssl.key.password":
            cfg["ssl_password"] = str(raw)
            continue
        key = name.replace(".", "_").replace("-", "_")
        if key in _MANAGED:
            raise ValueError(f"{SHORT_NAME}: option {label!r} is not supported: the source manages it")
        if key not in defaults:
            raise ValueError(f"{SHORT_NAME}: unknown Kafka option {label!r} (kafka-python's KafkaConsumer "
                             f"has no setting {key!r})")
        default = defaults[key]
        try:
            if key == "bootstrap_servers":
                value: Any = [s.strip() for s in str(raw).split(",") if s.strip()]
            elif key == "api_version":
                value = tuple(int(p) for p in str(raw).strip().split("."))
            elif isinstance(default, bool):
                value = _parse_bool(label, str(raw))
            elif isinstance(default, int) or key in ("receive_buffer_bytes", "send_buffer_bytes"):
                value = int(str(raw).strip())
            else:
                value = str(raw)
        except ValueError:
            raise ValueError(f"{SHORT_NAME}: option {label!r} has a value of the wrong type") from None
        cfg[key] = value
    if not cfg.get("bootstrap_servers"):
        raise ValueError(f"{SHORT_NAME}: option 'kafka.bootstrap.servers' is required")
    return cfg


class KafkaSourceOptions:
    """The parsed source options. Holds the consumer settings (which may include secrets): its
    repr shows the bootstrap servers and topics only."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        for key, name in _UNSUPPORTED.items():
            if key in opts:
                raise ValueError(f"{SHORT_NAME}: option {name!r} is not supported")
        kafka_opts = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
        for key in opts:
            if not key.startswith("kafka.") and key not in _KNOWN:
                _log.warning("%s: ignoring unknown option %r", SHORT_NAME, key)
        self.consumer: dict[str, Any] = consumer_config(kafka_opts)
        self.bootstrap = ",".join(self.consumer["bootstrap_servers"])

        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
        if len(chosen) != 1:
            raise ValueError(f"{SHORT_NAME}: set exactly one of 'subscribe', 'subscribePattern', 'assign'")
        self.subscribe: Optional[list[str]] = None
        self.pattern: Optional[str] = None
        self.assign: Optional[dict[str, list[int]]] = None
        if chosen[0] == "subscribe":
            topics = sorted({t.strip() for t in str(opts["subscribe"]).split(",") if t.strip()})
            if not topics:
                raise ValueError(f"{SHORT_NAME}: option 'subscribe' names no topic")
            self.subscribe = topics
        elif chosen[0] == "subscribepattern":
            self.pattern = str(opts["subscribepattern"])
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"{SHORT_NAME}: option 'subscribePattern' is not a valid regex: {exc}") from None
        else:
            self.assign = _parse_assign(str(opts["assign"]))

        self.starting = _parse_starting(opts.get("startingoffsets", "latest"))
        raw_limit = opts.get("maxoffsetspertrigger")
        self.max_offsets: Optional[int] = None
        if raw_limit not in (None, ""):
            try:
                self.max_offsets = int(str(raw_limit).strip())
            except ValueError:
                raise ValueError(f"{SHORT_NAME}: option 'maxOffsetsPerTrigger' must be a positive integer") from None
            if self.max_offsets <= 0:
                raise ValueError(f"{SHORT_NAME}: option 'maxOffsetsPerTrigger' must be a positive integer")
        try:
            self.poll_timeout_ms = int(str(opts.get("polltimeoutms", 120000)).strip())
        except ValueError:
            raise ValueError(f"{SHORT_NAME}: option 'pollTimeoutMs' must be an integer (milliseconds)") from None
        if self.poll_timeout_ms <= 0:
            raise ValueError(f"{SHORT_NAME}: option 'pollTimeoutMs' must be positive")
        self.fail_on_data_loss = _parse_bool("failOnDataLoss", str(opts.get("failondataloss", "true")))

    def __repr__(self) -> str:
        what = self.subscribe or self.pattern or self.assign
        return f"KafkaSourceOptions(bootstrap={self.bootstrap!r}, topics={what!r})"

    def new_consumer(self, role: str) -> Any:
        """A KafkaConsumer with the user's settings; no auto commit, no offset reset."""
        from kafka import KafkaConsumer

        cfg = dict(self.consumer)
        cfg.setdefault("client_id", f"{SHORT_NAME}-{role}")
        cfg["enable_auto_commit"] = False
        cfg["auto_offset_reset"] = "none"
        cfg.setdefault("allow_auto_create_topics", False)
        return KafkaConsumer(**cfg)


def _parse_assign(raw: str) -> dict[str, list[int]]:
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not data:
            raise ValueError
        out = {}
        for topic, parts in sorted(data.items()):
            if not isinstance(parts, list) or not parts or not all(isinstance(p, int) and p >= 0 for p in parts):
                raise ValueError
            out[str(topic)] = sorted(set(parts))
        return out
    except ValueError:
        raise ValueError(f"{SHORT_NAME}: option 'assign' must be JSON like {{\"topic\": [0, 1]}}") from None


def _parse_starting(raw: Any) -> Any:
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError
        out: dict[str, dict[int, int]] = {}
        for topic, parts in data.items():
            if not isinstance(parts, dict):
                raise ValueError
            out[str(topic)] = {}
            for p, off in parts.items():
                if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
                    raise ValueError
                out[str(topic)][int(p)] = off
        return out
    except ValueError:
        raise ValueError(
            f"{SHORT_NAME}: option 'startingOffsets' must be earliest, latest or JSON like "
            "{\"t\": {\"0\": 23, \"1\": -2}} (-2 earliest, -1 latest)") from None


# --------------------------------------------------------------------------- offsets helpers


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


class _OffsetClient:
    """Driver-side look-ups (topic discovery, earliest/latest offsets) with one KafkaConsumer."""

    def __init__(self, opts: KafkaSourceOptions) -> None:
        self.opts = opts
        self._consumer: Any = None

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            self._consumer = self.opts.new_consumer("driver")
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            finally:
                self._consumer = None

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        from kafka.errors import KafkaError

        try:
            return fn()
        except KafkaError as exc:
            self.close()
            raise RuntimeError(f"{SHORT_NAME}: {what} failed (bootstrap {self.opts.bootstrap}): "
                               f"{type(exc).__name__}: {exc}") from None

    def topic_partitions(self) -> list[tuple[str, int]]:
        """The topic-partitions the source reads now (fresh metadata)."""
        c = self.consumer
        topics = set(self._call("metadata request", c.topics))
        tps: list[tuple[str, int]] = []
        if self.opts.assign is not None:
            for topic, parts in self.opts.assign.items():
                have = c.partitions_for_topic(topic) if topic in topics else set()
                missing = [p for p in parts if p not in (have or set())]
                if missing:
                    raise ValueError(f"{SHORT_NAME}: assigned partitions {missing} of topic {topic!r} do not exist")
                tps.extend((topic, p) for p in parts)
        else:
            if self.opts.subscribe is not None:
                wanted = [t for t in self.opts.subscribe if t in topics]
            else:
                rx = re.compile(self.opts.pattern or "")
                wanted = sorted(t for t in topics if rx.fullmatch(t))
            for topic in wanted:
                for p in sorted(c.partitions_for_topic(topic) or ()):
                    tps.append((topic, p))
        return sorted(tps)

    def _offsets(self, kind: str, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from kafka import TopicPartition

        if not tps:
            return {}
        c = self.consumer
        tpl = [TopicPartition(t, p) for t, p in tps]
        fn = c.beginning_offsets if kind == "earliest" else c.end_offsets
        got = self._call(f"{kind} offsets request", lambda: fn(tpl, timeout_ms=self.opts.poll_timeout_ms))
        return {(tp.topic, tp.partition): int(off) for tp, off in got.items()}

    def earliest(self, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return self._offsets("earliest", tps)

    def latest(self, tps: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return self._offsets("latest", tps)


def current_end_offsets(options: Mapping[str, str]) -> Offsets:
    """The end offsets of everything a source with these options reads, now, in the source's
    offset JSON shape (what ``latestOffset()`` returns without ``maxOffsetsPerTrigger``)."""
    client = _OffsetClient(KafkaSourceOptions(options))
    try:
        return spark_shape(client.latest(client.topic_partitions()))
    finally:
        client.close()


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
        self._client: Optional[_OffsetClient] = None
        self._initial: Optional[Offsets] = None
        self._last_end: Optional[Offsets] = None  # end of the last partitions() call

    def __getstate__(self) -> dict[str, Any]:  # the driver's consumer never travels
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    @property
    def client(self) -> _OffsetClient:
        if self._client is None:
            self._client = _OffsetClient(self.opts)
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
        s, e = flat(start), flat(end)
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
        return _read_range(self.opts, partition)


def _read_range(opts: KafkaSourceOptions, part: KafkaInputPartition) -> Iterator[tuple[Any, ...]]:
    from kafka import TopicPartition
    from kafka.errors import OffsetOutOfRangeError

    topic, pnum, start, end = part.topic, part.partition, part.start, part.end
    label = f"{topic}-{pnum}"
    timeout_ms = opts.poll_timeout_ms
    deadline = time.monotonic() + timeout_ms / 1000.0

    def loss(msg: str) -> None:
        if opts.fail_on_data_loss:
            raise DataLossError(f"{SHORT_NAME}: possible data loss in {label} [{start}, {end}): {msg}. "
                                "Set failOnDataLoss=false to go on.")
        _log.warning("%s: possible data loss in %s [%d, %d): %s", SHORT_NAME, label, start, end, msg)

    consumer = opts.new_consumer(f"reader-{label}")
    try:
        tp = TopicPartition(topic, pnum)
        consumer.assign([tp])
        first = consumer.beginning_offsets([tp], timeout_ms=timeout_ms)[tp]
        last = consumer.end_offsets([tp], timeout_ms=timeout_ms)[tp]
        nxt = start
        if first > nxt:
            loss(f"offsets {nxt}..{min(first, end) - 1} no longer exist (earliest offset is {first})")
            nxt = first
        stop_at = end
        if last < stop_at:
            loss(f"the partition's end offset is {last}, below the batch end {end}")
            stop_at = last
        if nxt >= stop_at:
            return
        consumer.seek(tp, nxt)
        while nxt < stop_at:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                first = consumer.beginning_offsets([tp], timeout_ms=timeout_ms)[tp]
                if first > nxt:
                    loss(f"offsets from {nxt} were deleted while reading (earliest offset is now {first})")
                    return
                raise TimeoutError(f"{SHORT_NAME}: reading {label} offsets [{start}, {end}) timed out after "
                                   f"{timeout_ms} ms at offset {nxt} (pollTimeoutMs)")
            try:
                batch = consumer.poll(timeout_ms=min(remaining_ms, 1000))
            except OffsetOutOfRangeError:
                first = consumer.beginning_offsets([tp], timeout_ms=timeout_ms)[tp]
                loss(f"offset {nxt} is out of range (earliest offset is {first})")
                if first >= stop_at:
                    return
                nxt = max(nxt, first)
                consumer.seek(tp, nxt)
                continue
            for rec in batch.get(tp, ()):
                if rec.offset < nxt:
                    continue
                if rec.offset >= stop_at:
                    nxt = stop_at
                    break
                if rec.offset > nxt:  # a gap: compaction / transaction markers, or deleted records
                    first = consumer.beginning_offsets([tp], timeout_ms=timeout_ms)[tp]
                    if first > nxt:
                        loss(f"offsets {nxt}..{rec.offset - 1} were deleted (earliest offset is {first})")
                ts = None
                if rec.timestamp is not None and rec.timestamp >= 0:
                    ts = _dt.datetime.fromtimestamp(rec.timestamp / 1000.0, tz=_dt.timezone.utc)
                yield (topic, pnum, rec.offset, ts, rec.key, rec.value)
                nxt = rec.offset + 1
            if nxt < stop_at:
                pos = consumer.position(tp)
                if pos is not None and pos >= stop_at:  # trailing gap (markers / compaction)
                    nxt = stop_at
    finally:
        consumer.close()


# --------------------------------------------------------------------------- running queries


def offsets_reached(offsets: Mapping[str, Mapping[str, Any]], target: Mapping[str, Mapping[str, Any]]) -> bool:
    """True when every partition of `target` is in `offsets` at or beyond its target offset."""
    have = flat(offsets)
    return all(tp in have and have[tp] >= off for tp, off in flat(target).items())


def last_committed_source_offset(checkpoint: Path, source_index: int = 0) -> tuple[Optional[int], Optional[str]]:
    """(batch id, the source's offset line as Spark wrote it, ``-`` for none yet) of the latest
    batch that has both ``offsets/N`` and ``commits/N`` in `checkpoint`; (None, None) when there is
    none. ``offsets/N`` is read by the one reader of that format (inspectors/logs.py parse_offsets)."""
    from streamctl.formats.offsets import parse_offsets

    ckpt = Path(checkpoint)
    try:
        commits = {int(n) for n in os.listdir(ckpt / "commits") if n.isdigit()}
    except FileNotFoundError:
        return None, None
    for batch in sorted(commits, reverse=True):
        path = ckpt / "offsets" / str(batch)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        source = next((s for s in parse_offsets(data, str(path), batch).sources if s.source_id == source_index), None)
        if source is None:
            return batch, None
        return batch, "-" if source.raw is None else source.raw
    return None, None


def run_until_caught_up(
    start_query: Callable[[], Any],
    checkpoint: Path,
    target: Offsets,
    timeout_s: float = 300.0,
    source_index: int = 0,
    poll_s: float = 0.2,
) -> Any:
    """Run a streaming query with a processing-time trigger until it has committed a batch whose
    end offsets reach `target` (e.g. :func:`current_end_offsets` taken before the start), then stop
    it and return it. ``Trigger.AvailableNow`` is no substitute with ``maxOffsetsPerTrigger``: it
    reads one bounded batch only (see the module docstring).

    `start_query()` must start the query (``.start()``) on `checkpoint`. Raises the query's
    exception if it fails, TimeoutError after `timeout_s` (the query is stopped first)."""
    query = start_query()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            batch, line = last_committed_source_offset(Path(checkpoint), source_index)
            if line and line != "-" and offsets_reached(json.loads(line), target):
                return query
            if not query.isActive:
                exc = query.exception()
                if exc is not None:
                    raise exc
                raise RuntimeError(f"query stopped before reaching {json.dumps(target)} "
                                   f"(last committed batch {batch}: {line})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"query did not reach {json.dumps(target)} within {timeout_s:.0f}s "
                                   f"(last committed batch {batch}: {line})")
            time.sleep(poll_s)
    finally:
        if query.isActive:
            query.stop()
        try:
            query.awaitTermination(60)
        except Exception:  # noqa: BLE001 - a failure is re-raised above or reported by exception()
            pass

"""Broker access of streamctl's Kafka source (pipeline/kafka_source.py): the driver's look-ups
(topic discovery, earliest and latest offsets) through one KafkaConsumer, and the executors' read
of one topic-partition's offset range (a consumer per task). kafka-python is imported inside the
functions that use it."""
from __future__ import annotations

import datetime as _dt
import logging
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from streamctl.formats.kafka_offsets import SparkOffsets, spark_shape
from streamctl.pipeline.kafka_options import SHORT_NAME, KafkaSourceOptions

if TYPE_CHECKING:  # pragma: no cover
    from streamctl.pipeline.kafka_source import KafkaInputPartition

_log = logging.getLogger("streamctl.pipeline.kafka_source")  # the source's one logger, whichever module logs

Offsets = SparkOffsets  # Spark's Kafka offset JSON: formats/kafka_offsets.py


class DataLossError(RuntimeError):
    """Records a batch should read no longer exist (failOnDataLoss=true)."""


class OffsetClient:
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
    client = OffsetClient(KafkaSourceOptions(options))
    try:
        return spark_shape(client.latest(client.topic_partitions()))
    finally:
        client.close()


def read_range(opts: KafkaSourceOptions, part: KafkaInputPartition) -> Iterator[tuple[Any, ...]]:
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

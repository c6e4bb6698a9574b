"""streamctl.pipeline.kafka_source against a real Kafka-compatible broker (Tansu, kafka_broker
fixture from tests/helpers/kafka_fixtures.py), with and without real PySpark queries."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("kafka")

from streamctl.pipeline.kafka_source import (  # noqa: E402
    SHORT_NAME,
    DataLossError,
    KafkaDataSource,
    KafkaSourceOptions,
    consumer_config,
    current_end_offsets,
    last_committed_source_offset,
    rate_limit,
    register,
    run_until_caught_up,
)


def _reader(bootstrap: str, **options: Any):
    opts = {"kafka.bootstrap.servers": bootstrap, "pollTimeoutMs": "10000"}
    opts.update({k: str(v) for k, v in options.items()})
    return KafkaDataSource(opts).streamReader(None)


def _produce_round_robin(broker, topic: str, start: int, count: int, partitions: int = 3) -> None:
    """Records start..start+count-1: value v<i>, key k<i % 5>, partition i % partitions."""
    for i in range(start, start + count):
        broker.produce(topic, [f"v{i}"], partition=i % partitions, keys=[f"k{i % 5}"])


def _batch_ids(folder: Path) -> list[int]:
    return sorted(int(n) for n in os.listdir(folder) if n.isdigit())


# --------------------------------------------------------------------------- broker fixture


def test_broker_one_record_per_request_end_offsets_exact(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=3)
    assert kafka_broker.end_offsets(topic) == {0: 0, 1: 0, 2: 0}
    n = 31
    got = []
    for i in range(n):
        got += kafka_broker.produce(topic, [f"v{i}".encode()], partition=i % 3, keys=[f"k{i}"])
    per_part = {p: [o for q, o in got if q == p] for p in range(3)}
    assert per_part == {0: list(range(11)), 1: list(range(10)), 2: list(range(10))}
    assert kafka_broker.end_offsets(topic) == {0: 11, 1: 10, 2: 10}
    assert kafka_broker.beginning_offsets(topic) == {0: 0, 1: 0, 2: 0}
    # several records in one call (still one per request), default partitioner
    more = kafka_broker.produce(topic, ["a", "b", "c", None], keys=["x", "y", "z", "w"])
    ends = kafka_broker.end_offsets(topic)
    assert sum(ends.values()) == n + 4
    for part, off in more:
        assert off < ends[part]
    assert topic in kafka_broker.topics()


def test_broker_delete_topic(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=1)
    kafka_broker.produce(topic, ["x"])
    kafka_broker.delete_topic(topic)
    assert topic not in kafka_broker.topics()


def test_kafka_topic_names_are_unique(kafka_topic):
    names = {kafka_topic() for _ in range(5)}
    assert len(names) == 5
    assert all(len(n) < 200 for n in names)


# --------------------------------------------------------------------------- options, pure logic


def test_rate_limit_takes_exactly_the_limit_in_proportion():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 6, ("t", 1): 12, ("t", 2): 12}
    end = rate_limit(start, latest, 7)
    assert end == {("t", 0): 1, ("t", 1): 3, ("t", 2): 3}
    assert rate_limit(start, latest, 30) == latest
    assert rate_limit(start, latest, None) == latest
    # progress even when the limit is below the number of partitions with data
    one = rate_limit(start, latest, 1)
    assert sum(one[tp] - start[tp] for tp in start) == 1
    # a partition past its latest offset keeps the latest (reported as data loss later)
    assert rate_limit({("t", 0): 9}, {("t", 0): 5}, 3) == {("t", 0): 5}


def test_consumer_config_maps_kafka_properties():
    cfg = consumer_config({
        "bootstrap.servers": "h1:9092, h2:9093",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.plain.username": "alice",
        "sasl.plain.password": "pw",
        "request.timeout.ms": "40000",
        "check.crcs": "false",
        "api.version": "2.5.0",
        "ssl.endpoint.identification.algorithm": "",
    })
    assert cfg == {
        "bootstrap_servers": ["h1:9092", "h2:9093"],
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "pw",
        "request_timeout_ms": 40000,
        "check_crcs": False,
        "api_version": (2, 5, 0),
        "ssl_check_hostname": False,
    }
    jaas = consumer_config({
        "bootstrap.servers": "h:1",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="bob" password="s3cr3t";',
    })
    assert jaas["sasl_plain_username"] == "bob" and jaas["sasl_plain_password"] == "s3cr3t"


@pytest.mark.parametrize("options, fragment", [
    ({"kafka.sasl.plain.password": "s3cr3t-value", "kafka.no.such.thing": "s3cr3t-value", "subscribe": "t"},
     "kafka.no.such.thing"),
    ({"kafka.request.timeout.ms": "s3cr3t-value", "subscribe": "t"}, "wrong type"),
    ({"kafka.auto.offset.reset": "s3cr3t-value", "subscribe": "t"}, "manages it"),
    ({"kafka.sasl.jaas.config": "s3cr3t-value", "subscribe": "t"}, "PlainLoginModule"),
    ({"subscribe": "t", "assign": '{"t": [0]}'}, "exactly one"),
    ({"subscribe": "t", "startingOffsets": "s3cr3t-value"}, "startingOffsets"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({"subscribe": "t", "endingOffsets": "latest"}, "not supported"),
])
def test_bad_options_raise_without_values(options, fragment):
    opts = {"kafka.bootstrap.servers": "127.0.0.1:1", **options}
    with pytest.raises(ValueError) as err:
        KafkaSourceOptions(opts)
    assert fragment in str(err.value)
    assert "s3cr3t" not in str(err.value)


def test_options_repr_hides_secrets():
    opts = KafkaSourceOptions({"kafka.bootstrap.servers": "h:1", "kafka.sasl.plain.password": "s3cr3t",
                               "subscribe": "b,a"})
    assert "s3cr3t" not in repr(opts)
    assert opts.subscribe == ["a", "b"]
    assert opts.starting == "latest" and opts.fail_on_data_loss is True


def test_bootstrap_is_required():
    with pytest.raises(ValueError, match="kafka.bootstrap.servers"):
        KafkaSourceOptions({"subscribe": "t"})


# --------------------------------------------------------------------------- reader, no Spark


def test_reader_offsets_partitions_and_read(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=3)
    _produce_round_robin(kafka_broker, topic, 0, 30)  # 10 per partition
    r = _reader(kafka_broker.bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=7)
    try:
        init = r.initialOffset()
        assert json.dumps(init) == f'{{"{topic}": {{"0": 0, "1": 0, "2": 0}}}}'
        assert r.initialOffset() is init  # resolved once
        end = r.latestOffset()
        assert end == {topic: {"0": 3, "1": 2, "2": 2}}  # 7 split 10:10:10, leftover to partition 0
        parts = r.partitions(init, end)
        assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [
            (topic, 0, 0, 3), (topic, 1, 0, 2), (topic, 2, 0, 2)]
        rows = [row for p in parts for row in r.read(p)]
        assert [(row[1], row[2]) for row in rows] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1)]
        t, part, off, ts, key, value = rows[0]
        assert (t, part, off, key, value) == (topic, 0, 0, b"k0", b"v0")
        assert ts.tzinfo is not None
        # the next bound starts at the last planned end
        assert r.latestOffset() == {topic: {"0": 5, "1": 5, "2": 4}}
        # a restart: Spark calls partitions(X, X) first
        r2 = _reader(kafka_broker.bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=7)
        assert r2.partitions({topic: {"0": 9, "1": 9, "2": 9}}, {topic: {"0": 9, "1": 9, "2": 9}}) == []
        assert r2.latestOffset() == {topic: {"0": 10, "1": 10, "2": 10}}
        r2.stop()
    finally:
        r.stop()


def test_reader_starting_offsets_latest_and_json(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=3)
    _produce_round_robin(kafka_broker, topic, 0, 9)
    latest = _reader(kafka_broker.bootstrap, subscribe=topic, startingOffsets="latest")
    assert latest.initialOffset() == {topic: {"0": 3, "1": 3, "2": 3}}
    latest.stop()
    spec = json.dumps({topic: {"0": 1, "1": -1}})  # partition 2 missing -> earliest
    r = _reader(kafka_broker.bootstrap, subscribe=topic, startingOffsets=spec)
    assert r.initialOffset() == {topic: {"0": 1, "1": 3, "2": 0}}
    r.stop()
    bad = _reader(kafka_broker.bootstrap, subscribe=topic, startingOffsets=json.dumps({topic: {"7": 0}}))
    with pytest.raises(ValueError, match="do not exist"):
        bad.initialOffset()
    bad.stop()
    assigned = _reader(kafka_broker.bootstrap, assign=json.dumps({topic: [2, 0]}), startingOffsets="earliest")
    assert json.dumps(assigned.latestOffset()) == f'{{"{topic}": {{"0": 3, "2": 3}}}}'
    assigned.stop()


def test_reader_new_partitions_and_pattern(kafka_broker, kafka_topic):
    prefix = kafka_topic(prefix="pat")
    a, b = f"{prefix}-a", f"{prefix}-b"
    kafka_broker.create_topic(a, 1)
    kafka_broker.produce(a, ["x", "y"])
    r = _reader(kafka_broker.bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    try:
        init = r.initialOffset()
        assert init == {a: {"0": 0}}
        end = r.latestOffset()
        assert end == {a: {"0": 2}}
        r.partitions(init, end)
        kafka_broker.create_topic(b, 2)  # a new matching topic: read from earliest
        kafka_broker.produce(b, ["z"], partition=1)
        end2 = r.latestOffset()
        assert end2 == {a: {"0": 2}, b: {"0": 0, "1": 1}}
        parts = r.partitions(end, end2)
        assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [(b, 1, 0, 1)]
    finally:
        r.stop()


def test_reader_data_loss(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=1)
    kafka_broker.produce(topic, ["a", "b", "c"])
    r = _reader(kafka_broker.bootstrap, subscribe=topic, startingOffsets="earliest")
    with pytest.raises(DataLossError, match="below its start"):
        r.partitions({topic: {"0": 5}}, {topic: {"0": 3}})
    with pytest.raises(DataLossError, match="no longer in the batch"):
        r.partitions({topic: {"0": 1}, "gone": {"0": 1}}, {topic: {"0": 3}})
    # the topic is recreated with fewer records: a planned range [0, 3) cannot be read fully
    parts = r.partitions({topic: {"0": 0}}, {topic: {"0": 3}})
    kafka_broker.delete_topic(topic)
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, ["new"])
    with pytest.raises(DataLossError, match="end offset is 1"):
        list(r.read(parts[0]))
    lenient = _reader(kafka_broker.bootstrap, subscribe=topic, failOnDataLoss="false")
    rows = list(lenient.read(parts[0]))
    assert [(row[2], row[5]) for row in rows] == [(0, b"new")]
    assert lenient.partitions({topic: {"0": 5}}, {topic: {"0": 3}}) == []
    r.stop()
    lenient.stop()


def test_read_past_the_partition_end_is_data_loss_not_a_hang(kafka_broker, kafka_topic):
    """A planned range past the partition's end (Tansu answers a fetch beyond the end with no
    records rather than OffsetOutOfRange) is reported before polling, not waited for."""
    from streamctl.pipeline.kafka_source import KafkaInputPartition

    topic = kafka_topic(partitions=1)
    kafka_broker.produce(topic, ["a"])
    r = _reader(kafka_broker.bootstrap, subscribe=topic, pollTimeoutMs=1500)
    with pytest.raises(DataLossError, match="end offset is 1"):
        list(r.read(KafkaInputPartition(topic, 0, 0, 3)))


def test_current_end_offsets(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=2)
    kafka_broker.produce(topic, ["a", "b", "c"], partition=1)
    assert current_end_offsets({"kafka.bootstrap.servers": kafka_broker.bootstrap, "subscribe": topic}) == {
        topic: {"0": 0, "1": 3}}


# --------------------------------------------------------------------------- real PySpark queries


def _options(bootstrap: str, topic: str, **extra: Any) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "pollTimeoutMs": "60000"}
    opts.update({k: str(v) for k, v in extra.items()})
    return opts


def _recording_sink(out: Path) -> Callable[[Any, int], None]:
    """foreachBatch: append {"batch": id, "rows": [[partition, offset, key], ...]} to `out`."""

    def write(batch_df, batch_id: int) -> None:
        rows = [[r["partition"], r["offset"], r["key"].decode() if r["key"] is not None else None]
                for r in batch_df.select("partition", "offset", "key").collect()]
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps({"batch": batch_id, "rows": rows}) + "\n")

    return write


def _recorded(out: Path) -> list[dict]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def _start_recording(spark, options: dict[str, str], ckpt: Path, out: Path):
    def start():
        return (
            spark.readStream.format(SHORT_NAME).options(**options).load()
            .writeStream.foreachBatch(_recording_sink(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    return start


@pytest.mark.spark
def test_spark_query_bounded_batches_exact_offsets_and_restart(spark, kafka_broker, kafka_topic, tmp_path):
    register(spark)
    topic = kafka_topic(partitions=3)
    ckpt, out = tmp_path / "checkpoint", tmp_path / "batches.jsonl"
    limit, n1, n2 = 8, 40, 25
    _produce_round_robin(kafka_broker, topic, 0, n1)
    options = _options(kafka_broker.bootstrap, topic, maxOffsetsPerTrigger=limit)

    # run 1
    target = current_end_offsets(options)
    assert target == {topic: {"0": 14, "1": 13, "2": 13}}
    run_until_caught_up(_start_recording(spark, options, ckpt, out), ckpt, target, timeout_s=300)
    batches = _recorded(out)
    ids = _batch_ids(ckpt / "offsets")
    assert ids == list(range(math.ceil(n1 / limit))) == _batch_ids(ckpt / "commits")
    assert [b["batch"] for b in batches] == ids
    assert [len(b["rows"]) for b in batches] == [8, 8, 8, 8, 8]  # exactly the limit each time
    last, line = last_committed_source_offset(ckpt)
    assert last == ids[-1]
    assert line == f'{{"{topic}": {{"0": 14, "1": 13, "2": 13}}}}'
    a, b, c = json.loads(line)[topic].values()
    assert a + b + c == n1
    text = (ckpt / "offsets" / "0").read_text(encoding="utf-8")
    assert text.split("\n")[0] == "v1" and not text.endswith("\n")
    assert not (ckpt / "sources").exists() or not any((ckpt / "sources").rglob("*[0-9]"))

    # run 2 (a restart on the same checkpoint) after producing more
    _produce_round_robin(kafka_broker, topic, n1, n2)
    target2 = current_end_offsets(options)
    assert target2 == {topic: {"0": 22, "1": 22, "2": 21}}
    run_until_caught_up(_start_recording(spark, options, ckpt, out), ckpt, target2, timeout_s=300)
    batches = _recorded(out)
    seen = [(row[0], row[1]) for b in batches for row in b["rows"]]
    assert len(seen) == len(set(seen)) == n1 + n2  # every record exactly once
    assert set(seen) == {(i % 3, i // 3) for i in range(n1 + n2)}
    keys = {(row[0], row[1]): row[2] for b in batches for row in b["rows"]}
    assert keys[(1, 4)] == "k3"  # record 13 -> partition 1, offset 4, key k3
    ids2 = _batch_ids(ckpt / "offsets")
    assert ids2 == list(range(5 + math.ceil(n2 / limit))) == _batch_ids(ckpt / "commits")
    assert [b["batch"] for b in batches] == ids2
    _, line2 = last_committed_source_offset(ckpt)
    assert line2 == f'{{"{topic}": {{"0": 22, "1": 22, "2": 21}}}}'
    # run 2's first batch starts where run 1 ended
    first_rows = batches[5]["rows"]
    assert min(r[1] for r in first_rows if r[0] == 0) == 14


@pytest.mark.spark
def test_spark_available_now_reads_one_batch(spark, kafka_broker, kafka_topic, tmp_path):
    """Documented behaviour: PythonMicroBatchStream has no admission control, so availableNow
    calls latestOffset() once: everything in one batch without a limit, one bounded batch with."""
    register(spark)
    topic = kafka_topic(partitions=3)
    _produce_round_robin(kafka_broker, topic, 0, 12)

    def run(options, name):
        ckpt, out = tmp_path / name / "checkpoint", tmp_path / name / "batches.jsonl"
        ckpt.parent.mkdir()
        q = (spark.readStream.format(SHORT_NAME).options(**options).load()
             .writeStream.foreachBatch(_recording_sink(out))
             .option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        assert not q.isActive
        return _recorded(out), last_committed_source_offset(ckpt)

    unbounded, (last, line) = run(_options(kafka_broker.bootstrap, topic), "all")
    assert [len(b["rows"]) for b in unbounded] == [12]
    assert (last, line) == (0, f'{{"{topic}": {{"0": 4, "1": 4, "2": 4}}}}')
    bounded, (last, line) = run(_options(kafka_broker.bootstrap, topic, maxOffsetsPerTrigger=5), "bounded")
    assert [len(b["rows"]) for b in bounded] == [5]
    assert (last, line) == (0, f'{{"{topic}": {{"0": 2, "1": 2, "2": 1}}}}')


@pytest.mark.spark
def test_example_kafka_agg(spark, kafka_broker, kafka_topic, tmp_path):
    from streamctl.fixtures.example_kafka import build_kafka_agg

    topic = kafka_topic()  # created by the scenario (3 partitions)
    ckpt = build_kafka_agg(spark, tmp_path, kafka_broker.bootstrap, topic)
    assert ckpt == tmp_path / "kafka_agg" / "checkpoint"
    assert _batch_ids(ckpt / "offsets") == [0, 1, 2, 3, 4] == _batch_ids(ckpt / "commits")
    lines = [(ckpt / "offsets" / str(i)).read_text(encoding="utf-8").split("\n")[2] for i in range(5)]
    assert lines == [
        f'{{"{topic}": {{"0": 3, "1": 3, "2": 2}}}}',
        f'{{"{topic}": {{"0": 6, "1": 5, "2": 5}}}}',
        f'{{"{topic}": {{"0": 8, "1": 8, "2": 8}}}}',
        f'{{"{topic}": {{"0": 11, "1": 11, "2": 10}}}}',
        f'{{"{topic}": {{"0": 14, "1": 13, "2": 13}}}}',
    ]
    assert (ckpt / "state" / "0").is_dir()
    assert kafka_broker.end_offsets(topic) == {0: 14, 1: 13, 2: 13}

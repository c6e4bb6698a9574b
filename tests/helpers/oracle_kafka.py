"""The Kafka side of the restart oracle's Kafka shapes (tests/helpers/oracle_shapes.py): one Tansu
broker for the process (the caller's, see :func:`use`, or one started on first use and stopped at
exit), a topic per pipeline, and input "files" produced into it as records.

A Kafka pipeline's input folder holds one file, ``kafka.json`` (the bootstrap servers and the
topic), so every copy of the pipeline names the same topic. The topic is the input: unlike a
folder it is not copied with the case, so :func:`produce_files` is idempotent: it produces only
the files the topic does not hold yet (each file is exactly ``ROWS`` records, two partitions,
record ``j`` of a file on partition ``j % 2``). Every restart of every case then reads the same
records as the undisturbed run.
"""
from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

PARTITIONS = 2
LOCATION = "kafka.json"  # in the pipeline's input folder: {"bootstrap": ..., "topic": ...}

_lock = threading.Lock()
_broker: Any = None


def use(broker: Any) -> None:
    """Use this running broker (tests: the session's ``kafka_broker``) instead of starting one."""
    global _broker
    with _lock:
        _broker = broker


def broker() -> Any:
    """The broker: the one given to :func:`use`, else one started now and stopped at exit."""
    global _broker
    with _lock:
        if _broker is None or not _broker.running:
            from helpers.kafka_fixtures import TansuBroker
            from streamctl.pipeline.broker import resolve_binary

            folder = Path(tempfile.mkdtemp(prefix="streamctl-oracle-broker-"))
            started = TansuBroker(resolve_binary(), folder / "tansu.log").start()
            atexit.register(shutil.rmtree, folder, ignore_errors=True)  # runs after stop: last registered, first run
            atexit.register(started.stop)
            _broker = started
        return _broker


def location(input_dir: Path) -> dict[str, str]:
    """The pipeline's bootstrap servers and topic (its input folder's ``kafka.json``)."""
    return json.loads((input_dir / LOCATION).read_text())


def ensure_topic(input_dir: Path, name: str) -> dict[str, str]:
    """The pipeline's topic; a new one (named after `name`, unique) when the input folder has none."""
    path = input_dir / LOCATION
    if path.exists():
        return location(input_dir)
    b = broker()
    topic = f"oracle-{name}-{uuid.uuid4().hex[:8]}"
    b.create_topic(topic, PARTITIONS)
    input_dir.mkdir(parents=True, exist_ok=True)
    loc = {"bootstrap": b.bootstrap, "topic": topic}
    path.write_text(json.dumps(loc) + "\n")
    return loc


def produce_files(topic: str, start: int, count: int, rows_of: Callable[[int], list[dict]], per_file: int) -> None:
    """Files start..start+count-1 into `topic`, skipping those it holds already (every file is
    `per_file` records; files are produced in order, so the topic holds files 0..n-1)."""
    b = broker()
    if topic not in b.topics():
        b.create_topic(topic, PARTITIONS)
    have = sum(b.end_offsets(topic).values())
    if have % per_file:
        raise AssertionError(f"topic {topic}: {have} records, not a whole number of {per_file}-record files")
    for i in range(max(start, have // per_file), start + count):
        rows = rows_of(i)
        if len(rows) != per_file:
            raise AssertionError(f"file {i}: {len(rows)} records, not {per_file}")
        for j, row in enumerate(rows):
            b.produce(topic, [json.dumps(row)], partition=j % PARTITIONS)


def end_offsets(topic: str) -> Optional[dict[str, dict[str, int]]]:
    """The topic's end offsets in Spark's Kafka offset JSON shape."""
    ends = broker().end_offsets(topic)
    return {topic: {str(p): off for p, off in sorted(ends.items())}}

"""Fuzzing the readers (issue 26): real files mutated the hostile ways (truncation, byte flips,
inserted huge numbers, deep nesting, NUL and non-UTF-8 bytes, duplicate keys, wrong types), and
for each, `inspect epochs`, `align` and `trim` (plans only) must end with a documented exit code,
no internal error (exit 70), no traceback, exactly one JSON document under --json, and nothing
written. Base files: a checkpoint PySpark 3.5 wrote (tests/fixtures/spark-3.5/agg_hdfs) and a
file sink log in Spark's format beside it. Hypothesis runs derandomized with a fixed budget, so
CI sees the same examples every run."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

from hypothesis import HealthCheck, given, settings  # the test extra installs it
from hypothesis import strategies as st

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "spark-3.5" / "agg_hdfs" / "checkpoint"
ENTRY = ('{"path":"file:///x/part-%d","size":10,"isDir":false,"modificationTime":1,"blockReplication":1,'
         '"blockSize":1,"action":"add"}')
# every file kind of the base tree a restart or streamctl reads
TARGETS = ["checkpoint/metadata", "checkpoint/offsets/3", "checkpoint/offsets/2", "checkpoint/commits/3",
           "checkpoint/sources/0/3", "checkpoint/sources/0/0", "checkpoint/state/0/0/_metadata/schema",
           "checkpoint/state/0/0/4.delta", "sink/_spark_metadata/2.compact", "sink/_spark_metadata/3"]
INSERTS = [b"9" * 5000, b"9" * 25, b"[" * 3000, b"{\"a\":" * 2000, b"\x00", b"\xff\xfe", b"1e400", b"NaN",
           b'"nextBatchWatermarkMs":"x",', b'"id":1,"id":2,', b"\n", b"v99\n", b"-"]

NUMBERS = [b"9" * 5000, b"9" * 100_000, b"1e400", b"-1e400", b"NaN", b"Infinity", b'"a"', b"-1", b"1.5",
           b"99999999999999999999", b"null", b"[]", b"{}"]

EXIT_CODES = {"inspect": {0, 1, 3}, "align": {0, 3, 4}, "trim": {0, 3, 4}}


def _base(root: Path) -> None:
    shutil.copytree(FIXTURE, root / "checkpoint")
    log = root / "sink" / "_spark_metadata"
    log.mkdir(parents=True)
    (log / "2.compact").write_text("v1\n" + "\n".join(ENTRY % b for b in range(3)))
    (log / "3").write_text("v1\n" + ENTRY % 3)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


mutation = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1), st.just(b"")),
    st.tuples(st.just("flip"), st.floats(0, 1), st.binary(min_size=1, max_size=1)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.sampled_from(INSERTS)),
    # a number of the file (the k-th, k from `where`) replaced: where the hostile values bite
    st.tuples(st.just("number"), st.floats(0, 1), st.sampled_from(NUMBERS)),
)


def _mutate(data: bytes, kind: str, where: float, what: bytes) -> bytes:
    i = int(where * len(data))
    if kind == "truncate":
        return data[:i]
    if kind == "flip":
        return data[:i] + what + data[i + 1:]
    if kind == "insert":
        return data[:i] + what + data[i:]
    import re

    runs = list(re.finditer(rb"\d+", data))
    if not runs:
        return data
    m = runs[min(int(where * len(runs)), len(runs) - 1)]
    return data[:m.start()] + what + data[m.end():]


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(change=mutation)
def test_mutated_files_never_crash_hang_or_write(cli: Callable[..., Any], target: str, change: tuple) -> None:
    root = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        _base(root)
        path = root / target
        path.write_bytes(_mutate(path.read_bytes(), *change))
        before = _snapshot(root)
        ck, sink = str(root / "checkpoint"), str(root / "sink")
        for name, args in (("inspect", ("inspect", "epochs", ck, "--sink", sink, "--json")),
                           ("align", ("align", ck, "--sink", sink, "--json")),
                           ("trim", ("trim", ck, "--json"))):
            r = cli(*args)
            assert r.code in EXIT_CODES[name], (name, target, change, r)
            assert "Traceback" not in r.stderr and "internal error" not in r.stderr, (name, r.stderr)
            json.loads(r.stdout)  # exactly one JSON document
            if name == "inspect" and change[0] == "truncate" and change[1] == 0.0 \
                    and target.startswith("checkpoint/") and "state" not in target:
                q = json.loads(r.stdout)["queries"][0]  # an emptied log file a restart reads
                assert q["verdict"] not in ("aligned", "recoverable"), (target, q["findings"])
        assert _snapshot(root) == before, "a read-only run or a plan changed files"
    finally:
        shutil.rmtree(root, ignore_errors=True)


# --- more file kinds: Kafka, rate and named sources, the agent's lease, a Delta log, the config ---

QID = "11111111-2222-3333-4444-555555555555"
META = '{"batchWatermarkMs":0,"batchTimestampMs":1732500000000,"conf":{"spark.sql.shuffle.partitions":"2"}}'
LEASE = {"version": 1, "query_id": QID, "run_id": "r1", "name": "orders", "host": "driver-1", "pid": 4242,
         "started_at_ms": 1, "heartbeat_ms": 2, "expires_at_ms": 3, "last_batch": 2, "state": "released",
         "released_at_ms": 4, "stop_request_ms": None}
CONFIG = '[defaults]\nformat = "json"\n\n[pipelines.orders]\ncheckpoint = "CK"\nsink = "SINK"\n'


def _stateless(root: Path, offsets: Callable[[int], str], version: str = "v1") -> None:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": QID}))
    for b in range(3):
        (root / "offsets" / str(b)).write_text(f"{version}\n{META}\n{offsets(b)}")
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def _more_bases(root: Path) -> None:
    kafka = root / "kafka"
    _stateless(kafka, lambda b: '{"orders":{"0":%d,"1":%d}}' % (b * 5, b * 7))
    (kafka / "sources/0").mkdir(parents=True)
    (kafka / "sources/0/0").write_bytes(b"\x00v1\n" + b'{"orders":{"0":0,"1":0}}')
    (kafka / "_streamctl").mkdir()
    (kafka / "_streamctl/lease.json").write_text(json.dumps(LEASE))
    rate = root / "rate"
    _stateless(rate, lambda b: str(b * 4))
    (rate / "sources/0").mkdir(parents=True)
    (rate / "sources/0/0").write_text("v1\n1732500000000")
    named = root / "named"
    _stateless(named, lambda b: 'orders:{"logOffset":%d}' % b, version="v2")
    (named / "sources/orders").mkdir(parents=True)
    for b in range(3):
        (named / "sources/orders" / str(b)).write_text('v1\n{"path":"file:///in/p%d","timestamp":1,"batchId":%d}' % (b, b))
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    for v in range(3):
        write_deltalake(str(root / "delta"), pa.table({"batch": [v]}), mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction(QID, v)]))
    (root / "config.toml").write_text(CONFIG.replace("CK", str(kafka)).replace("SINK", str(root / "delta")))


MORE_TARGETS = ["kafka/sources/0/0", "kafka/offsets/2", "kafka/_streamctl/lease.json", "rate/sources/0/0",
                "rate/offsets/2", "named/offsets/2", "named/sources/orders/2",
                "delta/_delta_log/00000000000000000002.json", "delta/_delta_log/00000000000000000000.json",
                "config.toml"]
MORE_EXIT_CODES = {"inspect": {0, 1, 2, 3}, "align": {0, 2, 3, 4}, "trim": {0, 2, 3, 4}}


@pytest.mark.parametrize("target", MORE_TARGETS)
@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(change=mutation)
def test_more_mutated_kinds_never_crash_or_write(cli: Callable[..., Any], target: str, change: tuple) -> None:
    root = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        _more_bases(root)
        path = root / target
        path.write_bytes(_mutate(path.read_bytes(), *change))
        before = _snapshot(root)
        config = ("--config", str(root / "config.toml"))
        runs = [("inspect", (*config, "inspect", "epochs", str(root / "kafka"), "--sink", str(root / "delta"),
                             "--sink-kind", "delta", "--json")),
                ("inspect", (*config, "inspect", "epochs", str(root / "rate"), str(root / "named"), "--json")),
                ("inspect", (*config, "inspect", "epochs", "orders", "--json")),
                ("align", (*config, "align", str(root / "named"), "--json")),
                ("trim", (*config, "trim", str(root / "kafka"), "--json"))]
        for name, args in runs:
            r = cli(*args)
            assert r.code in MORE_EXIT_CODES[name], (name, target, change, r)
            assert "Traceback" not in r.stderr and "internal error" not in r.stderr, (name, r.stderr)
            json.loads(r.stdout)  # exactly one JSON document
        assert _snapshot(root) == before, "a read-only run or a plan changed files"
    finally:
        shutil.rmtree(root, ignore_errors=True)

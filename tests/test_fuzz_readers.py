"""Fuzzing the readers: real files mutated the hostile ways (truncation, byte flips,
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

from helpers.paths import SPARK35, copy_spark35

FIXTURE = SPARK35 / "agg_hdfs" / "checkpoint"
ENTRY = ('{"path":"file://SINK/part-%d","size":10,"isDir":false,"modificationTime":1,"blockReplication":1,'
         '"blockSize":1,"action":"add"}')  # SINK: the sink's own folder (its files exist: no SINK_FILES_MISSING)
# every file kind of the base tree a restart or streamctl reads
TARGETS = ["checkpoint/metadata", "checkpoint/offsets/3", "checkpoint/offsets/2", "checkpoint/commits/3",
           "checkpoint/sources/0/3", "checkpoint/sources/0/0", "checkpoint/state/0/0/_metadata/schema",
           "checkpoint/state/0/0/4.delta", "checkpoint/state/0/0/3.snapshot",
           "sink/_spark_metadata/2.compact", "sink/_spark_metadata/3"]
INSERTS = [b"9" * 5000, b"9" * 25, b"[" * 3000, b"{\"a\":" * 2000, b"\x00", b"\xff\xfe", b"1e400", b"NaN",
           b'"nextBatchWatermarkMs":"x",', b'"id":1,"id":2,', b"\n", b"v99\n", b"-"]

NUMBERS = [b"9" * 5000, b"9" * 100_000, b"1e400", b"-1e400", b"NaN", b"Infinity", b'"a"', b"-1", b"1.5",
           b"99999999999999999999", b"null", b"[]", b"{}"]

EXIT_CODES = {"inspect": {0, 1, 3}, "align": {0, 3, 4}, "trim": {0, 3, 4}}


def _base(root: Path) -> None:
    copy_spark35(FIXTURE, root / "checkpoint")
    log = root / "sink" / "_spark_metadata"
    log.mkdir(parents=True)
    entry = ENTRY.replace("SINK", str(root / "sink"))
    (log / "2.compact").write_text("v1\n" + "\n".join(entry % b for b in range(3)))
    (log / "3").write_text("v1\n" + entry % 3)
    for b in range(4):
        (root / "sink" / f"part-{b}").write_text('{"key":"k","count":1}\n')


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
    # an Iceberg table (pyiceberg as the writer, streaming summaries), its metadata files named as a Hadoop table's
    from pyiceberg.catalog.sql import SqlCatalog

    (root / "ice").mkdir()
    cat = SqlCatalog("t", uri=f"sqlite:///{root}/ice/catalog.db", warehouse=f"file://{root}/ice")
    cat.create_namespace("db")
    t = cat.create_table("db.orders", schema=pa.schema([("id", pa.int64())]))
    for e in range(2):
        t.append(pa.table({"id": [e]}), snapshot_properties={"spark.sql.streaming.queryId": QID,
                                                             "spark.sql.streaming.epochId": str(e)})
    meta = root / "ice/db/orders/metadata"
    for i, f in enumerate(sorted(meta.glob("*.metadata.json"))):
        f.rename(meta / f"v{i + 1}.metadata.json")
    (meta / "version-hint.text").write_text("3")
    # operator metadata (`state/<op>/_metadata/metadata`), as Spark 4.0 wrote it (Spark's own test corpus)
    shutil.copytree(FIXTURE.parents[2] / "spark-corpus/checkpoint-version-4.0.0/rocksdb/agg", root / "opmeta")


MORE_TARGETS = ["kafka/sources/0/0", "kafka/offsets/2", "kafka/_streamctl/lease.json", "rate/sources/0/0",
                "rate/offsets/2", "named/offsets/2", "named/sources/orders/2",
                "delta/_delta_log/00000000000000000002.json", "delta/_delta_log/00000000000000000000.json",
                "config.toml", "opmeta/state/0/_metadata/metadata", "ice/db/orders/metadata/v3.metadata.json",
                "ice/db/orders/metadata/version-hint.text"]
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
                ("inspect", (*config, "inspect", "epochs", str(root / "opmeta"), "--json")),
                ("inspect", (*config, "inspect", "epochs", str(root / "rate"), "--sink", str(root / "ice/db/orders"),
                             "--json")),
                ("inspect", (*config, "inspect", "sink", str(root / "ice/db/orders"), "--app-id", QID, "--json")),
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


# --- streamctl's own files: a backup's plan, journal and manifest; a coordinated sink's records ---

OWN_TARGETS = ["backup/plan.json", "backup/journal.jsonl", "backup/manifest.json", "coordinated/_commits/1.json",
               "coordinated/_commits/2.json"]
OWN_EXIT_CODES = {"undo": {0, 2, 3, 4, 5}, "resume": {0, 2, 3, 4, 5}, "inspect": {0, 1, 3}}


@pytest.fixture(scope="module")
def own_template(tmp_path_factory: pytest.TempPathFactory, layouts: Any) -> Path:
    """An executed align (the sink is one batch ahead: its entry and data file move aside), whose
    backup folder holds a plan, a journal, a manifest and moved files; and a coordinated sink with
    three epochs of two writers."""
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("own") / "t"
    _base(root)
    entry = ENTRY.replace("SINK", str(root / "sink")) % 4
    (root / "sink/_spark_metadata/4").write_text("v1\n" + entry)  # the sink is ahead: align moves batch 4 aside
    (root / "sink/part-4").write_text('{"key":"k","count":1}\n')
    r = subprocess.run([str(Path(sys.executable).with_name("streamctl")), "align", str(root / "checkpoint"), "--sink",
                        str(root / "sink"), "--execute", "--json", "--quiet-period", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    backup = Path(json.loads(r.stdout)["backup"])
    assert (backup / "files").is_dir(), sorted(p.name for p in backup.iterdir())
    (root / "backup").symlink_to(backup.relative_to(root), target_is_directory=True)
    layouts.coordinated(root / "coordinated", 2)  # helpers/layouts.py: three epochs, two writers
    _stateless(root / "coordinated-ck", lambda b: '{"logOffset":%d}' % b)
    layouts.source_log(root / "coordinated-ck", 0, 2)  # the file source's log its offsets name
    return root


def _own_copy(template: Path, dest: Path) -> Path:
    """A copy of the template as if align had run there: its backup's documents and its sink's log
    name the copy's roots (an undo of the copy must never touch the template)."""
    shutil.copytree(template, dest, symlinks=True)
    docs = [dest / "backup" / name for name in ("plan.json", "manifest.json", "journal.jsonl")]
    for f in docs + [f for f in (dest / "sink/_spark_metadata").iterdir() if f.is_file()]:  # backed-up files: as hashed
        f.write_bytes(f.read_bytes().replace(str(template).encode(), str(dest).encode()))
    return dest


def test_own_copy_undoes_cleanly(cli: Callable[..., Any], own_template: Path, tmp_path: Path) -> None:
    """The fuzz base itself: an unmutated copy's undo puts the sink back, in the copy only."""
    before = _snapshot(own_template)
    t = _own_copy(own_template, tmp_path / "t")
    r = cli("align", "--undo", str((t / "backup").resolve()), "--json")
    assert r.code == 0 and r.json()["restored"] >= 2, r
    assert (t / "sink/_spark_metadata/4").exists() and _snapshot(own_template) == before


@pytest.mark.parametrize("target", OWN_TARGETS)
@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(change=mutation)
def test_mutated_own_files_never_crash_or_write(cli: Callable[..., Any], own_template: Path, target: str,
                                                change: tuple) -> None:
    """`align --undo` / `--resume` on a backup whose plan, journal or manifest was mutated, and
    inspect of a coordinated sink whose commit record was: a documented exit code, no traceback,
    one JSON document; a refusal (any exit but 0) leaves every file as it was."""
    root = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        t = _own_copy(own_template, root / "t")
        path = t / target
        path.write_bytes(_mutate(path.read_bytes(), *change))
        backup = str((t / "backup").resolve())
        if target.startswith("backup/"):
            runs = [("undo", ("align", "--undo", backup, "--json")), ("resume", ("align", "--resume", backup, "--json"))]
        else:
            runs = [("inspect", ("inspect", "epochs", str(t / "coordinated-ck"), "--sink", str(t / "coordinated"),
                                 "--json", "--quiet-period", "0")),
                    ("inspect", ("inspect", "sink", str(t / "coordinated"), "--json"))]
        for name, args in runs:
            before = _snapshot(t)
            r = cli(*args)
            assert r.code in OWN_EXIT_CODES[name], (name, target, change, r)
            assert "Traceback" not in r.stderr and "internal error" not in r.stderr, (name, r.stderr)
            json.loads(r.stdout)  # exactly one JSON document
            if r.code != 0 or name == "inspect":
                assert _snapshot(t) == before, (name, target, change, "a refusal or a read changed files")
    finally:
        shutil.rmtree(root, ignore_errors=True)


STATE_NAMES = ["9" * 200 + ".delta", "99999999999999999999.snapshot", "-1.delta", "1e400.delta", "NaN.zip",
               "4_" + "f" * 240 + ".changelog", "4_.zip", "4..delta", " 4.delta", "4.delta\ufffd", "٤.delta", "4.DELTA",
               "4.snapshot.crc"]  # names the file system takes (at most 255 bytes)


@pytest.mark.parametrize("name", STATE_NAMES)
def test_hostile_state_file_names_never_crash_or_write(cli: Callable[..., Any], tmp_path: Path, name: str) -> None:
    """A state store folder holding a file named the hostile way (absurd and negative versions,
    floats, a 240-character unique id, a non-ASCII digit, odd case): a documented exit code,
    no traceback, one JSON document, nothing written."""
    _base(tmp_path)
    (tmp_path / "checkpoint/state/0/0" / name).write_bytes(b"x")
    before = _snapshot(tmp_path)
    ck, sink = str(tmp_path / "checkpoint"), str(tmp_path / "sink")
    for kind, args in (("inspect", ("inspect", "epochs", ck, "--sink", sink, "--json")),
                       ("inspect", ("inspect", "state", ck, "--json")),
                       ("align", ("align", ck, "--sink", sink, "--json")), ("trim", ("trim", ck, "--json"))):
        r = cli(*args)
        assert r.code in EXIT_CODES[kind], (kind, name, r)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, (kind, r.stderr)
        json.loads(r.stdout)
    assert _snapshot(tmp_path) == before


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(mutation)
def test_state_schema_reader_answers_or_names_the_file(m) -> None:
    """`streamctl preflight` reads the state schema file's key schema (formats/state.py
    parse_state_schema): a mutated file parses, is a version it leaves alone (None), or is a
    LogParseError naming the file; nothing else escapes."""
    from streamctl.formats.errors import LogParseError
    from streamctl.formats.state import parse_state_schema, schema_field_types

    data = _mutate((FIXTURE / "state/0/0/_metadata/schema").read_bytes(), *m)
    try:
        got = parse_state_schema(data, "state/0/0/_metadata/schema")
    except LogParseError as exc:
        assert "state/0/0/_metadata/schema" in str(exc)
        return
    if got is not None:
        assert all(isinstance(t, str) for t in schema_field_types(got[0]))

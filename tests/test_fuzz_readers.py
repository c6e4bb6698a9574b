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

"""The bounded reader (docs/formats/README.md#the-reader): the hostile inputs it
bounds, each in a copy of a checkpoint PySpark 3.5 wrote (tests/fixtures/spark-3.5/agg_hdfs, a file
source and HDFS state): an integer of 100,000 digits in `commits/N`, in the file source's log and
as the `logOffset` of `offsets/N`, `1e400` as `batchTimestampMs`, a FIFO where `offsets/N`, a
commit or a sink-log entry belongs. Each is UNREADABLE naming the file, exit 3, exactly one JSON
document, no traceback, nothing written, and no hang: `inspect epochs` runs as a subprocess with
a time bound."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from helpers.paths import SPARK35, copy_spark35

FIXTURE = SPARK35 / "agg_hdfs" / "checkpoint"
HUGE = "9" * 100_000


def _sink(root: Path) -> Path:
    sink = root / "sink"
    (sink / "_spark_metadata").mkdir(parents=True)
    for b in range(4):
        (sink / "_spark_metadata" / str(b)).write_text(
            'v1\n{"path":"file:///x/part-%d","size":1,"isDir":false,"modificationTime":1,"blockReplication":1,'
            '"blockSize":1,"action":"add"}' % b)
    return sink


def _replace_line(path: Path, index: int, text: str) -> None:
    lines = path.read_text().split("\n")
    lines[index] = text
    path.write_text("\n".join(lines))


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


DAMAGE: dict[str, tuple[str, Callable[[Path, Path], None]]] = {
    "huge commit watermark": ("commits/3", lambda c, s: (c / "commits/3").write_text(
        'v1\n{"nextBatchWatermarkMs":%s}' % HUGE)),
    "huge logOffset": ("offsets/3", lambda c, s: _replace_line(c / "offsets/3", 2, '{"logOffset":%s}' % HUGE)),
    "huge file-source timestamp": ("sources/0/3", lambda c, s: (c / "sources/0/3").write_text(
        'v1\n{"path":"file:///x","timestamp":%s,"batchId":3}' % HUGE)),
    "infinite batchTimestampMs": ("offsets/3", lambda c, s: _replace_line(
        c / "offsets/3", 1, json.dumps(json.loads((c / "offsets/3").read_text().split("\n")[1]))
        .replace('"batchTimestampMs":', '"batchTimestampMs":1e400,"x":'))),
    "huge sink file size": ("_spark_metadata/3", lambda c, s: (s / "_spark_metadata/3").write_text(
        'v1\n{"path":"file:///x/p","size":%s,"isDir":false,"modificationTime":1,"action":"add"}' % HUGE)),
    "FIFO offsets": ("offsets/3", lambda c, s: _fifo(c / "offsets/3")),
    "FIFO commit": ("commits/3", lambda c, s: _fifo(c / "commits/3")),
    "FIFO sink entry": ("_spark_metadata/3", lambda c, s: _fifo(s / "_spark_metadata/3")),
}


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            st = os.lstat(os.path.join(dirpath, f))
            out[os.path.join(dirpath, f)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("case", list(DAMAGE))
def test_hostile_input_is_unreadable_exit_3_without_a_hang(tmp_path: Path, case: str) -> None:
    ckpt = copy_spark35(FIXTURE, tmp_path / "checkpoint")
    sink = _sink(tmp_path)
    rel, damage = DAMAGE[case]
    damage(ckpt, sink)
    before = _snapshot(tmp_path)
    exe = Path(sys.executable).with_name("streamctl")
    r = subprocess.run([str(exe), "inspect", "epochs", str(ckpt), "--sink", str(sink), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert "Traceback" not in r.stderr and r.returncode == 3, (r.returncode, r.stderr[-2000:])
    doc = json.loads(r.stdout)  # exactly one JSON document
    q = doc["queries"][0]
    bad = [f for f in q["findings"] if f["code"] == "UNREADABLE"]
    assert bad and bad[0]["path"].endswith(rel), q["findings"]
    assert q["verdict"] == "unreadable"
    assert _snapshot(tmp_path) == before, "inspect changed files"

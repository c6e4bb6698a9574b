"""Progress on a terminal for every long mutation: align, trim and drop-sink,
their --resume and --undo, trim --purge and drop-sink --purge, on a local file system and on the
real S3 server (moto), each a real `streamctl` process whose stderr is a pseudo-terminal: the
status line shows files done, bytes, rate and eta. Piped, or with --json, nothing of it is
printed. (kafka commit-offsets: tests/test_kafka_broker.py, on the real broker.)

No Spark: the checkpoint is the Spark 3.5 fixture (tests/fixtures/spark-3.5/agg_rocksdb, written
by Spark), the sink a coordinated sink written here in its documented layout
(docs/formats/streamctl.md: one `_commits/<epoch>.json` record and one data file per epoch)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from helpers import s3_fixtures as _s3f
from helpers import terminal as term
from helpers.paths import SPARK35, copy_spark35

s3 = _s3f.s3
FIXTURE = SPARK35 / "agg_rocksdb" / "checkpoint"


def _pipeline(base: Path, sink_epochs: int) -> tuple[Path, Path]:
    """A copy of the fixture checkpoint (epochs 0..3 committed) and a coordinated sink holding
    epochs 0..sink_epochs-1 (5: one epoch ahead of the checkpoint, SINK_AHEAD)."""
    ck, out = base / "chk", base / "out"
    copy_spark35(FIXTURE, ck)
    query_id = json.loads((ck / "metadata").read_text())["id"]
    for e in range(sink_epochs):
        data = f"data/epoch={e}/part-00000-0-{e:08d}.jsonl"
        (out / data).parent.mkdir(parents=True, exist_ok=True)
        (out / data).write_text(json.dumps({"key": e}) + "\n")
        (out / "_commits").mkdir(exist_ok=True)
        (out / "_commits" / f"{e}.json").write_text(json.dumps(
            {"version": 1, "epoch": e, "query_id": query_id, "committed_at_ms": 1763762166000, "num_writers": 1,
             "writers": [{"partition": 0, "attempt": 0, "rows": 1, "files": [data]}], "rows": 1},
            separators=(",", ":")))
    return ck, out


@pytest.fixture(params=["local", "s3"])
def place(request, tmp_path) -> Callable[[Path, str], str]:
    """Where the folders live: (local folder, name) -> the location streamctl is given (on S3 the
    folder is uploaded under the name)."""
    if request.param == "local":
        return lambda folder, _name: str(folder)
    fs, port = request.getfixturevalue("s3")
    run_id = tmp_path.name

    def upload(folder: Path, name: str) -> str:
        prefix = f"progress-{run_id}/{name}"
        if folder.exists():
            _s3f.upload(fs, folder, prefix)
        return _s3f.s3_uri(port, prefix)
    return upload


def _shows_progress(r, what: str, label: str = "") -> None:
    assert r.code == 0, r
    lines = r.progress()
    assert lines, f"{what}: no progress line on the terminal: {r.stderr[-1500:]!r}"
    if label:
        assert label in r.stderr, (what, r.stderr[-1500:])


def _silent(r, what: str) -> None:
    assert r.code == 0, r
    assert not r.progress() and "files/s" not in r.stderr, f"{what} printed progress: {r.stderr[-1500:]!r}"


def test_trim_its_undo_resume_and_purge_show_progress_on_a_terminal_only(place, tmp_path):
    ck_dir, _out = _pipeline(tmp_path, 4)
    ck = place(ck_dir, "chk")
    b1, b2 = place(tmp_path / "b1", "b1"), place(tmp_path / "b2", "b2")
    trim = ("trim", ck, "--keep-epochs", "1", "--execute")
    _shows_progress(term.run(*trim, "--backup-dir", b1, terminal=True), "trim --execute")
    _silent(term.run("trim", "--undo", b1, terminal=False), "trim --undo, piped")
    # killed after its start and a group's begin record: the renames are left to the resume
    assert term.run(*trim, "--backup-dir", b2, terminal=False, crash_after=2).code == term.CRASH_EXIT
    _shows_progress(term.run("trim", "--resume", b2, terminal=True), "trim --resume")
    r = term.run("trim", "--undo", b2, "--json", terminal=True)
    _silent(r, "trim --undo --json")
    assert json.loads(r.stdout)["verified"] is True
    _shows_progress(term.run(*trim, "--purge", "--backup-dir", place(tmp_path / "b3", "b3"), terminal=True),
                    "trim --purge")
    _silent(term.run(*trim, "--keep-epochs", "1", terminal=False), "trim plan")


def test_align_and_drop_sink_their_undo_resume_and_purge_show_progress_on_a_terminal(place, tmp_path):
    ahead, aligned = tmp_path / "ahead", tmp_path / "aligned"
    ck_dir, out_dir = _pipeline(ahead, 5)  # the sink one epoch ahead: align rolls it back
    ck, out = place(ck_dir, "ahead/chk"), place(out_dir, "ahead/out")
    a1, a2 = place(tmp_path / "a1", "a1"), place(tmp_path / "a2", "a2")
    align = ("align", ck, "--sink", out, "--sink-kind", "coordinated", "--execute")
    _shows_progress(term.run(*align, "--backup-dir", a1, terminal=True), "align --execute")
    _shows_progress(term.run("align", "--undo", a1, terminal=True), "align --undo", "undo: ")
    assert term.run(*align, "--backup-dir", a2, terminal=False, crash_after=2).code == term.CRASH_EXIT
    _shows_progress(term.run("align", "--resume", a2, terminal=True), "align --resume")
    _silent(term.run("align", "--undo", a2, terminal=False), "align --undo, piped")

    ck_dir, out_dir = _pipeline(aligned, 4)
    ck, out = place(ck_dir, "aligned/chk"), place(out_dir, "aligned/out")
    d1, d2 = place(tmp_path / "d1", "d1"), place(tmp_path / "d2", "d2")
    drop = ("drop-sink", out, "--checkpoint", ck, "--sink-kind", "coordinated", "--assume-stopped", "--execute")
    _shows_progress(term.run(*drop, "--archive", d1, terminal=True), "drop-sink --execute")
    _shows_progress(term.run("drop-sink", "--undo", d1, terminal=True), "drop-sink --undo", "undo: ")
    assert term.run(*drop, "--archive", d2, terminal=False, crash_after=4).code == term.CRASH_EXIT
    _shows_progress(term.run("drop-sink", "--resume", d2, terminal=True), "drop-sink --resume")
    _silent(term.run("drop-sink", "--undo", d2, "--json", terminal=True), "drop-sink --undo --json")
    _shows_progress(term.run(*drop, "--purge", "--archive", place(tmp_path / "d3", "d3"), terminal=True),
                    "drop-sink --purge", "purge files/")

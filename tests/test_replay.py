"""Replayable or refused (issue 29): a roll back makes the restart replay batches, and a replayed
batch of a file source reads the input files its log lists, where the log says. With
`cleanSource=archive` Spark has moved those files to the archive after their batches committed.
One real PySpark query (tests/align_pipeline.py, kind ``dedup_file`` with ``cleanSource=archive``)
is damaged (a lost state delta forces a roll back); align must not call that roll back
exactly-once while the replayed input is gone (docs/model.md#replayable-batches).
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def ap(align_pipeline: Any) -> Any:
    """tests/align_pipeline.py (conftest's session fixture)."""
    return align_pipeline


def _archived(archive: Path) -> list[Path]:
    return sorted(archive.rglob("part-*.json")) if archive.exists() else []


def test_roll_back_over_archived_input_is_refused_until_the_files_are_back(ap, spark, cli, tmp_path, tree_snapshot):
    archive = tmp_path / "archive"
    p = ap.Pipeline(tmp_path, "dedup_file", spark,
                    reader_options={"cleanSource": "archive", "sourceArchiveDir": str(archive)})
    p.add_input(0, 5)  # batches 0..4
    p.run()
    ap.settle(p.base)
    moved = _archived(archive)
    assert moved and all(str(m).startswith(str(archive) + str(p.input)) for m in moved), moved
    # Spark archives a batch's input once the next batch starts: part-00003 is there, part-00004 not yet
    assert (archive / str(p.input).lstrip("/") / "part-00003.json").exists(), moved
    assert (p.input / "part-00004.json").exists(), moved
    # batch 3 in flight (its commit and batch 4 lost): the restart replays it from input that is gone
    inflight = tmp_path / "inflight"
    shutil.copytree(p.checkpoint, inflight)
    ap.remove_with_companions(inflight / "commits", "4")
    ap.remove_with_companions(inflight / "offsets", "4")
    ap.remove_with_companions(inflight / "commits", "3")
    r = cli("inspect", "epochs", str(inflight), "--json")
    found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
    assert r.code == 1 and "SOURCE_NOT_REPLAYABLE" in found, found
    assert found["SOURCE_NOT_REPLAYABLE"]["missing"] == [(p.input / "part-00003.json").as_uri()], found
    shutil.rmtree(inflight)

    # lose state versions 4 and 5 of one partition: only a roll back to epoch 2 restores
    store = p.checkpoint / "state/0/1"
    for v in (4, 5):
        for suffix in ("delta", "snapshot"):
            ap.remove_with_companions(store, f"{v}.{suffix}")

    base = ["align", str(p.checkpoint), "--sink", str(p.output), "--quiet-period", "0"]
    before = tree_snapshot(tmp_path)
    r = cli(*base)
    assert r.code == 4 and "SOURCE_NOT_REPLAYABLE" in r.stderr and "--source-archive" in r.stderr, r.stdout + r.stderr
    r = cli(*base, "--source-archive", str(archive))
    assert r.code == 4 and f"in the archive {archive}" in r.stderr, r.stdout + r.stderr
    assert tree_snapshot(tmp_path) == before, "a refused align changed files"

    # the operator puts the archived files of the replayed batches back; align then plans exactly-once
    for m in moved:
        dest = Path(str(m)[len(str(archive)):])
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(m), dest)
    r = cli(*base, "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r.stdout + r.stderr
    plan = r.json()["plan"]
    assert plan["classification"] == "exactly-once" and plan["strategy"] == "rollback" and plan["target"] == 2, plan
    p.add_input(p.files, 2)
    p.run()
    d = p.delivery()
    assert d["ok"], d

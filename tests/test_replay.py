"""Replayable or refused: a roll back makes the restart replay batches, and a replayed
batch of a file source reads the input files its log lists, where the log says. With
`cleanSource=archive` Spark has moved those files to the archive after their batches committed.
One real PySpark query (tests/helpers/align_pipeline.py, kind ``dedup_file`` with ``cleanSource=archive``)
is damaged (a lost state delta forces a roll back); align must not call that roll back
exactly-once while the replayed input is gone (docs/model.md#replayable-batches).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers.trees import copy_tree, remove_tree, wait_quiet

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def ap(align_pipeline: Any) -> Any:
    """tests/helpers/align_pipeline.py (conftest's session fixture)."""
    return align_pipeline


def _archived(archive: Path) -> list[Path]:
    return sorted(archive.rglob("part-*.json")) if archive.exists() else []


def test_roll_back_over_archived_input_is_refused_until_the_files_are_back(ap, spark, cli, tmp_path, tree_snapshot):
    archive = tmp_path / "archive"
    p = ap.Pipeline(tmp_path, "dedup_file", spark,
                    reader_options={"cleanSource": "archive", "sourceArchiveDir": str(archive)})
    p.add_input(0, 5)  # batches 0..4
    p.run()
    wait_quiet(p.base)
    moved = _archived(archive)
    assert moved and all(str(m).startswith(str(archive) + str(p.input)) for m in moved), moved
    # Spark archives a batch's input once the next batch starts: part-00003 is there, part-00004 not yet
    assert (archive / str(p.input).lstrip("/") / "part-00003.json").exists(), moved
    assert (p.input / "part-00004.json").exists(), moved
    # batch 3 in flight (its commit and batch 4 lost): the restart replays it from input that is gone
    inflight = tmp_path / "inflight"
    copy_tree(p.checkpoint, inflight)
    ap.remove_with_companions(inflight / "commits", "4")
    ap.remove_with_companions(inflight / "offsets", "4")
    ap.remove_with_companions(inflight / "commits", "3")
    r = cli("inspect", "epochs", str(inflight), "--json")
    found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
    assert r.code == 1 and "SOURCE_NOT_REPLAYABLE" in found, found
    assert found["SOURCE_NOT_REPLAYABLE"]["missing"] == [(p.input / "part-00003.json").as_uri()], found
    # align keeps the in-flight batch only with its input back (a plan that calls keeping it
    # exactly-once while the replay reads nothing loses batch 3's rows)
    r = cli("align", str(inflight), "--quiet-period", "0", "--json")
    assert r.code == 4 and "SOURCE_NOT_REPLAYABLE" in r.stderr, r.stdout + r.stderr
    r = cli("align", str(inflight), "--quiet-period", "0", "--source-archive", str(archive), "--json")
    plan = r.json()["plan"]
    assert r.code == 0 and plan["classification"] == "exactly-once" and plan["target"] == 2, r.stdout + r.stderr
    assert [s["path"] for s in plan["steps"] if s["action"] == "put_back"] == ["part-00003.json"], plan["steps"]
    remove_tree(inflight)

    # lose state versions 4 and 5 of one partition: only a roll back to epoch 2 restores
    store = p.checkpoint / "state/0/1"
    for v in (4, 5):
        for suffix in ("delta", "snapshot"):
            ap.remove_with_companions(store, f"{v}.{suffix}")

    base = ["align", str(p.checkpoint), "--sink", str(p.output), "--quiet-period", "0"]
    before = tree_snapshot(tmp_path)
    r = cli(*base)
    assert r.code == 4 and "SOURCE_NOT_REPLAYABLE" in r.stderr and "--source-archive" in r.stderr, r.stdout + r.stderr
    elsewhere = tmp_path / "elsewhere"  # an archive that does not hold them: still refused, and says so
    elsewhere.mkdir()
    r = cli(*base, "--source-archive", str(elsewhere))
    assert r.code == 4 and f"0 of them are in the archive {elsewhere}, 1 nowhere" in r.stderr, r.stdout + r.stderr
    assert tree_snapshot(tmp_path) == before, "a refused align changed files"

    # with every missing file in the archive, align puts them back as the first steps of its plan
    replayed = [f for f in moved if "part-00003" in f.name]  # batch 3 is the only replayed batch that archived
    r = cli(*base, "--source-archive", str(archive), "--json")
    assert r.code == 0, r.stdout + r.stderr
    plan = r.json()["plan"]
    assert plan["classification"] == "exactly-once" and plan["strategy"] == "rollback" and plan["target"] == 2, plan
    backs = [s for s in plan["steps"] if s["action"] == "put_back"]
    assert [s["path"] for s in backs] == ["part-00003.json"] and plan["steps"][0] == backs[0], plan["steps"]
    assert plan["roots"]["input"] == str(p.input) and plan["roots"]["archive"] == str(archive) + str(p.input), plan
    assert tree_snapshot(tmp_path) == before, "a dry run changed files"

    r = cli(*base, "--source-archive", str(archive), "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r.stdout + r.stderr
    assert (p.input / "part-00003.json").exists() and not any(f.exists() for f in replayed)
    # undo: the file goes back into the archive, bytes and mtime as Spark left them, and the checkpoint as it was
    undone = cli("align", "--undo", r.json()["backup"], "--json")
    assert undone.code == 0, undone.stdout + undone.stderr
    after = {k: v for k, v in tree_snapshot(tmp_path).items() if "_streamctl" not in k}
    assert after == {k: v for k, v in before.items() if "_streamctl" not in k}

    r = cli(*base, "--source-archive", str(archive), "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r.stdout + r.stderr
    p.add_input(p.files, 2)
    p.run()
    d = p.delivery()
    assert d["ok"], d
    wait_quiet(p.base)
    # Spark archived the put-back file again once its replayed batch committed
    assert all(f.exists() for f in replayed) and not (p.input / "part-00003.json").exists()

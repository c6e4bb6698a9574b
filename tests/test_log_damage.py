"""Physical damage to the logs, judged by a real restart (docs/model.md#physical-damage).

One real PySpark query (tests/helpers/align_pipeline.py, kind ``file``: a file source, a JSON file sink
with its ``_spark_metadata`` log) runs over four input files (batches 0..3). Each test puts that
pipeline back in place, damages it the way a crash, a full disk or a hand clean-up leaves it, and:

1. ``inspect epochs`` gives the verdict and exit code the damage deserves (never aligned);
2. the real restart of an untouched copy of the damage does what the verdict predicts (the
   oracle: it fails, with Spark's own error);
3. ``align --execute`` repairs it (a verified plan through the usual backup and journal), and the
   restart with two more input files delivers every id exactly once.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]


@pytest.fixture(scope="module")
def ap(align_pipeline: Any) -> Any:
    """tests/helpers/align_pipeline.py (conftest's session fixture)."""
    return align_pipeline
FILES = 4  # batches 0..3


@pytest.fixture(scope="module")
def lab(ap, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("log-damage")
    p = ap.build(root / "run", "file", spark, FILES)
    lab = ap.Lab(p, root / "snaps")
    lab.save("clean")
    return lab


def _fresh(lab: Any) -> Any:
    lab.put_back("clean")
    lab.p.files = FILES
    return lab.p


def _inspect(cli: Any, p: Any) -> tuple[int, dict, dict]:
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--json")
    assert "Traceback" not in r.stderr, r
    q = r.json()["queries"][0]
    return r.code, q, {f["code"]: f for f in q["findings"]}


def _restart_fails(lab: Any, match: str) -> None:
    """The oracle: the real restart of the damaged pipeline fails with Spark's `match`; the damage
    is put back afterwards (the failed start may have written files)."""
    lab.save("damaged")
    with pytest.raises(Exception, match=match):
        lab.p.run()
    lab.put_back("damaged")


def _align(cli: Any, p: Any, tree_snapshot: Any, *extra: str) -> dict:
    """Plan (nothing changes), then execute (verified); returns the plan."""
    args = ["align", str(p.checkpoint), "--sink", str(p.output), "--json", "--quiet-period", "0", *extra]
    before = tree_snapshot(p.base)
    r = cli(*args)
    assert r.code == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert tree_snapshot(p.base) == before, "align without --execute changed files"
    plan = r.json()["plan"]
    assert plan["classification"] == "exactly-once", plan
    done = cli(*args, "--execute")
    assert done.code == 0 and done.json()["verified"] is True, done.stdout + done.stderr
    return plan


def _restart_delivers(p: Any) -> None:
    p.add_input(p.files, 2)
    p.run()
    d = p.delivery()
    assert d["ok"], d


def _moved(plan: dict) -> set[str]:
    return {f"{s['root']}:{s['path']}" for s in plan["steps"] if s["action"] == "move"}


def test_empty_uncommitted_offsets_is_moved_aside(lab, cli, tree_snapshot):
    """A crash (or a full disk) while Spark wrote offsets/4: the file is empty."""
    p = _fresh(lab)
    p.add_input(FILES, 1)
    (p.checkpoint / "offsets/4").write_bytes(b"")
    code, q, found = _inspect(cli, p)
    assert code == 3 and q["verdict"] == "unreadable" and "offsets/4" in found["UNREADABLE"]["path"], q["findings"]
    _restart_fails(lab, "(?i)incomplete log file|offsets/4")
    plan = _align(cli, p, tree_snapshot)
    assert _moved(plan) == {"checkpoint:offsets/4"}, plan["steps"]
    assert plan["before"]["verdict"] == "unreadable" and plan["after"]["committed"] == 3, plan
    _restart_delivers(p)


def test_torn_newest_commit_is_written_as_spark_writes_it(lab, cli, tree_snapshot):
    """commits/3 torn after the sink committed batch 3: the sink and the WAL prove the batch
    complete, so align writes the commit (a roll forward) instead of replaying it."""
    p = _fresh(lab)
    whole = (p.checkpoint / "commits/3").read_bytes()
    (p.checkpoint / "commits/3").write_bytes(whole[: len(whole) // 2])
    code, q, found = _inspect(cli, p)
    assert code == 3 and "commits/3" in found["UNREADABLE"]["path"], q["findings"]
    _restart_fails(lab, "Unexpected end-of-input")
    plan = _align(cli, p, tree_snapshot)
    writes = {s["path"]: s.get("content") for s in plan["steps"] if s["action"] == "write"}
    assert plan["strategy"] == "roll_forward" and plan["target"] == 3, plan
    assert writes.get("commits/3", "").startswith("v1\n"), plan["steps"]
    _restart_delivers(p)


def test_torn_newest_sink_log_entry_rolls_its_batch_back(lab, cli, tree_snapshot):
    """`_spark_metadata/3` of the sink left empty by a full disk: batch 3 is rolled back with it
    (its data files, which no other entry lists, go to the backup) and replayed."""
    p = _fresh(lab)
    (p.output / "_spark_metadata/3").write_bytes(b"")
    code, q, found = _inspect(cli, p)
    assert code == 3 and q["verdict"] == "unreadable", q["findings"]
    p.add_input(FILES, 2)  # the restart with new input: batch 5 compacts the log, reading entry 3
    _restart_fails(lab, "_spark_metadata/3. Incomplete log file")
    plan = _align(cli, p, tree_snapshot)
    assert plan["target"] == 2 and "sink:_spark_metadata/3" in _moved(plan), plan
    assert "checkpoint:commits/3" in _moved(plan), plan["steps"]
    _restart_delivers(p)


def test_lost_metadata_is_written_with_the_given_query_id(ap, lab, cli, tree_snapshot):
    p = _fresh(lab)
    qid = json.loads((p.checkpoint / "metadata").read_text())["id"]
    ap.remove_with_companions(p.checkpoint, "metadata")
    code, q, found = _inspect(cli, p)
    assert code == 3 and "metadata" in found["UNREADABLE"]["path"], q["findings"]
    assert "STREAMING_CHECKPOINT_MISSING_METADATA_FILE" in found["UNREADABLE"]["message"], found
    if hasattr(lab.p.spark, "_streamingCheckpointManager"):  # Spark 4.2+ refuses to restart (verifyMetadataExists)
        _restart_fails(lab, "STREAMING_CHECKPOINT_MISSING_METADATA_FILE")
    else:  # PySpark 3.5 restarts as a new query: a new id, what the finding says (it takes the failing line)
        lab.save("damaged")
        lab.p.run()
        assert json.loads((p.checkpoint / "metadata").read_text())["id"] != qid
        lab.put_back("damaged")
    # a file sink skips a batch by its id, never by the query's: without --query-id align plans a
    # fresh id (the oracle's restart after it: tests/test_restart_oracle.py); the given one wins
    fresh = cli("align", str(p.checkpoint), "--sink", str(p.output), "--quiet-period", "0", "--json")
    assert fresh.code == 0 and any("a fresh id" in n for n in fresh.json()["plan"]["notes"]), fresh
    written = json.loads(next(s["content"] for s in fresh.json()["plan"]["steps"] if s["path"] == "metadata"))
    assert written["id"] != qid, written
    plan = _align(cli, p, tree_snapshot, "--query-id", qid)
    assert json.loads(next(s["content"] for s in plan["steps"] if s["path"] == "metadata")) == {"id": qid}
    assert json.loads((p.checkpoint / "metadata").read_text()) == {"id": qid}
    _restart_delivers(p)


def test_lost_pair_below_the_newest_batch_is_an_error_and_rolls_back(ap, lab, cli, tree_snapshot):
    """offsets/2 and commits/2 lost by a hand clean-up: the pattern async progress tracking leaves,
    but nothing proves the option, and the restart without it fails."""
    p = _fresh(lab)
    for log in ("offsets", "commits"):
        ap.remove_with_companions(p.checkpoint / log, "2")
    code, q, found = _inspect(cli, p)
    assert code == 1 and q["verdict"] == "misaligned", q["findings"]
    f = found["ASYNC_PROGRESS"]
    assert f["severity"] == "error" and f["restart_needs_async"] is True and "--async-progress" in f["message"], f
    _restart_fails(lab, "batch 2 doesn't exist")
    plan = _align(cli, p, tree_snapshot)
    assert plan["strategy"] == "rollback" and plan["target"] == 1, plan
    _restart_delivers(p)


def test_file_source_log_damage_is_what_the_restart_trips_on(ap, lab, cli, tree_snapshot):
    """The file source's own log (`sources/0/`): Spark's restart reads it from its newest
    compaction on (here none yet: every file from 0). A lost entry and an empty one both fail
    the restart; align names them and changes nothing (it does not rebuild the source's log)."""
    p = _fresh(lab)
    ap.remove_with_companions(p.checkpoint / "sources/0", "2")
    code, q, found = _inspect(cli, p)
    assert code == 1 and found["LOG_GAP"]["log"] == "sources/0" and found["LOG_GAP"]["missing"] == [2], q["findings"]
    _restart_fails(lab, "sources/0/2 doesn't exist")
    before = tree_snapshot(p.base)
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--quiet-period", "0")
    assert r.code == 4 and "sources/0/" in r.stderr and tree_snapshot(p.base) == before, r.stderr

    p = _fresh(lab)
    (p.checkpoint / "sources/0/3").write_bytes(b"")
    code, q, found = _inspect(cli, p)
    assert code == 3 and found["UNREADABLE"]["path"].endswith("sources/0/3"), q["findings"]
    _restart_fails(lab, "Incomplete log file")

"""`streamctl diagnose`: the findings in plain words and the exact next command, which
then works as given. Hand-written checkpoints in Spark's layout (no Spark run: the repairs these
lead to are proven against real restarts in tests/test_log_damage.py)."""
from __future__ import annotations

import shlex
from pathlib import Path

from helpers.layouts import checkpoint


def _checkpoint(root: Path, planned: int, committed: int) -> Path:
    return checkpoint(root, planned, committed)  # a checkpoint in Spark's layout (tests/helpers/layouts.py)


def _diagnose(cli, ckpt: Path) -> tuple[int, dict]:
    r = cli("diagnose", str(ckpt), "--quiet-period", "0", "--json")
    assert "Traceback" not in r.stderr, r.stderr
    doc = r.json()
    assert doc["kind"] == "Diagnosis", doc
    return r.code, doc


def test_torn_offsets_ends_with_the_align_that_repairs_it(cli, tmp_path):
    ckpt = _checkpoint(tmp_path / "chk", planned=4, committed=3)
    (ckpt / "offsets/4").write_bytes(b"")
    code, doc = _diagnose(cli, ckpt)
    assert code == 3 and doc["verdict"] == "unreadable", doc
    step = doc["next"]
    assert step["action"] == "align" and step["plan"]["classification"] == "exactly-once", step
    words = shlex.split(step["command"])
    assert words[0] == "streamctl" and words[-1] == "--execute", words
    r = cli(*words[1:], "--quiet-period", "0", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r.stdout + r.stderr
    code, doc = _diagnose(cli, ckpt)
    assert code == 0 and doc["next"]["action"] == "restart" and doc["next"]["command"] is None, doc


def test_a_repair_that_needs_a_fact_names_it(cli, tmp_path):
    ckpt = _checkpoint(tmp_path / "chk", planned=2, committed=2)
    (ckpt / "metadata").unlink()
    code, doc = _diagnose(cli, ckpt)
    assert code == 3 and doc["next"]["action"] == "manual" and "--query-id" in doc["next"]["why"], doc
    r = cli("diagnose", str(ckpt), "--quiet-period", "0")
    assert r.code == 3 and r.stdout.rstrip().splitlines()[-1].startswith("next: "), r.stdout


def test_an_aligned_checkpoint_restarts_as_is(cli, tmp_path):
    code, doc = _diagnose(cli, _checkpoint(tmp_path / "chk", planned=3, committed=3))
    assert code == 0 and doc["verdict"] == "aligned" and doc["next"]["action"] == "restart", doc

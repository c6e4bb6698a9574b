"""The words an operator reads: no Python `None` in any text output (a position that does not
exist reads "none", or the part is left out); a path that is no checkpoint (missing, a file, an
empty folder) gets "not a checkpoint" advice, one line and exit 3 with nothing changed on disk;
LIVE_QUERY from the quiet period says what it is based on and how to go on when the query is in
fact stopped. Hand-built checkpoints in Spark's layout (tests/helpers/layouts.py), no Spark run."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers.layouts import build, checkpoint, healthy_state
from helpers.trees import snapshot_tree


def _old(root: Path) -> Path:
    """Every file an hour old: no sign of a running query."""
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(dirpath, f), (1, 1))
    return root


def _source_log(chk: Path) -> Path:
    """`sources/0/<b>` for every offsets file's logOffset: the file source's log a restart reads."""
    if (chk / "sources").exists():  # the layout wrote it already
        return chk
    (chk / "sources" / "0").mkdir(parents=True)
    folder = chk.parent / f"{chk.name}-input"
    folder.mkdir()
    for f in (chk / "offsets").iterdir():
        if f.name.isdigit():
            (folder / f"part-{f.name}.json").write_text('{"id": 1}\n')
            (chk / "sources" / "0" / f.name).write_text("v1\n" + json.dumps(
                {"path": (folder / f"part-{f.name}.json").as_uri(), "timestamp": 1, "batchId": int(f.name)}))
    return chk


def _cases(tmp_path: Path) -> dict[str, tuple[Path, list[str]]]:
    """name -> (checkpoint, extra args): checkpoints without a sink, without commits, without offsets."""
    cases = {
        "no_commits": (_source_log(checkpoint(tmp_path / "no_commits", 1, None)), []),
        "committed_no_sink": (build(tmp_path / "stateful", 4, 3, state=healthy_state()), []),
        "torn_newest_no_sink": (_source_log(checkpoint(tmp_path / "torn", 3, 2)), []),
        "empty_sink_log": (checkpoint(tmp_path / "empty_sink" / "chk", 2, 2), ["--sink"]),
    }
    (tmp_path / "torn" / "offsets" / "3").write_bytes(b"")
    metadata_only = tmp_path / "metadata_only"
    metadata_only.mkdir()
    (metadata_only / "metadata").write_text(json.dumps({"id": "11111111-2222-3333-4444-555555555555"}))
    cases["metadata_only"] = (metadata_only, [])
    sink = tmp_path / "empty_sink" / "out"
    (sink / "_spark_metadata").mkdir(parents=True)
    cases["empty_sink_log"] = (cases["empty_sink_log"][0], ["--sink", str(sink)])
    for chk, _ in cases.values():
        _old(chk)
    return cases


def test_no_python_none_in_any_text_output(cli, tmp_path):
    for name, (chk, extra) in _cases(tmp_path).items():
        runs = [("inspect", "epochs", str(chk), *extra), ("inspect", "state", str(chk)),
                ("inspect", "writers", str(chk), *extra), ("diagnose", str(chk), *extra),
                ("align", str(chk), *extra), ("trim", str(chk), *extra), ("backups", str(chk))]
        if extra:
            runs.append(("inspect", "sink", extra[1]))
        for args in runs:
            r = cli(*args)
            assert "Traceback" not in r.stdout + r.stderr, (name, args, r)
            assert "None" not in r.stdout + r.stderr, (name, args, r)
    # an executed align and its undo: the result's "verified" line and the undo's positions
    chk = _old(_source_log(checkpoint(tmp_path / "wal_ahead", 3, 1)))
    r = cli("align", str(chk), "--execute")
    assert r.code == 0 and "verified: yes" in r.stdout and "None" not in r.stdout + r.stderr, r
    assert "sink epoch" not in r.stdout.splitlines()[-1], r.stdout  # no sink given: no sink part
    backup = r.stdout.split("undo: streamctl align --undo ", 1)[1].split(";", 1)[0]
    r = cli("align", "--undo", backup)
    assert r.code == 0 and "None" not in r.stdout + r.stderr, r


@pytest.mark.parametrize("what", ["missing", "file", "empty"])
def test_a_path_that_is_no_checkpoint_gets_not_a_checkpoint_advice(cli, tmp_path, what):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "empty").mkdir()
    target = {"missing": tmp_path / "nope", "file": tmp_path / "afile", "empty": tmp_path / "empty"}[what]
    before = snapshot_tree(tmp_path)
    for head, tail in ((["inspect", "epochs"], []), (["diagnose"], []), (["align"], []), (["align"], ["--execute"]),
                       (["trim"], ["--execute"])):
        args = (*head, str(target), *tail)
        r = cli(*args)
        out = r.stdout + r.stderr
        assert r.code == 3, (args, r)
        assert "not a checkpoint" in out or "not a Spark checkpoint" in out, (args, r)
        assert "checkpointLocation" in out and "from a copy" not in out and "None" not in out, (args, r)
        assert "Traceback" not in out, (args, r)
        if head[0] in ("align", "trim"):  # a refusal: one line on stderr, nothing on stdout
            assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, (args, r)
        assert snapshot_tree(tmp_path) == before, args
    r = cli("diagnose", str(target), "--json")
    doc = r.json()
    assert r.code == 3 and doc["next"]["action"] == "manual" and "not a checkpoint" in doc["next"]["why"], doc
    (f,) = doc["findings"]
    assert f["code"] == "UNREADABLE" and f["not_a_checkpoint"] is True, f


def test_live_query_from_the_quiet_period_says_what_it_is_based_on(cli, tmp_path):
    """The newest commit was just written (as when the query's own availableNow run ended, or
    after a hand edit): LIVE_QUERY names the file, its age and the quiet period, and the ways on
    when the query is stopped; align, which has no --assume-stopped, names --quiet-period 0."""
    chk = _source_log(checkpoint(tmp_path / "chk", 2, 2))
    _old(chk)
    os.utime(chk / "commits" / "2")  # now
    r = cli("inspect", "epochs", str(chk), "--quiet-period", "120", "--json")
    (f,) = [f for f in r.json()["queries"][0]["findings"] if f["code"] == "LIVE_QUERY"]
    assert f["severity"] == "info" and f["lease"] is None and f["quiet_period_s"] == 120, f
    assert 0 <= f["last_change_age_s"] < 120 and f["newest_file"] == "commits/2", f
    msg = f["message"]
    assert "commits/2" in msg and "quiet period of 120 s" in msg, msg
    assert "a run that just ended or a hand edit" in msg and "--quiet-period 0" in msg and "--assume-stopped" in msg, msg
    r = cli("diagnose", str(chk), "--quiet-period", "120", "--json")
    step = r.json()["next"]
    assert step["action"] == "stop" and step["command"] is None and "--quiet-period 0" in step["why"], step
    r = cli("align", str(chk), "--quiet-period", "120")
    assert r.code == 4 and "--quiet-period 0" in r.stderr and "None" not in r.stderr, r
    r = cli("align", str(chk), "--quiet-period", "0")
    assert r.code == 0, r

"""A sink belongs to its query: a query restarted on a new checkpoint over an old file
sink (the Databricks knowledge base's case). Spark's file sink skips every batch id its log
already holds, so the new query's first batches vanish; align must not roll the old query's
batches back as if they were the new one's, which loses more (docs/model.md#sink-ownership).

Two real PySpark queries (tests/helpers/align_pipeline.py, kind ``file``) write one JSON file sink: the
old one three batches, then the new one, on its own checkpoint, two. The oracle is the sink's own
log, read by hand: the new query's rows never reach it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers.trees import wait_quiet

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def ap(align_pipeline: Any) -> Any:
    """tests/helpers/align_pipeline.py (conftest's session fixture)."""
    return align_pipeline


def _epochs(cli: Any, ckpt: Path, sink: Path) -> tuple[int, dict, dict]:
    r = cli("inspect", "epochs", str(ckpt), "--sink", str(sink), "--json")
    assert "Traceback" not in r.stderr, r
    q = r.json()["queries"][0]
    return r.code, q, {f["code"]: f for f in q["findings"]}


def test_new_checkpoint_over_an_old_sink(ap, spark, cli, tmp_path, tree_snapshot):
    old = ap.build(tmp_path, "file", spark, 3)  # batches 0..2 in the sink
    new = ap.Pipeline(tmp_path, "file", spark, name="new")
    new.output = old.output
    before_rows = sorted(old.sink_ids())

    # pre-flight: the new checkpoint does not exist yet
    code, q, found = _epochs(cli, new.checkpoint, new.output)
    f = found.get("SINK_FOREIGN_BATCHES")
    assert code == 1 and f is not None and f["preflight"] is True and f["epochs"] == [0, 1, 2], q["findings"]
    assert "skips batch ids 0..2" in f["message"], f

    # the oracle: the new query's two batches (ids 0..2 of its own) never reach the sink
    new.add_input(0, 2)
    new.run()
    wait_quiet(new.base)
    assert sorted(old.sink_ids()) == before_rows, "the file sink wrote batches it should have skipped"
    assert ap.newest(new.checkpoint / "commits") == 1

    code, q, found = _epochs(cli, new.checkpoint, new.output)
    assert code == 1 and "SINK_FOREIGN_BATCHES" in found and "SINK_AHEAD" not in found, q["findings"]
    assert found["SINK_FOREIGN_BATCHES"]["epochs"] == [0, 1, 2], found
    # align never rolls another query's batches back
    before = tree_snapshot(tmp_path)
    r = cli("align", str(new.checkpoint), "--sink", str(new.output), "--quiet-period", "0")
    assert r.code == 4 and "SINK_FOREIGN_BATCHES" in r.stderr, r.stdout + r.stderr
    assert tree_snapshot(tmp_path) == before

    # the old query's own checkpoint still owns its sink: aligned
    code, q, found = _epochs(cli, old.checkpoint, old.output)
    assert code == 0 and "SINK_FOREIGN_BATCHES" not in found, q["findings"]

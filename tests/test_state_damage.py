"""A torn state file (issue 22): the newest delta (HDFS) or changelog (RocksDB) of one partition
cut short by a crash or a full disk, with no checksum companion (HDFS and object stores write
none). Spark's restart fails loading the store; `inspect epochs` once said "aligned, exit 0".
Judged by the file's own format (its LZ4Block end mark, docs/formats/state.md#torn-files), the
version is not restorable: STATE_UNRESTORABLE (exit 1) names the file, the real restart of an
untouched copy fails as predicted, and align's roll back leads to a restart that delivers every
id exactly once (tests/align_pipeline.py kinds ``dedup_file`` and ``dedup_rocksdb``)."""
from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]


@pytest.fixture(scope="module")
def ap(align_pipeline: Any) -> Any:
    """tests/align_pipeline.py (conftest's session fixture)."""
    return align_pipeline


@pytest.mark.parametrize("kind,suffix", [("dedup_file", "delta"), ("dedup_rocksdb", "changelog")])
def test_torn_newest_state_file_is_unrestorable_and_rolled_back(ap, spark, cli, tmp_path, kind, suffix):
    p = ap.build(tmp_path, kind, spark, 5)  # batches 0..4: the restart loads version 5
    store = p.checkpoint / "state/0/1"
    for full in ("5.snapshot", "5.zip"):  # a snapshot of version 5 would still restore it
        ap.remove_with_companions(store, full)
    torn = store / f"5.{suffix}"
    whole = torn.read_bytes()
    ap.remove_with_companions(store, f"5.{suffix}")  # no checksum companion, as on HDFS
    torn.write_bytes(whole[: len(whole) // 2])

    r = cli("inspect", "epochs", str(p.checkpoint), "--json")
    q = r.json()["queries"][0]
    found = {f["code"]: f for f in q["findings"]}
    assert r.code == 1 and "STATE_UNRESTORABLE" in found, q["findings"]
    assert f"5.{suffix} (torn:" in found["STATE_UNRESTORABLE"]["message"], found

    lab = ap.Lab(p, tmp_path / "snaps")
    lab.save("torn")
    # HDFS: CANNOT_LOAD_STATE_STORE; RocksDB, replaying the changelog: LZ4BlockInputStream's EOFException
    with pytest.raises(Exception, match="CANNOT_LOAD_STATE_STORE|Stream ended prematurely"):
        p.add_input(p.files, 1)
        p.run()
    lab.put_back("torn")
    p.files = 5

    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--json", "--execute")
    assert r.code == 0 and r.json()["verified"] is True, r.stdout + r.stderr
    plan = r.json()["plan"]
    assert plan["strategy"] == "rollback" and plan["target"] == 3 and plan["classification"] == "exactly-once", plan
    assert f"state/0/1/5.{suffix}" in [s["path"] for s in plan["steps"]], plan["steps"]
    p.add_input(p.files, 2)
    p.run()
    d = p.delivery()
    assert d["ok"], d

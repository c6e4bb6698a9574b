"""A torn state file: the newest delta (HDFS) or changelog (RocksDB) of one partition
cut short by a crash or a full disk, with no checksum companion (HDFS and object stores write
none). Spark's restart fails loading the store, while every name in the listing looks right.
Judged by the file's own format (its LZ4Block end mark, docs/formats/state.md#torn-files), the
version is not restorable: STATE_UNRESTORABLE (exit 1) names the file, the real restart of an
untouched copy fails as predicted, and align's roll back leads to a restart that delivers every
id exactly once (tests/helpers/align_pipeline.py kinds ``dedup_file`` and ``dedup_rocksdb``)."""
from __future__ import annotations

import time
from typing import Any

import pytest

from helpers.trees import wait_quiet

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]


@pytest.fixture(scope="module")
def ap(align_pipeline: Any) -> Any:
    """tests/helpers/align_pipeline.py (conftest's session fixture)."""
    return align_pipeline


def _oracle(ap: Any, p: Any, snaps: Any, survives: bool, match: str = ".") -> None:
    """The real restart of the damaged pipeline (one more input file) as the oracle: it delivers
    exactly once (`survives`) or fails with Spark's error; then the damaged state is put back."""
    lab = ap.Lab(p, snaps)
    lab.save("damaged")
    files = p.files
    p.add_input(p.files, 1)
    if survives:
        p.run()
        assert p.delivery()["ok"], p.delivery()
    else:
        with pytest.raises(Exception, match=match):
            p.run()
    lab.put_back("damaged")
    p.files = files


def _aligned_then_delivered(cli: Any, p: Any, moved: str) -> dict[str, Any]:
    """align --execute moves `moved` aside and verifies; the restart delivers every id once."""
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--json", "--execute")
    assert r.code == 0 and r.json()["verified"] is True, r.stdout + r.stderr
    plan = r.json()["plan"]
    assert moved in [s["path"] for s in plan["steps"]], plan["steps"]
    p.add_input(p.files, 2)
    p.run()
    assert p.delivery()["ok"], p.delivery()
    return plan


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

    # HDFS: CANNOT_LOAD_STATE_STORE; RocksDB, replaying the changelog: LZ4BlockInputStream's EOFException
    _oracle(ap, p, tmp_path / "snaps", False, "CANNOT_LOAD_STATE_STORE|Stream ended prematurely")
    plan = _aligned_then_delivered(cli, p, f"state/0/1/5.{suffix}")
    assert plan["strategy"] == "rollback" and plan["target"] == 3 and plan["classification"] == "exactly-once", plan


@pytest.mark.parametrize("kind,ext", [("dedup_file", "snapshot"), ("dedup_rocksdb", "zip")])
def test_torn_newest_snapshot_is_judged_by_the_line_and_moved_aside(ap, spark, cli, tmp_path, kind, ext):
    """The newest snapshot (HDFS `.snapshot`, LZ4Block framed) or zip (RocksDB, its end of
    central directory record) of a store, cut short, without a checksum companion; an older
    snapshot (or version 0) and the deltas/changelogs above it are intact. Spark 4.1+ restarts around it (auto
    snapshot repair; the checkpoint shows the line in its offsets conf): warning; PySpark 3.5
    fails: error. align moves it aside, after which every line restarts exactly once."""
    p = ap.build(tmp_path, kind, spark, 3, extra_confs={"spark.sql.streaming.stateStore.minDeltasForSnapshot": "1"})
    store = p.checkpoint / "state/0/0"
    deadline = time.monotonic() + 20
    while not list(store.glob(f"*.{ext}")) and time.monotonic() < deadline:  # the maintenance thread writes them
        time.sleep(0.2)
    wait_quiet(p.base)
    full = sorted(store.glob(f"*.{ext}"), key=lambda f: int(f.name.split(".")[0]))
    assert full, sorted(x.name for x in store.iterdir())
    victim = full[-1]  # the newest: the restart of version 3 starts from it
    whole = victim.read_bytes()
    ap.remove_with_companions(store, victim.name)
    victim.write_bytes(whole[: len(whole) // 2])

    r = cli("inspect", "epochs", str(p.checkpoint), "--json")
    found = [f for f in r.json()["queries"][0]["findings"] if f["code"] == "STATE_FILE_CORRUPT"]
    assert len(found) == 1 and f"{victim.name} (torn:" in found[0]["message"] and found[0]["snapshot_aside"], found
    around = int(spark.version.split(".")[0]) >= 4
    assert found[0]["severity"] == ("warning" if around else "error"), found
    assert r.code == (0 if around else 1), r.json()

    # the oracle: Spark 4.3 restarts around it; PySpark 3.5 fails loading the store
    _oracle(ap, p, tmp_path / "snaps", around, "CANNOT_LOAD_STATE_STORE|Stream ended prematurely|EOF|zip|corrupt")
    _aligned_then_delivered(cli, p, f"state/0/0/{victim.name}")


def test_sst_file_a_zip_names_is_gone(ap, spark, cli, tmp_path):
    """An SST file the newest RocksDB zip names, deleted by a hand clean-up of `SSTs/` (its
    checksum companion too): the zip's `metadata` entry is read (central directory and that one
    entry) and the listing of `SSTs/` checked. The verdict follows the fallback the store has:
    an older zip that does not need the file, or only changelogs, then Spark 4.1+ restarts around
    it and align moves the zip aside; otherwise the restart fails and align refuses. The real
    restart of an untouched copy is the oracle either way."""
    from streamctl.inspectors.state_file_checks import zip_ssts
    from streamctl.inspectors.storage import Storage

    p = ap.build(tmp_path, "dedup_rocksdb", spark, 3, extra_confs={"spark.sql.streaming.stateStore.minDeltasForSnapshot": "1"})
    store = p.checkpoint / "state/0/0"
    deadline = time.monotonic() + 20
    while not list(store.glob("*.zip")) and time.monotonic() < deadline:
        time.sleep(0.2)
    wait_quiet(p.base)
    zips = sorted(store.glob("*.zip"), key=lambda f: int(f.name.split(".")[0]))
    named = sorted(zip_ssts(Storage.open(str(store)), zips[-1].name))
    assert zips and named, sorted(x.name for x in store.iterdir())
    older = set().union(*(zip_ssts(Storage.open(str(store)), z.name) for z in zips[:-1])) if zips[:-1] else set()
    victim = ([n for n in named if n not in older] or named)[-1]  # one the older zips do not need, when there is one
    ap.remove_with_companions(store / "SSTs", victim)

    r = cli("inspect", "epochs", str(p.checkpoint), "--json")
    found = [f for f in r.json()["queries"][0]["findings"] if f["code"] == "STATE_FILE_CORRUPT"]
    assert len(found) == 1 and victim in found[0]["message"] and zips[-1].name in found[0]["message"], found
    survives = found[0]["restart"] == "auto_snapshot_repair"
    print(f"[sst] {victim} of {zips[-1].name} (older zips need it: {victim in older}): severity "
          f"{found[0]['severity']}, restart {found[0]['restart']}, snapshot_aside {found[0]['snapshot_aside']}")

    _oracle(ap, p, tmp_path / "snaps", survives)
    if not found[0]["snapshot_aside"]:
        r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--json", "--execute")
        assert r.code == 4 and "STATE_FILE_CORRUPT" in r.stderr, r
        return
    _aligned_then_delivered(cli, p, f"state/0/0/{zips[-1].name}")

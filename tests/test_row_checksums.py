"""State row checksums (`spark.sql.streaming.stateStore.rowChecksum.enabled`, Spark 4.1+) and
corrupt state files, on the newest PySpark.

Row checksums change no file name and no folder: each value in a delta, snapshot, changelog or
RocksDB row carries a CRC32C of its key and value bytes (`StateStoreRowChecksum.scala`,
`KeyValueChecksumEncoder`), verified on read at `…rowChecksum.readVerificationRatio`; the flag is
recorded in the offsets conf (`OffsetSeqMetadata`), so a restart keeps it. streamctl reads such
checkpoints like any other (no finding, align plans nothing, trim is verified, the restart
delivers every id exactly once).

A corrupt state file (one byte flipped) fails Spark's restart before any row checksum is checked
— the LZ4 stream is broken ("Stream is corrupted", CANNOT_LOAD_STATE_STORE) — when the file is a
delta or changelog the restart reads. A corrupt snapshot does not: Spark 4.1+'s auto snapshot
repair loads an older snapshot (or the empty store) and replays the changes. streamctl checks the
files of each store's restore chain against their checksum companions (Hadoop's `.<file>.crc`)
and says which of the two happens (STATE_FILE_CORRUPT, error or warning); align and trim refuse.

Three shapes, each built once (three batches), restored in place for every test (the file source
log holds absolute paths): HDFS deltas only, HDFS with a snapshot at the restart's version, RocksDB
changelogs only (`minDeltasForSnapshot` chooses which).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers.trees import copy_tree

pytestmark = [pytest.mark.spark, pytest.mark.spark4]  # row checksums, auto snapshot repair: Spark 4.1+

FILES = 3
REQUIRED = FILES  # the version a restart loads: committed batch FILES - 1, plus one
ROW_CHECKSUMS = {"spark.sql.streaming.stateStore.rowChecksum.enabled": "true",
                 "spark.sql.streaming.stateStore.rowChecksum.readVerificationRatio": "1"}
# name -> (pipeline kind, minDeltasForSnapshot, the file a byte is flipped in, the restart's outcome)
SHAPES = {
    "hdfs_deltas": ("dedup_file", "100", f"{REQUIRED}.delta", "fails"),
    "hdfs_snapshot": ("dedup_file", "1", "*.snapshot", "auto_snapshot_repair"),  # the newest snapshot
    "rocksdb_changelogs": ("dedup_rocksdb", "100", f"{REQUIRED}.changelog", "fails"),
}


def _victim(folder: Path, pattern: str, timeout_s: float = 20) -> Path:
    """The newest file of `folder` matching `pattern` (waiting for the state store maintenance
    to write a snapshot, at most `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = sorted(folder.glob(pattern), key=lambda f: int(f.name.split(".")[0]))
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert found, f"no {pattern} in {folder}"
    return found[-1]


@pytest.fixture(scope="module")
def built(spark: Any, align_pipeline: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ap = align_pipeline
    root = tmp_path_factory.mktemp("rowchecksums")
    for name, (kind, min_deltas, victim, _) in SHAPES.items():
        p = ap.Pipeline(root / "work", kind, spark, name=name, extra_confs=_confs(min_deltas))
        p.add_input(0, FILES)
        p.run()
        _victim(p.checkpoint / "state/0/0", victim)
        copy_tree(p.base, root / "pristine" / name)
    return root


def _confs(min_deltas: str) -> dict[str, str]:
    return dict(ROW_CHECKSUMS, **{"spark.sql.streaming.stateStore.minDeltasForSnapshot": min_deltas})


@pytest.fixture
def shape(spark: Any, align_pipeline: Any, built: Path) -> Callable[[str], Any]:
    """shape(name) -> its pipeline, restored to the pristine files."""
    def restore(name: str) -> Any:
        kind, min_deltas, _, _ = SHAPES[name]
        p = align_pipeline.Pipeline(built / "work", kind, spark, name=name, extra_confs=_confs(min_deltas))
        copy_tree(built / "pristine" / name, p.base, replace=True)
        p.files = FILES
        return p

    return restore


def _inspect(cli: Any, p: Any) -> tuple[int, dict]:
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--json")
    assert "Traceback" not in r.stderr, r
    return r.code, r.json()["queries"][0]


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_row_checksum_checkpoints_read_right(cli: Any, shape: Callable[[str], Any], name: str) -> None:
    p = shape(name)
    conf = json.loads((p.checkpoint / f"offsets/{FILES - 1}").read_text().split("\n")[1])["conf"]
    assert conf["spark.sql.streaming.stateStore.rowChecksum.enabled"] == "true", conf
    code, q = _inspect(cli, p)
    assert code == 0 and q["verdict"] == "aligned" and not q["findings"], q["findings"]
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--json")
    assert r.code == 0 and not r.json()["plan"]["steps"], r
    r = cli("trim", str(p.checkpoint), "--sink", str(p.output), "--keep-epochs", "1", "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r
    p.add_input(FILES, 1)
    p.run()
    d = p.delivery()
    assert d["ok"], d


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_corrupt_state_file_verdict_matches_restart(cli: Any, shape: Callable[[str], Any], tree_snapshot: Any,
                                                    name: str) -> None:
    p = shape(name)
    _, _, victim, restart = SHAPES[name]
    f = _victim(p.checkpoint / "state/0/0", victim, 0)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    code, q = _inspect(cli, p)
    found = [x for x in q["findings"] if x["code"] == "STATE_FILE_CORRUPT"]
    assert len(found) == 1 and found[0]["restart"] == restart, q["findings"]
    assert [x.rsplit("/", 4)[-4:] for x in found[0]["files"]] == [["state", "0", "0", f.name]], found
    assert (code, q["verdict"]) == ((1, "misaligned") if restart == "fails" else (0, "aligned")), q
    before = tree_snapshot(p.checkpoint)
    refusing = (("align",), ("trim", "--keep-epochs", "1", "--execute")) if restart == "fails" else \
        (("trim", "--keep-epochs", "1", "--execute"),)
    for args in refusing:
        r = cli(args[0], str(p.checkpoint), "--sink", str(p.output), *args[1:])
        assert r.code == 4 and "STATE_FILE_CORRUPT" in r.stderr and "Traceback" not in r.stderr, (args, r)
    assert tree_snapshot(p.checkpoint) == before
    p.add_input(FILES, 1)
    if restart == "fails":
        with pytest.raises(Exception, match="CANNOT_LOAD_STATE_STORE"):
            p.run()
        return
    # an intact older chain: align moves the corrupt snapshot aside (every line restarts then)
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--execute", "--json")
    assert r.code == 0 and r.json()["verified"], r
    assert f"state/0/0/{f.name}" in [s["path"] for s in r.json()["plan"]["steps"]], r.json()["plan"]["steps"]
    p.run()
    d = p.delivery()
    assert d["ok"], d

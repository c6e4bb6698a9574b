"""The SST files a RocksDB zip names must be there with the size its metadata records:
a checkpoint PySpark 3.5 wrote (tests/fixtures/spark-3.5/agg_rocksdb), its newest zip's SST cut
short or gone. The real restarts behind the verdicts: tests/test_state_damage.py."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers.paths import SPARK35, copy_spark35

FIXTURE = SPARK35 / "agg_rocksdb" / "checkpoint"


@pytest.mark.parametrize("damage", ["cut", "gone"])
def test_a_cut_or_lost_sst_of_the_restored_zip_is_found(cli: Any, tmp_path: Path, damage: str) -> None:
    from streamctl.inspectors.state_file_checks import zip_sst_sizes
    from streamctl.inspectors.storage import Storage

    ck = tmp_path / "checkpoint"
    copy_spark35(FIXTURE, ck)
    store = ck / "state/0/0"
    sizes = zip_sst_sizes(Storage.open(str(store)), "3.zip")
    sst, size = sorted(sizes.items())[-1]
    assert size is not None and (store / "SSTs" / sst).stat().st_size == size
    victim = store / "SSTs" / sst
    if damage == "cut":
        victim.write_bytes(victim.read_bytes()[: size // 2])
    else:
        victim.unlink()
    for crc in (victim.with_name(f".{sst}.crc"),):
        crc.unlink(missing_ok=True)
    r = cli("inspect", "epochs", str(ck), "--json", "--quiet-period", "0")
    found = [f for f in r.json()["queries"][0]["findings"] if f["code"] == "STATE_FILE_CORRUPT"]
    assert r.code == 1 and found and sst in found[0]["message"], r.json()
    if damage == "cut":
        assert f"({size // 2} bytes, the zip records {size})" in found[0]["message"], found

"""A checkpoint-format-2 RocksDB store restores by the lineage its changelogs record
(inspectors/state_lineage.py, formats/state.py `changelog_lineage`), not by any chain of files.
Each store here is built from names (a listing) and lineages written the way Spark's changelog
writer v3 writes them (`writeUTF("v3")`, `writeUTF(JSON)` in an LZ4Block stream); the real
restarts that prove the rule are the oracle's (tests/test_restart_oracle.py, format 2 cases) and
the lineages of a real Spark-written store are read in tests/test_state_features.py.
"""
from __future__ import annotations

from typing import Optional

import pytest

from streamctl.formats.state import changelog_lineage, changelog_with_lineage, lz4_stream
from streamctl.inspectors.state_lineage import lineage_status
from streamctl.inspectors.state_listing import StoreFiles
from streamctl.inspectors.state_restore import store_status


def _changelog(lineage: list[tuple[int, str]], version: str = "v3") -> bytes:
    return changelog_with_lineage(lineage, version)


def test_the_lineage_is_read_from_the_changelog_head() -> None:
    lineage = [(3, "c"), (4, "d"), (5, "e")]
    assert changelog_lineage(_changelog(lineage)) == lineage
    assert changelog_lineage(_changelog(lineage, "v4")) == lineage
    assert changelog_lineage(_changelog([], "v3")) == []
    assert changelog_lineage(lz4_stream(b"\x00\x00\x00\x03key")) == []  # a v1 changelog: records at once
    assert changelog_lineage(b"\x28\xb5\x2f\xfd zstd") is None  # another codec: not told
    cut = _changelog(lineage)[:30]
    assert changelog_lineage(cut) is None  # the lineage lies beyond the bytes read


def _store(names: list[str]) -> StoreFiles:
    s = StoreFiles(0, 0, "default")
    s.add_names(names)
    return s


IDS = {v: chr(ord("a") + v - 1) for v in range(1, 8)}  # version -> the id its commit names


def _judge(names: list[str], lineages: dict[int, list[int]], required: int = 6,
           unreadable: Optional[set[int]] = None):
    """The store's status by lineage; lineages: version -> the versions its changelog lists."""
    files = _store(names)
    valid = {v: IDS[v] for v in range(1, required + 1)}
    status = store_status(files, required, required - 1, valid)

    def lineage_of(name: str) -> Optional[list[tuple[int, str]]]:
        v = int(name.split("_", 1)[0])
        if v in (unreadable or set()):
            return None
        return changelog_lineage(_changelog([(x, IDS[x]) for x in lineages[v]]))

    return status, lineage_status(status, files, valid, lineage_of)


# A store of six versions with changelogs 1..6 and a snapshot uploaded at 3: the lineages of 4..6
# start at 3 (the writer's lineage was cut at the uploaded snapshot), those of 1..3 at 1.
LINEAGES = {1: [], 2: [1], 3: [1, 2], 4: [3], 5: [3, 4], 6: [3, 4, 5]}
CHANGELOGS = [f"{v}_{IDS[v]}.changelog" for v in range(1, 7)]


def test_a_whole_store_restores_from_the_snapshot_its_lineage_names() -> None:
    before, status = _judge(CHANGELOGS + ["3_c.zip"], LINEAGES)
    assert status.restorable_required and status.restore_files == ("3_c.zip", "4_d.changelog", "5_e.changelog", "6_f.changelog")
    assert status.restorable_versions == before.restorable_versions == frozenset(range(7))
    assert status.fallback_files == ()  # no checksum companions: not a line that repairs (4.1+ writes them)


def test_a_snapshot_that_fails_to_load_is_repaired_along_the_full_lineage() -> None:
    """Spark 4.2+'s repair reads 6's lineage (3..5), then 3's (1..2): the full lineage reaches
    version 1, so the empty store and every changelog restore 6 (observed 4.3.0: a truncated
    middle zip, the restart exact)."""
    crcs = [f".{n}.crc" for n in CHANGELOGS + ["3_c.zip"]]
    _before, status = _judge(CHANGELOGS + ["3_c.zip"] + crcs, LINEAGES)
    assert status.restore_files[0] == "3_c.zip"
    assert status.fallback_files == tuple(CHANGELOGS)
    _before, status = _judge(CHANGELOGS + ["2_b.zip", "3_c.zip"] + crcs, LINEAGES)
    assert status.fallback_files == ("2_b.zip", "3_c.changelog", "4_d.changelog", "5_e.changelog", "6_f.changelog")
    names = [n for n in CHANGELOGS if not n.startswith("3_")] + ["3_c.zip"] + crcs
    _before, status = _judge(names, LINEAGES)
    assert status.restorable_required and status.fallback_files == ()  # 3's lineage is gone with its changelog


def test_a_snapshot_deleted_from_the_middle_breaks_every_version_whose_lineage_starts_at_it() -> None:
    before, status = _judge(CHANGELOGS, LINEAGES)
    assert before.restorable_required  # a chain of changelogs from version 1 is there ...
    assert not status.restorable_required  # ... but Spark finds no snapshot in 6's lineage
    assert status.missing == ("3_c.zip",)
    assert status.restorable_versions == frozenset({0, 1, 2, 3})  # a roll back to epoch 2 restores
    assert (status.first_restorable, status.durable_version, status.broken_at) == (1, 3, None)


def test_a_deleted_snapshot_is_repaired_from_an_older_one_of_the_full_lineage() -> None:
    """The zip 6's lineage starts from (3) deleted, the zip at 2 kept: Spark's first try is the
    empty store with the short lineage, which fails; its repair (4.2+) reads the lineages back,
    finds zip 2 and replays 3..6 (observed 4.3.0 with transformWithState: the restart exact). The
    store stays unrestorable by the load itself (STATE_UNRESTORABLE where no line repairs); the
    repair is its fallback. The empty store is not tried twice: with no other zip, none."""
    crcs = [f".{n}.crc" for n in CHANGELOGS + ["2_b.zip"]]
    _before, status = _judge(CHANGELOGS + ["2_b.zip"] + crcs, LINEAGES)
    assert not status.restorable_required and status.missing == ("3_c.zip",)
    assert status.fallback_files == ("2_b.zip", "3_c.changelog", "4_d.changelog", "5_e.changelog", "6_f.changelog")
    _before, status = _judge(CHANGELOGS + [f".{n}.crc" for n in CHANGELOGS], LINEAGES)
    assert not status.restorable_required and status.fallback_files == ()


def test_a_lineage_from_version_1_restores_from_the_empty_store() -> None:
    lineages = {v: list(range(1, v)) for v in range(1, 7)}  # no snapshot was ever uploaded
    _before, status = _judge(CHANGELOGS, lineages)
    assert status.restorable_required and status.restore_files == tuple(CHANGELOGS)


def test_a_changelog_of_the_lineage_that_is_gone_is_named() -> None:
    names = [n for n in CHANGELOGS if not n.startswith("5_")] + ["3_c.zip", "5_x.changelog"]
    _before, status = _judge(names, LINEAGES)
    assert not status.restorable_required and "5_e.changelog" in status.missing


def test_a_lineage_that_cannot_be_read_keeps_the_chain_of_files() -> None:
    before, status = _judge(CHANGELOGS, LINEAGES, unreadable={4, 5, 6})
    assert status.restorable_required == before.restorable_required
    assert status.restorable_versions == before.restorable_versions


@pytest.mark.parametrize("zip_at", [4, 5])
def test_a_newer_snapshot_in_the_lineage_is_the_base(zip_at: int) -> None:
    _before, status = _judge(CHANGELOGS + [f"{zip_at}_{IDS[zip_at]}.zip"], LINEAGES)
    assert status.restorable_required
    assert status.restore_files[0] == f"{zip_at}_{IDS[zip_at]}.zip"
    assert status.restorable_versions == frozenset(range(zip_at, 7)) | {0, 1, 2, 3}

"""Newer state features on the newest PySpark: `transformWithState` with map,
list and value state, TTL and processing-time timers (streamctl.fixtures.state_features), on the
RocksDB provider with changelog checkpointing, in checkpoint format 1 (`tws`) and 2 (`tws_v2`,
state unique ids in commits/). Layout: state schema v3 files `state/0/_stateSchema/default/…` and
operator metadata v2 `state/0/_metadata/v2/<batch>` naming them.

Each kind is built once per session (six batches, one per input file) and kept pristine; a test
restores it in place (the file source log and the operator metadata hold absolute paths, so a copy
elsewhere would not restart), then:
- damage -> `inspect` names what Spark's real restart then fails on;
- clean -> `align` plans nothing, `trim` plans no schema/metadata file and nothing a kept
  restart reads, and a real restart after `trim --execute` / `align --to --execute` delivers
  every id exactly once (a lost `seen` map-state entry would let a repeated id through).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers.trees import copy_tree, wait_quiet

pytestmark = [pytest.mark.spark, pytest.mark.spark4]  # transformWithState: Spark 4.0+

FILES = 6


@pytest.fixture(scope="session")
def tws_built(spark: Any, align_pipeline: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("pandas")
    ap = align_pipeline
    root = tmp_path_factory.mktemp("tws")
    out = {}
    for kind in ("tws", "tws_v2"):
        p = ap.Pipeline(root / "work", kind, spark)
        p.add_input(0, FILES)
        p.run()
        wait_quiet(p.base)
        assert p.delivery()["ok"], p.delivery()
        copy_tree(p.base, root / "pristine" / kind)
        out[kind] = root
    return out


@pytest.fixture
def tws(spark: Any, align_pipeline: Any, tws_built: dict[str, Path]) -> Callable[[str], Any]:
    """tws(kind) -> the session's pipeline of `kind`, restored to its pristine files."""
    ap = align_pipeline

    def restore(kind: str) -> Any:
        root = tws_built[kind]
        p = ap.Pipeline(root / "work", kind, spark)
        # the previous test's restart may have left RocksDB maintenance still writing below it
        copy_tree(root / "pristine" / kind, p.base, replace=True)
        p.files = FILES
        return p

    return restore


def inspect(cli: Any, p: Any) -> tuple[int, dict, set[str]]:
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--json")
    assert "Traceback" not in r.stderr, r
    q = r.json()["queries"][0]
    return r.code, q, {f["code"] for f in q["findings"]}


def restart_error(p: Any) -> str:
    p.add_input(p.files, 1)
    with pytest.raises(Exception) as exc:
        p.run()
    return str(exc.value)


def restart_delivers(p: Any) -> None:
    p.add_input(p.files, 1)
    p.run()
    got = p.delivery()
    assert got["ok"], got


def schema_files(p: Any) -> list[Path]:
    return sorted((p.checkpoint / "state/0/_stateSchema").rglob("*"))


def test_layout_is_read(cli: Any, tws: Callable[[str], Any]) -> None:
    for kind in ("tws", "tws_v2"):
        p = tws(kind)
        code, q, codes = inspect(cli, p)
        assert code == 0 and q["verdict"] == "aligned" and not codes, q["findings"]
        r = cli("inspect", "state", str(p.checkpoint), "--json")
        assert r.code == 0 and r.json()["verdict"] == "aligned", r
        assert r.json()["checkpoint_format"] == (2 if kind == "tws_v2" else 1), r
        op = r.json()["operators"][0]
        assert op["metadata_version"] == 2 and op["num_partitions"] == 4, op
        assert (q["committed"], q["state_epoch"]) == (FILES - 1, FILES - 1), q
        meta = json.loads((p.checkpoint / "state/0/_metadata/v2/0").read_text().split("\n", 1)[1])
        props = json.loads(meta["operatorPropertiesJson"])
        kinds = {v["stateVariableType"] for v in props["stateVariables"]}
        assert {"ValueState", "ListState", "MapState", "TimerState"} <= kinds, props
        assert any(v["ttlEnabled"] for v in props["stateVariables"]), props
        assert [f for f in schema_files(p) if f.is_file()], "no state schema v3 file"


@pytest.mark.parametrize("kind", ["tws", "tws_v2"])
def test_trim_keeps_what_restart_reads(cli: Any, tws: Callable[[str], Any], kind: str) -> None:
    p = tws(kind)
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--json")
    assert r.code == 0 and not r.json()["plan"]["steps"], r
    r = cli("trim", str(p.checkpoint), "--sink", str(p.output), "--keep-epochs", "2", "--json")
    assert r.code == 0, r
    steps = [s["path"] for s in r.json()["plan"]["steps"] if s["root"] == "checkpoint"]
    assert any(s.startswith("state/0/0/") for s in steps), steps  # it does reclaim old versions
    assert not [s for s in steps if "_stateSchema" in s or "_metadata" in s], steps
    schemas = schema_files(p)
    r = cli("trim", str(p.checkpoint), "--sink", str(p.output), "--keep-epochs", "2", "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r
    assert schema_files(p) == schemas
    restart_delivers(p)
    code, q, codes = inspect(cli, p)
    assert code == 0 and q["committed"] == FILES, q["findings"]


def test_format2_changelogs_record_the_lineage_their_load_follows(tws: Callable[[str], Any]) -> None:
    """Every changelog Spark wrote in checkpoint format 2 carries a lineage (changelog v3/v4):
    the versions just below its own, consecutive, back to the snapshot its writer loaded from or
    to version 1, each with the id the commit log names for it. streamctl follows it as a
    restart does (inspectors/state_lineage.py)."""
    from streamctl.formats.state import changelog_lineage, state_file

    p = tws("tws_v2")
    named: dict[int, str] = {}  # version -> id, from commits/<v-1>.stateUniqueIds (partition 0)
    for c in (p.checkpoint / "commits").glob("[0-9]*"):
        ids = json.loads(c.read_text().split("\n", 1)[1]).get("stateUniqueIds") or {}
        named[int(c.name) + 1] = ids["0"][0][0] if isinstance(ids["0"][0], list) else ids["0"][0]
    store = p.checkpoint / "state/0/0"
    zips = {state_file(f.name).version for f in store.glob("*_*.zip")}
    seen = 0
    for f in sorted(store.glob("*_*.changelog")):
        v = state_file(f.name).version
        lineage = changelog_lineage(f.read_bytes())
        assert lineage is not None, f
        versions = [x for x, _u in lineage]
        assert versions == list(range(versions[0], v)) if versions else v == 1, (f.name, lineage)
        assert not versions or versions[0] == 1 or versions[0] in zips, (f.name, lineage, zips)
        assert all(named.get(x, u) == u for x, u in lineage), (f.name, lineage, named)
        seen += 1
    assert seen == FILES, sorted(store.iterdir())


def test_a_torn_format2_zip_is_repaired_on_the_lines_that_repair_it(cli: Any, tws: Callable[[str], Any]) -> None:
    """The zip the newest version of partition 0 restores from, cut short: Spark 4.2+ repairs a
    format-2 load along the changelogs' full lineage (SPARK-56216), so the restart on this line
    delivers every id once and inspect says a warning (exit 0); a 4.1 line loads format 2 without
    repair and fails, so `--target-spark 4.1` says the error (exit 1)."""
    p = tws("tws_v2")
    store = p.checkpoint / "state/0/0"
    required = FILES  # the version a restart after batch FILES-1 loads
    zips = sorted((int(z.name.split("_", 1)[0]), z) for z in store.glob("*_*.zip"))
    base = [z for v, z in zips if v <= required]
    assert base, sorted(f.name for f in store.iterdir())  # the store uploaded a snapshot to restore from
    data = base[-1].read_bytes()
    base[-1].write_bytes(data[: len(data) // 2])
    for sidecar in (store / f".{base[-1].name}.crc", store / f"{base[-1].name}.crc"):
        sidecar.unlink(missing_ok=True)
    code, q, codes = inspect(cli, p)
    corrupt = [f for f in q["findings"] if f["code"] == "STATE_FILE_CORRUPT"]
    assert code == 0 and corrupt and corrupt[0]["severity"] == "warning", q["findings"]
    assert corrupt[0]["restart"] == "auto_snapshot_repair", corrupt
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--target-spark", "4.1", "--json")
    found = {f["code"]: f for f in r.json()["queries"][0]["findings"]}
    assert r.code == 1 and found["STATE_FILE_CORRUPT"]["severity"] == "error", found
    restart_delivers(p)


def test_align_rollback_format2_restart_delivers(cli: Any, tws: Callable[[str], Any]) -> None:
    p = tws("tws_v2")
    r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--to", "3", "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r
    moved = [s["path"] for s in r.json()["plan"]["steps"] if s["root"] == "checkpoint"]
    assert "state/0/_metadata/v2/3" not in moved and "state/0/_metadata/v2/4" in moved, moved
    assert not [s for s in moved if "_stateSchema" in s], moved
    p.run()  # a `once` start replays one epoch: 4, then 5 (their files are in sources/0/4, 5)
    p.run()
    restart_delivers(p)


def _drop_changelog(p: Any) -> None:
    for n in (f"{FILES}.changelog", f".{FILES}.changelog.crc", f"{FILES}.changelog.crc"):
        (p.checkpoint / "state/0/0" / n).unlink(missing_ok=True)


def _commit_names_absent_id(p: Any) -> None:
    c = p.checkpoint / f"commits/{FILES - 1}"
    head, body = c.read_text().split("\n", 1)
    obj = json.loads(body)
    obj["stateUniqueIds"]["0"][0] = ["00000000-0000-0000-0000-000000000000"]
    (p.checkpoint / f"commits/.{FILES - 1}.crc").unlink(missing_ok=True)
    c.write_text(f"{head}\n{json.dumps(obj)}")


def _drop_schema(p: Any) -> None:
    for f in schema_files(p):
        if f.is_file():
            f.unlink()


def _drop_operator_metadata(p: Any) -> None:
    shutil.rmtree(p.checkpoint / "state/0/_metadata")


@pytest.mark.parametrize("kind, damage, code, spark_says", [
    ("tws", _drop_changelog, "STATE_UNRESTORABLE", "CANNOT_READ_STREAMING_STATE_FILE"),
    ("tws_v2", _commit_names_absent_id, "STATE_UNRESTORABLE", "6_00000000-0000-0000-0000-000000000000.changelog does not exist"),
    ("tws", _drop_schema, "STATE_SCHEMA_MISSING", "_stateSchema/default/"),
    ("tws", _drop_operator_metadata, "STATE_METADATA_MISSING", "STDS_FAILED_TO_READ_OPERATOR_METADATA"),
], ids=["changelog", "format2-commit-id", "schema-file", "operator-metadata"])
def test_damage_matches_restart(cli: Any, tws: Callable[[str], Any], kind: str, damage: Any, code: str,
                                spark_says: str) -> None:
    p = tws(kind)
    damage(p)
    rc, q, codes = inspect(cli, p)
    assert rc == 1 and q["verdict"] == "misaligned" and code in codes, q["findings"]
    r = cli("inspect", "state", str(p.checkpoint), "--json")
    assert r.code == 1 and code in {f["code"] for f in r.json()["findings"]}, r
    if code != "STATE_UNRESTORABLE":  # no epoch brings a schema or metadata file back
        r = cli("align", str(p.checkpoint), "--sink", str(p.output), "--json")
        assert r.code == 4 and code in r.stderr + r.stdout, r
    assert spark_says in restart_error(p)

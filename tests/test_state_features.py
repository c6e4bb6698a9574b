"""Newer state features on the newest PySpark: `transformWithState` with map,
list and value state, TTL and processing-time timers (streamctl.fixtures.state_features), on the
RocksDB provider with changelog checkpointing, in checkpoint format 1 (`tws`) and 2 (`tws_v2`,
state unique ids in commits/). Layout: state schema v3 files `state/0/_stateSchema/default/…` and
operator metadata v2 `state/0/_metadata/v2/<batch>` naming them.

Each kind is built once per session (six batches, one per input file) and kept pristine; a test
restores it in place (the file source log and the operator metadata hold absolute paths, so a plain copy
elsewhere would not restart), then:
- damage -> `inspect` names what Spark's real restart then fails on;
- clean -> `align` plans nothing, `trim` plans no schema/metadata file and nothing a kept
  restart reads, and a real restart after `trim --execute` / `align --to --execute` delivers
  every id exactly once (a lost `seen` map-state entry would let a repeated id through);
- `copy --execute` to another folder rewrites the operator metadata's schema paths: the copy
  inspects aligned at the same positions and restarts there exactly once, the old place byte for
  byte unchanged (with `--move --new-query-id`, a crash, `--resume` and `--undo` too).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import s3_fixtures as _s3f
from helpers.trees import copy_tree, snapshot_tree, tree, wait_quiet

pytestmark = [pytest.mark.spark, pytest.mark.spark4]  # transformWithState: Spark 4.0+

s3 = _s3f.s3

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


def test_deleted_zips_of_a_format2_store_are_judged_on_s3_without_deep(cli: Any, tws: Callable[[str], Any],
                                                                       s3: Any) -> None:
    """Every zip at or below the newest version deleted, the changelogs below it left: the restart
    fails (Spark loads by the lineage, which starts at a zip that is gone, and its repair finds no
    other zip in the full lineage). On an object store without `--deep` streamctl read no file's
    content, and the chain of changelogs from version 1 made the version look restorable
    ("aligned"); it now reads the one changelog head the restart's load follows, so the S3 copy
    is judged as the local one is."""
    from streamctl.formats.state import changelog_lineage

    fs, port = s3
    p = tws("tws_v2")
    store = p.checkpoint / "state/0/0"
    required = FILES
    log = next(store.glob(f"{required}_*.changelog"))
    lineage = changelog_lineage(log.read_bytes())
    assert lineage and lineage[0][0] > 1, lineage  # it starts at a zip
    zips = [z for z in store.glob("*_*.zip") if int(z.name.split("_", 1)[0]) <= required]
    assert f"{lineage[0][0]}_{lineage[0][1]}.zip" in {z.name for z in zips}, sorted(z.name for z in zips)
    for z in zips:
        for f in (z, store / f".{z.name}.crc", store / f"{z.name}.crc"):
            f.unlink(missing_ok=True)
    uri = _s3f.s3_uri(port, "tws-lineage/checkpoint")
    _s3f.upload(fs, p.checkpoint, "tws-lineage/checkpoint")
    for where in (str(p.checkpoint), uri):
        r = cli("inspect", "epochs", where, "--json")
        q = r.json()["queries"][0]
        gone = [f for f in q["findings"] if f["code"] == "STATE_UNRESTORABLE"]
        assert r.code == 1 and gone and f"{lineage[0][0]}_{lineage[0][1]}.zip" in json.dumps(gone), (where, q["findings"])
    err = restart_error(p)
    assert "CANNOT_LOAD_STATE_STORE" in err, err[:2000]


def test_a_deleted_lineage_zip_is_repaired_on_the_lines_that_repair_it(cli: Any, tws: Callable[[str], Any]) -> None:
    """The zip the newest version's lineage starts from deleted, an older zip of the store kept:
    Spark 4.2+ first tries the empty store with the short lineage (which fails), then its auto
    snapshot repair reads the full lineage back and loads the older zip (observed 4.3.0: the
    restart delivers every id once). A warning on this line (exit 0); `--target-spark 4.1`, whose
    format-2 load does not repair, keeps STATE_UNRESTORABLE (exit 1)."""
    from streamctl.formats.state import changelog_lineage

    p = tws("tws_v2")
    store = p.checkpoint / "state/0/0"
    lineage = changelog_lineage(next(store.glob(f"{FILES}_*.changelog")).read_bytes())
    assert lineage and lineage[0][0] > 1, lineage
    base = store / f"{lineage[0][0]}_{lineage[0][1]}.zip"
    older = [z for z in store.glob("*_*.zip") if int(z.name.split("_", 1)[0]) < lineage[0][0]]
    assert base.exists() and older, sorted(f.name for f in store.iterdir())
    for f in (base, store / f".{base.name}.crc", store / f"{base.name}.crc"):
        f.unlink(missing_ok=True)
    code, q, codes = inspect(cli, p)
    found = [f for f in q["findings"] if f["code"] == "STATE_FILE_CORRUPT"]
    assert code == 0 and "STATE_UNRESTORABLE" not in codes, q["findings"]
    assert found and found[0]["severity"] == "warning" and found[0]["restart"] == "auto_snapshot_repair", found
    assert base.name in found[0]["message"], found
    r = cli("inspect", "epochs", str(p.checkpoint), "--sink", str(p.output), "--target-spark", "4.1", "--json")
    gone = [f for f in r.json()["queries"][0]["findings"] if f["code"] == "STATE_UNRESTORABLE"]
    assert r.code == 1 and gone and base.name in gone[0]["message"], r.json()
    a = cli("align", str(p.checkpoint), "--sink", str(p.output), "--execute")
    assert a.code == 4 and "restart the query as is" in a.stderr, a  # nothing to move: the restart repairs
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


# -- copy: the operator metadata's schema paths rewritten, judged by real restarts -------------------

STREAMCTL = Path(sys.executable).parent / "streamctl"
V2 = "state/0/_metadata/v2"


def at(p: Any, checkpoint: Path, output: Path) -> Any:
    """The same query at another place (its input folder where it is)."""
    q = type(p)(p.base.parent, p.kind, p.spark, name=p.base.name)
    q.checkpoint, q.output, q.files = checkpoint, output, p.files
    return q


def old_place(p: Any) -> list[Any]:
    """The old checkpoint and sink byte for byte, and every file's size and mtime."""
    wait_quiet(p.base)
    return [tree(p.checkpoint), tree(p.output), snapshot_tree(p.checkpoint), snapshot_tree(p.output)]


def schema_paths(checkpoint: Path) -> dict[str, list[str]]:
    """batch -> the stateSchemaFilePaths of `state/0/_metadata/v2/<batch>`."""
    out = {}
    for f in sorted((checkpoint / V2).iterdir()):
        if f.name.isdigit():
            meta = json.loads(f.read_text().split("\n", 1)[1])
            out[f.name] = [x for s in meta["stateStoreInfo"] for x in s["stateSchemaFilePaths"]]
    return out


def names_only(checkpoint: Path) -> None:
    """Every schema path names a file under `checkpoint`, spelled as Hadoop's Path.toString spells
    it there (`file:/…`), and every Hadoop sidecar matches its file."""
    from streamctl.formats.checksum import hadoop_crc

    for batch, paths in schema_paths(checkpoint).items():
        assert paths and all(x.startswith(f"file:{checkpoint}/state/0/_stateSchema/") for x in paths), (batch, paths)
        assert all(Path(x[len("file:"):]).is_file() for x in paths), paths
        crc = checkpoint / V2 / f".{batch}.crc"
        assert not crc.exists() or crc.read_bytes() == hadoop_crc((checkpoint / V2 / batch).read_bytes()), crc


def copied(cli: Any, p: Any, dest: Path | str, sink_dest: Path | str, *extra: str) -> dict:
    r = cli("copy", str(p.checkpoint), str(dest), "--sink", str(p.output), "--sink-dest", str(sink_dest), *extra,
            "--execute", "--json")
    assert "Traceback" not in r.stderr and r.code == 0, r
    assert r.json()["verified"] is True, r.json()
    return r.json()


@pytest.mark.parametrize("kind", ["tws", "tws_v2"])
def test_copy_rewrites_the_schema_paths_and_restarts_at_the_new_place(cli: Any, tws: Callable[[str], Any],
                                                                      tmp_path: Path, kind: str) -> None:
    """Operator metadata v2 names the state schema files by absolute path: the copy writes every
    `_metadata/v2/<batch>` with the new place's paths (and a new sidecar), Spark's bytes otherwise
    kept; nothing else the new checkpoint holds names the old one. The new place inspects as the
    old one did, restarts there exactly once (the restart's own metadata names the new place: Spark
    carries the paths it read on), and the old place is byte for byte and mtime for mtime as it was."""
    p = tws(kind)
    before = old_place(p)
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    r = cli("copy", str(p.checkpoint), str(dest), "--sink", str(p.output), "--sink-dest", str(sink_dest), "--json")
    assert r.code == 0, r
    v2 = {f"{V2}/{b}" for b in schema_paths(p.checkpoint)}
    rewrites = {rw["path"]: rw["paths"] for rw in r.json()["plan"]["after"]["rewrites"] if rw["root"] == "checkpoint"}
    assert set(rewrites) == v2 and all(rewrites.values()), rewrites
    doc = copied(cli, p, dest, sink_dest)
    old, new = doc["after"]["old"], doc["after"]["new"]
    assert new["verdict"] == old["verdict"] == "aligned" and new["query_id"] == old["query_id"], doc["after"]
    names_only(dest)
    for rel in v2:  # only the paths changed
        assert (dest / rel).read_bytes() == (p.checkpoint / rel).read_bytes().replace(
            f"file:{p.checkpoint}/".encode(), f"file:{dest}/".encode()), rel
    old_bytes = str(p.checkpoint).encode()
    named = [f for f in dest.rglob("*") if f.is_file() and "_streamctl" not in f.parts and old_bytes in f.read_bytes()]
    assert named == [], named
    code, q, codes = inspect(cli, at(p, dest, sink_dest))
    assert code == 0 and q["verdict"] == "aligned" and not codes, q["findings"]
    assert (q["planned"], q["committed"], q["state_epoch"]) == (old["planned"], old["committed"], old["state_epoch"])
    assert q["sink"]["epoch"] == old["sink_epoch"], q["sink"]
    assert old_place(p) == before, "the copy changed the old place"

    restart_delivers(at(p, dest, sink_dest))
    assert str(FILES) in schema_paths(dest), "the restart wrote no operator metadata"
    names_only(dest)
    assert old_place(p) == before, "the restart at the new place read or wrote the old place"


def test_copy_move_new_query_id_crash_resume_undo(cli: Any, tws: Callable[[str], Any], tmp_path: Path) -> None:
    """`--move --new-query-id` killed (the journal's crash hook, a real process) once the first
    metadata rewrite has begun: `--resume` writes it, verifies and retires the old place; `--undo`
    takes the copy out and brings the old place back byte for byte; copied again, the query
    restarts at the new place exactly once under the new id."""
    p = tws("tws")
    before = [tree(p.checkpoint), tree(p.output)]
    dest, sink_dest = tmp_path / "new" / "checkpoint", tmp_path / "new" / "output"
    args = ["copy", str(p.checkpoint), str(dest), "--sink", str(p.output), "--sink-dest", str(sink_dest), "--move",
            "--new-query-id"]
    steps = cli(*args, "--json").json()["plan"]["steps"]
    first = next(i for i, s in enumerate(steps) if s["action"] == "write" and s["path"].startswith(V2))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCTL_")}
    env.update(STREAMCTL_QUIET_PERIOD="0", NO_COLOR="1", STREAMCTL_TEST_CRASH_AFTER=str(1 + 2 * first + 1))
    r = subprocess.run([str(STREAMCTL), *args, "--execute"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 86, (r.stdout, r.stderr)
    assert [tree(p.checkpoint), tree(p.output)] == before and not (dest / "metadata").exists()
    backup = next((dest / "_streamctl" / "backups").iterdir())
    r = cli("copy", "--resume", str(backup), "--json")
    assert r.code == 0 and r.json()["verified"] is True and r.json()["resumed"] is True, r
    assert r.json()["after"]["old"]["retired"] == r.json()["plan"]["op_id"]
    names_only(dest)
    r = cli("copy", "--undo", str(backup), "--json")
    assert r.code == 0 and r.json()["verified"] is True, r
    assert [tree(p.checkpoint), tree(p.output)] == before
    assert [f for f in tree(dest) if not f.startswith("_streamctl/")] == [] and tree(sink_dest) == {}

    again = tmp_path / "again"
    doc = copied(cli, p, again / "checkpoint", again / "output", "--move", "--new-query-id")
    new_id = doc["after"]["new"]["query_id"]
    assert new_id != doc["after"]["old"]["query_id"] and doc["after"]["old"]["retired"], doc["after"]
    q = at(p, again / "checkpoint", again / "output")
    restart_delivers(q)
    names_only(q.checkpoint)
    assert json.loads((q.checkpoint / "metadata").read_text())["id"] == new_id


def test_copy_refuses_a_schema_path_outside_the_old_place(cli: Any, tws: Callable[[str], Any], tmp_path: Path) -> None:
    """A schema path outside the old checkpoint (a copy made by hand before: a restart there still
    reads the place it names) is refused by name, nothing written; a new place whose name merely
    begins like the old one's (`checkpoint2` beside `checkpoint`) is no such path."""
    p = tws("tws")
    r = cli("copy", str(p.checkpoint), str(p.base / f"{p.checkpoint.name}2"), "--json")
    assert r.code == 0 and r.json()["plan"]["after"]["rewrites"], r
    newest = max(schema_paths(p.checkpoint), key=int)
    meta = p.checkpoint / V2 / newest
    meta.write_text(meta.read_text().replace(f"file:{p.checkpoint}/", "file:/elsewhere/checkpoint/"))
    (p.checkpoint / V2 / f".{newest}.crc").unlink()
    r = cli("copy", str(p.checkpoint), str(tmp_path / "new"), "--json")
    assert r.code == 4 and "outside the old checkpoint (file:/elsewhere/checkpoint/state/0/_stateSchema/" in r.stdout, r
    assert not (tmp_path / "new").exists()


def test_copy_to_s3_and_home_restarts_exactly_once(cli: Any, tws: Callable[[str], Any], tmp_path: Path,
                                                   s3: Any) -> None:
    """Across stores the schema paths take the new store's spelling (`s3a://bucket/...` on the S3
    server, `file:/...` back home); the copy brought home restarts exactly once."""
    fs, port = s3
    p = tws("tws")
    ck_uri, out_uri = _s3f.s3_uri(port, "tws/checkpoint"), _s3f.s3_uri(port, "tws/output")
    copied(cli, p, ck_uri, out_uri)
    with fs.open_input_stream(f"chk/tws/checkpoint/{V2}/0") as fh:
        meta = json.loads(fh.read().decode().split("\n", 1)[1])
    paths = [x for st in meta["stateStoreInfo"] for x in st["stateSchemaFilePaths"]]
    assert paths and all(x.startswith("s3a://chk/tws/checkpoint/state/0/_stateSchema/") for x in paths), paths
    home = tmp_path / "home"
    r = cli("copy", ck_uri, str(home / "checkpoint"), "--sink", out_uri, "--sink-dest", str(home / "output"),
            "--execute", "--json")
    assert r.code == 0 and r.json()["verified"] is True, r
    names_only(home / "checkpoint")
    q = at(p, home / "checkpoint", home / "output")
    restart_delivers(q)
    names_only(q.checkpoint)

"""Iceberg tables as streaming sinks (docs/formats/sinks.md#iceberg), read from the table
metadata alone.

The tables are written by a real Iceberg writer, `pyiceberg` (a SQL catalog on SQLite, a local
warehouse), whose appends carry the snapshot summary properties Iceberg's Spark streaming sink
writes (`spark.sql.streaming.queryId`, `spark.sql.streaming.epochId`). Iceberg's Spark runtime is
not on PyPI for this machine's lines (tests/helpers/iceberg_runtime.py builds one for PySpark 3.5); the
restart outcomes these verdicts predict are Iceberg's own rule (the streaming commit skips an
epoch its query already committed along the current ancestry), the same rule as Delta's `txn`,
whose real restarts tests/test_spark_sinks.py proves. The checkpoints are synthetic
(tests/helpers/layouts.py)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

pyiceberg = pytest.importorskip("pyiceberg", reason="pyiceberg is in the test extra (./dev test installs it)")

ROWS = 5
QID = "11111111-2222-3333-4444-555555555555"  # the query id of tests/helpers/layouts.py's checkpoints


@pytest.fixture
def checkpoint(layouts: Any) -> Any:
    assert layouts.QID == QID
    return layouts.checkpoint


def _table(root: Path, epochs: int, qid: str = QID) -> tuple[Any, Path]:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    root.mkdir(parents=True, exist_ok=True)
    cat = SqlCatalog("t", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")
    cat.create_namespace("db")
    t = cat.create_table("db.orders", schema=pa.schema([("id", pa.int64())]))
    for e in range(epochs):
        t.append(pa.table({"id": [e * ROWS + i for i in range(ROWS)]}),
                 snapshot_properties={"spark.sql.streaming.queryId": qid, "spark.sql.streaming.epochId": str(e)})
    return t, root / "db" / "orders"


def _inspect(cli: Any, chk: Path, table: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    r = cli("inspect", "epochs", str(chk), "--sink", str(table), "--json", "--quiet-period", "0", *extra)
    assert "Traceback" not in r.stderr, r
    return r.code, r.json()["queries"][0]


def _codes(q: dict[str, Any]) -> list[str]:
    return sorted(f["code"] for f in q["findings"])


def test_aligned_table_is_detected_and_its_epochs_listed(cli, tmp_path, checkpoint):
    t, table = _table(tmp_path / "wh", 3)
    chk = checkpoint(tmp_path / "chk", 2, 2)
    code, q = _inspect(cli, chk, table)
    assert code == 0 and q["verdict"] == "aligned" and q["sink"] == {"kind": "iceberg", "uri": str(table), "epoch": 2}, q
    r = cli("inspect", "sink", str(table), "--app-id", QID, "--json")
    sink = r.json()["sink"]
    assert r.code == 0 and sink["kind"] == "iceberg" and sink["epoch_ids"] == [0, 1, 2], sink
    assert sink["table_version"] == t.metadata.current_snapshot_id
    assert [e["rows"] for e in sink["epochs"]] == [ROWS] * 3


def test_commit_lost_after_the_table_committed_is_in_flight(cli, tmp_path, checkpoint):
    """A crash between the table's commit of epoch 2 and `commits/2`: Spark replays batch 2 and
    the sink skips it (exactly once)."""
    _, table = _table(tmp_path / "wh", 3)
    chk = checkpoint(tmp_path / "chk", 2, 1)
    code, q = _inspect(cli, chk, table)
    assert code == 0 and q["verdict"] == "recoverable" and _codes(q) == ["IN_FLIGHT"], q


def _hadoop(table: Path) -> None:
    """The pyiceberg table as a Hadoop table: `vN.metadata.json` and `version-hint.text`."""
    meta_dir = table / "metadata"
    files = sorted(meta_dir.glob("*.metadata.json"))
    for i, f in enumerate(files):
        os.rename(f, meta_dir / f"v{i + 1}.metadata.json")
    (meta_dir / "version-hint.text").write_text(str(len(files)))


def _rows(table: Path) -> list[int]:
    """The rows a reader of the table's current metadata sees (pyiceberg reads the version hint's file)."""
    from pyiceberg.table import StaticTable

    hint = (table / "metadata" / "version-hint.text").read_text().strip()
    t = StaticTable.from_metadata(str(table / "metadata" / f"v{hint}.metadata.json"))
    return sorted(t.scan().to_arrow()["id"].to_pylist())


def test_offsets_and_commit_lost_with_the_table_ahead(cli, tmp_path, checkpoint, tree_snapshot):
    """`offsets/2` and `commits/2` lost, the table holds epoch 2: Spark plans batch 2 anew and the
    sink skips it as committed (its rows are lost): SINK_AHEAD. A catalog table cannot be rolled
    back by a file: align refuses and names Iceberg's procedure. A Hadoop table is rolled back as
    Iceberg's `rollback_to_snapshot` does (a new metadata version whose current snapshot is epoch
    1's): exactly-once, the restart writes epoch 2 again; undo makes the previous version current
    (docs/model.md#iceberg-table-rollback)."""
    _, table = _table(tmp_path / "wh", 3)
    chk = checkpoint(tmp_path / "chk", 1, 1)
    code, q = _inspect(cli, chk, table)
    assert code == 1 and "SINK_AHEAD" in _codes(q), q
    f = {x["code"]: x for x in q["findings"]}["SINK_AHEAD"]
    assert f["skipped"] == [2], f
    r = cli("align", str(chk), "--sink", str(table), "--json", "--quiet-period", "0")
    assert r.code == 4 and "rollback_to_snapshot" in r.stderr, r

    _hadoop(table)
    new = f"v{len(list((table / 'metadata').glob('v*.metadata.json'))) + 1}.metadata.json"
    before = tree_snapshot(tmp_path)
    r = cli("align", str(chk), "--sink", str(table), "--json", "--quiet-period", "0")
    assert r.code == 0, r.stdout + r.stderr
    plan = r.json()["plan"]
    assert plan["classification"] == "exactly-once" and plan["target"] == 1 and plan["after"]["sink_epoch"] == 1, plan
    assert [(s["root"], s["path"]) for s in plan["steps"]] == [("sink", f"metadata/{new}"),
                                                              ("sink", "metadata/version-hint.text")], plan["steps"]
    assert tree_snapshot(tmp_path) == before, "a plan changed files"
    done = cli("align", str(chk), "--sink", str(table), "--json", "--quiet-period", "0", "--execute")
    assert done.code == 0 and done.json()["verified"] is True, done.stdout + done.stderr
    assert _rows(table) == list(range(2 * ROWS))  # the oracle: an Iceberg reader sees epochs 0 and 1 only
    code, q = _inspect(cli, chk, table)
    assert code == 0 and q["sink"]["epoch"] == 1 and "SINK_ROLLED_BACK" in _codes(q), q
    undone = cli("align", "--undo", done.json()["backup"], "--json")
    assert undone.code == 0, undone.stdout + undone.stderr
    assert _rows(table) == list(range(3 * ROWS)) and not (table / "metadata" / new).exists()


def test_table_rollback_refuses_over_another_writer(cli, tmp_path, checkpoint):
    """Another writer appended after the query's epoch 2: rolling the table back to epoch 1 would
    drop its rows, so align refuses and names its snapshot."""
    import pyarrow as pa

    t, table = _table(tmp_path / "wh", 3)
    t.append(pa.table({"id": [1000]}))  # a batch job's append
    other = t.metadata.current_snapshot_id
    _hadoop(table)
    chk = checkpoint(tmp_path / "chk", 1, 1)
    r = cli("align", str(chk), "--sink", str(table), "--json", "--quiet-period", "0")
    assert r.code == 4 and "another writer" in r.stderr and str(other) in r.stderr, r.stderr


def test_table_rolled_back_makes_the_checkpoint_replay(cli, tmp_path, checkpoint):
    """The table rolled back to epoch 1's snapshot, the checkpoint at 2: SINK_BEHIND and the
    epochs that left the ancestry; align rolls the checkpoint back to 1 (the replay of batch 2
    writes it again: exactly once)."""
    t, table = _table(tmp_path / "wh", 3)
    epoch1 = [s for s in t.metadata.snapshots if s.summary["spark.sql.streaming.epochId"] == "1"][0]
    t.manage_snapshots().rollback_to_snapshot(epoch1.snapshot_id).commit()
    chk = checkpoint(tmp_path / "chk", 2, 2)
    code, q = _inspect(cli, chk, table)
    assert code == 1 and q["sink"]["epoch"] == 1 and {"SINK_BEHIND", "SINK_ROLLED_BACK"} <= set(_codes(q)), q
    r = cli("align", str(chk), "--sink", str(table), "--json", "--quiet-period", "0")
    assert r.code == 0, r
    plan = r.json()["plan"]
    assert plan["strategy"] == "rollback" and plan["target"] == 1 and plan["classification"] == "exactly-once", plan
    assert all(s["root"] == "checkpoint" for s in plan["steps"]), plan["steps"]  # the table is never touched


def test_other_query_and_expired_history(cli, tmp_path, checkpoint):
    """A checkpoint whose query id the table never saw: nothing of it is in the table (behind when
    it committed epochs). A table whose ancestry ends at an expired snapshot before any epoch of
    the query: its epoch is unknown, never aligned."""
    _, table = _table(tmp_path / "wh", 3, qid="99999999-2222-3333-4444-555555555555")
    chk = checkpoint(tmp_path / "chk", 2, 2)
    code, q = _inspect(cli, chk, table)
    assert code == 1 and q["sink"]["epoch"] is None and "SINK_BEHIND" in _codes(q), q

    _, table2 = _table(tmp_path / "wh2", 3)
    meta_dir = table2 / "metadata"
    newest = sorted(meta_dir.glob("*.metadata.json"))[-1]
    meta = json.loads(newest.read_text())
    meta["snapshots"] = [s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"]]
    meta["snapshots"][0]["summary"] = {"operation": "replace"}  # the query's epochs are all in expired snapshots
    newest.write_text(json.dumps(meta))
    code, q = _inspect(cli, chk, table2)
    assert code == 3 and q["verdict"] == "unreadable", q
    assert "expired" in {f["code"]: f for f in q["findings"]}["UNREADABLE"]["message"]


def test_hadoop_table_version_hint_and_two_claimants(cli, tmp_path, checkpoint):
    """A Hadoop table (`vN.metadata.json` and `version-hint.text`) names its current file; two
    catalog files claiming the newest number cannot be told apart: unreadable, naming them."""
    _, table = _table(tmp_path / "wh", 2)
    meta_dir = table / "metadata"
    files = sorted(meta_dir.glob("*.metadata.json"))
    _hadoop(table)
    chk = checkpoint(tmp_path / "chk", 1, 1)
    code, q = _inspect(cli, chk, table)
    assert code == 0 and q["sink"]["epoch"] == 1, q
    (meta_dir / "version-hint.text").unlink()
    shutil.copy(meta_dir / f"v{len(files)}.metadata.json", meta_dir / f"{len(files):05d}-a.metadata.json")
    shutil.copy(meta_dir / f"v{len(files)}.metadata.json", meta_dir / f"{len(files):05d}-b.metadata.json")
    code, q = _inspect(cli, chk, table)
    assert code == 3 and "claim version" in q["findings"][0]["message"], q


def test_drop_sink_leaves_the_table_and_records_its_snapshot(cli, tmp_path, checkpoint):
    """drop-sink retires the checkpoint; the table is never touched; the hand-off records the
    table's snapshot id and the query's last epoch; --purge-data is refused for a table."""
    import hashlib

    t, table = _table(tmp_path / "wh", 3)
    chk = checkpoint(tmp_path / "chk", 2, 2)
    for d in ("offsets", "commits"):
        for f in (chk / d).iterdir():
            os.utime(f, (1, 1))
    before = {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in table.rglob("*") if f.is_file()}
    r = cli("drop-sink", str(table), "--checkpoint", str(chk), "--assume-stopped", "--purge-data", "--json")
    assert r.code == 4 and "not supported for Iceberg" in r.stderr, r
    r = cli("drop-sink", str(table), "--checkpoint", str(chk), "--assume-stopped", "--execute", "--json")
    assert r.code == 0, r
    archive = r.json()["archive"] if "archive" in r.json() else r.json()["backup"]
    handoff = json.loads((Path(archive) / "handoff.json").read_text())
    assert handoff["sink_epoch"] == 2 and handoff["sink_snapshot_id"] == t.metadata.current_snapshot_id, handoff
    assert {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in table.rglob("*") if f.is_file()} == before


def _catalog_cli(warehouse: Path) -> Any:
    """streamctl as its own process with catalog `t` (SQL on SQLite under `warehouse`) configured
    as pyiceberg is, by PYICEBERG_CATALOG__* variables: pyiceberg reads them when it is imported,
    so an in-process run would miss them."""
    import subprocess
    import sys

    env = dict(os.environ, PYICEBERG_CATALOG__T__URI=f"sqlite:///{warehouse}/catalog.db", PYICEBERG_CATALOG__T__TYPE="sql",
               PYICEBERG_CATALOG__T__WAREHOUSE=f"file://{warehouse}", STREAMCTL_QUIET_PERIOD="0", NO_COLOR="1")

    def run(*args: str) -> Any:
        return subprocess.run([str(Path(sys.executable).parent / "streamctl"), *args], env=env, capture_output=True,
                              text=True, timeout=120)

    return run


def test_a_table_named_through_its_catalog(cli, tmp_path, checkpoint):
    """`--sink catalog:<name>/<namespace>.<table>`: pyiceberg loads the table from its catalog
    (here SQL on SQLite, configured as pyiceberg is, by PYICEBERG_CATALOG__* variables: read when
    pyiceberg is imported, so streamctl runs as its own process) and the metadata file the catalog
    names is the current one, even where the folder alone is ambiguous (two files claiming the
    newest number). A table the catalog does not know is exit 3 in one line that shows none of
    the catalog's settings."""
    t, table = _table(tmp_path / "wh", 3)
    run = _catalog_cli(tmp_path / "wh")

    meta_dir = table / "metadata"
    current = Path(t.metadata_location.replace("file://", ""))
    number = current.name.split("-", 1)[0]
    shutil.copy(current, meta_dir / f"{number}-decoy.metadata.json")  # a second claimant: the folder alone is ambiguous
    chk = checkpoint(tmp_path / "chk", 2, 2)
    code, q = _inspect(cli, chk, table)
    assert code == 3 and "claim version" in q["findings"][0]["message"], q
    r = run("inspect", "epochs", str(chk), "--sink", "catalog:t/db.orders", "--json")
    q = json.loads(r.stdout)["queries"][0]
    assert r.returncode == 0 and q["sink"]["kind"] == "iceberg" and q["sink"]["epoch"] == 2, r.stdout + r.stderr
    s = run("inspect", "sink", "catalog:t/db.orders", "--app-id", QID, "--json")
    assert s.returncode == 0 and json.loads(s.stdout)["sink"]["metadata"].endswith(current.name), s.stdout + s.stderr

    r = run("inspect", "epochs", str(chk), "--sink", "catalog:t/db.nothing")
    assert r.returncode == 3 and "db.nothing" in r.stderr and "sqlite" not in r.stderr + r.stdout, r.stdout + r.stderr
    bad = run("inspect", "epochs", str(chk), "--sink", "catalog:t")
    assert bad.returncode == 2 and "catalog:<catalog name>" in bad.stderr, bad.stderr


def test_a_catalog_table_is_rolled_back_through_its_catalog(tmp_path, checkpoint):
    """The table-ahead incident on a table named through its catalog: align rolls it back with
    Iceberg's rollback_to_snapshot through the catalog (pyiceberg), verified; a reader of the
    catalog then sees epochs 0 and 1 only; undo sets epoch 2's snapshot current again. A table
    that moved on after the rollback (another commit) makes undo refuse."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    t, table = _table(tmp_path / "wh", 3)
    epoch2 = t.metadata.current_snapshot_id
    run = _catalog_cli(tmp_path / "wh")

    def current() -> tuple[int, list[int]]:
        cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'wh'}/catalog.db", warehouse=f"file://{tmp_path / 'wh'}")
        tb = cat.load_table("db.orders")
        return tb.metadata.current_snapshot_id, sorted(tb.scan().to_arrow()["id"].to_pylist())

    chk = checkpoint(tmp_path / "chk", 1, 1)  # offsets/2 and commits/2 lost
    r = run("align", str(chk), "--sink", "catalog:t/db.orders", "--json")
    plan = json.loads(r.stdout)["plan"]
    assert r.returncode == 0 and plan["classification"] == "exactly-once", r.stdout + r.stderr
    assert [s["action"] for s in plan["steps"]] == ["catalog_rollback"], plan["steps"]
    assert current() == (epoch2, list(range(3 * ROWS))), "a plan changed the table"
    done = run("align", str(chk), "--sink", "catalog:t/db.orders", "--json", "--execute")
    assert done.returncode == 0 and json.loads(done.stdout)["verified"] is True, done.stdout + done.stderr
    snap, rows = current()
    assert snap != epoch2 and rows == list(range(2 * ROWS)), (snap, rows)  # the oracle: an Iceberg reader
    backup = json.loads(done.stdout)["backup"]
    undone = run("align", "--undo", backup, "--json")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert current() == (epoch2, list(range(3 * ROWS)))

    again = run("align", str(chk), "--sink", "catalog:t/db.orders", "--json", "--execute")
    assert again.returncode == 0, again.stdout + again.stderr
    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'wh'}/catalog.db", warehouse=f"file://{tmp_path / 'wh'}")
    cat.load_table("db.orders").append(pa.table({"id": [1000]}))  # the restarted query or anyone commits
    refused = run("align", "--undo", json.loads(again.stdout)["backup"], "--json")
    assert refused.returncode == 4 and "moved on" in refused.stderr, refused.stdout + refused.stderr

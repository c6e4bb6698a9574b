"""Iceberg sinks with the real Iceberg writer and real restarts: PySpark 3.5 with
iceberg-spark-runtime 1.10 (tests/helpers/iceberg_runtime.py builds it from PyPI; the shared session of
the 3.5 leg carries it), a Hadoop catalog in a temp folder, a file source, one input file per
epoch. For each incident the checkpoint (or the table) is damaged the way it
happens, `inspect epochs` gives its verdict, and the real restart of the same state is the
oracle: the ids in the table counted after two more input files."""
from __future__ import annotations

import json
from collections import Counter
from itertools import count
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.spark35]

ROWS = 5
_catalogs = count()


class Run:
    """A streaming query from tmp/in into an Iceberg table of its own catalog, checkpoint tmp/ck."""

    def __init__(self, spark: Any, tmp: Path) -> None:
        self.spark, self.tmp = spark, tmp
        self.inp, self.ck, self.wh = tmp / "in", tmp / "ck", tmp / "wh"
        self.inp.mkdir(parents=True)
        self.cat = f"ice{next(_catalogs)}"
        spark.conf.set(f"spark.sql.catalog.{self.cat}", "org.apache.iceberg.spark.SparkCatalog")
        spark.conf.set(f"spark.sql.catalog.{self.cat}.type", "hadoop")
        spark.conf.set(f"spark.sql.catalog.{self.cat}.warehouse", str(self.wh))
        spark.sql(f"CREATE TABLE {self.cat}.db.orders (id BIGINT) USING iceberg")
        self.table_dir = self.wh / "db" / "orders"
        self.files = 0

    def add(self, n: int) -> None:
        for i in range(self.files, self.files + n):
            (self.inp / f"p{i:03d}.json").write_text("".join(json.dumps({"id": i * ROWS + j}) + "\n" for j in range(ROWS)))
        self.files += n

    def run(self, ck: Path | None = None) -> None:
        (self.spark.readStream.schema("id BIGINT").option("maxFilesPerTrigger", 1).json(str(self.inp)).writeStream
         .format("iceberg").outputMode("append").option("checkpointLocation", str(ck or self.ck))
         .trigger(availableNow=True).toTable(f"{self.cat}.db.orders").awaitTermination())

    def ids(self) -> Counter[int]:
        self.spark.sql(f"REFRESH TABLE {self.cat}.db.orders")
        return Counter(int(r["id"]) for r in self.spark.table(f"{self.cat}.db.orders").collect())

    def expected(self) -> Counter[int]:
        return Counter(range(self.files * ROWS))


def _drop(folder: Path, batch: int) -> None:
    for name in (str(batch), f".{batch}.crc"):
        (folder / name).unlink(missing_ok=True)


def _inspect(cli: Any, r: Run, ck: Path | None = None) -> tuple[int, dict[str, Any]]:
    res = cli("inspect", "epochs", str(ck or r.ck), "--sink", str(r.table_dir), "--json", "--quiet-period", "0")
    assert "Traceback" not in res.stderr, res
    return res.code, res.json()["queries"][0]


def _codes(q: dict[str, Any]) -> set[str]:
    return {f["code"] for f in q["findings"]}


@pytest.fixture
def r(spark: Any, tmp_path: Path) -> Run:
    run = Run(spark, tmp_path)
    run.add(3)
    run.run()  # epochs 0..2
    return run


def test_commit_lost_after_the_table_committed_restarts_exactly_once(cli, r):
    _drop(r.ck / "commits", 2)
    code, q = _inspect(cli, r)
    assert code == 0 and q["verdict"] == "recoverable" and q["sink"]["epoch"] == 2, q
    r.add(2)
    r.run()
    assert r.ids() == r.expected()  # the oracle: exactly once


def test_offsets_and_commit_lost_with_the_table_ahead_loses_ids(cli, r):
    _drop(r.ck / "offsets", 2)
    _drop(r.ck / "commits", 2)
    code, q = _inspect(cli, r)
    assert code == 1 and "SINK_AHEAD" in _codes(q), q
    a = cli("align", str(r.ck), "--sink", str(r.table_dir), "--json", "--quiet-period", "0")
    plan = a.json()["plan"]  # the repair (the next test carries it out): the table goes back to epoch 1
    assert a.code == 0 and plan["classification"] == "exactly-once" and plan["after"]["sink_epoch"] == 1, plan
    r.add(2)  # restarted as is: the table skips the re-planned batch 2
    r.run()
    got = r.ids()
    assert got != r.expected() and set(r.expected()) - set(got), got  # the oracle: ids lost, as predicted


def test_offsets_and_commit_lost_then_align_rolls_the_table_back_and_the_restart_is_exactly_once(cli, r):
    """The same damage, repaired: the Hadoop table is rolled back to epoch 1's snapshot as
    Iceberg's rollback_to_snapshot does (a new metadata version), so the real writer commits the
    re-planned batch 2 instead of skipping it (docs/model.md#iceberg-table-rollback)."""
    _drop(r.ck / "offsets", 2)
    _drop(r.ck / "commits", 2)
    a = cli("align", str(r.ck), "--sink", str(r.table_dir), "--json", "--quiet-period", "0", "--execute")
    assert a.code == 0 and a.json()["verified"] is True, a.stdout + a.stderr
    plan = a.json()["plan"]
    assert plan["classification"] == "exactly-once" and {s["root"] for s in plan["steps"]} == {"sink"}, plan
    r.spark.sql(f"REFRESH TABLE {r.cat}.db.orders")  # a restart is a new driver: no cached table metadata
    r.add(2)
    r.run()
    assert r.ids() == r.expected()  # the oracle: exactly once


def test_table_rolled_back_then_align_replays_exactly_once(cli, r, spark):
    table = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"{r.cat}.db.orders")
    snaps = sorted(json.loads((r.table_dir / "metadata" / f"v{(r.table_dir / 'metadata/version-hint.text').read_text().strip()}.metadata.json").read_text())["snapshots"],
                   key=lambda s: s["sequence-number"])
    epoch1 = [s for s in snaps if s["summary"].get("spark.sql.streaming.epochId") == "1"][0]
    table.manageSnapshots().rollbackTo(epoch1["snapshot-id"]).commit()
    code, q = _inspect(cli, r)
    assert code == 1 and q["sink"]["epoch"] == 1 and {"SINK_BEHIND", "SINK_ROLLED_BACK"} <= _codes(q), q

    done = cli("align", str(r.ck), "--sink", str(r.table_dir), "--execute", "--json", "--quiet-period", "0")
    assert done.code == 0 and done.json()["verified"], done
    assert done.json()["plan"]["target"] == 1 and done.json()["plan"]["classification"] == "exactly-once"
    r.add(2)
    r.run()
    assert r.ids() == r.expected()  # exactly once after align


def test_a_fresh_checkpoint_on_the_same_table_is_a_preflight_finding(cli, r):
    new = r.tmp / "ck2"
    code, q = _inspect(cli, r, new)
    assert code == 1 and _codes(q) == {"SINK_NEW_QUERY"}, q
    r.run(new)
    got = r.ids()
    assert any(n > 1 for n in got.values()), got  # the oracle: the new query delivered every row again


def _java_table(spark: Any, r: Run) -> Any:
    return spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, f"{r.cat}.db.orders")


def test_compaction_and_a_second_writer_between_epochs(cli, r, spark):
    """Other writers' snapshots after the query's epoch 2 (Iceberg's own compaction, a batch
    append): the sink epoch is still 2 (the writer walks past them), aligned; the restart commits
    epochs 3 and 4 once, and the batch rows stay. A crash that lost `offsets/2` and `commits/2`
    then cannot be repaired by rolling the table back over those writers: align refuses, naming
    them."""
    r.spark.createDataFrame([(10_000,)], "id BIGINT").writeTo(f"{r.cat}.db.orders").append()
    actions = spark._jvm.org.apache.iceberg.spark.actions.SparkActions.get()
    result = actions.rewriteDataFiles(_java_table(spark, r)).option("min-input-files", "2").execute()
    assert result.rewrittenDataFilesCount() > 1, "the compaction rewrote nothing"
    code, q = _inspect(cli, r)
    assert code == 0 and q["sink"]["epoch"] == 2 and q["verdict"] == "aligned", q
    sink = cli("inspect", "sink", str(r.table_dir), "--app-id", q["query_id"], "--json")
    assert sink.code == 0 and sink.json()["sink"]["other_snapshots_after"] == 2, sink.stdout  # the append, the replace

    _drop(r.ck / "offsets", 2)
    _drop(r.ck / "commits", 2)
    a = cli("align", str(r.ck), "--sink", str(r.table_dir), "--json", "--quiet-period", "0")
    assert a.code == 4 and "another writer" in a.stderr, a.stderr
    r.spark.sql(f"REFRESH TABLE {r.cat}.db.orders")


def test_compaction_then_restart_is_exactly_once(cli, r, spark):
    actions = spark._jvm.org.apache.iceberg.spark.actions.SparkActions.get()
    actions.rewriteDataFiles(_java_table(spark, r)).option("min-input-files", "2").execute()
    code, q = _inspect(cli, r)
    assert code == 0 and q["sink"]["epoch"] == 2, q
    r.spark.sql(f"REFRESH TABLE {r.cat}.db.orders")
    r.add(2)
    r.run()
    assert r.ids() == r.expected()  # the oracle: epochs 3, 4 once, nothing of 0..2 again


def test_expired_history_is_unknown_and_a_branch_is_off_the_ancestry(cli, r, spark):
    """Snapshot expiry that keeps only another writer's newest snapshot hides every epoch of the
    query: unknown (exit 3), never aligned. A branch holding the query's epochs is not the table's
    current state: the epoch on `main` counts."""
    import time

    table = _java_table(spark, r)
    snaps = json.loads((r.table_dir / "metadata" / f"v{(r.table_dir / 'metadata/version-hint.text').read_text().strip()}"
                        ".metadata.json").read_text())["snapshots"]
    epoch = {s["summary"].get("spark.sql.streaming.epochId"): s["snapshot-id"] for s in snaps}
    table.manageSnapshots().createBranch("audit", epoch["2"]).commit()
    table.manageSnapshots().rollbackTo(epoch["1"]).commit()  # main at epoch 1; epoch 2 only on the branch
    code, q = _inspect(cli, r)
    assert code == 1 and q["sink"]["epoch"] == 1 and "SINK_ROLLED_BACK" in _codes(q), q
    assert json.loads((r.table_dir / "metadata" / f"v{(r.table_dir / 'metadata/version-hint.text').read_text().strip()}"
                       ".metadata.json").read_text())["refs"]["audit"]["snapshot-id"] == epoch["2"]

    r.spark.sql(f"REFRESH TABLE {r.cat}.db.orders")
    r.spark.createDataFrame([(10_000,)], "id BIGINT").writeTo(f"{r.cat}.db.orders").append()
    table = _java_table(spark, r)
    table.refresh()
    table.manageSnapshots().removeBranch("audit").commit()
    table.expireSnapshots().expireOlderThan(int(time.time() * 1000) + 1000).retainLast(1).commit()
    code, q = _inspect(cli, r)
    assert code == 3 and q["verdict"] == "unreadable" and "expired" in str(q["findings"]), q

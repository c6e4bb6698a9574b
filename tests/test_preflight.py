"""`streamctl preflight`: before a deploy, does a new version of a query fit its
checkpoint? One real PySpark query (tests/helpers/align_pipeline.py, kind ``dedup_file``) writes the
checkpoint; three new versions of it (the same query, one with a stateful operator added, one
with it removed) are judged by preflight and then by the oracle, a real restart of each version
on a copy of the checkpoint (docs/model.md#preflight)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from helpers.trees import copy_tree

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def ap(align_pipeline: Any) -> Any:
    """tests/helpers/align_pipeline.py (conftest's session fixture)."""
    return align_pipeline

VERSIONS = '''
def _src(spark):
    return (spark.readStream.schema("id BIGINT, key STRING").option("maxFilesPerTrigger", 1)
            .json({input!r}))

def same(spark):
    return _src(spark).dropDuplicates(["id"])

def added(spark):  # a stateful operator added in front of the old one: ids shift
    return _src(spark).dropDuplicates(["id"]).groupBy("key").count()

def removed(spark):
    return _src(spark)

def rekeyed(spark):  # the same operator, keyed by one more column
    return _src(spark).dropDuplicates(["id", "key"])

def retyped(spark):  # the same key column, as another type
    from pyspark.sql import functions as F
    return _src(spark).withColumn("id", F.col("id").cast("string")).dropDuplicates(["id"])

def renamed(spark):  # the key renamed, same type: Spark compares types, not names
    return _src(spark).withColumnRenamed("id", "order_id").dropDuplicates(["order_id"])
'''


def _restart(spark: Any, df: Any, ckpt: Path, complete: bool) -> None:
    q = (df.writeStream.format("noop").outputMode("complete" if complete else "append")
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination()


def test_preflight_predicts_the_restart_of_a_changed_query(ap, spark, cli, tmp_path, monkeypatch):
    p = ap.build(tmp_path, "dedup_file", spark, 2)
    p.add_input(p.files, 1)  # new input: the restart runs a batch
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "orders_v2.py").write_text(textwrap.dedent(VERSIONS.format(input=str(p.input))))
    monkeypatch.syspath_prepend(str(mods))
    import orders_v2  # noqa: E402  (the module the deploy would ship)

    expected = {"same": None, "added": "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
                "removed": "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
                "rekeyed": "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "retyped": "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
                "renamed": None}
    codes = {"STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA": "STATEFUL_OPERATORS_CHANGED",
             "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE": "STATE_KEY_SCHEMA_CHANGED"}
    for version, error in expected.items():
        r = cli("preflight", str(p.checkpoint), "--query", f"orders_v2:{version}", "--json")
        assert "Traceback" not in r.stderr, r.stderr
        doc = r.json()
        assert doc["kind"] == "Preflight" and doc["checkpoint_operators"] == [{"id": 0, "name": "dedupe"}], doc
        if error is None:
            assert r.code == 0 and doc["findings"] == [] and doc["verdict"] == "aligned", doc
        else:
            (f,) = doc["findings"]
            assert r.code == 1 and f["code"] == codes[error] and f["restart_error"] == error, doc
        # the oracle: the real restart of that version on a copy of the checkpoint
        copy = tmp_path / f"copy-{version}"
        copy_tree(p.checkpoint, copy)
        df = getattr(orders_v2, version)(spark)
        if error is None:
            _restart(spark, df, copy, complete=False)
            assert ap.newest(copy / "commits") == 2, version
        else:
            with pytest.raises(Exception, match=error):
                _restart(spark, df, copy, complete=version == "added")

    r = cli("preflight", str(p.checkpoint), "--query", "orders_v2:missing")
    assert r.code == 2 and "orders_v2:missing" in r.stderr and "Traceback" not in r.stderr, r.stderr

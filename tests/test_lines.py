"""`--target-spark` (docs/model.md#spark-lines) on a copy of the PySpark 3.5 fixture whose newest
commit is made the `v2` a format-2 checkpoint writes (the real restarts on both lines are in
tests/test_spark_upgrade.py): flag, environment, config file and `installed` name the line;
a bad value is a one-line usage error (exit 2) that changes nothing. And the stream-stream joins
PySpark 3.5 wrote (tests/fixtures/spark-3.5/join_*_hdfs): 4.3 refuses the one whose state schema
stores the join key column as not nullable, and the oracle (a restart of a copy on PySpark 4.x) agrees."""
from __future__ import annotations

import json
import shutil
from importlib import metadata
from pathlib import Path

import pytest

from helpers.paths import SPARK35, copy_spark35
from streamctl.formats.errors import UsageError
from streamctl.inspectors.lines import parse_line

FIXTURE = SPARK35 / "agg_hdfs" / "checkpoint"


def _format2(tmp_path: Path) -> Path:
    ck = tmp_path / "ck"
    copy_spark35(FIXTURE, ck)
    (ck / "commits" / "3").write_text('v2\n{"nextBatchWatermarkMs":0}')
    (ck / "commits" / ".3.crc").unlink()
    return ck


def _codes(r) -> dict:
    return {f["code"]: f for f in r.json()["queries"][0]["findings"]}


def test_parse_line_takes_versions_and_installed():
    assert parse_line("3.5") == (3, 5) and parse_line("4.3.0") == (4, 3) and parse_line(" 4.2.0.dev1 ") == (4, 2)
    installed = metadata.version("pyspark")
    assert parse_line("installed") == tuple(int(x) for x in installed.split(".")[:2])
    for bad in ("3", "3.x", "latest", "4.3.0; rm -rf /", ""):
        with pytest.raises(UsageError, match="--target-spark"):
            parse_line(bad)


def test_target_line_refuses_a_newer_log_version_and_reads_its_own(cli, tmp_path):
    ck = _format2(tmp_path)
    r = cli("inspect", "epochs", str(ck), "--target-spark", "3.5", "--json")
    f = _codes(r)
    assert r.code == 1 and f["SPARK_LINE_REFUSES"]["files"] == [str(ck / "commits" / "3")], f
    assert f["SPARK_LINE_REFUSES"]["needs"] == "4.0" and f["SPARK_LINE_REFUSES"]["logs"] == {"commits": 2, "offsets": 1}
    r = cli("inspect", "epochs", str(ck), "--target-spark", "4.3", "--json")
    assert r.code == 0 and "SPARK_LINE_CHECKED" in _codes(r), r.stdout
    r = cli("inspect", "epochs", str(ck), "--json")  # not asked: not checked
    assert r.code == 0 and not {"SPARK_LINE_CHECKED", "SPARK_LINE_REFUSES"} & set(_codes(r)), r.stdout

    d = cli("diagnose", str(ck), "--target-spark", "3.5", "--json")
    assert d.code == 1 and "SPARK_LINE_REFUSES" in {x["code"] for x in d.json()["findings"]}, d.stdout


def test_target_line_from_environment_and_config(cli, tmp_path, monkeypatch):
    ck = _format2(tmp_path)
    monkeypatch.setenv("STREAMCTL_TARGET_SPARK", "3.5")
    assert cli("inspect", "epochs", str(ck)).code == 1
    assert cli("inspect", "epochs", str(ck), "--target-spark", "4.3").code == 0  # the flag wins
    monkeypatch.delenv("STREAMCTL_TARGET_SPARK")
    config = tmp_path / "config.toml"
    config.write_text('[defaults]\ntarget_spark = "3.5"\n')
    r = cli("--config", str(config), "inspect", "epochs", str(ck), "--json")
    assert r.code == 1 and "SPARK_LINE_REFUSES" in _codes(r), r.stdout
    # a pipeline names its own line, over the defaults; the flag still wins
    config.write_text(f'[defaults]\ntarget_spark = "3.5"\n[pipelines.orders]\ncheckpoint = "{ck}"\ntarget_spark = "4.3"\n')
    r = cli("--config", str(config), "inspect", "epochs", "orders", "--json")
    assert r.code == 0 and "SPARK_LINE_CHECKED" in _codes(r), r.stdout
    d = cli("--config", str(config), "diagnose", "orders", "--json")
    assert d.code == 0 and "SPARK_LINE_CHECKED" in {x["code"] for x in d.json()["findings"]}, d.stdout
    r = cli("--config", str(config), "inspect", "epochs", "orders", "--target-spark", "3.5")
    assert r.code == 1, r.stdout
    config.write_text(f'[pipelines.orders]\ncheckpoint = "{ck}"\ntarget_spark = "soon"\n')
    r = cli("--config", str(config), "inspect", "epochs", "orders")
    assert r.code == 2 and "pipeline orders's target_spark" in r.stderr, r.stderr


def test_a_bad_target_is_one_line_and_exit_2(cli, tmp_path, tree_snapshot):
    ck = _format2(tmp_path)
    before = tree_snapshot(tmp_path)
    r = cli("inspect", "epochs", str(ck), "--target-spark", "three")
    assert r.code == 2 and r.stderr.count("\n") == 1 and "--target-spark" in r.stderr and "Traceback" not in r.stderr
    assert tree_snapshot(tmp_path) == before


def test_state_keys_of_an_explain_string_and_a_schema_file():
    """The two sides preflight compares (docs/model.md#preflight): the key types of a plan's
    deduplication and aggregation operators (the explain text PySpark 4.3 prints, types by exprId
    from the analyzed plan), and the key schema of a state schema file PySpark 3.5 wrote."""
    from streamctl.formats.state import parse_state_schema, schema_field_types
    from streamctl.pipeline.preflight import keys_in_plan

    text = ("+- StateStoreSave [key#1], state info [ checkpoint = <unknown>, runId = r, opId = 0, ver = 0, "
            "numPartitions = 200] stateStoreCkptIds = None, Append, 2\n"
            "   +- StateStoreRestore [key#1], state info [ checkpoint = <unknown>, runId = r, opId = 0, ver = 0]\n"
            "      +- StreamingDeduplicate [id#0L, window#7-T10000ms], state info [ checkpoint = <unknown>, runId = r, "
            "opId = 1, ver = 0, numPartitions = 200] stateStoreCkptIds = None\n"
            "         +- StreamingDeduplicate [upper(key#1)], state info [ checkpoint = <unknown>, runId = r, opId = 2]\n")
    window = {"type": "struct", "fields": []}
    assert keys_in_plan(text, {0: "long", 1: "string", 7: window}) == {
        0: ['"string"'], 1: ['"long"', '{"fields":[],"type":"struct"}'], 2: None}
    data = (FIXTURE / "state/0/0/_metadata/schema").read_bytes()
    key, value = parse_state_schema(data, "schema")
    assert schema_field_types(key) == ['"string"'] and schema_field_types(value) == ['"long"', '"long"']


JOINS = {"join_renamed_hdfs": "join_renamed", "join_aliased_hdfs": "join_aliased"}
REFUSED_SCHEMA = "state/0/0/left-keyWithIndexToValue/_metadata/schema"  # `id` stored not nullable


def _join_copy(tmp_path: Path, name: str) -> Path:
    """A copy of a 3.5-written join (input, checkpoint, sink) whose file sources' and sink's logs
    name the copy's paths, as they would had the query run there (Spark reads the newest batch's
    files by the logged paths when it restarts)."""
    old = SPARK35 / name
    base = tmp_path / name
    shutil.copytree(old, base)
    old_uri, new_uri = f"file://{old}", f"file://{base}"
    logs = [*base.glob("checkpoint/sources/*/[0-9]*"), *base.glob("sink/_spark_metadata/[0-9]*")]
    first = (base / "checkpoint/sources/0/0").read_text().splitlines()[1]
    written_at = json.loads(first)["path"].split("/input/")[0]  # where produce.py ran
    for log in logs:
        log.write_text(log.read_text().replace(written_at, new_uri).replace(old_uri, new_uri))
        (log.parent / f".{log.name}.crc").unlink(missing_ok=True)  # Hadoop would check the old bytes
    return base


def test_join_schema_rule_takes_the_non_nullable_join_key_column_only():
    """Value fields 3.5 stored not nullable that 4.3 restarts (observed: an event-time column the
    range condition's filter keeps, a literal) are not refused; the join key column is, from 4.3."""
    from streamctl.formats.state import schema_fields
    from streamctl.inspectors.lines import join_schema_refusals

    def struct(*fields):
        return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": nl, "metadata": {}} for n, t, nl in fields]}

    key = schema_fields(struct(("field0", "long", True), ("index", "long", True)))
    kept = {"a": (key, schema_fields(struct(("lid", "long", True), ("lts", "timestamp", False), ("one", "integer", False),
                                            ("matched", "boolean", True))))}
    assert join_schema_refusals((4, 3), kept) == []
    refused = {"b": (key, schema_fields(struct(("id", "long", False), ("v", "string", True), ("matched", "boolean", True))))}
    [r] = join_schema_refusals((4, 3), refused)
    assert (r.file, r.error, r.needs) == ("b", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", None) and " id " in r.why
    assert join_schema_refusals((4, 2), refused) == []


def test_a_3_5_join_storing_its_key_column_not_nullable_is_refused_by_4_3(cli, tmp_path):
    """The issue's join (the right side's columns renamed): its left side stores `id` not
    nullable, which 4.3 refuses (STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE) and lines before it
    read; the aliased neighbour stores every field nullable and restarts on 4.3."""
    refused = _join_copy(tmp_path, "join_renamed_hdfs") / "checkpoint"
    r = cli("inspect", "epochs", str(refused), "--target-spark", "4.3", "--quiet-period", "0", "--json")
    f = _codes(r)
    assert r.code == 1 and "SPARK_LINE_CHECKED" not in f, f
    assert f["SPARK_LINE_REFUSES"]["files"] == [str(refused / REFUSED_SCHEMA)], f
    assert f["SPARK_LINE_REFUSES"]["restart_errors"] == ["STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"], f
    assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in f["SPARK_LINE_REFUSES"]["message"], f
    d = cli("diagnose", str(refused), "--target-spark", "4.3", "--quiet-period", "0", "--json")
    found = {x["code"]: x for x in d.json()["findings"]}
    assert d.code == 1 and found["SPARK_LINE_REFUSES"]["files"] == [str(refused / REFUSED_SCHEMA)], d.stdout
    r = cli("inspect", "epochs", str(refused), "--target-spark", "4.2", "--quiet-period", "0", "--json")
    assert r.code == 0 and "SPARK_LINE_CHECKED" in _codes(r), r.stdout  # no such check before 4.3

    fine = _join_copy(tmp_path, "join_aliased_hdfs") / "checkpoint"
    r = cli("inspect", "epochs", str(fine), "--target-spark", "4.3", "--quiet-period", "0", "--json")
    f = _codes(r)
    assert r.code == 0 and "SPARK_LINE_REFUSES" not in f and "2 stream-stream join state schema" in \
        f["SPARK_LINE_CHECKED"]["message"], f


@pytest.mark.spark
def test_spark_4_restarts_the_3_5_joins_as_predicted(spark, tmp_path):
    """The oracle: PySpark 4.x restarts a copy of each join with one more file per side."""
    from helpers import spark_line_job
    from helpers.spark_fixtures import spark_major

    if spark_major() < 4:
        pytest.skip("the restart under test is on Spark 4")
    results = {name: spark_line_job.run(spark, {"kind": kind, "base": str(_join_copy(tmp_path, name)), "files": [6, 1]})
               for name, kind in JOINS.items()}
    refused = results["join_renamed_hdfs"]
    assert not refused["ok"] and "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in refused["error"], refused
    assert results["join_aliased_hdfs"]["ok"], results["join_aliased_hdfs"]

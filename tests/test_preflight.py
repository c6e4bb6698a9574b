"""`streamctl preflight`: before a deploy, does a new version of a query fit its
checkpoint? One real PySpark query (tests/helpers/align_pipeline.py, kind ``dedup_file``) writes the
checkpoint; three new versions of it (the same query, one with a stateful operator added, one
with it removed) are judged by preflight and then by the oracle, a real restart of each version
on a copy of the checkpoint (docs/model.md#preflight). A file source reading another folder is
judged the same way: a stateless query and a watermarked window (ending on a no-data batch),
each restarted on a copy of its input folder; the comparison itself on hand-built logs."""
from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from helpers.trees import copy_tree


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


@pytest.mark.spark
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


PATHS = '''
from pyspark.sql import functions as F


def _read(spark, path):
    return spark.readStream.schema("id BIGINT, ts BIGINT").option("maxFilesPerTrigger", 1).json(path)


def _windowed(df):  # a windowed count with a watermark: its last batch is a no-data batch
    return (df.withColumn("t", F.col("ts").cast("timestamp")).withWatermark("t", "2 seconds")
            .groupBy(F.window("t", "10 seconds")).count().select(F.col("window.start").cast("long").alias("start"), "count"))


def stateless_a(spark):
    return _read(spark, {a!r}).select("id")


def stateless_b(spark):  # the same query reading a copy of the input folder
    return _read(spark, {b!r}).select("id")


def window_a(spark):
    return _windowed(_read(spark, {a!r}))


def window_b(spark):
    return _windowed(_read(spark, {b!r}))
'''


def _run(df: Any, ckpt: Path, out: Path) -> Any:
    q = (df.writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(ckpt))
         .outputMode("append").trigger(availableNow=True).start())
    q.awaitTermination()
    return q


@pytest.mark.spark
def test_preflight_predicts_the_restart_of_a_query_reading_another_path(spark, cli, tmp_path, monkeypatch):
    """A checkpoint written reading folder A, a new version reading folder B that holds copies of
    A's files: when the newest batch read files, the restart fails (`Wrong basePath`); after a
    no-data batch (a watermarked window's last batch) it reads every file of B again. The same
    query reading A gets no finding and reads nothing again."""
    import json

    a, b = tmp_path / "in" / "a", tmp_path / "copy" / "b"
    a.mkdir(parents=True)
    for i in range(3):  # one event-time window per file, read in that order (by modification time)
        f = a / f"part-{i}.json"
        f.write_text("".join(json.dumps({"id": i * 4 + j, "ts": 1_700_000_000 + 10 * i + j}) + "\n" for j in range(4)))
        os.utime(f, (1_700_000_000 + i, 1_700_000_000 + i))
    shutil.copytree(a, b)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "paths_v2.py").write_text(PATHS.format(a=str(a), b=str(b)))
    monkeypatch.syspath_prepend(str(mods))
    import paths_v2  # noqa: E402

    for shape in ("stateless", "window"):
        _run(getattr(paths_v2, f"{shape}_a")(spark), tmp_path / shape / "checkpoint", tmp_path / shape / "out")
    offsets = sorted(int(f.name) for f in (tmp_path / "window" / "checkpoint" / "offsets").iterdir() if f.name.isdigit())
    assert offsets == [0, 1, 2, 3], offsets  # batch 3 read no file: the window's no-data batch

    expected = {("stateless", "a"): None, ("window", "a"): None,
                ("stateless", "b"): "fails", ("window", "b"): "reads_again"}
    for (shape, side), restart in expected.items():
        ckpt = tmp_path / shape / "checkpoint"
        r = cli("preflight", str(ckpt), "--query", f"paths_v2:{shape}_{side}", "--json")
        assert "Traceback" not in r.stderr, r.stderr
        doc = r.json()
        assert doc["query_file_sources"] == [{"source": 0, "path": str(a if side == "a" else b)}], doc
        if restart is None:
            assert r.code == 0 and doc["findings"] == [], doc
        else:
            (f,) = doc["findings"]
            assert r.code == 1 and f["code"] == "SOURCE_PATH_CHANGED" and f["restart"] == restart, doc
            assert f["checkpoint_folder"] == str(a) and f["query_path"] == str(b) and f["source"] == 0, f
            text = cli("preflight", str(ckpt), "--query", f"paths_v2:{shape}_{side}")
            assert "SOURCE_PATH_CHANGED" in text.stdout and "None" not in text.stdout, text
        # the oracle: the real restart of that version on a copy of the checkpoint
        copy = tmp_path / f"restart-{shape}-{side}"
        copy_tree(ckpt, copy / "checkpoint")
        copy_tree(tmp_path / shape / "out", copy / "out")
        df = getattr(paths_v2, f"{shape}_{side}")(spark)
        if restart == "fails":
            with pytest.raises(Exception, match="Wrong basePath"):
                _run(df, copy / "checkpoint", copy / "out")
            continue
        q = _run(df, copy / "checkpoint", copy / "out")
        read = sum(p["numInputRows"] for p in q.recentProgress)
        assert read == (12 if restart == "reads_again" else 0), (shape, side, q.recentProgress)


def _file_source_checkpoint(root: Path, files: list[list[str]], offsets: list[int]) -> Path:
    """offsets/<b> with logOffset `offsets[b]`, commits through the newest, `sources/0/<n>` naming `files[n]`."""
    import json

    for d in ("offsets", "commits", "sources/0"):
        (root / d).mkdir(parents=True)
    (root / "metadata").write_text('{"id":"11111111-2222-3333-4444-555555555555"}')
    for n, names in enumerate(files):
        (root / "sources" / "0" / str(n)).write_text("v1\n" + "\n".join(
            json.dumps({"path": p, "timestamp": 1, "batchId": n}) for p in names))
    for b, lo in enumerate(offsets):
        (root / "offsets" / str(b)).write_text(f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{{}}}}\n{{"logOffset":{lo}}}')
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


@pytest.mark.parametrize(("query_path", "restart"), [
    ("file:/data/in", None),  # the same folder, as Hadoop qualifies it
    ("file:/data/in/", None),
    ("file:/data", None),  # a parent: the logged files are under it, Spark's base check passes
    ("file:/data/in/*", "glob"),  # a glob: Spark passes no basePath, not judged
    ("file:/data/other", "fails"),
    ("file:/data/in2", "fails"),
    ("file:/data/i", "reads_again"),  # not its folder, yet a string prefix of its files: Spark's check passes
    ("s3a://bucket/data/in", "fails"),
])
def test_source_path_compared_with_the_newest_log_entry(tmp_path, query_path, restart):
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.preflight import compare_source_paths

    chk = _file_source_checkpoint(tmp_path / "chk", [["file:///data/in/key=a/f0.json"],
                                                     ["file:///data/in/key=b/f%201.json"]], [0, 1])
    q = inspect_checkpoint(str(chk), quiet_period_s=0)
    given = query_path.replace("file:", "")
    found = compare_source_paths(str(chk), q.planned, q.sources, [(0, None, given, query_path)])
    if restart in (None, "glob"):
        assert found == [], found
    else:
        (f,) = found
        assert f.code == "SOURCE_PATH_CHANGED" and f.details["restart"] == restart, f
        assert f.details["checkpoint_folder"] == "/data/in/key=b" and f.details["epochs"] == [1], f
    # the newest batch read no file (a no-data batch): nothing refuses the path, every file there is new
    nodata = _file_source_checkpoint(tmp_path / "nodata", [["file:///data/in/f0.json"]], [0, 0])
    q = inspect_checkpoint(str(nodata), quiet_period_s=0)
    found = compare_source_paths(str(nodata), q.planned, q.sources, [(0, None, given, query_path)])
    assert [f.details["restart"] for f in found] == ([] if restart in (None, "glob") else ["reads_again"]), found


@pytest.mark.parametrize(("options", "gone", "restart"), [
    ({"subscribe": "orders,refunds"}, [], None),
    ({"subscribe": "orders, refunds,audit"}, [], None),  # a topic added is read from its earliest offsets
    ({"subscribe": "orders"}, ["refunds-0"], "fails"),
    ({"subscribe": "orders-v2,refunds"}, ["orders-0", "orders-1"], "fails"),
    ({"subscribePattern": "orders|refunds"}, [], None),
    ({"subscribePattern": "ord.*"}, ["refunds-0"], "fails"),
    ({"assign": '{"orders":[0,1],"refunds":[0]}'}, [], None),
    ({"assign": '{"orders":[1],"refunds":[0]}'}, ["orders-0"], "fails"),
    ({"subscribe": "orders", "failOnDataLoss": "false"}, ["refunds-0"], "drops"),
])
def test_kafka_topics_compared_with_the_newest_offsets(tmp_path, options, gone, restart):
    """A Kafka source of the new query that no longer reads a partition the newest offsets hold
    positions for: the restart fails on data loss (failOnDataLoss, the default) or drops it.
    Proven by a real restart in tests/test_restart_oracle.py (the topic renamed)."""
    from streamctl.inspectors.preflight import compare_kafka_topics

    chk = tmp_path / "chk"
    (chk / "offsets").mkdir(parents=True)
    (chk / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
                                       '{"orders":{"0":5,"1":7},"refunds":{"0":2}}')
    found = compare_kafka_topics(str(chk), 3, [(0, None, options)])
    assert [p for f in found for p in f.details["partitions"]] == gone, found
    assert [f.details["restart"] for f in found] == ([restart] if restart else []), found
    assert all(f.code == "SOURCE_TOPICS_CHANGED" and "offsets/3" in f.message for f in found), found
    assert compare_kafka_topics(str(chk), None, [(0, None, options)]) == []  # nothing planned: a fresh start


@pytest.mark.parametrize(("text", "query_sources", "found"), [
    ('v1\n{}\n{"logOffset":3}\n{"logOffset":3}', 2, False),
    ('v1\n{}\n{"logOffset":3}\n{"logOffset":3}', 1, True),  # a join's second source removed
    ('v1\n{}\n{"logOffset":3}', 2, True),  # a source added
    ('v1\n{}\n{"logOffset":3}\n-', 2, False),  # a source with no offset yet still counts
    ('v2\n{}\n0:{"logOffset":3}\norders:{"logOffset":1}', 1, False),  # named sources: matched by name
])
def test_source_count_compared_with_the_newest_offsets(tmp_path, text, query_sources, found):
    """SOURCES_CHANGED: the restart hands the newest offsets' lines to the sources by position and
    asserts the counts match (proven by a real restart on both lines in
    tests/test_restart_oracle.py, a join's second source removed)."""
    from streamctl.inspectors.preflight import compare_sources

    chk = tmp_path / "chk"
    (chk / "offsets").mkdir(parents=True)
    (chk / "offsets" / "3").write_text(text)
    got = compare_sources(str(chk), 3, query_sources, [])
    assert [f.code for f in got] == (["SOURCES_CHANGED"] if found else []), got
    if found:
        assert f"now there are [{query_sources}] sources" in got[0].details["restart_error"], got
    assert compare_sources(str(chk), None, query_sources, []) == []  # nothing planned: a fresh start


@pytest.mark.parametrize(("line", "kinds", "swapped"), [
    ('{"logOffset":3}', [(0, None, "file")], []),
    ('{"orders":{"0":5}}', [(0, None, "kafka")], []),
    ('{"logOffset":3}', [(0, None, "kafka")], [(0, "file", "kafka")]),  # files to a topic on the same checkpoint
    ('{"orders":{"0":5}}', [(0, None, "file")], [(0, "kafka", "file")]),
    ('{"logOffset":3}', [], []),  # a source of a kind streamctl does not know: not judged
    ('-', [(0, None, "kafka")], []),  # no offset yet
])
def test_source_kind_compared_with_the_newest_offsets(tmp_path, line, kinds, swapped):
    """SOURCES_CHANGED: a source of another kind where the newest offsets held one cannot read
    its offset (proven by a real restart in test_preflight_predicts_a_file_query_turned_to_kafka)."""
    from streamctl.inspectors.preflight import compare_sources

    chk = tmp_path / "chk"
    (chk / "offsets").mkdir(parents=True)
    (chk / "offsets" / "3").write_text('v1\n{}\n' + line)
    got = compare_sources(str(chk), 3, 1, kinds)
    assert [(s["source"], s["checkpoint_kind"], s["query_kind"]) for f in got for s in f.details["sources"]] == swapped


KINDS = '''
from pyspark.sql import functions as F


def files(spark):
    return spark.readStream.schema("id BIGINT").option("maxFilesPerTrigger", 1).json({a!r}).select("id")


def topic(spark):  # the next version: the same records from a topic, on the same checkpoint
    from streamctl.pipeline.kafka_source import SHORT_NAME, register

    register(spark)
    raw = (spark.readStream.format(SHORT_NAME).option("kafka.bootstrap.servers", {bootstrap!r})
           .option("subscribe", {topic!r}).option("startingOffsets", "earliest").load())
    return raw.select(F.get_json_object(F.col("value").cast("string"), "$.id").cast("long").alias("id"))
'''


@pytest.mark.spark
@pytest.mark.spark4
def test_preflight_predicts_a_file_query_turned_to_kafka(spark, cli, tmp_path, monkeypatch, kafka_broker, kafka_topic):
    """A file query's checkpoint, and a next version reading the same records from a topic on it:
    the source count is the same, and the restart fails, as the Kafka source cannot read the file
    source's `{"logOffset": n}`. preflight said it fits (exit 0); now SOURCES_CHANGED naming both
    kinds. The same file query still fits."""
    import json

    a = tmp_path / "in"
    a.mkdir()
    (a / "part-0.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(4)))
    topic = kafka_topic(1)
    kafka_broker.produce(topic, [json.dumps({"id": i}) for i in range(4, 8)])
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "kinds_v2.py").write_text(KINDS.format(a=str(a), bootstrap=kafka_broker.bootstrap, topic=topic))
    monkeypatch.syspath_prepend(str(mods))
    import kinds_v2  # noqa: E402

    ckpt, out = tmp_path / "checkpoint", tmp_path / "out"
    _run(kinds_v2.files(spark), ckpt, out)
    r = cli("preflight", str(ckpt), "--query", "kinds_v2:files", "--json")
    assert r.code == 0 and r.json()["findings"] == [], r.stdout
    r = cli("preflight", str(ckpt), "--query", "kinds_v2:topic", "--json")
    (f,) = r.json()["findings"]
    assert r.code == 1 and f["code"] == "SOURCES_CHANGED", r.stdout
    assert f["sources"] == [{"source": 0, "checkpoint_kind": "file", "query_kind": "kafka"}], f
    copy = tmp_path / "restart"
    copy_tree(ckpt, copy / "checkpoint")
    copy_tree(out, copy / "out")
    with pytest.raises(Exception, match="is not a Kafka source's"):  # streamctl's source names the offset
        _run(kinds_v2.topic(spark), copy / "checkpoint", copy / "out")

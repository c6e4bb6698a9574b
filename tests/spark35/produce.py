"""Produce small PySpark 3.5 streaming checkpoints for cross-version reading tests.

Run by scripts/make_spark35_fixture.sh with the interpreter of .venv-spark35 (pyspark==3.5.*).
It must not import streamctl (not installed in that venv); the join queries come from
tests/helpers/spark_line_job.py, which imports none at import time.

    python tests/spark35/produce.py OUT_DIR [NAME...]

writes OUT_DIR/<name>/ for every scenario below (or the named ones) and OUT_DIR/README.md. The
aggregations keep only checkpoint/ (their input/ and output/ are deleted); the stream-stream
joins keep input/, checkpoint/ and sink/, so that a newer Spark line can restart a copy of them.
OUT_DIR/produced.json remembers which PySpark wrote each scenario, and when.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))  # the join queries, shared with the tests
import spark_line_job  # noqa: E402

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
BASE_TS = dt.datetime(2024, 1, 1)
NUM_KEYS = 4
ROWS_PER_FILE = 4
FILES_PER_RUN = (2, 2)  # two runs (one restart), 4 micro-batches in all

SCENARIOS = {
    "agg_hdfs": {"spark.sql.streaming.stateStore.providerClass": HDFS},
    "agg_rocksdb": {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    },
}

# stream-stream joins (tests/helpers/spark_line_job.py `join_query`, also what a newer line
# restarts a copy with), HDFS state, 3 shuffle partitions, six batches: Spark 4.3 refuses the
# renamed one and restarts the aliased one (docs/model.md#spark-lines)
JOIN_SCENARIOS = {"join_renamed_hdfs": "join_renamed", "join_aliased_hdfs": "join_aliased"}
JOIN_FILES = 6  # per side, one per batch (maxFilesPerTrigger=1)

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""


def log(msg: str) -> None:
    print(f"[spark35] {msg}", file=sys.stderr, flush=True)


def write_inputs(folder: Path, start: int, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    base_mtime = time.time() - 3600
    for i in range(start, start + count):
        rows = []
        for j in range(ROWS_PER_FILE):
            ts = BASE_TS + dt.timedelta(seconds=i * 10 + j)
            rows.append({"key": f"k{(i + j) % NUM_KEYS}", "value": (i * 7 + j * 3) % 11,
                         "ts": ts.strftime("%Y-%m-%dT%H:%M:%S")})
        tmp = folder / f".part-{i:05d}.json.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(tmp, (base_mtime + i, base_mtime + i))
        tmp.rename(folder / f"part-{i:05d}.json")


def get_spark():
    from pyspark.sql import SparkSession

    conf_file = Path(tempfile.gettempdir()) / "streamctl-spark35-log4j2.properties"
    conf_file.write_text(LOG4J2)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("streamctl-spark35-fixture")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{conf_file}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "200ms")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def build(spark, base: Path, name: str, confs: dict) -> Path:
    from pyspark.sql import functions as F

    ckpt, inp = base / "checkpoint", base / "input"
    saved = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        start = 0
        for run, count in enumerate(FILES_PER_RUN, 1):
            write_inputs(inp, start, count)
            start += count
            df = (spark.readStream.schema("key STRING, value BIGINT, ts TIMESTAMP")
                  .option("maxFilesPerTrigger", 1).json(str(inp))
                  .groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("total")))
            q = (df.writeStream.format("noop").outputMode("update")
                 .option("checkpointLocation", str(ckpt)).queryName(name)
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            log(f"{name}: run {run} done, last batch {q.lastProgress['batchId']}")
    finally:
        for k, v in saved.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    for extra in ("input", "output"):
        shutil.rmtree(base / extra, ignore_errors=True)
    return ckpt


def build_join(spark, base: Path, name: str, kind: str) -> None:
    confs = {"spark.sql.streaming.stateStore.providerClass": HDFS, "spark.sql.shuffle.partitions": "3",
             "spark.sql.streaming.stateStore.minDeltasForSnapshot": "100"}
    saved = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        spark_line_job.write_join_input(str(base), 0, JOIN_FILES)
        q = spark_line_job.join_query(spark, kind, str(base)).queryName(name).start()
        q.awaitTermination()
        log(f"{name}: done, last batch {q.lastProgress['batchId']}")
    finally:
        for k, v in saved.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


def main(argv: list[str]) -> int:
    names = argv[2:] or [*SCENARIOS, *JOIN_SCENARIOS]
    if len(argv) < 2 or not set(names) <= {*SCENARIOS, *JOIN_SCENARIOS}:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1]).resolve()
    import pyspark

    version = pyspark.__version__
    if not version.startswith("3.5."):
        log(f"expected pyspark 3.5.x, got {version}")
        return 2
    spark = get_spark()
    try:
        java_version = spark.sparkContext._jvm.System.getProperty("java.version")
        for name in names:
            base = out / name
            shutil.rmtree(base, ignore_errors=True)
            if name in SCENARIOS:
                build(spark, base, name, SCENARIOS[name])
            else:
                build_join(spark, base, name, JOIN_SCENARIOS[name])
    finally:
        spark.stop()

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    produced_file = out / "produced.json"
    produced = json.loads(produced_file.read_text()) if produced_file.exists() else {}
    for name in names:
        produced[name] = f"pyspark {version} (Java {java_version}, Python {sys.version.split()[0]}) on {now}"
    produced_file.write_text(json.dumps(produced, indent=1, sort_keys=True) + "\n")
    written = "\n".join(f"- `{n}`: {produced.get(n, 'not produced')}" for n in [*SCENARIOS, *JOIN_SCENARIOS])
    (out / "README.md").write_text(f"""\
# PySpark 3.5 checkpoints (cross-version reading fixture)

Produced by

{written}

with

    scripts/make_spark35_fixture.sh [NAME...]

which installs `pyspark==3.5.*` into `.venv-spark35/` and runs
`tests/spark35/produce.py tests/fixtures/spark-3.5`. Do not edit these files by hand;
re-run the script instead.

| name | query | state provider |
|---|---|---|
| `agg_hdfs` | file source -> `groupBy(key).agg(count, sum)` -> `noop` (update) | HDFSBackedStateStoreProvider |
| `agg_rocksdb` | same | RocksDBStateStoreProvider, changelog checkpointing on |
| `join_renamed_hdfs` | two file sources `left`, `right` (`id, v, ts`); the right's `v`, `ts` renamed (`withColumnRenamed`) -> inner join on `id` -> parquet `sink/` (append) | HDFSBackedStateStoreProvider |
| `join_aliased_hdfs` | the same sources, each side selected under new names (`lid, lv` and `rid, rv`) -> inner join `lid = rid` -> parquet `sink/` | HDFSBackedStateStoreProvider |

Each query ran twice (a restart on the same checkpoint) with `trigger(availableNow=True)`,
`maxFilesPerTrigger=1` and {sum(FILES_PER_RUN)} input files in all ({' + '.join(map(str, FILES_PER_RUN))}),
so batches 0..{sum(FILES_PER_RUN) - 1} exist; `spark.sql.shuffle.partitions=2`,
`minDeltasForSnapshot=2`, `maintenanceInterval=200ms`. Only `checkpoint/` is kept: the input
files named in `sources/0/*` and in `offsets/*` were deleted after the run.
Hidden Hadoop `.<name>.crc` sidecars are kept as Spark wrote them.

The joins ran once each with `trigger(availableNow=True)` over {JOIN_FILES} files per side of {spark_line_job.JOIN_ROWS} rows
(`maxFilesPerTrigger=1`: batches 0..{JOIN_FILES - 1}), `spark.sql.shuffle.partitions=3`,
`minDeltasForSnapshot=100` (deltas only). They keep `input/`, `checkpoint/` and `sink/`; their logs
name the absolute paths they were written at, so a restart of a copy first rewrites its file sources'
logs to the copy's paths (tests/test_spark_upgrade.py). Spark 4.3 refuses `join_renamed_hdfs` (STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE)
and restarts `join_aliased_hdfs` (docs/model.md#spark-lines).
""")
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Produce small PySpark 3.5 streaming checkpoints for cross-version reading tests.

Run by scripts/make_spark35_fixture.sh with the interpreter of .venv-spark35 (pyspark==3.5.*).
Self-contained: it must not import streamctl (not installed in that venv).

    python tests/spark35/produce.py OUT_DIR

writes OUT_DIR/<name>/checkpoint for every scenario below, deletes each scenario's input/ and
output/ folders afterwards, and writes OUT_DIR/README.md.
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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
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
        for name, confs in SCENARIOS.items():
            base = out / name
            shutil.rmtree(base, ignore_errors=True)
            build(spark, base, name, confs)
    finally:
        spark.stop()

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    (out / "README.md").write_text(f"""\
# PySpark 3.5 checkpoints (cross-version reading fixture)

Produced by **pyspark {version}** (Java {java_version}, Python {sys.version.split()[0]}) on {now} with

    scripts/make_spark35_fixture.sh

which installs `pyspark==3.5.*` into `.venv-spark35/` and runs
`tests/spark35/produce.py tests/fixtures/spark-3.5`. Do not edit these files by hand;
re-run the script instead.

| name | query | state provider |
|---|---|---|
| `agg_hdfs` | file source -> `groupBy(key).agg(count, sum)` -> `noop` (update) | HDFSBackedStateStoreProvider |
| `agg_rocksdb` | same | RocksDBStateStoreProvider, changelog checkpointing on |

Each query ran twice (a restart on the same checkpoint) with `trigger(availableNow=True)`,
`maxFilesPerTrigger=1` and {sum(FILES_PER_RUN)} input files in all ({' + '.join(map(str, FILES_PER_RUN))}),
so batches 0..{sum(FILES_PER_RUN) - 1} exist; `spark.sql.shuffle.partitions=2`,
`minDeltasForSnapshot=2`, `maintenanceInterval=200ms`. Only `checkpoint/` is kept: the input
files named in `sources/0/*` and in `offsets/*` were deleted after the run.
Hidden Hadoop `.<name>.crc` sidecars are kept as Spark wrote them.
""")
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""One query of tests/test_spark_upgrade.py, run on whichever PySpark imports it: in the 3.5 leg's
own session, or as `python tests/helpers/spark_line_job.py JOBS_JSON` under the newest line's venv (a
subprocess: one JVM per line). Each job is {"kind", "base", "files": [first, count], "confs"}; the
query reads `<base>/input` (JSON files it writes, one per batch) and writes Spark's noop sink
with its checkpoint at `<base>/checkpoint`. Prints one JSON line per job: {"base", "ok",
"error"}."""
from __future__ import annotations

import datetime as dt
import json
import os
import sys
from typing import Any

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
KINDS = ("agg", "dedup", "join")
# the stream-stream joins of tests/fixtures/spark-3.5/join_{renamed,aliased}_hdfs (written there by
# tests/spark35/produce.py with these functions): `<base>/input/{left,right}` into a parquet `<base>/sink`
JOIN_KINDS = ("join_renamed", "join_aliased")
JOIN_ROWS = 2


def _write_file(folder: str, i: int, rows: list[dict[str, Any]]) -> None:
    """`folder`/part-<i>.json, JSON lines, renamed into place with a fixed mtime per file."""
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".part-{i:05d}.json.tmp")
    with open(tmp, "w") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(tmp, (1_700_000_000 + i, 1_700_000_000 + i))
    os.rename(tmp, os.path.join(folder, f"part-{i:05d}.json"))


def write_input(base: str, first: int, count: int) -> None:
    t0 = dt.datetime(2026, 1, 1)
    for i in range(first, first + count):
        _write_file(os.path.join(base, "input"), i, [
            {"id": i * 10 + k, "key": f"k{k % 3}", "ts": (t0 + dt.timedelta(seconds=i * 10 + k)).isoformat()}
            for k in range(10)])


def write_join_input(base: str, first: int, count: int) -> None:
    """Files `first..first+count-1` of both sides of a JOIN_KINDS query, one per batch."""
    t0 = dt.datetime(2024, 1, 1)
    for side in ("left", "right"):
        for i in range(first, first + count):
            _write_file(os.path.join(base, "input", side), i, [
                {"id": i * JOIN_ROWS + k, "v": f"{side}{i}.{k}", "ts": (t0 + dt.timedelta(seconds=i * 10 + k)).isoformat()}
                for k in range(JOIN_ROWS)])


def join_query(spark: Any, kind: str, base: str) -> Any:
    """Two JSON file sources joined on `id` (inner) into parquet. `join_renamed`: the right
    side's other columns renamed (withColumnRenamed), so the state stores `id` as Spark's inferred
    isnotnull filter left it, not nullable on the left; `join_aliased`: both sides selected under
    new names, every stored field nullable (docs/model.md#spark-lines)."""
    from pyspark.sql import functions as F

    def side(name: str) -> Any:
        return (spark.readStream.schema("id BIGINT, v STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
                .json(os.path.join(base, "input", name)))

    left, right = side("left"), side("right")
    if kind == "join_renamed":
        joined = left.join(right.withColumnRenamed("v", "rv").withColumnRenamed("ts", "rts"), "id")
    else:
        joined = left.select(F.col("id").alias("lid"), F.col("v").alias("lv")).join(
            right.select(F.col("id").alias("rid"), F.col("v").alias("rv")), F.expr("lid = rid"))
    return (joined.writeStream.format("parquet").option("path", os.path.join(base, "sink"))
            .option("checkpointLocation", os.path.join(base, "checkpoint")).trigger(availableNow=True))


def query(spark: Any, kind: str, base: str) -> Any:
    from pyspark.sql import functions as F

    if kind in JOIN_KINDS:
        return join_query(spark, kind, base)

    src = (spark.readStream.schema("id BIGINT, key STRING, ts TIMESTAMP").option("maxFilesPerTrigger", 1)
           .json(os.path.join(base, "input")))
    if kind == "agg":
        df, mode = src.groupBy("key").count(), "complete"
    elif kind == "dedup":
        df, mode = src.dropDuplicates(["id"]), "append"
    else:  # a stream-stream inner join with watermarks and a time range
        left = src.select(F.col("id").alias("lid"), F.col("ts").alias("lts")).withWatermark("lts", "1 minute")
        right = src.select(F.col("id").alias("rid"), F.col("ts").alias("rts")).withWatermark("rts", "1 minute")
        cond = F.expr("lid = rid AND rts BETWEEN lts - INTERVAL 5 SECONDS AND lts + INTERVAL 5 SECONDS")
        df, mode = left.join(right, cond, "inner"), "append"
    return (df.writeStream.format("noop").outputMode(mode)
            .option("checkpointLocation", os.path.join(base, "checkpoint")).trigger(availableNow=True))


def run(spark: Any, job: dict[str, Any]) -> dict[str, Any]:
    from streamctl.pipeline.session import scenario_confs  # restores (or unsets) every conf it set

    with scenario_confs(spark, dict(job.get("confs") or {})):
        try:
            (write_join_input if job["kind"] in JOIN_KINDS else write_input)(job["base"], *job["files"])
            q = query(spark, job["kind"], job["base"]).start()
            q.awaitTermination()
            return {"base": job["base"], "ok": True, "error": None}
        except Exception as exc:  # noqa: BLE001 - the restart's error is the result
            return {"base": job["base"], "ok": False, "error": str(exc)[:2000]}


def main() -> None:
    from pyspark.sql import SparkSession

    jobs = json.loads(sys.argv[1])
    spark = (SparkSession.builder.master("local[2]").appName("streamctl-spark-line-job")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for job in jobs:
            print(json.dumps(run(spark, job)), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()

"""The local SparkSession the demo, the reference pipeline and the example scenarios run on,
and the state-store confs a scenario sets for its run (restored after it)."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
CKPT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"

#: Every conf a scenario may change; restored after each scenario.
SCENARIO_CONFS = (PROVIDER, CHANGELOG, CKPT_FORMAT)

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
# PySpark's gateway counts as a REPL: unless its logger has its own level, Spark resets the
# root level to WARN and prints "Setting default log level".
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""


def _log4j_config_file() -> Path:
    path = Path(tempfile.gettempdir()) / "streamctl-examples-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return path


def get_spark(app_name: str = "streamctl-examples", confs: dict[str, str] | None = None) -> SparkSession:
    """A small local SparkSession (2 cores, 4 shuffle partitions, no UI, quick state maintenance);
    `confs` are set on the builder too (for example `spark.jars`, which only a new session takes)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    log4j = _log4j_config_file()
    # a JVM crash report goes to the temp folder, never into the working directory
    crash = Path(tempfile.gettempdir()) / "streamctl-hs_err_pid%p.log"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j} -XX:ErrorFile={crash}"
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "3")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "200ms")
        .config("spark.sql.streaming.metricsEnabled", "false")
    )
    for key, value in (confs or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def scenario_confs(spark: SparkSession, overrides: dict[str, str]) -> Iterator[None]:
    """Set the scenario confs, restoring (or unsetting) every scenario conf afterwards."""
    saved = {k: spark.conf.get(k, None) for k in SCENARIO_CONFS + tuple(overrides)}
    try:
        for k, v in overrides.items():
            spark.conf.set(k, v)
        yield
    finally:
        for key, was in saved.items():
            if was is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, was)

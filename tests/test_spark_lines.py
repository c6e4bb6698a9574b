"""The Spark line a test run really uses (README "Spark lines").

`./dev test` runs the suite twice: on the newest PySpark the dev extra allows (.venv), then the
`spark_lines` subset on PySpark 3.5 (.venv-spark35, STREAMCTL_SPARK_LINE=3.5). This test is in
both legs, so a leg that silently runs another Spark (a wrong venv, a SPARK_HOME pointing
elsewhere, executors on another interpreter) fails instead of re-running the same line twice.
"""
from __future__ import annotations

import os
import re
import sys

import pytest

from helpers.paths import REPO

pytestmark = [pytest.mark.spark, pytest.mark.spark_lines]

PYPROJECT = REPO / "pyproject.toml"


def _line(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def _dev_extra_floor() -> tuple[int, int]:
    """The lower bound of the dev extra's pyspark requirement (`pyspark>=X.Y,<N`)."""
    text = PYPROJECT.read_text()
    dev = text[text.index("\ndev = ["):]
    return _line(re.search(r'"pyspark>=([\d.]+)', dev).group(1))  # type: ignore[union-attr]


def test_the_leg_runs_the_spark_line_it_names(spark) -> None:
    import pyspark

    want = os.environ.get("STREAMCTL_SPARK_LINE")
    python_side, jvm_side = pyspark.__version__, spark.version
    if want:  # the 3.5 leg names its line
        assert python_side.startswith(want + "."), (want, python_side)
    else:  # the main leg: the newest line the dev extra asks for
        assert _line(python_side) >= _dev_extra_floor(), python_side
    assert jvm_side == python_side, (jvm_side, python_side)  # no foreign SPARK_HOME
    # Python workers run the leg's own interpreter (PYSPARK_PYTHON), not another venv's.
    workers = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("sys").executable).collect()
    assert workers == [sys.executable], (workers, sys.executable)
    assert os.environ["PYSPARK_PYTHON"] == sys.executable

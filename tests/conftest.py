"""Shared fixtures. Tests run with --import-mode=importlib and `python -P`; pytest puts tests/
on sys.path (`pythonpath` in pyproject.toml), so what the tests share is the package
tests/helpers/, imported as `helpers.<module>`."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import align_pipeline as _align_pipeline
from helpers import layouts as _layouts
from helpers import terminal as _terminal
from helpers.kafka_fixtures import kafka_broker, kafka_topic  # noqa: F401  (fixtures)
from helpers.lanes import pytest_runtestloop  # noqa: F401  (two processes share one run: ./dev test)
from helpers.spark_fixtures import fresh_copy, spark, spark_checkpoints  # noqa: F401  (fixtures)
from helpers.trees import snapshot_tree

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _has_python_data_sources() -> bool:
    """PySpark 4.0+ (`pyspark.sql.datasource`); False on the 3.5 leg (`./dev test-spark35`)."""
    try:
        return importlib.util.find_spec("pyspark.sql.datasource") is not None
    except ModuleNotFoundError:  # no pyspark at all
        return True


# Modules that import streamctl's Python data sources at import time cannot even be collected on
# PySpark 3.5; none of their tests is in the 3.5 leg (`spark_lines`).
collect_ignore = [] if _has_python_data_sources() else ["test_coordinated_sink.py", "test_kafka_source.py"]


@pytest.fixture(autouse=True)
def empty_object_store_buckets() -> Any:
    """After each test, the bucket `chk` of every moto server still running is emptied
    (helpers/s3_fixtures.py SERVED): a later test starts from an empty bucket, and moto's listings
    stay as fast as the test's own keys allow."""
    from helpers import s3_fixtures

    yield
    s3_fixtures.empty_buckets()


@pytest.fixture(scope="session")
def terminal() -> Any:
    """helpers/terminal.py: streamctl as a real process on a pseudo-terminal."""
    return _terminal


@pytest.fixture(scope="session")
def align_pipeline() -> Any:
    """helpers/align_pipeline.py: real PySpark pipelines and their delivery check."""
    return _align_pipeline


@pytest.fixture(scope="session")
def layouts() -> Any:
    """helpers/layouts.py: checkpoints and sinks in Spark's layout, built by hand."""
    return _layouts


class CliResult:
    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.stderr = code, stdout, stderr

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, stdout={self.stdout[:2000]!r}, stderr={self.stderr[:2000]!r})"


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., CliResult]:
    """Run the streamctl app in-process (typer's CliRunner, stdout and stderr kept apart).
    No user config is read: STREAMCTL_CONFIG is unset and the config dir points at an empty dir."""
    from typer.testing import CliRunner

    from streamctl.cli.app import app

    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("STREAMCTL_CONFIG", raising=False)
    monkeypatch.delenv("STREAMCTL_FORMAT", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    # Checkpoints built by the tests are seconds old: without this every inspection would
    # report LIVE_QUERY. Tests of liveness pass --quiet-period themselves.
    monkeypatch.setenv("STREAMCTL_QUIET_PERIOD", "0")
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str, env: dict[str, str] | None = None) -> CliResult:
        runner = CliRunner()
        result = runner.invoke(app, list(args), env=env, catch_exceptions=False)
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return run


@pytest.fixture
def tree_snapshot() -> Callable[[Path], dict[str, tuple[int, int]]]:
    return snapshot_tree

"""Shared fixtures. Tests run with --import-mode=importlib and `python -P`, so helper modules
in tests/ are loaded by path rather than imported as a package."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parent.parent

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


def _load(name: str) -> Any:
    if f"streamctl_tests_{name}" in sys.modules:  # test modules load helpers under the same key
        return sys.modules[f"streamctl_tests_{name}"]
    spec = importlib.util.spec_from_file_location(f"streamctl_tests_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def terminal() -> Any:
    """tests/terminal.py: streamctl as a real process on a pseudo-terminal."""
    return _load("terminal")


_spark = _load("spark_fixtures")
spark = _spark.spark
spark_checkpoints = _spark.spark_checkpoints
fresh_copy = _spark.fresh_copy


@pytest.fixture(scope="session")
def align_pipeline() -> Any:
    """tests/align_pipeline.py (real PySpark pipelines and their delivery check), loaded by path."""
    return _load("align_pipeline")


@pytest.fixture(scope="session")
def layouts() -> Any:
    """tests/test_sinks.py's builders of checkpoints and sinks in Spark's layout, loaded by path."""
    return _load("test_sinks")


_kafka = _load("kafka_fixtures")
kafka_broker = _kafka.kafka_broker
kafka_topic = _kafka.kafka_topic


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


def snapshot_tree(root: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file below root (to prove nothing was written)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            try:
                st = p.lstat()
            except OSError:
                continue
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def tree_snapshot() -> Callable[[Path], dict[str, tuple[int, int]]]:
    return snapshot_tree

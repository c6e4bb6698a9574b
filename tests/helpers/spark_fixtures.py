"""Session-scoped PySpark fixtures: real checkpoints built by `streamctl.fixtures.examples`.

A pytest plugin module. The tests run with --import-mode=importlib and `python -P`; either of
these in tests/conftest.py loads it:

    pytest_plugins = ["tests.spark_fixtures"]

or (what tests/conftest.py does) load this file by path and re-export ``spark``,
``spark_checkpoints`` and ``fresh_copy``. The module has no relative imports, so both work.

Fixtures:

* ``spark`` (session): a small local SparkSession from ``get_spark()``; stopped at session end.
* ``spark_checkpoints`` (session): builds every example scenario once and returns
  ``{name: checkpoint Path}``; each checkpoint sits at ``<root>/<name>/checkpoint`` next to its
  ``input/`` and ``output/`` folders. On PySpark 3.5 (the `./dev test-spark35` leg) only the
  scenarios 3.5 can run (``SPARK35_SCENARIOS``: no checkpoint format 2, no Python data source,
  no ``DataFrame.toArrow``).
* ``fresh_copy`` (function): returns ``copy(name) -> Path``, copying a built scenario (checkpoint
  plus sibling input/output) into a fresh tmp dir, so a test may damage it freely. The copy keeps
  the ``<dir>/<name>/checkpoint`` layout; the returned Path is the copied checkpoint.

Every test using these fixtures should be marked ``@pytest.mark.spark``; those that also hold
on PySpark 3.5 ``@pytest.mark.spark_lines`` (and ``spark4`` on the cases that need Spark 4).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from helpers.trees import copy_tree

__all__ = ["spark", "spark_checkpoints", "fresh_copy", "SPARK35_SCENARIOS", "spark_major"]

#: The example scenarios PySpark 3.5 can run (streamctl.fixtures.examples.SCENARIOS minus
#: agg_rocksdb_v2, coordinated_sink and delta_foreach_batch).
SPARK35_SCENARIOS = ("stateless_file_sink", "agg_hdfs", "agg_rocksdb", "join_hdfs", "dedup_rocksdb")


def spark_major() -> int:
    """The major version of the installed PySpark."""
    import pyspark

    return int(pyspark.__version__.split(".", 1)[0])


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from streamctl.pipeline.session import get_spark

    confs = {}
    if spark_major() < 4:  # Iceberg's Spark runtime exists for 3.5 only here (tests/helpers/iceberg_runtime.py)
        from helpers import iceberg_runtime
        from helpers.paths import REPO

        confs["spark.jars"] = ",".join(iceberg_runtime.jars(REPO / ".cache" / "iceberg"))
    session = get_spark("streamctl-tests", confs)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_checkpoints(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from streamctl.fixtures.examples import build_all

    root = tmp_path_factory.mktemp("spark-examples")
    return build_all(spark, root, None if spark_major() >= 4 else list(SPARK35_SCENARIOS))


@pytest.fixture
def fresh_copy(spark_checkpoints: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        try:
            src_ckpt = spark_checkpoints[name]
        except KeyError:
            raise KeyError(f"no example checkpoint named {name!r}; known: {sorted(spark_checkpoints)}") from None
        dest_root = tmp_path_factory.mktemp(f"copy-{name}")
        # the shared session's state store maintenance may still write a snapshot of a stopped
        # example query: copy_tree copies what the tree holds once quiet, never a temp file it caught
        copy_tree(src_ckpt.parent, dest_root / name)
        _as_if_written_here(src_ckpt.parent, dest_root / name)
        return dest_root / name / src_ckpt.name

    return copy


def _as_if_written_here(src: Path, dest: Path) -> None:
    """A file sink's log names its data files by absolute path: a plain copy's log still names
    the original's (SINK_FILES_MISSING, tests/test_relocation.py). Tests that only want a fresh
    pipeline get the log as Spark would have written it at `dest` (and its Hadoop sidecars)."""
    from streamctl.formats.checksum import hadoop_crc

    for log in dest.rglob("_spark_metadata"):
        for f in log.iterdir():
            if f.is_file() and not f.name.startswith("."):
                text = f.read_bytes()
                new = text.replace(str(src).encode(), str(dest).encode())
                if new != text:
                    st = f.stat()  # its time stays Spark's (orphan files are judged against it)
                    f.write_bytes(new)
                    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
                    crc = f.with_name(f".{f.name}.crc")
                    if crc.exists():
                        cst = crc.stat()
                        crc.write_bytes(hadoop_crc(new))
                        os.utime(crc, ns=(cst.st_atime_ns, cst.st_mtime_ns))


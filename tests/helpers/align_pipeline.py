"""Real PySpark pipelines for the align/drop-sink delivery checks (loaded by path from tests).

    p = Pipeline(root, "dedup_file", spark)       # root/dedup_file/{input,checkpoint,output}
    p.add_input(0, 4); p.run()                    # availableNow, one input file per batch
    ... damage the checkpoint / sink, run `streamctl align --execute` ...
    p.add_input(4, 2); p.run()                    # restart of the same query with more input
    assert p.delivery()["ok"]                      # every id exactly once in the sink

Kinds (`KINDS`):
* ``file``: stateless select -> JSON file sink (``_spark_metadata``); compaction every
  ``COMPACT_INTERVAL`` batches (so tests cross compaction points quickly);
* ``dedup_file``: ``dropDuplicates(["id"])`` (stateful; HDFS provider) -> JSON file sink; every
  input file repeats the first id of the previous file, so state must remember it;
* ``dedup_rocksdb``: the same with the RocksDB provider and changelog checkpointing;
* ``coordinated``: stateless -> ``repartition(2)`` -> streamctl's coordinated sink (two writers);
* ``tws``: ``transformWithState`` (streamctl.fixtures.state_features: map, list and value state,
  TTL, processing-time timers; RocksDB with changelog checkpointing) deduplicating the repeats ->
  JSON file sink; ``tws_v2``: the same with checkpoint format 2 (state unique ids in commits/);
  ``tws_pandas``: the same processor through ``transformWithStateInPandas`` (pandas DataFrames in
  and out, the same column families and timers), checkpoint format 1;
* ``dedup_offsets_v2``: ``dedup_file`` with offsets log version 2 (`<sourceId>:<offset>` lines,
  ``spark.sql.streaming.offsetLog.formatVersion=2``, Spark 4.3);
* ``named_source``: ``file`` with a named source (``DataStreamReader.name("orders")`` and
  ``spark.sql.streaming.queryEvolution.enableSourceEvolution``, PySpark 4.2+): offsets v2 lines
  ``orders:<offset>`` and ``sources/orders/``.
  In processing-time mode the operator always asks for another (no-data) batch, so availableNow
  never ends (Spark 4.3); these kinds run one `once` trigger per new input file instead, files
  waiting in ``pending/`` until their run (with none pending: one `once` run, which replays one
  rolled-back epoch).

Input file i holds ids ``i*ROWS .. i*ROWS+ROWS-1`` (plus the repeat); the delivery check reads only
what the sink's own log commits (pyarrow-free: JSON lines) and compares with every id written.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from helpers.trees import copy_tree, wait_quiet

ROWS = 5
COMPACT_INTERVAL = 3
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
KINDS = ("file", "dedup_file", "dedup_rocksdb", "coordinated", "tws", "tws_v2", "tws_pandas", "dedup_offsets_v2",
         "named_source")
_CONFS = {
    "file": {},
    "dedup_file": {"spark.sql.streaming.stateStore.providerClass": HDFS},
    "dedup_rocksdb": {"spark.sql.streaming.stateStore.providerClass": ROCKSDB,
                      "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"},
    "coordinated": {},
    "tws": {"spark.sql.streaming.stateStore.providerClass": ROCKSDB,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"},
    "tws_v2": {"spark.sql.streaming.stateStore.providerClass": ROCKSDB,
               "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
               "spark.sql.streaming.stateStore.checkpointFormatVersion": "2"},
    "dedup_offsets_v2": {"spark.sql.streaming.stateStore.providerClass": HDFS,
                         "spark.sql.streaming.offsetLog.formatVersion": "2"},
    "named_source": {"spark.sql.streaming.queryEvolution.enableSourceEvolution": "true"},
    "tws_pandas": {"spark.sql.streaming.stateStore.providerClass": ROCKSDB,
                   "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"},
}
_BASE = {"spark.sql.streaming.fileSink.log.compactInterval": str(COMPACT_INTERVAL),
         "spark.sql.streaming.stateStore.checkpointFormatVersion": "1",
         "spark.sql.streaming.minBatchesToRetain": "100"}


class Pipeline:
    def __init__(self, root: Path, kind: str, spark: Any, name: str | None = None, extra_confs: dict[str, str] | None = None,
                 reader_options: dict[str, str] | None = None) -> None:
        assert kind in KINDS, kind
        self.kind = kind
        self.spark = spark
        self.base = Path(root) / (name or kind)
        self.input = self.base / "input"
        self.checkpoint = self.base / "checkpoint"
        self.output = self.base / "output"
        self.files = 0
        self.extra = dict(extra_confs or {})
        self.reader_options = dict(reader_options or {})  # e.g. cleanSource=archive

    # -- input ------------------------------------------------------------------------------
    def ids_of(self, i: int) -> list[int]:
        return list(range(i * ROWS, i * ROWS + ROWS))

    def add_input(self, start: int, count: int) -> None:
        self.input.mkdir(parents=True, exist_ok=True)
        folder = self.base / "pending" if self.kind.startswith("tws") else self.input
        folder.mkdir(parents=True, exist_ok=True)
        base_mtime = time.time() - 3600
        for i in range(start, start + count):
            rows = [{"id": n, "key": f"k{n % 4}"} for n in self.ids_of(i)]
            if i > 0 and self.kind.startswith(("dedup", "tws")):
                rows.append({"id": (i - 1) * ROWS, "key": f"k{((i - 1) * ROWS) % 4}"})  # a repeat
            path = folder / f"part-{i:05d}.json"
            tmp = folder / f".part-{i:05d}.json.tmp"
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
            os.utime(tmp, (base_mtime + i, base_mtime + i))
            tmp.rename(path)
        self.files = max(self.files, start + count)

    def expected_ids(self) -> list[int]:
        return [n for i in range(self.files) for n in self.ids_of(i)]

    # -- the query ----------------------------------------------------------------------------
    def writer(self) -> Any:
        spark = self.spark
        reader = spark.readStream.schema("id BIGINT, key STRING").option("maxFilesPerTrigger", 1)
        for k, v in self.reader_options.items():
            reader = reader.option(k, v)
        if self.kind == "named_source":
            reader = reader.name("orders")
        df = reader.json(str(self.input))
        if self.kind.startswith("dedup"):
            df = df.dropDuplicates(["id"])
        elif self.kind == "tws_pandas":
            from streamctl.fixtures.state_features import tws_pandas_dedup

            df = tws_pandas_dedup(df)
        elif self.kind.startswith("tws"):
            from streamctl.fixtures.state_features import tws_dedup

            df = tws_dedup(df)
        if self.kind == "coordinated":
            from streamctl.pipeline.coordinated_sink import SHORT_NAME, register

            register(spark)
            w = df.repartition(2).writeStream.format(SHORT_NAME).outputMode("append").option("path", str(self.output))
        else:
            w = df.writeStream.format("json").outputMode("append").option("path", str(self.output))
        w = w.option("checkpointLocation", str(self.checkpoint)).queryName(f"align_{self.kind}")
        return w.trigger(once=True) if self.kind.startswith("tws") else w.trigger(availableNow=True)

    @contextmanager
    def confs(self) -> Iterator[None]:
        """The kind's session confs while the block runs (the session is shared: put back after)."""
        confs = dict(_BASE, **_CONFS[self.kind], **self.extra)
        saved = {k: self.spark.conf.get(k, None) for k in confs}
        try:
            for k, v in confs.items():
                self.spark.conf.set(k, v)
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    self.spark.conf.unset(k)
                else:
                    self.spark.conf.set(k, v)

    def run(self) -> None:
        """Start the query (availableNow), wait until it has read every input file; raise what Spark
        raises, once the tree is quiet: a task of the aborted stage or the state store maintenance
        thread may still write for a moment after the query failed (and race a put_back)."""
        try:
            self._run()
        except BaseException:
            wait_quiet(self.base)
            raise

    def _run(self) -> None:
        with self.confs():
            if not self.kind.startswith("tws"):
                self.writer().start().awaitTermination()
                return
            pending = sorted((self.base / "pending").glob("part-*.json"))
            for path in pending:
                path.rename(self.input / path.name)
                self.writer().start().awaitTermination()
            if not pending:  # one batch: a replay after a rollback reads one epoch's files per start
                self.writer().start().awaitTermination()

    # -- the delivery check -------------------------------------------------------------------
    def sink_ids(self) -> list[int]:
        ids: list[int] = []
        if self.kind == "coordinated":
            from streamctl.formats.coordinated_log import committed_files

            for path in committed_files(str(self.output)):
                with open(path) as fh:
                    ids.extend(int(json.loads(line)["id"]) for line in fh if line.strip())
            return ids
        return sink_log_ids(self.output / "_spark_metadata")

    def delivery(self) -> dict[str, Any]:
        got = Counter(self.sink_ids())
        want = Counter(self.expected_ids())
        missing = sorted(i for i in want if got[i] < want[i])
        dupes = sorted(i for i in got if got[i] > 1)
        unknown = sorted(i for i in got if i not in want)
        return {"rows": sum(got.values()), "expected": sum(want.values()), "missing": missing, "duplicates": dupes,
                "unexpected": unknown, "ok": not missing and not dupes and not unknown}


# -- helpers for the delivery-check tests (appended) -------------------------------------------
def sink_log_ids(log: Path) -> list[int]:
    """Every id in the data files a file-sink log (`_spark_metadata`, or an archived copy)
    commits (read here by hand, not by streamctl's reader: the check must not trust what it
    checks)."""
    ids: list[int] = []
    for path in logged_sink_paths(log):
        with open(path) as fh:
            ids.extend(int(json.loads(line)["id"]) for line in fh if line.strip())
    return ids


def logged_sink_paths(log: Path) -> list[str]:
    """The local paths of the data files a file-sink log commits, each once, in log order: the
    newest compaction and the batches after it."""
    from urllib.parse import unquote, urlparse

    batches: dict[int, bool] = {}
    for name in os.listdir(log):
        stem, _, ext = name.partition(".")
        if stem.isdigit() and ext in ("", "compact"):
            batches[int(stem)] = ext == "compact"
    compacts = [b for b, c in batches.items() if c]
    first = max(compacts) if compacts else 0
    files: dict[str, None] = {}
    for b in sorted(x for x in batches if x >= first):
        path = log / (f"{b}.compact" if batches[b] else str(b))
        if not path.is_file():  # a named pipe would block every reader of the sink: none can read it
            raise OSError(f"{path}: not a regular file")
        lines = path.read_text().split("\n")
        assert lines[0] == "v1", (b, lines[:1])
        for line in lines[1:]:
            if line.strip():
                files[unquote(urlparse(json.loads(line)["path"]).path)] = None
    return list(files)


def wait_for(pred: Any, timeout: float, what: str, step: float = 0.05) -> Any:
    """`pred()`'s first true value, polled every `step` s; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def newest(folder: Path) -> int | None:
    """The highest numbered file in `folder` (offsets/, commits/), None for none or no folder."""
    ids = [int(n) for n in os.listdir(folder) if n.isdigit()] if folder.exists() else []
    return max(ids) if ids else None


class Lab:
    """A pipeline and its saved folders, put back IN PLACE (the file sink's log holds absolute
    paths) before a test acts on them."""

    def __init__(self, p: Pipeline, snaps: Path) -> None:
        self.p = p
        self.snaps = snaps

    @property
    def base(self) -> Path:
        return self.p.base

    @property
    def ckpt(self) -> Path:
        return self.p.checkpoint

    @property
    def out(self) -> Path:
        return self.p.output

    def save(self, name: str) -> None:
        copy_tree(self.base, self.snaps / name, replace=True)

    def put_back(self, name: str) -> None:
        """After a failed run, a task of the aborted stage or the state store maintenance thread
        may still write below the base for a moment: copy_tree waits until it is quiet."""
        copy_tree(self.snaps / name, self.base, replace=True)

    def align_args(self, *extra: str) -> list[str]:
        return ["align", str(self.ckpt), "--sink", str(self.out), *extra]


def build(root: Path, kind: str, spark: Any, files: int, **kw: Any) -> Pipeline:
    """A pipeline run over input files 0..files-1 (one batch each), quiet, and checked: every id
    delivered exactly once (what a test then damages or acts on)."""
    p = Pipeline(root, kind, spark, **kw)
    p.add_input(0, files)
    p.run()
    wait_quiet(p.base)
    assert p.delivery()["ok"], p.delivery()
    return p


def remove_with_companions(folder: Path, name: str) -> list[str]:
    """Delete `name` in `folder` with its checksum companions (`.name.crc`, `name.crc`,
    `.name.crc.crc`); returns the names deleted."""
    gone = []
    for n in (name, f".{name}.crc", f"{name}.crc", f".{name}.crc.crc"):
        p = Path(folder) / n
        if p.exists():
            p.unlink()
            gone.append(n)
    return gone

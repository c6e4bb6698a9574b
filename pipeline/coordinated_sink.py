"""streamctl's coordinated sink: a PySpark 4.x Python data source (streaming writer) whose
micro-batches (epochs) become visible through one atomic commit record per epoch.

    from streamctl.pipeline.coordinated_sink import register
    register(spark)
    (df.writeStream.format("streamctl-coordinated")
       .option("path", "/some/dir")
       .option("checkpointLocation", "/some/checkpoint")
       .start())

**Local file system only.** ``path`` must be an absolute local path or a ``file://`` URI
(``file:///some/dir``, ``file:/some/dir``); anything else (``s3a://``, ``hdfs://``, a relative
path) is rejected when the query starts. Tasks (in Spark's Python workers) and the commit (in a
Python worker on the driver) use ``os``/``shutil`` directly, so every executor must see the same
directory: fine for ``local[*]``, wrong for a cluster without a shared mount.

## Layout

```
<path>/
  _staging/<epoch>/part-<partition:05d>-<attempt>-<uuid>.jsonl   files written by tasks (write(iterator))
  data/epoch=<epoch>/part-<partition:05d>-<attempt>-<uuid>.jsonl published files (moved from staging by commit)
  _commits/<epoch>.json                                          the epoch's commit record, written atomically
  _commits/.<epoch>.json.<uuid>.tmp                              temp file of an in-progress commit record
```

* ``<epoch>`` is the micro-batch id (the ``batchId`` of ``offsets/<batchId>`` in the checkpoint),
  in decimal without padding. ``<partition>`` is the write task's partition id, zero-padded to 5
  digits; ``<attempt>`` is the task attempt number (decimal, unpadded); ``<uuid>`` is a random
  UUID in its 36-character text form (``8-4-4-4-12`` lowercase hex), new for every task attempt.
* A data file holds one JSON object per line (UTF-8, each line newline-terminated), one line per row, keyed
  by column name. Timestamps are ISO-8601 strings (``TIMESTAMP``: UTC with offset,
  ``2024-01-01T00:00:00+00:00``; ``TIMESTAMP_NTZ``: no offset), dates ISO-8601, decimals strings,
  binary base64, non-finite floats the strings ``NaN``/``Infinity``/``-Infinity``; structs are
  objects, arrays lists, maps objects with string keys.
* A task whose partition has no rows writes no file (its writer entry has ``rows: 0`` and
  ``files: []``), but it is still a writer of the epoch.

Commit record ``_commits/<epoch>.json`` (one JSON object, keys in this order):

```
{"version": 1, "epoch": <epoch>, "query_id": <query id, or null>, "committed_at_ms": <int>,
 "num_writers": <number of write tasks>,
 "writers": [{"partition": <p>, "attempt": <a>, "rows": <n>,
              "files": ["data/epoch=<epoch>/part-<p:05d>-<a>-<uuid>.jsonl", ...]}, ...],
 "rows": <total rows>}
```

* ``writers`` is sorted by ``partition``, one entry per write task of the epoch; ``files`` are
  paths relative to ``<path>``, ``/``-separated. ``rows`` is the sum of the writers' rows.
* ``query_id`` is the streaming query id (the checkpoint's ``metadata`` id, Spark's local property
  ``sql.streaming.queryId`` as seen by the write tasks).
* ``committed_at_ms`` is the wall-clock time (epoch milliseconds) the record was written.

Commit protocol and idempotency rules:

1. Tasks write their rows to ``_staging/<epoch>/`` only; nothing there is visible to readers.
2. ``commit(epoch)`` runs once all tasks succeeded. If ``_commits/<epoch>.json`` already exists,
   the epoch was committed before (Spark replays an epoch whose ``commits/<epoch>`` is missing
   from the checkpoint): the staged files of this replay are duplicates; they are deleted,
   ``_staging/<epoch>/`` is removed if empty, and nothing else changes.
3. Otherwise each staged file is renamed to ``data/epoch=<epoch>/`` (same file name), then the
   commit record is written atomically: ``_commits/.<epoch>.json.<uuid>.tmp`` is written and
   fsynced, then hard-linked to ``_commits/<epoch>.json``, which never overwrites; if the record
   appeared meanwhile, the other one wins and the temp file is discarded. Then
   ``_staging/<epoch>/`` is removed if empty.
4. **The commit record is the only source of truth.** An epoch is committed if and only if
   ``_commits/<epoch>.json`` exists; its data are exactly the files the record names. Files in
   ``data/epoch=<E>/`` that no record names (a publish interrupted before its record was
   written, then replayed) and files left in ``_staging/`` (tasks or epochs that never committed)
   are orphans, never data. A ``.tmp`` file in ``_commits/`` is an interrupted record write.
5. ``abort(epoch)`` (a task failed, or commit raised) deletes the epoch's staged files and
   ``_staging/<epoch>/`` entirely; it never touches ``data/`` or ``_commits/``.

Readers read the files the records name, through ``committed_files(path)``: it parses every
record as ``streamctl inspect sink`` does, so a reader fails where streamctl says UNREADABLE
(docs/coordinated-sink.md, *Reading the sink*).

Fault injection (for tests; both options take an epoch number):

* ``crashBeforeCommitEpoch = N``: ``commit(N)`` raises at its start, so the staged files stay
  in ``_staging/N/`` and there is no ``_commits/N.json`` - a driver that crashed after the tasks
  finished. The query fails.
* ``failAfterPublishEpoch = N``: ``commit(N)`` raises after moving the files to
  ``data/epoch=N/`` but before writing the commit record - published files without a record.
  The query fails.

Spark calls ``abort`` after a failed ``commit``; a real crashed driver would not. To leave the
crash's traces on disk, ``abort(N)`` does nothing when one of these options names ``N`` and every
task reported success (no ``None`` message); an abort after a task failure still cleans up.
Restarting the query without the option replays epoch ``N`` and commits it once (rule 3).

How a task learns its epoch: PySpark 4.1 passes the batch id only to ``commit``/``abort``, but
``MicroBatchExecution`` sets the local property ``streaming.sql.batchId`` on every micro-batch
job (and ``sql.streaming.queryId``); Python tasks see them through
``TaskContext.get().getLocalProperty``. ``write`` fails loudly when the property is missing
(e.g. a batch ``df.write`` or a continuous-mode query), and ``commit`` refuses messages whose
epoch is not the batch id it commits.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import math
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence
from urllib.parse import unquote, urlparse

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DateType,
    DecimalType,
    MapType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from streamctl.formats.coordinated_log import (
    COORD_COMMITS,
    COORD_DATA,
    COORD_STAGING,
    commit_record,
    commit_record_name,
    committed_files,
    epoch_folder,
    serialize_commit_record,
    writer_entry,
)
from streamctl.inspectors.outputs import fsync_dir

__all__ = [
    "SHORT_NAME",
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "CoordinatedSinkDataSource",
    "CoordinatedSinkWriter",
    "CoordinatedCommitMessage",
    "InjectedFault",
    "register",
    "local_path",
    "committed_files",
]

SHORT_NAME = "streamctl-coordinated"
#: Local properties Spark's MicroBatchExecution sets on every micro-batch job.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


OPT_PATH = "path"
OPT_CRASH_BEFORE_COMMIT = "crashBeforeCommitEpoch"
OPT_FAIL_AFTER_PUBLISH = "failAfterPublishEpoch"


class InjectedFault(RuntimeError):
    """Raised by the fault-injection options (crashBeforeCommitEpoch, failAfterPublishEpoch)."""


@dataclass
class CoordinatedCommitMessage(WriterCommitMessage):
    """What one write task reports to commit(): its partition, attempt, row count and the staged
    files (relative to the sink path, ``/``-separated). ``epoch`` and ``query_id`` are what the
    task read from the job's local properties; commit() checks ``epoch`` against its batch id."""

    partition: int
    attempt: int
    rows: int
    files: list[str] = field(default_factory=list)
    epoch: Optional[int] = None
    query_id: Optional[str] = None


def register(spark: Any) -> None:
    """Register the sink under the short name ``streamctl-coordinated`` in this session."""
    spark.dataSource.register(CoordinatedSinkDataSource)


def local_path(value: Optional[str]) -> str:
    """The absolute local path of a plain path or ``file:`` URI; ValueError for anything else."""
    if not value:
        raise ValueError(f"the {SHORT_NAME} sink needs option 'path' (a local directory)")
    if value.startswith("file:"):
        parsed = urlparse(value)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{SHORT_NAME}: only local file:// URIs are supported, got {value!r}")
        path = unquote(parsed.path)
    elif "://" in value:
        raise ValueError(f"{SHORT_NAME}: only local file system paths are supported, got {value!r}")
    else:
        path = value
    if not os.path.isabs(path):
        raise ValueError(f"{SHORT_NAME}: option 'path' must be absolute, got {value!r}")
    return os.path.normpath(path)


def _lookup(options: Any, key: str) -> Optional[str]:
    """options[key], case-insensitively (a CaseInsensitiveDict on the workers, a dict in tests)."""
    for k, v in dict(options or {}).items():
        if k.lower() == key.lower():
            return v
    return None


def _int_option(options: Any, key: str) -> Optional[int]:
    raw = _lookup(options, key)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{SHORT_NAME}: option {key!r} must be an integer epoch, got {raw!r}") from None


class CoordinatedSinkDataSource(DataSource):
    """``streamctl-coordinated``: a streaming-only sink; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> CoordinatedSinkWriter:
        return CoordinatedSinkWriter(
            local_path(_lookup(self.options, OPT_PATH)),
            schema,
            crash_before_commit_epoch=_int_option(self.options, OPT_CRASH_BEFORE_COMMIT),
            fail_after_publish_epoch=_int_option(self.options, OPT_FAIL_AFTER_PUBLISH),
        )


# --------------------------------------------------------------------------- row -> JSON


def _to_json(value: Any, dtype: Optional[DataType]) -> Any:
    """A JSON-able form of one value of `dtype` (see the module docstring)."""
    if value is None:
        return None
    if isinstance(dtype, StructType):
        items = value.asDict(recursive=False) if hasattr(value, "asDict") else dict(value)
        return {f.name: _to_json(items.get(f.name), f.dataType) for f in dtype.fields}
    if isinstance(dtype, ArrayType):
        return [_to_json(v, dtype.elementType) for v in value]
    if isinstance(dtype, MapType):
        return {str(_to_json(k, dtype.keyType)): _to_json(v, dtype.valueType) for k, v in value.items()}
    if isinstance(value, _dt.datetime):
        if isinstance(dtype, TimestampNTZType):
            return value.isoformat()
        if isinstance(dtype, TimestampType) or value.tzinfo is not None:
            # PySpark hands TIMESTAMP values over as naive local-time datetimes.
            return value.astimezone(_dt.timezone.utc).isoformat()
        return value.isoformat()
    if isinstance(value, _dt.date) or isinstance(dtype, DateType):
        return value.isoformat()
    if isinstance(value, decimal.Decimal) or isinstance(dtype, DecimalType):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)) or isinstance(dtype, BinaryType):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _to_json(v, None) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v, None) for v in value]
    return str(value)


def _row_line(row: Any, schema: StructType) -> str:
    return json.dumps(_to_json(row, schema), ensure_ascii=False, separators=(",", ":")) + "\n"


# --------------------------------------------------------------------------- file helpers


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _rmdir_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:  # not empty, or gone
        pass


# --------------------------------------------------------------------------- the writer


class CoordinatedSinkWriter(DataSourceStreamWriter):
    """Stages rows per task, publishes them per epoch with one atomic commit record."""

    def __init__(
        self,
        path: str,
        schema: StructType,
        *,
        crash_before_commit_epoch: Optional[int] = None,
        fail_after_publish_epoch: Optional[int] = None,
    ) -> None:
        self.path = path
        self.schema = schema
        self.crash_before_commit_epoch = crash_before_commit_epoch
        self.fail_after_publish_epoch = fail_after_publish_epoch

    # ---- paths

    def _abs(self, rel: str) -> str:
        return os.path.join(self.path, *rel.split("/"))

    def _staged_rel(self, rel: str, epoch: int) -> str:
        """Check that a message's file is a staging file of `epoch` (commit and abort delete and
        move only those) and return it."""
        parts = rel.split("/")
        if len(parts) != 3 or parts[0] != COORD_STAGING or parts[1] != str(epoch) or parts[2] in ("", ".", ".."):
            raise ValueError(f"{SHORT_NAME}: {rel!r} is not a staging file of epoch {epoch}")
        return rel

    # ---- executors

    def write(self, iterator: Iterator[Any]) -> CoordinatedCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError(f"{SHORT_NAME}: write() must run in a Spark task (no TaskContext)")
        raw = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if raw is None or not str(raw).strip().lstrip("-").isdigit():
            raise RuntimeError(
                f"{SHORT_NAME}: the task has no micro-batch id (local property {BATCH_ID_PROPERTY!r} "
                f"is {raw!r}); this sink works only in micro-batch streaming queries")
        epoch = int(raw)
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) or None
        partition, attempt = ctx.partitionId(), ctx.attemptNumber()

        rel = f"{COORD_STAGING}/{epoch}/part-{partition:05d}-{attempt}-{uuid.uuid4()}.jsonl"
        target = self._abs(rel)
        rows = 0
        out = None
        try:
            for row in iterator:
                if out is None:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    out = open(target, "w", encoding="utf-8", newline="\n")
                out.write(_row_line(row, self.schema))
                rows += 1
            if out is not None:
                out.flush()
                os.fsync(out.fileno())
                out.close()
                out = None
        except BaseException:
            if out is not None:
                out.close()
                _remove(target)
            raise
        return CoordinatedCommitMessage(
            partition=partition, attempt=attempt, rows=rows, files=[rel] if rows else [],
            epoch=epoch, query_id=query_id)

    # ---- driver

    def commit(self, messages: Sequence[Optional[WriterCommitMessage]], batchId: int) -> None:
        epoch = int(batchId)
        if self.crash_before_commit_epoch == epoch:
            raise InjectedFault(f"{SHORT_NAME}: {OPT_CRASH_BEFORE_COMMIT}={epoch}: crashing before commit({epoch})")
        msgs = self._checked(messages, epoch)
        staging_dir = self._abs(f"{COORD_STAGING}/{epoch}")
        commits_dir = self._abs(COORD_COMMITS)
        record_path = os.path.join(commits_dir, commit_record_name(epoch))

        if os.path.exists(record_path):
            # A replay of a committed epoch: what the tasks staged duplicates published data.
            for m in msgs:
                for rel in m.files:
                    _remove(self._abs(self._staged_rel(rel, epoch)))
            _rmdir_if_empty(staging_dir)
            return

        data_rel = f"{COORD_DATA}/{epoch_folder(epoch)}"
        data_dir = self._abs(data_rel)
        os.makedirs(data_dir, exist_ok=True)
        writers: list[dict[str, Any]] = []
        for m in sorted(msgs, key=lambda m: (m.partition, m.attempt)):
            published = []
            for rel in m.files:
                name = self._staged_rel(rel, epoch).split("/")[-1]
                src, dst = self._abs(rel), os.path.join(data_dir, name)
                try:
                    os.rename(src, dst)
                except FileNotFoundError:
                    if not os.path.exists(dst):
                        raise FileNotFoundError(
                            f"{SHORT_NAME}: staged file {rel} of epoch {epoch} is gone") from None
                published.append(f"{data_rel}/{name}")
            writers.append(writer_entry(m.partition, m.attempt, m.rows, published))
        fsync_dir(data_dir)
        fsync_dir(staging_dir)

        if self.fail_after_publish_epoch == epoch:
            raise InjectedFault(
                f"{SHORT_NAME}: {OPT_FAIL_AFTER_PUBLISH}={epoch}: failing after publishing epoch {epoch}, "
                "before its commit record")

        query_ids = sorted({m.query_id for m in msgs if m.query_id})
        record = commit_record(epoch, query_ids[0] if len(query_ids) == 1 else None, int(time.time() * 1000), writers)
        self._write_record(commits_dir, record_path, epoch, record)
        _rmdir_if_empty(staging_dir)

    def abort(self, messages: Sequence[Optional[WriterCommitMessage]], batchId: int) -> None:
        epoch = int(batchId)
        injected = epoch in (self.crash_before_commit_epoch, self.fail_after_publish_epoch)
        if injected and all(m is not None for m in messages):
            return  # the simulated crash happened in commit(); a dead driver runs no abort
        for m in messages:
            if isinstance(m, CoordinatedCommitMessage):
                for rel in m.files:
                    try:
                        _remove(self._abs(self._staged_rel(rel, epoch)))
                    except ValueError:
                        continue
        shutil.rmtree(self._abs(f"{COORD_STAGING}/{epoch}"), ignore_errors=True)

    # ---- helpers

    @staticmethod
    def _checked(messages: Sequence[Optional[WriterCommitMessage]], epoch: int) -> list[CoordinatedCommitMessage]:
        msgs = []
        for m in messages:
            if not isinstance(m, CoordinatedCommitMessage):
                raise RuntimeError(f"{SHORT_NAME}: commit({epoch}) got an unexpected message {m!r}")
            if m.epoch != epoch:
                raise RuntimeError(
                    f"{SHORT_NAME}: a task of partition {m.partition} staged epoch {m.epoch}, "
                    f"but Spark commits epoch {epoch}")
            msgs.append(m)
        return msgs

    @staticmethod
    def _write_record(commits_dir: str, record_path: str, epoch: int, record: dict) -> None:
        os.makedirs(commits_dir, exist_ok=True)
        tmp = os.path.join(commits_dir, f".{commit_record_name(epoch)}.{uuid.uuid4()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(serialize_commit_record(record))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, record_path)  # never overwrites: FileExistsError if it is there
            except FileExistsError:
                pass  # another commit of this epoch won; ours is discarded
            except OSError:
                # No hard links on this file system: rename, checking first (a tiny race window).
                if not os.path.exists(record_path):
                    os.rename(tmp, record_path)
        finally:
            _remove(tmp)
        fsync_dir(commits_dir)

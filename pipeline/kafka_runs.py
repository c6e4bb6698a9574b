"""Running a query on streamctl's Kafka source until it has caught up (pipeline/kafka_source.py,
its docstring's *How it runs*): ``Trigger.AvailableNow`` reads one bounded batch only with
``maxOffsetsPerTrigger``, so a processing-time trigger runs until the checkpoint has committed a
batch reaching the end offsets seen at the start. Needs neither PySpark nor kafka-python at import."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from streamctl.formats.kafka_offsets import SparkOffsets, flat
from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR

Offsets = SparkOffsets  # Spark's Kafka offset JSON: formats/kafka_offsets.py


def offsets_reached(offsets: Mapping[str, Mapping[str, Any]], target: Mapping[str, Mapping[str, Any]]) -> bool:
    """True when every partition of `target` is in `offsets` at or beyond its target offset."""
    have = flat(offsets)
    return all(tp in have and have[tp] >= off for tp, off in flat(target).items())


def last_committed_source_offset(checkpoint: Path, source_index: int = 0) -> tuple[Optional[int], Optional[str]]:
    """(batch id, the source's offset line as Spark wrote it, ``-`` for none yet) of the latest
    batch that has both ``offsets/N`` and ``commits/N`` in `checkpoint`; (None, None) when there is
    none. ``offsets/N`` is read by the one reader of that format (inspectors/logs.py parse_offsets)."""
    from streamctl.formats.offsets import parse_offsets

    ckpt = Path(checkpoint)
    try:
        commits = {int(n) for n in os.listdir(ckpt / COMMITS_DIR) if n.isdigit()}
    except FileNotFoundError:
        return None, None
    for batch in sorted(commits, reverse=True):
        path = ckpt / OFFSETS_DIR / str(batch)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        source = next((s for s in parse_offsets(data, str(path), batch).sources if s.source_id == source_index), None)
        if source is None:
            return batch, None
        return batch, "-" if source.raw is None else source.raw
    return None, None


def run_until_caught_up(
    start_query: Callable[[], Any],
    checkpoint: Path,
    target: Offsets,
    timeout_s: float = 300.0,
    source_index: int = 0,
    poll_s: float = 0.2,
) -> Any:
    """Run a streaming query with a processing-time trigger until it has committed a batch whose
    end offsets reach `target` (e.g. :func:`current_end_offsets` taken before the start), then stop
    it and return it. ``Trigger.AvailableNow`` is no substitute with ``maxOffsetsPerTrigger``: it
    reads one bounded batch only (see the module docstring).

    `start_query()` must start the query (``.start()``) on `checkpoint`. Raises the query's
    exception if it fails, TimeoutError after `timeout_s` (the query is stopped first).

    A query that fails while it starts because its Python source's worker did not connect back
    (Spark gives a new Python worker a fixed 10 s, which a loaded machine can exceed) is started
    again, at most twice: nothing ran, so nothing of it is in the checkpoint."""
    query = start_query()
    deadline = time.monotonic() + timeout_s
    restarts = 0
    try:
        while True:
            batch, line = last_committed_source_offset(Path(checkpoint), source_index)
            if line and line != "-" and offsets_reached(json.loads(line), target):
                return query
            if not query.isActive:
                exc = query.exception()
                if exc is not None and restarts < 2 and _worker_did_not_connect(exc, query):
                    restarts += 1
                    query = start_query()
                    continue
                if exc is not None:
                    raise exc
                raise RuntimeError(f"query stopped before reaching {json.dumps(target)} "
                                   f"(last committed batch {batch}: {line})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"query did not reach {json.dumps(target)} within {timeout_s:.0f}s "
                                   f"(last committed batch {batch}: {line})")
            time.sleep(poll_s)
    finally:
        if query.isActive:
            query.stop()
        try:
            query.awaitTermination(60)
        except Exception:  # noqa: BLE001 - a failure is re-raised above or reported by exception()
            pass


def _worker_did_not_connect(exc: BaseException, query: Any) -> bool:
    """The query failed before its first batch of this run because a Python worker did not
    connect back in time (Spark's PythonWorkerFactory: "Python worker failed to connect back")."""
    return "Python worker failed to connect back" in str(exc) and query.lastProgress is None

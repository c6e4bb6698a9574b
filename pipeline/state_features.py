"""A `transformWithState` processor for the newer-state-feature checkpoints (tests, examples).

`DedupProcessor` keeps, per grouping key, several column families in one RocksDB store:
- ``seen`` (map state, TTL 1 h): id -> 1, the ids already emitted; a repeated id is dropped, so a
  restart that loses this state delivers it twice (the delivery check sees it);
- ``recent`` (list state): the ids of the key's newest batch;
- ``count`` (value state, TTL 1 h): how many ids the key has emitted;
- a processing-time timer per key (one hour ahead; its handler clears ``recent``).

TTL and processing-time timers add Spark's own column families ($ttl_*, $procTimers_*). Lives in
the package, not in tests/, because Spark's Python workers unpickle it by reference.
"""
from __future__ import annotations

from typing import Any, Iterator

TWS_OUTPUT = "id BIGINT, key STRING"
TTL_MS = 3_600_000

try:  # pyspark >= 4.1 (transformWithState); the class is only defined where Spark has the API
    from pyspark.sql.streaming import StatefulProcessor
except ImportError:  # pragma: no cover - older PySpark: no transformWithState
    StatefulProcessor = object  # type: ignore[assignment,misc]


class DedupProcessor(StatefulProcessor):  # type: ignore[misc,valid-type]
    def init(self, handle: Any) -> None:
        self.handle = handle
        self.seen = handle.getMapState("seen", "id BIGINT", "one INT", TTL_MS)
        self.recent = handle.getListState("recent", "id BIGINT")
        self.count = handle.getValueState("count", "n BIGINT", TTL_MS)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any = None) -> Iterator[Any]:
        from pyspark.sql import Row

        fresh: list[int] = []
        for row in rows:
            if row.id not in fresh and not self.seen.containsKey((row.id,)):
                fresh.append(row.id)
        for i in fresh:
            self.seen.updateValue((i,), (1,))
        if fresh:
            self.recent.put([(i,) for i in fresh])
            old = self.count.get()[0] if self.count.exists() else 0
            self.count.update((old + len(fresh),))
            if timerValues is not None and not list(self.handle.listTimers()):
                self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + TTL_MS)
        for i in fresh:
            yield Row(id=i, key=key[0])

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        self.recent.clear()
        return iter(())

    def close(self) -> None:
        pass


def tws_dedup(df: Any) -> Any:
    """`df` (id, key) -> ids deduplicated per key by `DedupProcessor` (append, processing time)."""
    return df.groupBy("key").transformWithState(DedupProcessor(), TWS_OUTPUT, "Append", "ProcessingTime")

"""What the inspection of one checkpoint returns: `QueryInspection`, its operators' state
(`OperatorReport`) and its parallel writers (`Writer`), each with the record of the JSON contract."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR
from streamctl.formats.offsets import OffsetEntry
from streamctl.inspectors.findings import Finding, finding_records, verdict_of
from streamctl.inspectors.logs import LogListing
from streamctl.inspectors.sources import SourceInfo
from streamctl.inspectors.state_restore import StoreStatus

if TYPE_CHECKING:  # sinks load only when a sink is inspected: keep `inspect epochs` start-up lean
    from streamctl.inspectors.sinks import SinkLog


@dataclass(frozen=True, slots=True)
class Writer:
    """One parallel writer and the epochs it can restart from."""

    name: str  # "offsets", "commits", "state/<op>/<partition>/<store>"
    kind: str  # "wal" | "commit_log" | "state_store"
    first: Optional[int]
    last: Optional[int]
    status: str  # ok | behind | ahead | broken | empty

    def to_record(self) -> dict[str, Any]:
        return {"writer": self.name, "kind": self.kind, "first": self.first, "last": self.last, "status": self.status}


@dataclass(frozen=True, slots=True)
class OperatorReport:
    operator_id: int
    name: Optional[str]
    num_partitions: Optional[int]
    num_partitions_source: Optional[str]  # "operator_metadata" | "offsets_conf" | None
    metadata_version: Optional[int]
    store_names: tuple[str, ...]
    partitions_found: tuple[int, ...]
    stores: tuple[StoreStatus, ...]

    @property
    def provider(self) -> str:
        kinds = {s.provider for s in self.stores if s.provider not in ("unknown",)}
        return kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "unknown")

    def summary(self) -> dict[str, Any]:
        chains: dict[str, int] = {}
        for s in self.stores:
            chains[s.chain] = chains.get(s.chain, 0) + 1
        durable = [s.durable_version for s in self.stores if s.durable_version is not None]
        return {
            "stores": len(self.stores),
            "chains": dict(sorted(chains.items())),
            "min_durable_version": min(durable) if durable else None,
            "max_durable_version": max(durable) if durable else None,
        }

    def to_record(self) -> dict[str, Any]:
        return {
            "operator": self.operator_id,
            "name": self.name,
            "provider": self.provider,
            "metadata_version": self.metadata_version,
            "num_partitions": self.num_partitions,
            "num_partitions_source": self.num_partitions_source,
            "store_names": list(self.store_names),
            "partitions_found": len(self.partitions_found),
            "summary": self.summary(),
            "stores": [s.to_record() for s in self.stores],
        }


@dataclass(frozen=True)
class QueryInspection:
    """Everything `inspect epochs` and `inspect state` say about one checkpoint."""

    checkpoint: str
    query_id: Optional[str]
    planned: Optional[int]
    committed: Optional[int]
    state_epoch: Optional[int]
    offsets: LogListing
    commits: LogListing
    async_progress: bool
    checkpoint_format: int
    operators: tuple[OperatorReport, ...]
    writers: tuple[Writer, ...]
    common_window: Optional[tuple[int, int]]
    sources: tuple[SourceInfo, ...]
    latest_offsets: Optional[OffsetEntry]
    committed_offsets: Optional[OffsetEntry]
    findings: tuple[Finding, ...]
    sink: Optional[SinkLog] = None
    kafka: Optional[dict[str, Any]] = None  # filled by inspectors.kafka.with_kafka
    lease: Optional[dict[str, Any]] = None  # the agent's lease, when there is one
    # the oldest epoch a rewind reaches and its batch's batchTimestampMs (inspectors/rewind_time.py
    # with_oldest_time; `inspect epochs` only: one more read)
    oldest_kept: Optional[tuple[int, Optional[int]]] = None

    @property
    def verdict(self) -> str:
        return verdict_of(self.findings)

    @property
    def stateful(self) -> bool:
        return bool(self.operators)

    def to_record(self) -> dict[str, Any]:
        """The `queries[]` element of the EpochReport JSON contract."""
        def window(log: LogListing) -> Optional[list[int]]:
            return None if log.oldest is None else [log.oldest, log.latest]  # type: ignore[list-item]

        return {
            "checkpoint": self.checkpoint,
            "query_id": self.query_id,
            "planned": self.planned,
            "committed": self.committed,
            "state_epoch": self.state_epoch,
            "retained": {"offsets": window(self.offsets), "commits": window(self.commits)},
            "async_progress": self.async_progress,
            "checkpoint_format": self.checkpoint_format,
            "stateful": self.stateful,
            "writers": [w.to_record() for w in self.writers],
            "common_window": None if self.common_window is None else list(self.common_window),
            "sources": [_source_record(s) for s in self.sources],
            "sink": None if self.sink is None else self.sink.position(),
            "kafka": self.kafka,
            "lease": self.lease,
            "temp_files": sorted([f"{OFFSETS_DIR}/{n}" for n in self.offsets.temp_files]
                          + [f"{COMMITS_DIR}/{n}" for n in self.commits.temp_files]),
            "findings": finding_records(self.findings),
            "verdict": self.verdict,
            "reclaimable": None,  # filled by `inspect epochs --reclaimable` (streamctl.operations.trim)
            **self._times(),
        }

    def _times(self) -> dict[str, Any]:
        """`planned_time`, `committed_time`, `oldest_kept` and `oldest_time` (ISO-8601 UTC, the
        batches' batchTimestampMs); a key is left out when its time is unknown."""
        from streamctl.formats.offsets import iso_time

        times: dict[str, Any] = {}
        for key, entry in (("planned_time", self.latest_offsets), ("committed_time", self.committed_offsets)):
            if entry is not None and entry.timestamp_ms is not None:
                times[key] = iso_time(entry.timestamp_ms)
        if self.oldest_kept is not None:
            times["oldest_kept"] = self.oldest_kept[0]
            if self.oldest_kept[1] is not None:
                times["oldest_time"] = iso_time(self.oldest_kept[1])
        return times


def _source_record(s: SourceInfo) -> dict[str, Any]:
    rec: dict[str, Any] = {"source": s.source_id, "kind": s.kind}
    if s.kafka_initial is not None:
        rec["initial_offsets"] = s.kafka_initial.raw
    if s.kind == "file":
        rec["file_log_latest"] = s.file_log_latest
    if s.kind == "rate":
        rec["start_ms"] = s.rate_start_ms
    return rec

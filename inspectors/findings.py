"""Findings and verdicts (docs/model.md#findings). Codes are a public contract."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

API_VERSION = "streamctl/v1"  # every JSON document's api_version: the one definition

INFO, WARNING, ERROR = "info", "warning", "error"
SEVERITY_RANK = {ERROR: 0, WARNING: 1, INFO: 2}

# code -> default severity
CODES: dict[str, str] = {
    "IN_FLIGHT": INFO,
    "LOG_GAP": ERROR,
    "COMMIT_AHEAD": ERROR,
    "WAL_AHEAD": ERROR,
    "STATE_UNRESTORABLE": ERROR,
    "STATE_PARTITION_MISSING": ERROR,
    "STATE_ORPHANS": WARNING,
    "STATE_SCHEMA_MISSING": ERROR,
    "STATE_METADATA_MISSING": ERROR,
    "SINK_AHEAD": ERROR,
    "SINK_BEHIND": ERROR,
    "SOURCE_EXPIRED": ERROR,
    "SOURCE_RESET": ERROR,
    "SOURCE_NEW_PARTITION": INFO,
    "QUERY_ID_CLASH": ERROR,
    "LIVE_QUERY": INFO,
    "UNREADABLE": ERROR,
    # beyond the original minimum set (docs/model.md#findings)
    "STALE_CHECKSUM": ERROR,
    "SINK_WRITER_MISSING": ERROR,
    "SINK_ORPHANS": WARNING,
    "STALE_LEASE": WARNING,
    # Spark's own checkpoint operations (offline state repartition, PySpark 4.2+)
    "REPARTITION_BATCH": INFO,
    "REPARTITION_UNFINISHED": ERROR,
    "SINK_REPARTITION_HOLE": ERROR,
    # never repair what a restart reads: the sources of the state layout disagree
    "STATE_LAYOUT_CONFLICT": WARNING,
    # the gaps async progress tracking leaves in offsets/ and commits/ (not LOG_GAP)
    "ASYNC_PROGRESS": INFO,
    # a state file a restart reads does not match its checksum companion
    "STATE_FILE_CORRUPT": ERROR,
    # a batch a restart replays cannot be read again (its input files are gone)
    "SOURCE_NOT_REPLAYABLE": ERROR,
    # the newest batch's input folder moved with the checkpoint: the restart fails `Wrong basePath`
    "SOURCE_MOVED": ERROR,
    "SOURCE_GONE": ERROR,
    "STATE_WITHOUT_LOGS": ERROR,
    # --target-spark: the named Spark line refuses a file a restart reads (a log version it does not read)
    "SPARK_LINE_REFUSES": ERROR,
    # --target-spark: the named Spark line reads what a restart reads
    "SPARK_LINE_CHECKED": INFO,
    # the sink's log holds batches this checkpoint did not write (another query's, a lost history's)
    "SINK_FOREIGN_BATCHES": ERROR,
    # `streamctl preflight`: a new version of the query does not fit the checkpoint's operators
    "STATEFUL_OPERATORS_CHANGED": ERROR,
    # `streamctl preflight`: a kept operator keys its state by other types than the checkpoint's schema file
    "STATE_KEY_SCHEMA_CHANGED": ERROR,
    # `streamctl preflight`: a file source reads another path than the one its checkpoint's log names
    "SOURCE_PATH_CHANGED": ERROR,
    "SOURCE_TOPICS_CHANGED": ERROR,
    # `streamctl preflight`: the new query reads another number of sources than the checkpoint's offsets hold
    "SOURCES_CHANGED": ERROR,
    # the newest offsets take a Kafka partition back below the batch before's (a recreated topic, an edit)
    "SOURCE_REWOUND": ERROR,
    # data files a file sink's log names that its readers do not see (a moved or copied folder, a hand clean-up)
    "SINK_FILES_MISSING": ERROR,
    # a checkpoint streamctl drop-sink retired (its tombstone `metadata`): a state, not damage
    "RETIRED": INFO,
    # an Iceberg table rolled back past epochs of the query (snapshots off the current ancestry)
    "SINK_ROLLED_BACK": WARNING,
    # pre-flight: a new checkpoint over an Iceberg table other streaming queries wrote (duplicates)
    "SINK_NEW_QUERY": ERROR,
}

ALIGNED, RECOVERABLE, MISALIGNED, UNREADABLE = "aligned", "recoverable", "misaligned", "unreadable"
VERDICTS = (ALIGNED, RECOVERABLE, MISALIGNED, UNREADABLE)


@dataclass(frozen=True, slots=True)
class Finding:
    """One broken (or noteworthy) invariant. `details` are extra machine-readable JSON keys."""

    code: str
    message: str
    severity: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.severity:
            object.__setattr__(self, "severity", CODES.get(self.code, ERROR))

    def to_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = dict(self.details)
        rec.update({"code": self.code, "severity": self.severity, "message": self.message})
        return rec

    def sort_key(self) -> tuple[int, str, str]:
        return (SEVERITY_RANK.get(self.severity, 3), self.code, self.message)


def finding_records(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    """Findings as every document lists them: sorted (Finding.sort_key), as records."""
    return [f.to_record() for f in sorted(findings, key=Finding.sort_key)]


def verdict_of(findings: Iterable[Finding]) -> str:
    """unreadable if any UNREADABLE; else misaligned if any error; else recoverable if
    IN_FLIGHT of a stopped query; else aligned (warnings and info allowed). A running query
    (LIVE_QUERY) is between its offsets and its commit half of the time: its batch in flight is
    the one it runs, so its verdict stays aligned instead of flapping."""
    items = list(findings)
    if any(f.code == "UNREADABLE" for f in items):
        return UNREADABLE
    if any(f.severity == ERROR for f in items):
        return MISALIGNED
    if any(f.code == "IN_FLIGHT" for f in items) and not any(f.code == "LIVE_QUERY" for f in items):
        return RECOVERABLE
    return ALIGNED


def worst_verdict(verdicts: Iterable[str]) -> str:
    order = {UNREADABLE: 3, MISALIGNED: 2, RECOVERABLE: 1, ALIGNED: 0}
    worst = ALIGNED
    for v in verdicts:
        if order[v] > order[worst]:
            worst = v
    return worst


def summarize(items: list[str], limit: int = 5) -> str:
    """'a, b, c and 4 more' for messages that must stay one line."""
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"


MAX_LISTED = 1000  # ids a finding lists at most; the ranges and the count say the rest


def missing_ranges(present: list[int] | tuple[int, ...], lo: int, hi: int) -> list[tuple[int, int]]:
    """The ids in [lo, hi] not in `present`, as (first, last) ranges. Cost follows the ids that
    exist (len(present)), never the numeric gap hi - lo."""
    out: list[tuple[int, int]] = []
    nxt = lo
    for p in sorted(set(present)):
        if p < nxt:
            continue
        if p > hi:
            break
        if p > nxt:
            out.append((nxt, p - 1))
        nxt = p + 1
    if nxt <= hi:
        out.append((nxt, hi))
    return out


def ids_of(ranges: list[tuple[int, int]], limit: int = MAX_LISTED) -> list[int]:
    """At most `limit` ids of these ranges, in order."""
    out: list[int] = []
    for a, b in ranges:
        out.extend(range(a, min(b, a + limit - len(out) - 1) + 1))
        if len(out) >= limit:
            break
    return out


def count_of(ranges: list[tuple[int, int]]) -> int:
    return sum(b - a + 1 for a, b in ranges)


def ranges_text(ranges: list[tuple[int, int]], limit: int = 5) -> str:
    """[(3, 5), (9, 9)] -> '3..5, 9'."""
    return summarize([str(a) if a == b else f"{a}..{b}" for a, b in ranges], limit)


def shown(value: Any) -> str:
    """A value as an operator reads it: "none" for a position (or anything) that does not exist,
    never Python's `None`."""
    return "none" if value is None else str(value)


def positions_text(pos: Mapping[str, Any], sink: bool) -> str:
    """`planned 3, committed 3, sink epoch 3` from a plan's before/after record; the sink part
    only where a sink was inspected."""
    out = f"planned {shown(pos.get('planned'))}, committed {shown(pos.get('committed'))}"
    return out + (f", sink epoch {shown(pos.get('sink_epoch'))}" if sink else "")


def human_bytes(n: int) -> str:
    """1536 -> `1.5 KiB` (B, KiB, MiB, GiB)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)  # pragma: no cover

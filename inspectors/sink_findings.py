"""The sink a checkpoint writes to, joined to its inspection: the sink log's own findings, its
position against the checkpoint's (SINK_BEHIND, SINK_AHEAD, ...), batches of another query
(SINK_FOREIGN_BATCHES), the pre-flight of a new checkpoint over a used sink, the entries
repartition batches left out of a file sink's log (SINK_REPARTITION_HOLE), and the sink's
writers among the parallel writers. Loaded only when a sink is inspected."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from streamctl.formats.errors import StreamctlError
from streamctl.formats.layout import OFFSETS_DIR
from streamctl.formats.offsets import parse_offsets
from streamctl.inspectors.checkpoint_reads import Progress
from streamctl.inspectors.findings import Finding, summarize
from streamctl.inspectors.log_findings import repartition_batch_finding, repartition_change
from streamctl.inspectors.logs import LogListing
from streamctl.inspectors.ownership import foreign_batches, foreign_finding
from streamctl.inspectors.query_inspection import QueryInspection, Writer
from streamctl.inspectors.sinks import SinkLog, compare_sink, read_sink
from streamctl.inspectors.storage import Storage
from streamctl.inspectors.writer_windows import common_window, writer_status


def _repartition_sink(sink: SinkLog, found: list[Finding], checkpoint: tuple[Finding, ...]) -> list[Finding]:
    """A repartition batch reads no input and writes nothing to the sink. SINK_BEHIND by exactly
    the repartition batches is, for a file sink, SINK_REPARTITION_HOLE: its log has no entry for
    the batch, Spark's batch readers of the sink fail (BATCH_METADATA_NOT_FOUND) and the query
    dies at the log's next compaction. Delta (txn version per batch, no contiguity) and the
    coordinated sink (one commit record per epoch, no compaction) hold every record: no finding."""
    repartitions = {int(f.details["epoch"]) for f in checkpoint if f.code == "REPARTITION_BATCH"}
    out = []
    for f in found:
        missing = set(f.details.get("missing", ())) if f.code == "SINK_BEHIND" else set()
        if not missing or not missing <= repartitions:
            out.append(f)
        elif sink.kind == "file":
            out.append(_sink_hole_finding(sink, sorted(missing)))
    return out


def _sink_hole_finding(sink: SinkLog, epochs: list[int]) -> Finding:
    return Finding(
        "SINK_REPARTITION_HOLE",
        f"the file sink's log has no entry for repartition batch(es) {summarize([str(e) for e in epochs])}: "
        f"Spark's batch readers of the sink fail (BATCH_METADATA_NOT_FOUND) and the query dies at the log's "
        f"next compaction; `streamctl align` writes the empty entry (the batch read nothing)",
        details={"sink_epoch": sink.epoch, "missing": epochs})


def _repartition_sink_gaps(location: str, sink: SinkLog, q: QueryInspection) -> tuple[list[Finding], list[Finding]]:
    """A file sink's LOG_GAP (a batch missing after the log's newest compaction) whose missing
    batches are all committed repartition batches, however old: the query ran on past the
    repartition and the log kept the hole (it dies at the next compaction). Each listed batch is
    tested as Spark does, from offsets/<b> and offsets/<b-1> (cost follows the listed ids).
    Returns the sink's findings with such a LOG_GAP turned into SINK_REPARTITION_HOLE, and
    REPARTITION_BATCH for those batches the checkpoint's findings (the newest two) did not name."""
    known = {int(f.details["epoch"]) for f in q.findings if f.code == "REPARTITION_BATCH"}
    out: list[Finding] = []
    older: list[Finding] = []
    for f in sink.findings:
        missing = [int(b) for b in f.details.get("missing", ())] if f.code == "LOG_GAP" and sink.kind == "file" else []
        if (not missing or f.details.get("missing_count") != len(missing) or q.committed is None
                or max(missing) > q.committed):
            out.append(f)
            continue
        changes = _repartition_changes(location, missing)
        if changes is None:
            out.append(f)
            continue
        older += [repartition_batch_finding(b, *changes[b]) for b in missing if b not in known]
        out.append(_sink_hole_finding(sink, missing))
    return out, older


def _repartition_changes(location: str, batches: list[int]) -> Optional[dict[int, tuple[int, int]]]:
    """{batch: (old, new) partition counts} when every batch is a repartition batch, else None."""
    try:
        st = Storage.open(location)
        changes = {}
        for b in batches:
            entry, older = (parse_offsets(st.read(f"{OFFSETS_DIR}/{i}"), st.uri(f"{OFFSETS_DIR}/{i}"), i) for i in (b, b - 1))
            change = repartition_change(entry, older)
            if change is None:
                return None
            changes[b] = change
        return changes
    except StreamctlError:  # an unreadable or missing offsets file: the gap stays LOG_GAP
        return None



def _skipped_replay(q: QueryInspection, sink: SinkLog) -> list[Finding]:
    """The in-flight batch P = C + 1 the sink already holds (S == P), on a stateful query of
    checkpoint format 2: the file sink (and Delta's writer, by its txn version) skips the replay
    without running the query, so no state store commits and Spark's commit of the batch, which
    must name every store's new checkpoint id, fails (`assertion failed: CheckpointInfo length:
    0, numPartitions: N`; observed 4.3.0). Format 1 replays it as the in-flight case: the sink
    skips, the state versions written before the crash stay. Rolling the sink back to C lets the
    replay write the batch again (align's repair)."""
    p, c = q.planned, q.committed
    if (q.checkpoint_format != 2 or not q.stateful or sink.kind not in ("file", "delta") or sink.epoch is None
            or p is None or sink.epoch != p or p != (-1 if c is None else c) + 1
            or any(f.code == "UNREADABLE" for f in sink.findings)):
        return []
    return [Finding(
        "SINK_AHEAD",
        f"the {sink.kind} sink holds batch {p}, which the checkpoint planned and did not commit: the restart replays "
        f"it, the sink skips it without running the query, and with checkpoint format 2 Spark's commit of the batch "
        f"names no state store checkpoint and fails (\"assertion failed: CheckpointInfo length: 0\"); "
        + (f"align rolls the sink back to batch {c} so that the replay writes it again" if sink.kind == "file" else
           "a Delta table cannot be rolled back to the batch before it (a restore keeps its txn version): align "
           "refuses"),
        details={"sink_epoch": sink.epoch, "committed": c, "planned": p, "skipped": [p], "skipped_range": [p, p],
                 "skipped_count": 1, "checkpoint_format": 2})]


def _writer_ids(log: SinkLog, sink: str) -> list[str]:
    """The streaming writers' query ids a table holds (Iceberg: its snapshots' summaries; Delta:
    its `txn` app ids), for a pre-flight; [] for other sinks or when unknown."""
    if log.kind == "iceberg":
        return list(log.extra.get("streaming_queries") or [])
    if log.kind == "delta" and log.table_version is not None:
        from streamctl.inspectors.delta_sink import delta_app_ids

        try:
            return delta_app_ids(Storage.open(sink)) or []
        except StreamctlError:
            return []
    return []


def _preflight(q: QueryInspection, log: SinkLog, *findings: Finding) -> QueryInspection:
    """The inspection of a checkpoint that does not exist yet: no positions, the sink, `findings`."""
    empty = LogListing(exists=False)
    return QueryInspection(q.checkpoint, None, None, None, None, empty, empty, False, 1, (), (), None, (), None,
                           None, tuple(findings), sink=log)


def join_sink(q: QueryInspection, location: str, storage: Optional[Storage], sink: str, sink_kind: str,
              app_id: Optional[str], sink_absent: frozenset[str], progress: Optional[Progress], known: bool,
              missing: bool) -> QueryInspection:
    """`q` with the sink at `sink` read and compared (a Delta sink's txn app id defaults to the
    query id). `known`: the checkpoint's positions could be read (else no finding is derived
    from them); `missing`: the checkpoint does not exist yet (a pre-flight)."""
    if progress:
        progress(f"reading sink {sink}")
    log = read_sink(sink, sink_kind, app_id or q.query_id, absent=sink_absent)
    if missing and log.kind == "delta" and app_id and log.epoch is not None:
        # a pre-flight with the app id the writer is given: a new query's batch ids restart at 0,
        # and the writer skips every one up to the table's txn version of that id
        return _preflight(q, log, foreign_finding([log.epoch], log.epoch, None, preflight=True, kind="delta",
                                                  app_id=app_id))
    others = _writer_ids(log, sink) if missing else []
    if others:
        # a pre-flight: a new checkpoint is a new query id, which the table never saw
        # (docs/formats/sinks.md#iceberg, #delta)
        held = ("epochs of {n} streaming query id(s)" if log.kind == "iceberg"
                else "txn versions of {n} streaming writer(s)' app id(s)").format(n=len(others))
        f = Finding("SINK_NEW_QUERY",
                    f"{location} does not exist yet and the {log.kind.capitalize()} table {log.uri} holds {held} "
                    f"({summarize(others, 2)}): a new checkpoint starts a new query id, which the table skips nothing "
                    "for, so the source is read again from its starting position and every row it already delivered "
                    "arrives again (duplicates) unless that position says otherwise",
                    details={"query_ids": others, "preflight": True})
        return _preflight(q, log, f)
    if missing and log.kind in ("file", "coordinated") and log.epoch is not None:
        # a pre-flight: no checkpoint yet over a sink that skips the batch ids it holds (docs/model.md#sink-ownership)
        f = foreign_finding(list(log.epoch_ids), log.epoch, None, preflight=True, kind=log.kind)
        return _preflight(q, log, f, *log.findings)
    if known:  # derived from the checkpoint's positions only when they are known
        sink_findings, older = _repartition_sink_gaps(location, log, q)
        checkpoint_findings = q.findings + tuple(older)
        compared = _repartition_sink(log, compare_sink(log, q.planned, q.committed), checkpoint_findings)
        compared += _skipped_replay(q, log)
        foreign = foreign_batches(storage, q, log) if storage is not None else []  # type: ignore[arg-type]
        if foreign:  # not this query's batches: never SINK_AHEAD (align would roll them back)
            compared = [f for f in compared if f.code != "SINK_AHEAD"] + [
                foreign_finding(foreign, int(log.epoch), q.committed)]  # type: ignore[arg-type]
    else:
        sink_findings, checkpoint_findings, compared = list(log.findings), q.findings, []
    findings = checkpoint_findings + tuple(sink_findings) + tuple(compared)
    reference = q.committed if q.committed is not None else q.planned
    extra = [Writer("sink", "sink_log", log.first_epoch, log.epoch, writer_status(log.first_epoch, log.epoch, reference))]
    for w in log.writers:
        broken = any(e < (w.last if w.last is not None else -1) for e in w.missing_in)
        extra.append(Writer(w.name, "sink_writer", w.first, w.last, writer_status(w.first, w.last, reference, broken)))
    writers = q.writers + tuple(extra)
    return replace(q, findings=findings, sink=log, writers=writers, common_window=common_window(list(writers)))

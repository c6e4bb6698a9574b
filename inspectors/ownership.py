"""A sink belongs to its query: SINK_FOREIGN_BATCHES (docs/model.md#sink-ownership).

Spark's file sink skips every batch id its log already holds (`FileStreamSink.addBatch`: a batch
id at or below the log's newest is "already committed"). A query started on a new checkpoint over
an old sink (the Databricks knowledge base's case), or on a checkpoint whose history was lost,
writes nothing for batch ids up to the sink's newest: its rows are lost, and rolling the sink back
as if those batches were the query's own destroys the old query's rows too.

Evidence: a sink-log entry written by this query is younger than the batch it commits, and
every batch this checkpoint retains was planned at or after its oldest retained batch's
`batchTimestampMs` (the driver's clock, inside `offsets/<o>`: it survives copies, unlike file
times). So an entry `b >= o` whose modification time is older than that timestamp was written
by someone else, before this checkpoint planned anything it retains. Entries below the retained
window `o` are not judged (the query's own early history); copying the sink (new, later times)
can hide foreign entries but never make the query's own look foreign; on object stores, whose
clocks are not the driver's, an entry must be older by `REMOTE_SKEW_S`. With no checkpoint yet
(a pre-flight), every batch of the sink's log is foreign. Only the oldest and the newest entries
(`JUDGED_OLDEST`, `JUDGED_NEWEST`) are looked up: cost follows them, not the log's length."""
from __future__ import annotations

from typing import Any, Optional

from streamctl.formats.errors import StreamctlError
from streamctl.formats.layout import OFFSETS_DIR
from streamctl.inspectors.findings import Finding, ids_of, missing_ranges, ranges_text
from streamctl.inspectors.storage import Storage

JUDGED_OLDEST, JUDGED_NEWEST = 5, 20
REMOTE_SKEW_S = 300


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    if not ids:
        return []
    gaps = missing_ranges(ids, ids[0], ids[-1])
    out, start = [], ids[0]
    for a, b in gaps:
        out.append((start, a - 1))
        start = b + 1
    out.append((start, ids[-1]))
    return out


def foreign_finding(foreign: list[int], sink_epoch: int, committed: Optional[int], preflight: bool = False,
                    kind: str = "file", app_id: Optional[str] = None) -> Finding:
    """`kind` "coordinated": streamctl's coordinated sink, which skips an epoch whose commit record
    exists (pipeline/coordinated_sink.py, rule 2), as the file sink skips a logged batch id;
    "delta": a Delta table's txn of the app id a writer is given (`txnAppId`), whose version a
    writer with that app id skips up to."""
    c = -1 if committed is None else committed
    what = ranges_text(_runs(foreign))
    log, skips = {
        "coordinated": ("the coordinated sink's _commits/", "the coordinated sink skips every epoch with a commit record"),
        "delta": (f"the Delta table's txn of app id {app_id}",
                  "A Delta writer given that app id (txnAppId) skips every batch id"),
    }.get(kind, ("the file sink's log", "Spark's file sink skips every batch id"))
    lost = (f"a query starting on this checkpoint skips batch ids 0..{sink_epoch}: the rows of those batches are "
            "never written, unless it plans the very batches the old query wrote (the same input files in the "
            "same batches)" if preflight else
            f"this query's batches {c + 1}..{sink_epoch} write nothing (their rows are lost)" if sink_epoch > c else
            "this query's batches with those ids wrote nothing (their rows are lost)")
    return Finding(
        "SINK_FOREIGN_BATCHES",
        f"{log} holds batch(es) {what} that this checkpoint did not write (written before it planned "
        f"them: another query's, or a lost history's). {skips} up to {sink_epoch}: "
        f"{lost}. align never rolls them back as this query's own; to keep every row, start the query on a new "
        "sink path (the old sink keeps its rows)" + (", or give its writer a new txnAppId" if kind == "delta" else ""),
        details={"epochs": ids_of(_runs(foreign)), "epoch_count": len(foreign), "sink_epoch": sink_epoch,
                 "committed": committed, "preflight": preflight})


def foreign_batches(ck: Storage, q: Any, sink: Any) -> list[int]:
    """The batches of a file sink's log this checkpoint did not write (see the module's rules)."""
    o = q.offsets.oldest
    if sink.kind != "file" or sink.epoch is None or o is None:
        return []
    try:
        from streamctl.formats.offsets import parse_offsets
        from streamctl.inspectors.sinks import list_file_sink_log

        ts = parse_offsets(ck.read(f"{OFFSETS_DIR}/{o}"), ck.uri(f"{OFFSETS_DIR}/{o}"), o).timestamp_ms
        if ts is None or ts <= 0:
            return []
        sst = Storage.open(sink.uri)
        threshold_ns = ts * 1_000_000 - (0 if sst.is_local else REMOTE_SKEW_S * 1_000_000_000)
        log = list_file_sink_log(sst)
        ids = [b for b in sorted(log.ids) if b >= o]
        judged = sorted(set(ids[:JUDGED_OLDEST] + ids[-JUDGED_NEWEST:]))
        foreign = []
        for b in judged:
            e = sst.lookup(log.rel(b))
            if e is not None and e.mtime_ns is not None and e.mtime_ns < threshold_ns:
                foreign.append(b)
        return foreign
    except StreamctlError:
        return []  # unreadable: the checkpoint's and the sink's own findings say so

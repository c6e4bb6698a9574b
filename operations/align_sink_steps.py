"""align's steps in the sink (docs/model.md#align): the file sink's log and data files rolled back
to a batch, the coordinated sink's commit records and epochs, an Iceberg table's rollback, the
empty entries of repartition holes, orphans, stale checksums and a moved sink's paths."""
from __future__ import annotations

from typing import Optional

from streamctl.formats.checksum import crc_name, hadoop_crc
from streamctl.formats.compactible import compactible_file
from streamctl.formats.coordinated_log import (
    COORD_COMMITS,
    COORD_DATA,
    COORD_STAGING,
    commit_record_name,
    epoch_of_folder,
)
from streamctl.formats.file_sink_log import EMPTY_SINK_ENTRY, FILE_SINK_LOG
from streamctl.formats.iceberg import is_metadata_name
from streamctl.inspectors.placement import rewrite_paths
from streamctl.inspectors.sinks import SinkLog
from streamctl.inspectors.storage import Storage
from streamctl.operations.align_evidence import Evidence, FileSinkLog, Planner, keeps_next, table_rollback
from streamctl.operations.damage import rel_of as _rel_of
from streamctl.operations.plan import Refused, Step

MAX_NAMED_BATCHES = 10  # missing sink-log batches a refusal names; it counts the rest


def file_sink_steps(sink: Storage, log: FileSinkLog, x: int,
                    check_only: bool = False) -> tuple[list[Step], list[str]]:
    """Steps that leave the file sink's log at batch x, with the data files of later batches
    moved away. Returns (steps, reasons it cannot be done); `check_only` returns the reasons
    alone, without asking the storage anything (it runs once per candidate epoch)."""
    def is_compact(b: int) -> bool:
        return log.interval is not None and (b + 1) % log.interval == 0

    def first_of_chain(last: int) -> int:
        """A reader of the log at `last` reads the newest compaction at or below it and every
        batch after it (every batch from 0 without compaction)."""
        return 0 if log.interval is None else max(((last + 1) // log.interval) * log.interval - 1, 0)

    newest = max(log.present)
    if x >= newest:
        return [], []
    # cost follows the files that exist: the chain's batches present, never range(0, x)
    lo = first_of_chain(x)
    kept = [b for b in sorted(log.present) if lo <= b <= x and log.present[b] == is_compact(b)]
    missing_count = x - lo + 1 - len(kept)
    kept_ids = set(kept)
    missing: list[int] = []
    b = lo
    while len(missing) < min(missing_count, MAX_NAMED_BATCHES):
        if b not in kept_ids:
            missing.append(b)
        b += 1
    bad = [b for b in kept if b in log.unreadable]
    if bad:
        return [], [f"a roll back to batch {x} reads {FILE_SINK_LOG}/{compactible_file(bad[0], log.present[bad[0]])}, "
                    f"which cannot be read ({log.unreadable[bad[0]]})"]
    steps: list[Step] = []
    kept_files: set[str] = set()
    for b in kept:
        kept_files.update(log.entries[b])
    if missing:
        # The only other record of those batches is a later compaction K, which merges them
        # with batch K's own files: nothing tells the files of the kept batches from those of
        # K, so the log cannot be rebuilt at x.
        later = sorted(b for b, c in log.present.items() if c and b > x)
        names = ", ".join(compactible_file(b, is_compact(b)) for b in missing) \
            + (f" and {missing_count - len(missing)} more" if missing_count > len(missing) else "")
        return [], [f"{FILE_SINK_LOG}/ lacks {names} needed to stop at batch {x}"
                    + (f": Spark deleted them after {FILE_SINK_LOG}/{later[0]}.compact, which merges them with the "
                       f"batches to roll back, so their files cannot be told apart" if later else "")]
    all_now: set[str] = set()
    for b in log.present:
        if first_of_chain(newest) <= b:
            all_now.update(log.entries.get(b, []))
    for b, compact in sorted(log.present.items()):
        if b > x:
            name = compactible_file(b, compact)
            steps.append(Step("move", "sink", f"{FILE_SINK_LOG}/{name}", f"sink commit of batch {b} > {x}"))
            if b in log.checksums:
                steps.append(Step("move", "sink", f"{FILE_SINK_LOG}/{log.checksums[b]}", "its checksum"))
    reasons = []
    root = sink.display.partition("?")[0].rstrip("/")
    for path in sorted(all_now - kept_files):
        rel = log.placement.rel(path, root, sink.is_local)  # a moved sink: where the file is now
        if rel is None:
            reasons.append(f"{FILE_SINK_LOG} lists {path}, outside the sink root {root}: streamctl never touches it")
            continue
        if check_only:
            continue
        steps.append(Step("move", "sink", rel, "data file of a rolled-back batch"))
        hid = crc_name(rel)
        if sink.lookup(hid) is not None:
            steps.append(Step("move", "sink", hid, "its checksum"))
    return steps, reasons


def coordinated_steps(sink: Storage, log: SinkLog, x: int) -> list[Step]:
    steps = []
    for e in log.epoch_ids:
        if e > x:
            steps.append(Step("move", "sink", f"{COORD_COMMITS}/{commit_record_name(e)}", f"sink commit record of epoch {e} > {x}"))
    for d in sink.list_dir(COORD_DATA) or []:
        epoch = epoch_of_folder(d.name)
        if d.is_dir and epoch is not None and epoch > x:
            steps.append(Step("move", "sink", f"{COORD_DATA}/{d.name}", "data files of a rolled-back epoch"))
    for d in sink.list_dir(COORD_STAGING) or []:
        if d.is_dir and d.name.isdigit() and int(d.name) > x:
            steps.append(Step("move", "sink", f"{COORD_STAGING}/{d.name}", "staged files of an uncommitted epoch"))
    return steps


def sink_steps(pl: Planner, ev: Evidence, x: int, earlier: list[Step]) -> tuple[list[Step], Optional[int]]:
    """The sink at epoch x: empty entries of repartition holes, later epochs rolled back (file and
    coordinated sinks), files no commit names. Returns (steps, the sink epoch after them)."""
    steps: list[Step] = []
    new_s = ev.S
    for b in ev.sink_holes:
        rel = f"{FILE_SINK_LOG}/{b}"
        steps.append(Step("write", "sink", rel, f"the empty sink-log entry of repartition batch {b}", EMPTY_SINK_ENTRY))
        steps.append(Step("write", "sink", crc_name(rel), "its checksum", hadoop_crc(EMPTY_SINK_ENTRY)))
    sink, sink_st = ev.sink, ev.sink_st
    if sink is None or sink_st is None:
        return steps, new_s
    if ev.rollbackable and ev.s_ > x:
        if sink.kind == "file":
            steps += file_sink_steps(sink_st, ev.file_log, x)[0]  # type: ignore[arg-type]
        else:
            steps += coordinated_steps(sink_st, sink, x)
        new_s = x
    elif sink.kind == "iceberg" and ev.s_ > x and not (keeps_next(ev, pl.req, x) and ev.s_ == x + 1):
        back, text, after = table_rollback(ev, x)
        if back is not None:  # chosen as exactly-once by align_target.py _classified: the table goes back to epoch x
            steps += [Step(action, "sink", rel, "Iceberg table rollback through its catalog" if action != "write" else
                           "Iceberg table rollback: the new current metadata version" if is_metadata_name(rel.rsplit("/", 1)[-1])
                           else "Iceberg table rollback: the version hint", content)
                      for action, rel, content in back]
            pl.notes.append(text)
            new_s = after
    for f in sink.findings:
        if f.code == "SINK_ORPHANS":
            for uri in f.details.get("files", []):
                srel = _rel_of(uri, sink_st.display)
                if srel and not any(srel.startswith(s.path + "/") or srel == s.path
                                    for s in earlier + steps if s.root == "sink"):
                    steps.append(Step("move", "sink", srel, "sink file no commit names"))
    if ev.file_log is not None:
        steps += _stale_sink_checksums(ev.file_log, new_s, earlier + steps)
        steps += _relocation_steps(pl, ev, earlier + steps)
    return steps, new_s


def _stale_sink_checksums(log: FileSinkLog, new_s: Optional[int], earlier: list[Step]) -> list[Step]:
    """Hadoop checksums of sink-log batches that are gone, above the sink epoch the plan leaves:
    Spark's write of those batches on restart would fail on them (STALE_CHECKSUM)."""
    if log.files is None:
        return []
    moved = {s.path for s in earlier if s.root == "sink"}
    return [Step("move", "sink", f"{FILE_SINK_LOG}/{name}", "checksum of a sink-log batch that is gone")
            for name in log.files.stale_checksums(-1 if new_s is None else new_s)
            if f"{FILE_SINK_LOG}/{name}" not in moved]


def _relocation_steps(pl: Planner, ev: Evidence, earlier: list[Step]) -> list[Step]:
    """A moved or copied file sink (docs/model.md#moved-and-copied-sinks): every log file that
    stays and names a file under an old root is rewritten to name it where it is now, with its
    Hadoop sidecar; refused when a file a kept entry names exists nowhere."""
    log, sink_st = ev.file_log, ev.sink_st
    assert log is not None and sink_st is not None
    where = log.placement
    gone = {s.path for s in earlier if s.root == "sink" and s.action == "move"}
    kept = [b for b in sorted(log.present) if f"{FILE_SINK_LOG}/{_log_name(log, b)}" not in gone]
    lost = sorted({p for b in kept for p in log.entries.get(b, []) if p in set(where.missing)})
    if lost:
        raise Refused(f"{sink_st.display}: SINK_FILES_MISSING: {FILE_SINK_LOG}/ names {len(lost)} data file(s) that exist "
                      f"nowhere (first: {lost[0]}); align cannot bring their rows back: put the files back (from a copy of "
                      "the sink), then align rewrites where the log says they are")
    if not where.moved:
        return []
    steps: list[Step] = []
    rewritten = 0
    for b in kept:
        if not any(p in where.moved for p in log.entries.get(b, [])):
            continue
        rel = f"{FILE_SINK_LOG}/{_log_name(log, b)}"
        content = sink_st.read(rel)
        new = rewrite_paths(content, where.moved, sink_st)
        if new == content:
            continue
        rewritten += 1
        steps.append(Step("write", "sink", rel, "its data files' paths at the sink's current location", new))
        if b in log.checksums:
            steps.append(Step("write", "sink", f"{FILE_SINK_LOG}/{log.checksums[b]}", "its checksum", hadoop_crc(new)))
    if rewritten:
        pl.notes.append(f"{FILE_SINK_LOG}/: {rewritten} log file(s) name {len(where.moved)} data file(s) under "
                        f"{', '.join(where.old_roots[:3])}, where the sink was: their paths are rewritten to the sink's "
                        "current location, so a batch read of the sink sees every file again")
    return steps


def _log_name(log: FileSinkLog, b: int) -> str:
    return compactible_file(b, log.present[b])

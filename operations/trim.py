"""`streamctl trim`: reclaim checkpoint and sink-log space down to exactly what recovery needs.

The floor: with `--keep-epochs N` (and/or `--keep-rollback-to E`) every epoch X from
`min(C - N + 1, E)` to C must stay a restart point for `align --to X`. That needs `offsets/X-1..`,
`commits/X..`, in every state store the restore chain (newest snapshot/zip at or below the version,
then every delta/changelog) of each version X+1..C+1, the SST files the kept RocksDB zips name
(read from the zip's `metadata`), and the file sink's log from the compaction at or below X.
Everything older is planned for removal, per category, with sizes; staging of aborted epochs of a
coordinated sink goes too. Never: files above the floor, versions the newest restorable version
needs, anything while the query is live or misaligned (align first).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Any, Callable, Optional

from streamctl.formats.checksum import crc_target
from streamctl.formats.compactible import compactible_file
from streamctl.formats.coordinated_log import COORD_STAGING
from streamctl.formats.file_sink_log import FILE_SINK_LOG
from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR
from streamctl.formats.state import SST_DIR, ZIP_EXT, state_versions
from streamctl.inspectors.checkpoint import inspect_checkpoint
from streamctl.inspectors.query_inspection import QueryInspection
from streamctl.inspectors.sinks import list_file_sink_log
from streamctl.inspectors.state_file_checks import zip_ssts
from streamctl.inspectors.state_listing import StoreFiles
from streamctl.inspectors.storage import Storage
from streamctl.inspectors.window import NoKeptWindow, oldest_kept_epoch
from streamctl.operations.plan import (
    EXACTLY_ONCE,
    CheckpointRequest,
    Plan,
    Refused,
    Step,
    liveness_evidence,
    refuse_corrupt_state,
    refuse_unsafe,
)

CATEGORIES = ("offsets", "commits", "state", "ssts", "sink_log", "staging")


@dataclass
class TrimRequest(CheckpointRequest):
    keep_epochs: int = 10
    keep_rollback_to: Optional[str] = None  # an epoch number or an ISO-8601 time (inspectors/rewind_time.py)
    purge: bool = False
    async_progress: bool = False  # the operator says the query runs with asyncProgressTrackingEnabled=true


def plan_trim(req: TrimRequest, q: Optional[QueryInspection] = None) -> tuple[Plan, dict[str, dict[str, int]]]:
    """The trim plan and the reclaimable files/bytes per category. `q`: an inspection of the same
    checkpoint, sink and quiet period already made (inspect epochs --reclaimable); else one is made."""
    if q is None:
        q = req.inspect()
    else:
        refuse_unsafe(q)
    refuse_corrupt_state(q)
    errors = [f for f in q.findings if f.severity == "error"
              and not (req.async_progress and f.code == "ASYNC_PROGRESS")]  # stated: its gaps are Spark's own
    if q.verdict == "misaligned" and errors:
        codes = sorted({f.code for f in errors})
        raise Refused(f"{q.checkpoint}: misaligned ({', '.join(codes)}): run `streamctl align` first; trim never "
                      "removes what a realignment may need", code="misaligned")
    if q.committed is None:
        raise Refused(f"{q.checkpoint}: nothing committed yet: nothing to trim")
    C = q.committed
    P = q.planned if q.planned is not None else C
    stores = [s for op in q.operators for s in op.stores]
    keep_to, notes = _keep_rollback_to(q, req.keep_rollback_to)
    pinned, sp_notes, sp_records = _savepoints(q)
    if pinned is not None:  # the oldest savepoint is kept like --keep-rollback-to
        keep_to = pinned if keep_to is None else min(keep_to, pinned)
    try:
        low = oldest_kept_epoch(q, req.keep_epochs, keep_to)
    except NoKeptWindow as exc:
        raise Refused(str(exc)) from None
    st = Storage.open(req.checkpoint)
    steps: list[Step] = []
    sizes: dict[str, dict[str, int]] = {c: {"files": 0, "bytes": 0} for c in CATEGORIES}
    action = "delete" if req.purge else "move"

    # files whose listing gave no size, per storage: asked once the steps are made, the category of each
    unsized: dict[int, tuple[Storage, list[str], list[str]]] = {}

    def add(root: str, storage: Storage, rel: str, category: str, reason: str, size: Optional[int] = None) -> None:
        """A step; `size` from the folder listing when it has one (no request per file on object
        stores), else asked once every step is made (Storage.sizes)."""
        add_many(root, storage, [rel], category, [reason], [size])

    def add_many(root: str, storage: Storage, rels: list[str], category: str, reasons: list[str],
                 file_sizes: list[Optional[int]]) -> None:
        """`add` of many files of one category (a store's: one call, not one per file)."""
        steps.extend(map(Step, repeat(action, len(rels)), repeat(root), rels, reasons))
        sizes[category]["files"] += len(rels)
        known = [size for size in file_sizes if size is not None]
        sizes[category]["bytes"] += sum(map(int, known))
        if len(known) == len(rels):
            return
        _storage, asked, categories = unsized.setdefault(id(storage), (storage, [], []))
        unknown = [rel for rel, size in zip(rels, file_sizes, strict=True) if size is None]
        asked.extend(unknown)
        categories.extend(repeat(category, len(unknown)))

    _add_steps(req, q, st, low, C, stores, add, add_many)
    for storage, asked, categories in unsized.values():
        for category, size in zip(categories, storage.sizes(asked), strict=True):
            sizes[category]["bytes"] += size

    plan = Plan(
        command="trim",
        roots={"checkpoint": st.display, **({"sink": Storage.open(req.sink).display} if req.sink else {})},
        strategy="trim", target=low, classification=EXACTLY_ONCE, steps=steps, expected_verdict=q.verdict,
        before={"planned": P, "committed": C, "sink_epoch": q.sink.epoch if q.sink else None,
                "state_epoch": q.state_epoch, "verdict": q.verdict, "findings": sorted({f.code for f in q.findings})},
        after={"planned": q.planned, "committed": C, "sink_epoch": q.sink.epoch if q.sink else None,
               "oldest_rollback": low, "reclaimable": sizes, "savepoints": sp_records},
        notes=[f"keeps every restart and rollback point {low}..{C}"] + notes + sp_notes
        + (["--purge: files are deleted, not archived; no undo"] if req.purge else []),
        settings={"sink_kind": q.sink.kind if q.sink else None, "app_id": req.app_id or (q.sink.app_id if q.sink else None)},
    )
    plan.before["liveness"] = liveness_evidence(q, req.quiet_period_s)
    return plan, sizes


def _keep_rollback_to(q: QueryInspection, value: Optional[str]) -> tuple[Optional[int], list[str]]:
    """--keep-rollback-to as an epoch (a time resolved by inspectors/rewind_time.py; Refused
    outside the kept window) and the note saying what a time named."""
    from streamctl.inspectors.rewind_time import OutsideWindow, epoch_or_time

    if value is None:
        return None, []
    try:
        epoch, rewind = epoch_or_time(q, value, "--keep-rollback-to")
    except OutsideWindow as exc:
        raise Refused(str(exc)) from None
    return epoch, [f"--keep-rollback-to {value}: {rewind.text()}"] if rewind is not None else []


def _savepoints(q: QueryInspection) -> tuple[Optional[int], list[str], list[dict[str, Any]]]:
    """The oldest epoch a savepoint pins (kept like --keep-rollback-to), the notes naming every
    savepoint (broken ones with what is missing: never skipped in silence) and the plan's records."""
    from streamctl.inspectors.savepoints import list_savepoints

    found = list_savepoints(q)
    kept = [s for s in found if s.intact and s.savepoint is not None]
    notes = []
    if kept:
        notes.append("keeps the restore files of savepoint(s) " + ", ".join(
            f"{s.name} (epoch {s.savepoint.epoch})" for s in kept if s.savepoint is not None))
    notes += [f"savepoint {s.name} is {s.status()}: trim keeps nothing for it (`streamctl savepoint delete` removes it)"
              for s in found if not s.intact]
    records = [{"name": s.name, "epoch": s.savepoint.epoch if s.savepoint else None,
                "status": "intact" if s.intact else "broken", "missing": list(s.missing)} for s in found]
    pinned = min((s.savepoint.epoch for s in kept if s.savepoint is not None), default=None)
    return pinned, notes, records


def _add_steps(req: TrimRequest, q: QueryInspection, st: Storage, low: int, C: int, stores: list[Any],
               add: Callable[..., None], add_many: Callable[..., None]) -> None:
    """Every file below the kept window, by category, handed to `add` or `add_many` (plan_trim's)."""
    keep_offsets = low - 1
    if q.async_progress:  # the previous batch Spark reads is the previous offsets file on disk
        keep_offsets = max((b for b in q.offsets.batch_ids if b < low), default=low)
    for name, category, keep_from in ((OFFSETS_DIR, "offsets", keep_offsets), (COMMITS_DIR, "commits", low)):
        for e in sorted(st.list_dir(name) or [], key=lambda e: e.name):
            b = crc_target(e.name) or e.name
            if b.isdigit() and int(b) < keep_from:
                add("checkpoint", st, f"{name}/{e.name}", category, f"below the kept window (from {keep_from})", e.size)

    # a store listed like another (the same `shape`: the same names in the same order,
    # inspectors/state_listing.py) that restores the same versions moves the same names: worked out once
    by_shape: dict[tuple[str, frozenset[int]], tuple[list[str], list[str], list[str]]] = {}
    for s in stores:
        shape = s.files.shape[0] if st.is_local and s.files is not None and s.files.shape is not None else None
        known = by_shape.get((shape, s.restorable_versions)) if shape is not None else None
        if known is not None:
            below, reasons, kept_zips = known
            add_many("checkpoint", st, [f"{s.path}/{name}" for name in below], "state", reasons, [None] * len(below))
        else:
            if st.is_local and s.listing:  # the inspection's listing (made under the same lock): no second one
                sized: dict[str, Optional[int]] = dict.fromkeys(s.listing)  # sizes asked aside (add)
            else:  # object stores: the listing carries the sizes
                sized = {e.name: e.size for e in st.list_dir(s.path) or [] if not e.is_dir}
            below, reasons, kept_zips = _below_floor(s, sized, low, C)
            if shape is not None:
                by_shape[(shape, s.restorable_versions)] = below, reasons, kept_zips
            add_many("checkpoint", st, [f"{s.path}/{name}" for name in below], "state", reasons,
                     [sized[name] for name in below])
        if s.provider == "rocksdb" and kept_zips:
            referenced: set[str] = set()
            for z in kept_zips:
                referenced |= zip_ssts(st, f"{s.path}/{z}")
            for e in sorted(st.list_dir(f"{s.path}/{SST_DIR}") or [], key=lambda e: e.name):
                sst = crc_target(e.name) or e.name
                if sst.endswith(".sst") and sst not in referenced:
                    add("checkpoint", st, f"{s.path}/{SST_DIR}/{e.name}", "ssts", "SST file no kept zip names", e.size)

    if q.sink is not None and req.sink:
        sink_st = Storage.open(req.sink)
        if q.sink.kind == "file":
            log = list_file_sink_log(sink_st)
            compacts = [b for b in log.compactions if b <= low]
            if compacts:
                keep_from = compacts[-1]
                for old in (b for b in log.ids if b < keep_from):
                    for log_name in (log.name(old), log.checksums.get(old)):
                        if log_name is not None:
                            add("sink", sink_st, f"{FILE_SINK_LOG}/{log_name}", "sink_log", f"superseded by {compactible_file(keep_from, True)}")
            # orphan data files (SINK_ORPHANS: no entry names them, older than the newest batch file):
            # the "staging" category, as a coordinated sink's leftovers of failed epochs
            from streamctl.operations.damage import rel_of

            for finding in q.sink.findings:
                for uri in (finding.details.get("files", []) if finding.code == "SINK_ORPHANS" else []):
                    rel = rel_of(uri, sink_st.display)
                    if rel:
                        add("sink", sink_st, rel, "staging", "orphan data file no sink-log entry names")
        elif q.sink.kind == "coordinated":
            for e in sink_st.list_dir(COORD_STAGING) or []:
                if e.is_dir and e.name.isdigit() and int(e.name) <= C:
                    add("sink", sink_st, f"{COORD_STAGING}/{e.name}", "staging", "staging of an epoch that is committed or aborted")


def _below_floor(s: Any, sized: dict[str, Optional[int]], low: int, C: int) -> tuple[list[str], list[str], list[str]]:
    """(the names of store `s`'s folder below the oldest base a kept version restores from, the
    reason of each, the zips it keeps) when some kept version restores; `sized`: its listing."""
    listing = state_versions(sorted(sized))  # (name, version) of each state file and checksum companion
    files = s.files
    if files is None:  # a store judged without its files: classified here, as the inspection does
        files = StoreFiles(s.operator_id, s.partition, s.store)
        files.add_names(sorted(sized))
    # its versions as the inspection classifies them (StoreFiles.add_names): no 4-tuple per name
    full = files.full | set(files.full_ids)
    incr = files.incr | set(files.incr_ids)
    # the oldest base any kept version restores from
    floor = None
    for v in range(low + 1, C + 2):
        if v not in s.restorable_versions:
            continue
        base = max([f for f in full if f <= v] or [0])
        while base > 0 and any(i not in incr for i in range(base + 1, v + 1)):
            older = [f for f in full if f < base]
            base = max(older) if older else 0
        floor = base if floor is None else min(floor, base)
    if floor is None or floor <= 0:
        return [], [], []
    kept_zips = []
    below: list[tuple[str, int]] = []
    for name, version in listing:
        if version < floor:
            below.append((name, version))
        elif name.endswith(ZIP_EXT):  # a zip itself (a companion's name ends in .crc)
            kept_zips.append(name)
    return ([name for name, _v in below], [f"version {v} below the oldest kept restore chain ({floor})" for _name, v in below],
            kept_zips)


def verify_trim(plan: Plan) -> tuple[bool, dict[str, Any]]:
    q = inspect_checkpoint(plan.roots["checkpoint"], sink=plan.roots.get("sink"),
                           sink_kind=plan.settings.get("sink_kind") or "auto", app_id=plan.settings.get("app_id"),
                           quiet_period_s=0, deep=True)
    got = {"planned": q.planned, "committed": q.committed, "sink_epoch": q.sink.epoch if q.sink else None,
           "verdict": q.verdict, "findings": sorted({f.code for f in q.findings}), "state_epoch": q.state_epoch}
    ok = (q.planned == plan.after.get("planned") and q.committed == plan.after.get("committed")
          and q.verdict == plan.expected_verdict and q.state_epoch == plan.before.get("state_epoch"))
    return ok, got


def _verify(plan: Plan, _roots: Any) -> tuple[bool, dict[str, Any]]:
    return verify_trim(plan)


def operation() -> Any:
    """trim, as the runner (operations/runner.py) runs, resumes and undoes it."""
    from streamctl.operations.runner import Operation

    return Operation("trim", _verify)


def reclaimable(checkpoint: str, sink: Optional[str], sink_kind: str, app_id: Optional[str], keep_epochs: int,
                quiet: float, inspection: Any = None) -> dict[str, Any]:
    """What `streamctl trim --keep-epochs N` would reclaim, or why it would refuse (`inspect epochs
    --reclaimable`: a plan, nothing changed)."""
    from streamctl.formats.errors import StreamctlError

    try:
        plan, sizes = plan_trim(TrimRequest(checkpoint, sink, sink_kind, app_id, quiet, keep_epochs=keep_epochs),
                                inspection)
    except StreamctlError as exc:
        return {"keep_epochs": keep_epochs, "refused": str(exc)}
    return {"keep_epochs": keep_epochs, "oldest_kept_epoch": plan.target,
            "files": sum(v["files"] for v in sizes.values()), "bytes": sum(v["bytes"] for v in sizes.values()),
            "by_category": sizes}

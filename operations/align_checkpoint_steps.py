"""align's steps in the checkpoint (docs/model.md#align): `offsets/` and `commits/` left at the
target (entries above it moved, missing commits rebuilt, the retained window narrowed past a
hole), state versions and files no restart uses moved away, a torn snapshot moved aside, and the
file source logs of a moved input rewritten."""
from __future__ import annotations

from typing import Any, Optional

from streamctl.formats.checksum import checksum_base, crc_companions, crc_name, hadoop_crc, visible_crc_name
from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR, SOURCES_DIR, STATE_DIR
from streamctl.formats.names import batch_id_of, is_temp_name
from streamctl.formats.state import OPERATOR_METADATA_DIR, OPERATOR_METADATA_V2, state_versions
from streamctl.operations.align_evidence import Evidence, Planner, moved_inputs
from streamctl.operations.damage import rel_of as _rel_of
from streamctl.operations.plan import Refused, Step


def _log_steps(ev: Evidence, name: str, ids: set[int], above: int, listing: Any) -> list[Step]:
    """offsets/ or commits/: entries above the target, stale checksums, temp files."""
    steps = []
    for b in sorted(ids):
        if b > above:
            steps.append(Step("move", "checkpoint", f"{name}/{b}", f"{name} entry {b} > {above}"))
    for b in sorted(set(listing.crc_only) | {b for b in ids if b > above}):
        if b > above or b in listing.crc_only:
            rel = crc_name(f"{name}/{b}")
            if ev.st.lookup(rel) is not None and not (name == COMMITS_DIR and b <= above and b not in ids and ev.fillable(b)):
                steps.append(Step("move", "checkpoint", rel, "checksum of a moved entry" if b in ids else "stale checksum (its file is gone)"))
    for t in listing.temp_files:
        steps.append(Step("move", "checkpoint", f"{name}/{t}", "temp file of an interrupted write"))
    return steps


def _missing_below(ids: set[int], x: int) -> Optional[int]:
    """The newest id missing between the smallest of `ids` and x (exclusive), None when there is
    no hole (cost follows the ids that exist, never the numeric gap)."""
    nxt = x
    for b in sorted((b for b in ids if b < x), reverse=True):
        if nxt - b > 1:
            return nxt - 1
        nxt = b
    return None


def checkpoint_log_steps(pl: Planner, ev: Evidence, x: int, new_p: int) -> list[Step]:
    """offsets/ and commits/ left at planned new_p and committed x: entries above moved, missing
    commits at or below x rebuilt where their offsets are known; otherwise the retained window
    narrowed to start after the newest hole (Spark never reads below P-1)."""
    O, K, c_ = ev.O, ev.K, ev.c_
    steps = _log_steps(ev, OFFSETS_DIR, O, new_p, ev.q.offsets) + _log_steps(ev, COMMITS_DIR, K, x, ev.q.commits)
    low_k = min(K) if K else 0
    writes = sorted({j for j in O if low_k <= j <= x and j not in K and ev.fillable(j)}
                    | {j for j in O if c_ < j <= x})  # rolling forward: every j has offsets (_hard_reasons)
    for j in writes:
        content = pl.commit_content(j, O)
        steps.append(Step("write", "checkpoint", f"{COMMITS_DIR}/{j}", "complete the commit" if j > c_ else "rebuild a missing commit", content))
        steps.append(Step("write", "checkpoint", crc_name(f"{COMMITS_DIR}/{j}"), "its checksum", hadoop_crc(content)))
    hole_o = _missing_below(O, x)
    hole_k = _missing_below(K | set(writes), x) if K else None
    holes = [h for h in (hole_o, hole_k) if h is not None]
    if holes and ev.async_ok:  # Spark's own gaps (ASYNC_PROGRESS): its restart reads the files around them
        pl.notes.append("async progress tracking: the gaps in offsets/ and commits/ are Spark's own and stay; "
                        "restart the query with asyncProgressTrackingEnabled=true")
    elif holes:
        cut = max(holes)
        for name, ids in ((OFFSETS_DIR, O), (COMMITS_DIR, K)):
            for b in sorted(ids):
                if b <= cut:
                    steps.append(Step("move", "checkpoint", f"{name}/{b}", f"below the hole at {cut}: the retained window starts after it"))
                    if ev.st.lookup(crc_name(f"{name}/{b}")) is not None:
                        steps.append(Step("move", "checkpoint", crc_name(f"{name}/{b}"), "its checksum"))
        pl.notes.append(f"the retained window now starts at {cut + 1}: batch files up to the hole at {cut} moved away")
    return steps


def state_steps(ev: Evidence, x: int) -> list[Step]:
    """State versions above x+1, operator metadata of later batches, and files no restart uses."""
    steps: list[Step] = []
    reasons: dict[Optional[int], str] = {}  # one text per version
    by_shape: dict[str, list[tuple[str, str]]] = {}  # a listing's (name, reason) to move, by its shape
    st = ev.st
    for op in ev.q.operators:
        op_rel = f"{STATE_DIR}/{op.operator_id}"
        for s in op.stores:
            # the folder as the inspection listed it (as trim plans: one listing), its names'
            # versions in one regex (a rollback of 50 epochs moves 66,000 files: a listing and a
            # parse per name were half the plan); once for the stores listed alike
            # (the same `shape`, inspectors/state_listing.py: the same names in the same order)
            shape = s.files.shape[0] if s.files is not None and s.files.shape is not None else None
            movers = by_shape.get(shape) if shape is not None else None
            if movers is None:
                files = s.listing if s.files is not None else st.list_names(s.path)[0]
                above = dict(state_versions(files, x + 1))
                joined = "\n".join(files)
                temps = "tmp" in joined or "temp-" in joined
                movers = []  # in the listing's order (`above` keeps it)
                for name, v in ([(n, above.get(n)) for n in files if n in above or is_temp_name(n)] if temps
                                else above.items()):
                    why = reasons.get(v)
                    if why is None:
                        why = reasons[v] = f"state version {v} > {x + 1}" if v is not None else "temp file"
                    movers.append((name, why))
                if shape is not None:
                    by_shape[shape] = movers
            base = s.path + "/"  # a property: once per store, not per file
            # a folder's names are distinct, and so are the stores' folders
            steps += [Step("move", "checkpoint", base + name, why) for name, why in movers]
        v2_rel = f"{op_rel}/{OPERATOR_METADATA_DIR}/{OPERATOR_METADATA_V2}"
        for e in st.list_dir(v2_rel) or []:
            b = batch_id_of(checksum_base(e.name))
            if b is not None and b > x:
                steps.append(Step("move", "checkpoint", f"{v2_rel}/{e.name}", f"operator metadata of batch {b} > {x}"))
    orphans = [f for f in ev.q.findings if f.code == "STATE_ORPHANS"]
    seen = {s.path for s in steps} if orphans else set()
    for f in orphans:
        for uri in f.details.get("files", []):
            orphan = _rel_of(uri, st.display)
            if orphan and orphan not in seen:
                seen.add(orphan)
                steps.append(Step("move", "checkpoint", orphan, "state file no restart uses"))
                for comp in crc_companions(orphan):
                    if comp not in seen and st.lookup(comp) is not None:
                        seen.add(comp)
                        steps.append(Step("move", "checkpoint", comp, "its checksum"))
    return steps


def snapshot_aside_steps(pl: Planner, ev: Evidence) -> list[Step]:
    """A torn or corrupt snapshot/zip whose older snapshot and later deltas/changelogs are intact
    (STATE_FILE_CORRUPT with `snapshot_aside`): moved aside with its checksum companions, so every
    Spark line restores the version from the older chain (4.1+'s auto snapshot repair does the same)."""
    steps: list[Step] = []
    for f in ev.q.findings:
        if f.code != "STATE_FILE_CORRUPT" or not f.details.get("snapshot_aside"):
            continue
        if ev.fmt2:  # the commit log names each version's snapshot by id: no older chain to fall back on here
            raise Refused(f"{ev.q.checkpoint}: STATE_FILE_CORRUPT: {f.message.split(': an older', 1)[0]}; with checkpoint "
                          "format 2 the commits name the snapshot a restart loads: put it back from a copy")
        for uri in f.details.get("files", []):
            rel = _rel_of(uri, pl.st.display)
            if not rel:
                raise Refused(f"{ev.q.checkpoint}: STATE_FILE_CORRUPT names {uri}, which is not inside the checkpoint")
            steps.append(Step("move", "checkpoint", rel, "torn or corrupt snapshot: the restart loads the older "
                                                         "snapshot and replays the changes above it"))
            for companion in (crc_name(rel), visible_crc_name(rel)):
                if pl.st.lookup(companion) is not None:
                    steps.append(Step("move", "checkpoint", companion, "its checksum"))
    if steps:
        pl.notes.append("a torn or corrupt snapshot is moved aside: the store restores from its older snapshot and "
                        "the deltas/changelogs above it")
    return steps


def moved_source_steps(pl: Planner, ev: Evidence) -> list[Step]:
    """An input folder moved with the checkpoint (SOURCE_MOVED, docs/model.md#moved-input): every
    file of `sources/<n>/` that names paths under the old base is rewritten to the new one, with
    its Hadoop sidecar, so the restart's `getBatch` finds the newest batch's files under the
    query's new path and the seen-files map knows the moved files by their new names."""
    from streamctl.formats.compactible import compactible_name

    steps: list[Step] = []
    for sid, m in sorted(moved_inputs(ev.q).items()):
        rel_dir = f"{SOURCES_DIR}/{sid}"
        entries = ev.st.list_dir(rel_dir) or []
        names = {e.name for e in entries if not e.is_dir}
        count = 0
        for name in sorted(names, key=lambda n: (compactible_name(n) or (-1, False))[0]):
            if compactible_name(name) is None:
                continue
            content = ev.st.read(f"{rel_dir}/{name}")
            new = m.rewrite_log(content)
            if new == content:
                continue
            count += 1
            steps.append(Step("write", "checkpoint", f"{rel_dir}/{name}", f"its input paths under {m.new_base}", new))
            if crc_name(name) in names:
                steps.append(Step("write", "checkpoint", crc_name(f"{rel_dir}/{name}"), "its checksum", hadoop_crc(new)))
        if count:
            pl.notes.append(f"{rel_dir}/: {count} log file(s) name input files under {m.old_base}, moved with the "
                            f"checkpoint to {m.new_base}: rewritten, so the restart finds them under the query's new "
                            f"path (restart it reading {m.new_folder} or the folder it was under)")
    return steps

"""An Iceberg table as a streaming sink (docs/formats/sinks.md#iceberg): its epochs per query, read
from the table metadata alone (no Spark, no catalog needed for a table folder).

Iceberg's Spark streaming sink (`SparkWrite`'s streaming commit) puts `spark.sql.streaming.queryId`
and `spark.sql.streaming.epochId` into every snapshot summary it commits, and before committing an
epoch it walks the current snapshot's ancestry (parent ids) and skips the epoch when the newest
snapshot of that query id already holds it or a later one. So the sink epoch `S` of a checkpoint is
the epoch of the first snapshot of its query id along the current snapshot's ancestry.

The table metadata's files and JSON are formats/iceberg.py's; this module reads them through
Storage and judges what they say about a query.
"""
from __future__ import annotations

from typing import Any, Optional

from streamctl.formats.errors import StorageError
from streamctl.formats.iceberg import (
    EPOCH_ID,
    MAX_HINT_BYTES,
    MAX_METADATA_BYTES,
    METADATA_DIR,
    VERSION_HINT,
    hadoop_name,
    hadoop_version,
    hinted_name,
    is_metadata_name,
    metadata_rel,
    metadata_versions,
    parse_table_metadata,
    rolled_back_metadata,
    version_hint,
)
from streamctl.inspectors.findings import Finding, summarize
from streamctl.inspectors.storage import Storage


def is_table(st: Storage) -> bool:
    """A folder whose `metadata/` holds table metadata files."""
    return any(is_metadata_name(n) for n in (st.list_names(METADATA_DIR)[0] if st.kind(METADATA_DIR) == "dir" else []))


CATALOG_PREFIX = "catalog:"  # a sink named through an Iceberg catalog: catalog:<name>/<namespace>.<table>
_PINNED: dict[str, tuple[str, str]] = {}  # table location (Storage.display) -> (current metadata file, catalog spec)


def catalog_table(spec: str) -> Any:
    """The pyiceberg table a `catalog:<name>/<namespace>.<table>` spec names (StorageError naming
    only the spec: the catalog's own error text may hold credentials)."""
    from streamctl.formats.errors import UsageError

    name, _, ident = spec[len(CATALOG_PREFIX):].partition("/")
    if not name or not ident or "." not in ident:
        raise UsageError(f"{spec!r}: a catalog sink is catalog:<catalog name>/<namespace>.<table>")
    try:
        from pyiceberg.catalog import load_catalog
    except ImportError:
        raise UsageError(f"{spec}: reading an Iceberg catalog needs pyiceberg: pip install 'streamctl[iceberg]'") from None
    try:
        return load_catalog(name).load_table(ident)
    except Exception as exc:  # noqa: BLE001 - by type only
        raise StorageError(spec, f"the Iceberg catalog {name!r} cannot load table {ident!r} ({type(exc).__name__}); "
                           "check its pyiceberg configuration") from None


def pin(location: str, metadata_location: str, spec: str) -> None:
    """Remember the current metadata file the catalog names for the table at `location`."""
    _PINNED[Storage.open(location).display] = (metadata_location.rsplit("/", 1)[1], spec)


def resolve_catalog_sink(spec: str) -> str:
    """`catalog:<name>/<namespace>.<table>` -> the table's location, its current metadata file
    pinned as the catalog names it (docs/formats/sinks.md#iceberg). The catalog is pyiceberg's
    (REST, Glue, Hive, SQL, ...), configured as pyiceberg is: `~/.pyiceberg.yaml` or
    `PYICEBERG_CATALOG__<NAME>__<KEY>` variables; nothing of its settings is printed."""
    table = catalog_table(spec)
    location, current = str(table.metadata.location).rstrip("/"), str(table.metadata_location)
    if not current.startswith(f"{location}/{metadata_rel('')}") or "/" in current[len(location) + len(METADATA_DIR) + 2:]:
        raise StorageError(spec, f"the catalog names metadata {current} outside the table's {METADATA_DIR}/ folder")
    pin(location, current, spec)
    return location


def current_metadata(st: Storage) -> str:
    """The relative path of the table's current metadata file (StorageError when it cannot be told)."""
    pinned = _PINNED.get(st.display, (None, ""))[0]
    if pinned is not None:  # named by its catalog (resolve_catalog_sink)
        if st.lookup(metadata_rel(pinned)) is None:
            raise StorageError(st.uri(metadata_rel(pinned)), "the metadata file the catalog names does not exist")
        return metadata_rel(pinned)
    names = st.list_names(METADATA_DIR)[0]
    if VERSION_HINT in names:
        hinted = hinted_name(st.read(metadata_rel(VERSION_HINT), MAX_HINT_BYTES), names)
        if hinted is not None:
            return metadata_rel(hinted)
    versions = metadata_versions(names)
    if not versions:
        raise StorageError(st.uri(METADATA_DIR), "no table metadata file (*.metadata.json)")
    top = max(versions)
    if len(versions[top]) > 1:
        raise StorageError(st.uri(METADATA_DIR), f"{len(versions[top])} metadata files claim version {top} "
                           f"({summarize(sorted(versions[top]), 2)}): the catalog names the current one")
    return metadata_rel(versions[top][0])


def read_table(st: Storage, app_id: Optional[str]) -> dict[str, Any]:
    """What the table says about the streaming query `app_id` (docs/formats/sinks.md#iceberg):
    `epoch` (S), `epochs` along the current ancestry (newest first: epoch, snapshot id, time,
    files and rows added), `rolled_back` (epochs of the query in snapshots off the ancestry),
    `others` (snapshots of other writers after the query's newest epoch), `expired` (the ancestry
    ends at a parent the metadata no longer holds before any epoch of the query), and the current
    snapshot id. StorageError / LogParseError for a file that is not table metadata."""
    rel = current_metadata(st)
    meta = parse_table_metadata(st.read(rel, MAX_METADATA_BYTES), st.uri(rel))
    snapshots, current = meta.snapshots, meta.current
    hadoop = hadoop_version(rel)
    out: dict[str, Any] = {"metadata": st.uri(rel), "metadata_rel": rel, "snapshot_id": current, "epoch": None, "epochs": [],
                           "hadoop_version": hadoop if hadoop is not None and st.lookup(metadata_rel(VERSION_HINT))
                           is not None else None, "ancestry": [],
                           "rolled_back": [], "others": 0, "expired": False,
                           "queries": sorted({str(s.query) for s in snapshots.values() if s.query})}
    ancestry: list[int] = []
    seen: set[int] = set()
    sid = current
    while sid is not None and sid != -1 and sid not in seen:
        seen.add(sid)
        snap = snapshots.get(sid)
        if snap is None:
            out["expired"] = True  # the parent was expired: history before it is gone
            break
        ancestry.append(sid)
        sid = snap.parent_id
    for sid in ancestry:
        snap = snapshots[sid]
        mine = app_id is not None and snap.query == app_id
        out["ancestry"].append({"snapshot_id": sid, "epoch": snap.epoch if mine else None,
                                "operation": snap.operation, "query": snap.query})
        if mine:
            epoch = snap.epoch
            if epoch is None:
                raise StorageError(st.uri(rel), f"snapshot {sid}: {EPOCH_ID} {snap.epoch_value!r} is not an epoch")
            out["epochs"].append({"epoch": epoch, "snapshot_id": sid, "timestamp_ms": snap.timestamp_ms,
                                  "files": snap.files, "rows": snap.rows})
        elif not out["epochs"]:
            out["others"] += 1  # another writer's snapshot after the query's newest epoch
    if out["epochs"]:
        out["epoch"] = out["epochs"][0]["epoch"]
        out["expired"] = False  # the newest epoch was found: what expired before it does not matter
    on_path = set(ancestry)
    for sid, snap in snapshots.items():
        if sid not in on_path and app_id is not None and snap.query == app_id:
            epoch = snap.epoch
            if epoch is not None:
                out["rolled_back"].append(epoch)
    out["rolled_back"] = sorted(set(out["rolled_back"]))
    return out


def findings_of(table: dict[str, Any], app_id: Optional[str]) -> list[Finding]:
    """What the table's metadata alone says about the query (positions are compared elsewhere)."""
    out = []
    if table["expired"] and app_id is not None:
        path = table["metadata"]
        out.append(Finding("UNREADABLE", f"{path}: the current snapshot's ancestry ends at an expired snapshot before "
                           f"any epoch of query {app_id}: the table's epoch for it is unknown (expired history)",
                           details={"path": path, "reason": "snapshot history expired"}))
    if table["rolled_back"] and table["epoch"] is not None:
        gone = [e for e in table["rolled_back"] if e > table["epoch"]]
        if gone:
            out.append(Finding(
                "SINK_ROLLED_BACK",
                f"epochs {summarize([str(e) for e in gone], 5)} of query {app_id} are in snapshots that are no longer "
                f"in the table's current ancestry (the table was rolled back, or they are on a branch): the table "
                f"now holds the query's epochs up to {table['epoch']}",
                details={"epochs": gone, "sink_epoch": table["epoch"]}))
    return out


def rollback(st: Storage, table: dict[str, Any], x: int,
             now_ms: int) -> tuple[Optional[list[tuple[str, str, bytes]]], str, Optional[int]]:
    """Roll the table back so the query's newest epoch in it is `x`, as Iceberg's
    `rollback_to_snapshot` does (docs/model.md#iceberg-table-rollback). Returns
    ([(step action, relative path, content)], what it does, the query's epoch after it), or
    (None, why not, None). A Hadoop table: the writes of a new metadata version whose current
    snapshot (and `main` ref) is the snapshot before the query's epochs above `x`, the snapshot
    and metadata logs extended, then of the version hint; every snapshot, manifest and data file
    stays. A table named through its catalog: one `catalog_rollback` step (the executor asks the
    catalog). Refused when another writer committed above epoch `x` (its data would go), when no
    snapshot of epoch `x` is there to go back to, or for a catalog table given by its folder."""
    import json

    anc = table["ancestry"]
    above = [k for k, a in enumerate(anc) if a["epoch"] is not None and a["epoch"] > x]
    if not above:
        return None, "nothing to roll back", None
    i = above[-1] + 1  # the snapshot before the oldest of the query's epochs above x
    others = [f"{a['snapshot_id']} ({a['operation'] or 'unknown'})" for a in anc[:i]
              if a["epoch"] is None or a["epoch"] <= x]
    if others:
        return None, (f"another writer committed {len(others)} snapshot(s) after the query's epoch {x} "
                      f"({summarize(others, 3)}): rolling the table back would drop their data"), None
    if i == len(anc):
        return None, f"the query's epochs above {x} start the table's history: no snapshot to roll back to", None
    target = anc[i]["snapshot_id"]
    after = next((a["epoch"] for a in anc[i:] if a["epoch"] is not None), None)
    if after is None or after != x:
        return None, (f"the snapshot it would go back to holds the query's epoch {after}, not {x}: what the table "
                      f"holds of epochs {'' if after is None else after + 1}..{x} is unknown"), None
    epochs = [a["epoch"] for a in anc[:i]]
    if table.get("hadoop_version") is None:
        spec = _PINNED.get(st.display, (None, ""))[1]
        if not spec:
            return None, (f"{table['metadata']} is named by a catalog, not by a version hint: name the table through "
                          f"its catalog (--sink catalog:<name>/<namespace>.<table>) for align to roll it back, or roll "
                          f"it back yourself (CALL <catalog>.system.rollback_to_snapshot('<db>.<table>', {target})), "
                          "then align again"), None
        order = {"catalog": spec, "from_snapshot": table["snapshot_id"], "to_snapshot": target,
                 "metadata": table["metadata"]}
        return ([("catalog_rollback", table["metadata_rel"], json.dumps(order, sort_keys=True).encode("utf-8"))],
                f"the table is rolled back to snapshot {target} through its catalog {spec} (Iceberg's "
                f"rollback_to_snapshot): epochs {summarize([str(e) for e in sorted(epochs)], 5)} leave its current "
                "state and the restart writes them again; undo sets the previous current snapshot again", after)
    rel = table["metadata_rel"]
    version = int(table["hadoop_version"]) + 1
    new_rel = metadata_rel(hadoop_name(version))
    if st.lookup(new_rel) is not None:
        return None, f"{st.uri(new_rel)} exists already: the table moved on since it was read", None
    content = rolled_back_metadata(st.read(rel, MAX_METADATA_BYTES), st.uri(rel), target, now_ms, st.uri(METADATA_DIR))
    return ([("write", new_rel, content), ("write", metadata_rel(VERSION_HINT), version_hint(version))],
            f"the table is rolled back to snapshot {target} (a new metadata version v{version}, as Iceberg's "
            f"rollback_to_snapshot does): epochs {summarize([str(e) for e in sorted(epochs)], 5)} leave its current "
            "state and the restart writes them again; undo makes the previous version current", after)

"""Findings of the state stores a restart loads: partition folders missing
(STATE_PARTITION_MISSING), stores that cannot restore the version the restart needs
(STATE_UNRESTORABLE), torn or corrupt files (STATE_FILE_CORRUPT), schema and operator metadata
missing, orphans, a disputed partition count (STATE_LAYOUT_CONFLICT), state without logs; and the
`OperatorReport` of each operator (docs/model.md#state-stores)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from streamctl.formats.commits import CommitEntry
from streamctl.formats.layout import STATE_DIR
from streamctl.formats.state import DEFAULT_STORE, OPERATOR_METADATA_DIR, OPERATOR_METADATA_V2
from streamctl.inspectors.checkpoint_reads import READ_WORKERS, CheckpointReads
from streamctl.inspectors.findings import (
    ERROR,
    WARNING,
    Finding,
    count_of,
    ids_of,
    missing_ranges,
    ranges_text,
    summarize,
)
from streamctl.inspectors.log_findings import SHUFFLE_PARTITIONS, conf_count
from streamctl.inspectors.query_inspection import OperatorReport
from streamctl.inspectors.state_listing import OperatorFiles, StateFiles, StoreFiles
from streamctl.inspectors.state_restore import StoreStatus
from streamctl.inspectors.storage import parallel_map

ROW_CHECKSUM_CONF = "spark.sql.streaming.stateStore.rowChecksum.enabled"  # in offsets confs of Spark 4.1+
AUTO_REPAIR_CONF = "spark.sql.streaming.stateStore.autoSnapshotRepair.enabled"
SOURCE_EVOLUTION_CONF = "spark.sql.streaming.queryEvolution.enableSourceEvolution"  # in offsets confs of Spark 4.2+


class StateFindings(CheckpointReads):
    def _state_findings(self, state: StateFiles, conf: dict[str, str], required: Optional[int],
                        planned: Optional[int], commits: dict[int, CommitEntry]) -> list[OperatorReport]:
        st = self.st
        reports = []
        conf_parts = conf.get(SHUFFLE_PARTITIONS)
        for op_id in sorted(state.operators):
            op = state.operators[op_id]
            if op.metadata_error is not None:
                self.unreadable(op.metadata_error)
            layout = _layout_sources(op, conf_parts, commits)
            num, source = _layout_count(layout)
            names = op.store_names()
            valid = _valid_ids(op, commits)
            pending = [(op.partitions[part].get(name) or StoreFiles(op_id, part, name), valid.get((part, name), {}))
                       for part in sorted(op.partitions) for name in names]

            def status(fv: tuple[StoreFiles, dict[int, str]]) -> StoreStatus:
                files, ids = fv
                key = (files.operator_id, files.partition, files.store)
                pre = self.prepared.get(key)
                if pre is not None and not ids and pre[0] == (required, planned):
                    self.judged[key] = pre[2]
                    return pre[1] if pre[1].files is files else replace(pre[1], files=files)
                return self.chains.status_of(files, required, planned, ids)

            # one task per store on object stores (each judges its chain's ends with ranged reads)
            statuses: list[StoreStatus] = ([status(fv) for fv in pending] if st.is_local
                                           else parallel_map(status, pending, READ_WORKERS))
            report = OperatorReport(
                op_id, op.metadata.operator_name if op.metadata else None, num, source,
                op.metadata.version if op.metadata else None, tuple(names), tuple(sorted(op.partitions)), tuple(statuses))
            reports.append(report)

            if num is not None:
                gaps = missing_ranges(sorted(op.partitions), 0, num - 1)  # cost: the folders that exist
                if gaps:
                    self.findings.append(Finding(
                        "STATE_PARTITION_MISSING",
                        f"state/{op_id}: {count_of(gaps)} of {num} partition folders missing ({ranges_text(gaps)})",
                        details={"operator": op_id, "num_partitions": num, "missing_partitions": ids_of(gaps),
                                 "missing_count": count_of(gaps)}))
            self._schema_findings(op)
            bad = [s for s in statuses if not s.restorable_required]
            bad = self._lineage_repairs(op, bad)
            # format 2: the ids of the version a restart loads are in commits/<required - 1>; that
            # file unreadable (its own UNREADABLE), which files the version needs is unknown
            unknown = (required is not None and required >= 1 and required - 1 not in commits
                       and any(s.uses_unique_ids for s in op.stores()))
            if bad and not unknown:
                parts = [f"{s.path} (missing {', '.join(s.missing)})" for s in bad]
                self.findings.append(Finding(
                    "STATE_UNRESTORABLE",
                    f"operator {op_id}: {len(bad)} store(s) cannot restore version {required} "
                    f"(needed to resume after batch {None if required is None else required - 1}): {summarize(parts, 3)}",
                    details={"operator": op_id, "version": required,
                             "stores": [{"partition": s.partition, "store": s.store, "path": st.uri(s.path),
                                         "missing": list(s.missing)} for s in bad]}))
            self._corrupt_findings(op, statuses)
            orphan_files = [f"{s.path}/{n}" for s in statuses for n in s.orphans + s.temp_files]
            orphan_files += [f"{STATE_DIR}/{op_id}/{p}/{store.store + '/' if store.store != DEFAULT_STORE else ''}{n}"
                             for p, stores in op.partitions.items() for store in stores.values() for n in store.orphan_crc]
            orphan_files += [f"{STATE_DIR}/{op_id}/{n}" for n in op.temp_files]
            if num is not None:
                beyond = [p for p in sorted(op.partitions) if p >= num]
                contested = [p for p in beyond if any(p < n for n in layout.values())]
                orphan_files += [f"{STATE_DIR}/{op_id}/{p}" for p in beyond if p not in contested]
                if contested:
                    self._layout_conflict(op_id, layout, contested)
            if orphan_files:
                orphan_files.sort()
                self.findings.append(Finding(
                    "STATE_ORPHANS",
                    f"operator {op_id}: {len(orphan_files)} state file(s) no restart will use "
                    f"({'versions above ' + str(planned + 1) if planned is not None else 'any version: nothing is planned'}, "
                    "temp files, unnamed ids): "
                    f"{summarize(orphan_files, 3)}",
                    details={"operator": op_id, "files": [st.uri(f) for f in orphan_files]}))
        return reports


    def _repair_lines(self) -> tuple[bool, bool, bool]:
        """(4.1+ line, 4.2+ line, auto snapshot repair on) of the restart: the line named by
        `--target-spark`, else the newest offsets conf's (4.1+ records the row checksum setting
        there, 4.2+ the source evolution one); not shown: the older line's failing outcome."""
        conf = getattr(self, "newest_conf", {})
        line_41, line_42 = ((ROW_CHECKSUM_CONF in conf, SOURCE_EVOLUTION_CONF in conf) if self.target_spark is None
                            else (self.target_spark >= (4, 1), self.target_spark >= (4, 2)))
        return line_41, line_42, str(conf.get(AUTO_REPAIR_CONF, "true")).lower() != "false"

    def _lineage_repairs(self, op: OperatorFiles, bad: list[StoreStatus]) -> list[StoreStatus]:
        """`bad` less the checkpoint-format-2 stores whose lineage starts at a zip that is gone
        while Spark 4.2+'s auto snapshot repair loads an older zip of the full lineage (observed
        4.3.0: the zip deleted, an older one kept, the restart exact): a warning on a line that
        repairs (STATE_FILE_CORRUPT, `restart` `auto_snapshot_repair`); the rest stay
        STATE_UNRESTORABLE. Judged where the chains' files are read (local, `--deep`)."""
        _l41, line_42, auto_repair = self._repair_lines()
        if not (line_42 and auto_repair and self.read_ends):
            return bad
        stores = {(s.partition, s.store): s for s in op.stores()}
        repaired = [s for s in bad if s.unique_ids and s.fallback_files and (files := stores.get((s.partition, s.store)))
                    is not None and self.chains.fallback_whole(s, files)]
        if repaired:
            gone = [f"{s.path}/{s.missing[0]}" for s in repaired]
            self.findings.append(Finding(
                "STATE_FILE_CORRUPT",
                f"operator {op.operator_id}: {len(gone)} zip(s) a format-2 lineage starts from are gone: "
                f"{summarize(gone, 3)}; an older zip of each store's full lineage and the changelogs above it are "
                "intact: Spark 4.2+ restarts from them (auto snapshot repair, "
                + ("the --target-spark line)" if self.target_spark is not None else "this checkpoint's line)"),
                severity=WARNING,
                details={"operator": op.operator_id, "files": [self.st.uri(g) for g in gone],
                         "restart": "auto_snapshot_repair", "snapshot_aside": False}))
        taken = {id(s) for s in repaired}
        return [s for s in bad if id(s) not in taken]

    def _corrupt_findings(self, op: OperatorFiles, statuses: list[StoreStatus]) -> None:
        """A file a restart reads that does not match its checksum companion. A corrupt delta or
        changelog fails the restart (observed 4.3.0: CANNOT_LOAD_STATE_STORE, "Stream is
        corrupted", with or without row checksums): error. A corrupt snapshot/zip does not when
        an older snapshot (or version 0) and intact incrementals up to the restart's version
        exist: Spark 4.1+'s auto snapshot repair loads those (observed 4.3.0): warning. Only the
        files of the restore chain (and, for a corrupt snapshot, of its fallback) are read; checksums
        only on the local file system, torn snapshots (their own format) everywhere."""
        if not self.read_ends:
            return
        local = self.st.is_local
        stores = {(s.partition, s.store): s for s in op.stores()}

        def judge(status: StoreStatus) -> Optional[tuple[list[str], bool]]:
            key = (status.operator_id, status.partition, status.store)
            if key in self.judged:  # judged as it was listed (_prepare)
                return self.judged[key]
            files = stores.get((status.partition, status.store))
            return None if files is None else self.chains.judge(status, files)

        # Spark 4.1+ loads around a bad snapshot (auto snapshot repair), 4.2+ in checkpoint format
        # 2 too (SPARK-56216); older lines fail. The line shows in the newest offsets conf: 4.1+
        # records the row checksum setting there, 4.2+ the source evolution one. Not shown: the
        # failing outcome is taken (align moves the snapshot aside: every line restarts).
        line_41, line_42, auto_repair = self._repair_lines()
        around = line_41 and auto_repair
        fatal: list[str] = []
        repaired: list[str] = []
        judged_all = [judge(s) for s in statuses] if local else parallel_map(judge, statuses, READ_WORKERS)
        for status, judged in zip(statuses, judged_all, strict=True):
            if judged is not None:
                # format 2: only a 4.2+ line repairs (a load by lineage has no older chain before it)
                repairs = judged[1] and (not status.unique_ids or (line_42 and auto_repair))
                (repaired if repairs else fatal).extend(judged[0])
        for items, severity, effect in (
                (fatal, ERROR, "Spark's restart fails loading the store (CANNOT_LOAD_STATE_STORE); align and trim "
                               "refuse (exit 4)"),
                (repaired, WARNING if around else ERROR,
                 "an older snapshot and the changes above it are intact: "
                 + ("Spark 4.1+ restarts from them (auto snapshot repair, "
                    + ("the --target-spark line)" if self.target_spark is not None else "this checkpoint's line)")
                    if around else
                    "Spark 4.1+ restarts from them (auto snapshot repair), older lines fail and "
                    + ("the --target-spark line is older" if self.target_spark is not None and self.target_spark < (4, 1)
                       else "the restart does not have it (auto snapshot repair is off)" if line_41
                       else "the checkpoint does not show a 4.1+ line"))
                 + "; align moves the snapshot aside, after which every line restarts from them")):
            if items:
                self.findings.append(Finding(
                    "STATE_FILE_CORRUPT",
                    f"operator {op.operator_id}: {len(items)} state file(s) a restart reads are torn or do not match "
                    f"their checksum: {summarize(items, 3)}: {effect}",
                    severity=severity,
                    details={"operator": op.operator_id, "files": [self.st.uri(i.split(" (", 1)[0]) for i in items],
                             "restart": "auto_snapshot_repair" if items is repaired and around else "fails",
                             "snapshot_aside": items is repaired}))

    def _layout_conflict(self, op_id: int, layout: dict[str, int], contested: list[int]) -> None:
        sources = ", ".join(f"{k} says {v}" for k, v in layout.items())
        folders = [f"{STATE_DIR}/{op_id}/{p}" for p in contested]
        self.findings.append(Finding(
            "STATE_LAYOUT_CONFLICT",
            f"operator {op_id}: the sources of the partition count disagree ({sources}): "
            f"{summarize(folders, 3)} may be read by a restart; align and trim refuse (exit 4) rather than move them",
            details={"operator": op_id, "sources": layout, "partitions": contested,
                     "files": [self.st.uri(f) for f in folders]}))


    def _schema_findings(self, op: OperatorFiles) -> None:
        """State schema v3 (transformWithState, Spark 4.0+): a restart reads the newest
        `_metadata/v2/<batch>` and every schema file it names (OperatorStateMetadataV2Reader,
        StateSchemaCompatibilityChecker); without them it fails before loading any state."""
        rel = f"{STATE_DIR}/{op.operator_id}"
        if op.metadata_error is not None:
            return
        v3_schemas = [f for f in op.schema_files if f.count("/") >= 2]
        if v3_schemas and not op.v2_metadata_batches:
            self.findings.append(Finding(
                "STATE_METADATA_MISSING",
                f"{rel}: state schema files ({summarize(v3_schemas, 2)}) but no operator metadata "
                f"{rel}/_metadata/v2/<batch>: Spark's restart fails (STDS_FAILED_TO_READ_OPERATOR_METADATA)",
                details={"operator": op.operator_id,
                         "path": self.st.uri(f"{rel}/{OPERATOR_METADATA_DIR}/{OPERATOR_METADATA_V2}")}))
        if op.metadata is None or op.metadata.version < 2:
            return
        present = set(op.schema_files)
        missing = [p for p in op.metadata.schema_paths if p not in present]
        if missing:
            self.findings.append(Finding(
                "STATE_SCHEMA_MISSING",
                f"{op.metadata.path} names state schema file(s) that do not exist: "
                f"{summarize([f'{rel}/{m}' for m in missing], 2)}: Spark's restart fails (file does not exist)",
                details={"operator": op.operator_id, "files": [self.st.uri(f"{rel}/{m}") for m in missing]}))


    def _state_without_logs(self, operators: list[int]) -> None:
        """STATE_WITHOUT_LOGS: state files of earlier batches but no offsets/ or commits/ batch (the
        logs deleted to reprocess from the start, state left behind)."""
        self.findings.append(Finding(
            "STATE_WITHOUT_LOGS",
            f"state/ holds files of operator(s) {', '.join(map(str, operators))} but offsets/ and commits/ hold no "
            "batch: a restart starts from batch 0 over the old state (Spark 4.1+ refuses to start: "
            "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY); put offsets/ and commits/ back from a copy, or reprocess "
            "on a new checkpoint and a new sink path (this sink skips the batch ids it holds)",
            details={"operators": operators}))


def _layout_sources(op: OperatorFiles, conf_parts: Any, commits: dict[int, CommitEntry]) -> dict[str, int]:
    """Every source of an operator's partition count a restart may follow, newest evidence:
    the newest offsets conf, the newest commit's stateUniqueIds (format 2) and the operator
    metadata (v1, or the newest v2 version)."""
    out: dict[str, int] = {}
    n = conf_count({SHUFFLE_PARTITIONS: conf_parts})
    if n is not None:
        out["offsets_conf"] = n
    if commits:
        newest = commits[max(commits)]
        ids = (newest.state_unique_ids or {}).get(str(op.operator_id))
        if ids:
            out[f"commits/{newest.batch_id} stateUniqueIds"] = len(ids)
    if op.metadata is not None and op.metadata.stores:
        out["operator_metadata"] = max(n for _, n in op.metadata.stores)
    return out


def _layout_count(layout: dict[str, int]) -> tuple[Optional[int], Optional[str]]:
    """The partition count a restart uses: the newest offsets conf (Spark restores it into the
    session before planning), else the operator metadata; the label names operator_metadata
    whenever it agrees."""
    meta = layout.get("operator_metadata")
    num = layout.get("offsets_conf", meta)
    if num is None:
        return None, None
    return num, "operator_metadata" if meta == num else "offsets_conf"


def _valid_ids(op: OperatorFiles, commits: dict[int, CommitEntry]) -> dict[tuple[int, str], dict[int, str]]:
    """(partition, store) -> {version: unique id} from commits/<version-1>.stateUniqueIds."""
    out: dict[tuple[int, str], dict[int, str]] = {}
    key = str(op.operator_id)
    for batch, entry in commits.items():
        if not entry.state_unique_ids or key not in entry.state_unique_ids:
            continue
        for part, ids in enumerate(entry.state_unique_ids[key]):
            stores = op.partitions.get(part, {})
            names = sorted(stores) or [DEFAULT_STORE]
            for i, uid in enumerate(ids):
                name = _store_with_id(stores, batch + 1, uid)
                if name is None:
                    name = names[i] if i < len(names) else f"#{i}"
                out.setdefault((part, name), {})[batch + 1] = uid
    return out


def _store_with_id(stores: dict[str, StoreFiles], version: int, uid: str) -> Optional[str]:
    for name, s in stores.items():
        if uid in s.incr_ids.get(version, ()) or uid in s.full_ids.get(version, ()):
            return name
    return None

"""The restore chain of each state store: what it restores and whether a restart can read it.

`Chains` decides a store's status (inspectors/state_restore.py `store_status`, with the torn deltas and
changelogs of its chain taken out) and judges the files of its chain (torn snapshots and zips,
checksums) for the checkpoint inspection (inspectors/checkpoint.py).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional

from streamctl.formats.errors import StorageError
from streamctl.formats.state import (
    LINEAGE_HEAD,
    SST_DIR,
    STATE_CODEC_CONF,
    changelog_lineage,
    is_full_file,
    is_zip_file,
    state_file,
)
from streamctl.inspectors.findings import summarize
from streamctl.inspectors.state_file_checks import content_mismatch, torn_full_reason, torn_reason, zip_sst_sizes
from streamctl.inspectors.state_lineage import id_at, lineage_status
from streamctl.inspectors.state_listing import StoreFiles, without_file
from streamctl.inspectors.state_restore import StoreStatus, store_status
from streamctl.inspectors.storage import Storage


class Chains:
    """The restore chains of one checkpoint's stores. `read_ends`: whether the files of a chain
    are read (their heads and tails, checksums): always locally, on object stores and HDFS with
    `deep` (a ranged read or two per store). Without it a checkpoint-format-2 store still has
    the lineage of the version a restart loads read (one ranged read), as that load follows it."""

    def __init__(self, storage: Storage, deep: bool = False) -> None:
        self.st = storage
        self.read_ends = storage.is_local or deep
        self._lineages: dict[str, Optional[list[tuple[int, str]]]] = {}  # a changelog's lineage by path
        self.lz4 = False  # the conf a restart runs with names lz4 as the state codec (`set_codec`)

    def set_codec(self, conf: dict[str, str]) -> None:
        """The state store codec of the conf a restart runs with (`spark.sql.streaming.stateStore
        .compression.codec`, recorded in every offsets file since Spark 3.1; not judged when absent)."""
        codec = str(conf.get(STATE_CODEC_CONF, "")).lower()
        self.lz4 = codec in ("lz4", "org.apache.spark.io.lz4compressioncodec")

    def status_of(self, files: StoreFiles, required: Optional[int], planned: Optional[int],
                   valid: dict[int, str]) -> StoreStatus:
        """store_status, with the deltas or changelogs of the restore chain judged by their own
        format: a torn one (no LZ4Block end mark, empty) is as good as gone, so the version it
        carries is not restorable and STATE_UNRESTORABLE names it (docs/formats/state.md#torn-files)."""
        status = self._status(files, required, planned, valid)
        torn: list[str] = []
        torn_names: set[str] = set()
        while self.read_ends and status.restorable_required and status.restore_files:
            bad = None
            incremental = [n for n in status.restore_files if not is_full_file(n)]
            if not self.st.is_local:  # object stores: the newest written, the one a crash leaves torn
                incremental = incremental[-1:]
            for name in incremental:
                why = torn_reason(self.st, f"{status.path}/{name}")
                if why is not None:
                    bad = (name, why)
                    break
            if bad is None:
                break
            parsed = state_file(bad[0])
            if parsed is None:
                break
            torn.append(f"{bad[0]} (torn: {bad[1]})")
            torn_names.add(bad[0])
            files = without_file(files, parsed.version, parsed.unique_id, False)
            status = self._status(files, required, planned, valid)
        if torn:
            status = replace(status, missing=tuple(torn) + tuple(m for m in status.missing if m not in torn_names))
        return status

    def _status(self, files: StoreFiles, required: Optional[int], planned: Optional[int],
                valid: dict[int, str]) -> StoreStatus:
        """store_status; for a checkpoint-format-2 RocksDB store whose files are read, narrowed to
        what Spark's load by lineage restores (inspectors/state_lineage.py)."""
        status = store_status(files, required, planned, valid)
        if not (files.uses_unique_ids and files.provider == "rocksdb"):
            return status
        only = None  # without `deep` on object stores and HDFS: the head of the version a restart loads
        if not self.read_ends:
            req = status.required_version
            uid = id_at(files, req, valid) if req else None
            if not req or uid is None or uid in files.full_ids.get(req, ()) or uid not in files.incr_ids.get(req, ()):
                return status
            only = files.file_name(req, uid, False)

        def lineage_of(name: str) -> Optional[list[tuple[int, str]]]:
            if only is not None and name != only:
                return None  # that version keeps its chain of files
            rel = f"{status.path}/{name}"
            if rel not in self._lineages:
                try:
                    ends = self.st.read_ends(rel, LINEAGE_HEAD, 0)
                except StorageError:
                    ends = None
                self._lineages[rel] = None if ends is None else changelog_lineage(ends[0])
            return self._lineages[rel]

        return lineage_status(status, files, valid, lineage_of)

    def judge(self, status: StoreStatus, files: StoreFiles) -> Optional[tuple[list[str], bool]]:
        """(texts of the bad files of `status`'s restore chain, whether an intact older chain is
        there), None when whole. The snapshot/zip the chain starts from is judged by its own
        format (a torn one has no companion to disagree with on HDFS and object stores); then,
        on the local file system only, the checksums: the companions' and the files' own LZ4Block
        ones (object stores: a GET per file of every chain, and Spark's S3 reads verify no Hadoop
        sidecar)."""
        local = self.st.is_local
        first = status.restore_files[:1]
        read: dict[str, bytes] = {}  # the first file's bytes, read once for both checks
        if local and first:
            try:
                read[first[0]] = self.st.read(f"{status.path}/{first[0]}")
            except StorageError:
                pass  # each check reads (and judges) it itself
        bad = self.torn_full(status.path, first, read)
        if local:
            bad += [b for b in self.mismatches(status.path, status.restore_files, files.lists, read)
                    if b[0] not in {n for n, _ in bad}]
        if not bad:
            return None
        texts = [f"{status.path}/{name} ({why})" for name, why in bad]
        # a named pipe or a device where the snapshot belongs blocks the restart: no repair follows
        snapshot_only = ([name for name, _ in bad] == [status.restore_files[0]] and is_full_file(bad[0][0])
                         and "not a regular file" not in bad[0][1])
        return texts, bool(snapshot_only and self.fallback_whole(status, files))

    def fallback_whole(self, status: StoreStatus, files: StoreFiles) -> bool:
        """Whether the files Spark's auto snapshot repair reads instead (`fallback_files`) are
        there and whole: the snapshot they start from not torn; locally, their checksums."""
        return bool(status.fallback_files and not (self.st.is_local and self.mismatches(
            status.path, status.fallback_files, files.lists)) and not self.torn_full(
            status.path, status.fallback_files[:1]))

    def prepare(self, required: Optional[int], planned: Optional[int],
                 files: StoreFiles) -> Optional[tuple[tuple[Optional[int], Optional[int]], StoreStatus, Any]]:
        """read_state's `prepare`: ((required, planned), the store's status (its `files` the
        listed store itself), its judged chain) for a store without commit-log ids; None for the
        others (their status needs the commit log's ids, read after the listing). No findings,
        no state on self."""
        if files.uses_unique_ids:
            return None
        status = self.status_of(files, required, planned, {})
        judged = self.judge(status, files) if self.read_ends else None
        return (required, planned), status, judged

    def torn_full(self, folder: str, names: tuple[str, ...],
                   read: Optional[dict[str, bytes]] = None) -> list[tuple[str, str]]:
        """(name, why) of each snapshot/zip of `names` that is torn by its own format (`read`:
        the bytes of those read already)."""
        out = []
        for name in names:
            if is_full_file(name):
                why = torn_full_reason(self.st, f"{folder}/{name}", (read or {}).get(name))
                if why:
                    out.append((name, f"torn: {why}"))
                elif is_zip_file(name):
                    gone = self.missing_ssts(folder, name)
                    if gone and self.st.lookup(f"{folder}/{name}") is None:
                        continue  # deleted since it was read (the maintenance thread's clean-up, zip then
                        # SSTs): a state in motion, not damage; a restart never loads it
                    if gone:
                        out.append((name, f"names {len(gone)} SST file(s) SSTs/ lacks or holds cut short: {summarize(gone, 2)}"))
        return out

    def missing_ssts(self, folder: str, name: str) -> list[str]:
        """The SST files the RocksDB zip `folder/name` names that its store's `SSTs/` lacks, or
        holds with another size than the zip records (a restart copies every one of them:
        RocksDBFileManager.loadCheckpointFromDfs, which checks the size)."""
        try:
            named = zip_sst_sizes(self.st, f"{folder}/{name}")
            entries = {e.name: e for e in self.st.list_dir(f"{folder}/{SST_DIR}") or []} if named else {}
        except StorageError:
            return []  # judged elsewhere (an unreadable zip is not guessed at here)
        out = []
        for sst, size in sorted(named.items()):
            entry = entries.get(sst)
            if entry is None:
                out.append(sst)
                continue
            got = entry.size
            if got is None and size is not None and self.st.is_local:
                try:
                    got = self.st.stat(f"{folder}/{SST_DIR}/{sst}").size
                except StorageError:
                    got = None
            if size is not None and got is not None and got != size:
                out.append(f"{sst} ({got} bytes, the zip records {size})")
        return out

    def mismatches(self, folder: str, names: tuple[str, ...], lists: Callable[[str], bool],
                    read: Optional[dict[str, bytes]] = None) -> list[tuple[str, str]]:
        """(name, why) of each of `names` in `folder` that does not match its checksum companion
        or its own LZ4Block checksums (`read`: the bytes of those read already)."""
        out = []
        for name in names:
            why = content_mismatch(self.st, folder, name, lists, (read or {}).get(name), self.lz4)
            if why:
                out.append((name, why))
        return out


def required_version(planned: Optional[int], committed: Optional[int]) -> Optional[int]:
    """The state version the next run loads: committed + 1, else the planned batch."""
    if committed is not None:
        return committed + 1
    return planned

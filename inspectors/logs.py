"""What one listing of a Spark log folder (`offsets/`, `commits/`) shows: batch files, temp files,
stray names, checksum sidecars, gaps. The names themselves are formats/names.py's; the files'
bytes are parsed by formats/offsets.py and formats/commits.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from streamctl.formats.checksum import is_hadoop_crc
from streamctl.formats.names import batch_id_of, is_temp_name
from streamctl.inspectors.findings import ids_of, missing_ranges

if TYPE_CHECKING:
    from streamctl.inspectors.storage import Storage


@dataclass(frozen=True, slots=True)
class LogListing:
    """What one listing of `offsets/` or `commits/` shows."""

    batch_ids: tuple[int, ...] = ()
    temp_files: tuple[str, ...] = ()
    stray_files: tuple[str, ...] = ()  # names Spark ignores that are not crc/temp files
    exists: bool = True
    crc_only: tuple[int, ...] = ()  # batch ids with a hidden `.N.crc` sidecar but no file N

    def stale_checksums(self) -> list[int]:
        """Sidecars `.N.crc` above the newest batch: Hadoop's local file system refuses to
        create N next to them, so Spark's next write of batch N fails ("Multiple streaming
        queries are concurrently using ..."). Left behind when N is deleted by hand."""
        latest = -1 if self.latest is None else self.latest
        return [b for b in self.crc_only if b > latest]

    @property
    def latest(self) -> Optional[int]:
        return self.batch_ids[-1] if self.batch_ids else None

    @property
    def oldest(self) -> Optional[int]:
        return self.batch_ids[0] if self.batch_ids else None

    def gaps(self) -> list[int]:
        """Batch ids missing inside [oldest, latest]."""
        ids = self.batch_ids
        if len(ids) < 2 or ids[-1] - ids[0] + 1 == len(ids):
            return []
        return ids_of(self.gap_ranges())  # bounded: cost follows the ids present, never the gap

    def gap_ranges(self) -> list[tuple[int, int]]:
        """The missing ids inside [oldest, latest] as (first, last) ranges."""
        ids = self.batch_ids
        return missing_ranges(ids, ids[0], ids[-1]) if len(ids) >= 2 else []


def classify_log_names(names: list[tuple[str, bool]], exists: bool = True) -> LogListing:
    """Sort a folder's (name, is_dir) pairs into batch files, temp files and strays."""
    ids: list[int] = []
    temps: list[str] = []
    strays: list[str] = []
    crcs: list[int] = []
    for name, is_dir in names:
        b = batch_id_of(name)
        if b is not None and not is_dir:
            ids.append(b)
        elif is_temp_name(name):
            temps.append(name)
        elif is_hadoop_crc(name):
            crc_of = batch_id_of(name[1:-4])
            if crc_of is not None:
                crcs.append(crc_of)
        else:
            strays.append(name)
    ids.sort()
    present = set(ids)
    crc_only = tuple(sorted(b for b in crcs if b not in present))
    return LogListing(tuple(ids), tuple(sorted(temps)), tuple(sorted(strays)), exists, crc_only)


def list_log(storage: Storage, rel: str) -> LogListing:
    """One listing of the log folder `rel` (`offsets`, `commits`). A folder named like a batch
    file counts as that batch, as Spark's listing counts it (HDFSMetadataLog.listBatches filters
    by name): a restart that reads it fails ("is a folder"), one that does not never sees it."""
    entries = storage.list_dir(rel)
    if entries is None:
        return LogListing(exists=False)
    return classify_log_names([(e.name, e.is_dir and batch_id_of(e.name) is None) for e in entries])

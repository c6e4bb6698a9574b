"""The parallel writers of a checkpoint (offsets/, commits/, each state store; a sink's log and
writers) and the epochs each can restart from: their status against the reference epoch and the
window they all share (docs/model.md#parallel-writers)."""
from __future__ import annotations

from typing import Optional

from streamctl.formats.layout import COMMITS_DIR, OFFSETS_DIR
from streamctl.inspectors.logs import LogListing
from streamctl.inspectors.query_inspection import Writer
from streamctl.inspectors.state_restore import StoreStatus


def writer_status(first: Optional[int], last: Optional[int], reference: Optional[int], broken: bool = False) -> str:
    if last is None:
        return "empty"
    if broken:
        return "broken"
    if reference is None or last == reference:
        return "ok"
    return "behind" if last < reference else "ahead"


def common_window(writers: list[Writer]) -> Optional[tuple[int, int]]:
    """[max of firsts, min of lasts] over every writer; None when it is empty."""
    firsts = [w.first for w in writers if w.first is not None]
    lasts = [w.last for w in writers if w.last is not None]
    if not writers or len(firsts) < len(writers) or len(lasts) < len(writers):
        return None
    lo, hi = max(firsts), min(lasts)
    return (lo, hi) if lo <= hi else None


def checkpoint_writers(offsets: LogListing, commits: LogListing, stores: list[StoreStatus],
                       reference: Optional[int]) -> tuple[list[Writer], Optional[tuple[int, int]]]:
    """Every writer's restartable window and the common window."""
    writers: list[Writer] = []
    if offsets.exists or offsets.batch_ids:
        writers.append(Writer(OFFSETS_DIR, "wal", offsets.oldest, offsets.latest,
                              writer_status(offsets.oldest, offsets.latest, reference, bool(offsets.gaps()))))
    if commits.exists or commits.batch_ids:
        writers.append(Writer(COMMITS_DIR, "commit_log", commits.oldest, commits.latest,
                              writer_status(commits.oldest, commits.latest, reference, bool(commits.gaps()))))
    for s in stores:
        first = None if s.first_restorable is None else s.first_restorable - 1
        last = None if s.durable_version is None else s.durable_version - 1
        writers.append(Writer(s.path, "state_store", first, last, writer_status(first, last, reference, s.broken_at is not None)))
    return writers, common_window(writers)

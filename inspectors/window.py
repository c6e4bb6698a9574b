"""The kept window of a checkpoint (docs/model.md#trim): the oldest epoch that stays a restart point
when `keep_epochs` epochs (and any rollback to `keep_rollback_to`) are kept. `streamctl trim` plans
with it; `streamctl kafka retention-floor` reads the Kafka offsets of its start. A read-only
judgment over an inspection: nothing here writes.
"""
from __future__ import annotations

from typing import Optional

from streamctl.formats.errors import StreamctlError
from streamctl.inspectors.query_inspection import QueryInspection


class NoKeptWindow(StreamctlError):
    """No window can be kept (nothing committed, a bad --keep-epochs or --keep-rollback-to)."""


def oldest_kept_epoch(q: QueryInspection, keep_epochs: int, keep_rollback_to: Optional[int] = None) -> int:
    """The oldest epoch L that stays a restart point: min(C - keep_epochs + 1, keep_rollback_to),
    raised to what the logs retain and until every state store can restore L+1."""
    C = q.committed
    if C is None:
        raise NoKeptWindow(f"{q.checkpoint}: nothing committed yet")
    if keep_epochs < 1:
        raise NoKeptWindow("--keep-epochs must be at least 1 (the restart point itself)")
    low = C - keep_epochs + 1
    if keep_rollback_to is not None:
        if keep_rollback_to > C:
            raise NoKeptWindow(f"--keep-rollback-to {keep_rollback_to} is above the newest commit {C}")
        low = min(low, keep_rollback_to)
    oldest = q.offsets.oldest or 0
    if q.async_progress:  # ASYNC_PROGRESS: the restart points are the batches both logs hold
        low = max(low, q.commits.oldest or 0, oldest)
        both = set(q.offsets.batch_ids) & set(q.commits.batch_ids)
        return max((b for b in both if b <= low), default=low)
    low = max(low, q.commits.oldest or 0, oldest + (1 if oldest > 0 else 0))
    stores = [s for op in q.operators for s in op.stores]
    while stores and low < C and any(low + 1 not in s.restorable_versions for s in stores):
        low += 1
    return low

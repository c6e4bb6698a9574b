"""Rewind points in wall-clock time (docs/model.md#rewind-by-time). An operator names a time
(ISO-8601 with its zone); the epoch it stands for is the newest batch of the kept window whose
`batchTimestampMs` (offsets/<N>: when the driver planned it) is at or before that time, so every
batch planned after it runs again. `resolve_time` is the one place that turns a time into an
epoch: align --to, trim --keep-rollback-to, kafka starting-offsets/commit-offsets --epoch, kafka
retention-floor --keep-rollback-to and savepoint create --at all call it. Read-only.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Optional

from streamctl.formats.errors import StreamctlError, UsageError
from streamctl.formats.layout import OFFSETS_DIR
from streamctl.formats.offsets import iso_time, parse_offsets
from streamctl.inspectors.query_inspection import QueryInspection
from streamctl.inspectors.storage import Storage
from streamctl.inspectors.window import NoKeptWindow, oldest_kept_epoch

_TIME_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
                      r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
FUTURE_SLACK_MS = 60_000  # a time this far past the clock of the machine is refused (a typo, not a rewind)


class OutsideWindow(StreamctlError):
    """A time (or a savepoint) outside what the checkpoint keeps: a refusal (exit 4, nothing changed)."""


def looks_like_time(text: str) -> bool:
    """A value that is meant as a time (a date first), not an epoch number or a keyword."""
    return re.match(r"^\d{4}-\d{2}-\d{2}", text.strip()) is not None


def parse_time(text: str, flag: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 time with its zone (`Z`, `+05:30`, `-0800`);
    UsageError (exit 2) for a time without a zone or no time at all."""
    m = _TIME_RE.match(text.strip())
    if m is None:
        raise UsageError(f"invalid value for {flag}: {text[:80]!r} is not an ISO-8601 time "
                         "(e.g. 2026-11-21T02:55:00Z or 2026-11-21T04:55:00+02:00)")
    year, month, day, hour, minute, sec, frac, utc, sign, zh, zm = m.groups()
    if utc is None and sign is None:
        raise UsageError(f"invalid value for {flag}: {text[:80]!r} has no zone: add Z for UTC or an offset such as +02:00")
    offset = timedelta(0) if utc else (1 if sign == "+" else -1) * timedelta(hours=int(zh), minutes=int(zm))
    try:
        when = datetime(int(year), int(month), int(day), int(hour), int(minute), int(sec or 0),
                        int((frac or "0").ljust(6, "0")[:6]), tzinfo=timezone(offset))
    except ValueError as exc:
        raise UsageError(f"invalid value for {flag}: {text[:80]!r}: {exc}") from None
    return (when - _EPOCH) // timedelta(milliseconds=1)


def iso(ms: Optional[int]) -> str:
    """An ISO-8601 UTC time with milliseconds (2026-11-21T02:55:00.123Z); "unknown" for no time."""
    return "unknown" if ms is None else iso_time(ms)


def batch_time(st: Storage, batch: int) -> Optional[int]:
    """`batchTimestampMs` of offsets/<batch>, or None when the file is gone, unreadable or has none."""
    try:
        return parse_offsets(st.read(f"{OFFSETS_DIR}/{batch}"), st.uri(f"{OFFSETS_DIR}/{batch}"), batch).timestamp_ms
    except (StreamctlError, OSError):
        return None


@dataclass(frozen=True)
class Rewind:
    """The epoch a time names, its batch's time, the next batch (which runs again) and the window."""

    time_ms: int
    epoch: int
    epoch_ms: int
    next_epoch: Optional[int]
    next_ms: Optional[int]
    window: tuple[int, int]

    def text(self) -> str:
        if self.next_epoch is None or self.next_ms is None:
            after = "; no batch started after it"
        elif self.next_ms <= self.time_ms:  # the batch in flight: planned before the time, never committed
            after = f"; epoch {self.next_epoch} (started {iso(self.next_ms)}, not committed) runs again"
        else:
            after = f"; epoch {self.next_epoch} (started {iso(self.next_ms)}) and every later batch runs again"
        return f"{iso(self.time_ms)} is epoch {self.epoch} (started {iso(self.epoch_ms)}){after}"


def kept_window(q: QueryInspection) -> tuple[int, int]:
    """The epochs a rewind may reach: the oldest restart point the checkpoint keeps .. the newest commit."""
    try:
        low = oldest_kept_epoch(q, (q.committed or 0) + 1)
    except NoKeptWindow as exc:
        raise OutsideWindow(f"{q.checkpoint}: no kept window to rewind in ({exc})") from None
    return low, int(q.committed)  # type: ignore[arg-type]


def window_text(st: Storage, window: tuple[int, int]) -> str:
    low, high = window
    lo_ms, hi_ms = batch_time(st, low), batch_time(st, high)
    times = f", batches started {iso(lo_ms)} .. {iso(hi_ms)}" if lo_ms is not None and hi_ms is not None else ""
    return f"the kept window is epochs {low}..{high}{times}"


def resolve_time(q: QueryInspection, time_ms: int, what: str, now_ms: Optional[int] = None) -> Rewind:
    """The newest epoch of the kept window whose batch started at or before `time_ms`, or
    OutsideWindow naming the window in epochs and times (`what`: the value as given, for the
    message). A binary search over the retained offsets (their times grow with the batch id)."""
    st = Storage.open(q.checkpoint)
    low, high = window = kept_window(q)
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    if time_ms > now_ms + FUTURE_SLACK_MS:
        raise OutsideWindow(f"{q.checkpoint}: {what} ({iso(time_ms)}) is in the future; {window_text(st, window)}")
    ids = sorted(b for b in q.offsets.batch_ids if low <= b <= high)
    times: dict[int, Optional[int]] = {}

    def at(i: int) -> int:
        b = ids[i]
        if b not in times:
            times[b] = batch_time(st, b)
        value = times[b]
        if value is None:
            raise OutsideWindow(f"{q.checkpoint}: offsets/{b} records no batchTimestampMs: {what} cannot be placed")
        return value

    if not ids or time_ms < at(0):
        raise OutsideWindow(f"{q.checkpoint}: {what} ({iso(time_ms)}) is before the kept window: "
                            f"{window_text(st, window)}; nothing older can be rewound to")
    lo, hi = 0, len(ids) - 1  # invariant: at(lo) <= time_ms
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if at(mid) <= time_ms:
            lo = mid
        else:
            hi = mid - 1
    epoch = ids[lo]
    later = sorted(b for b in q.offsets.batch_ids if b > epoch)
    nxt = later[0] if later else None
    return Rewind(time_ms, epoch, at(lo), nxt, batch_time(st, nxt) if nxt is not None else None, window)


def epoch_or_time(q: QueryInspection, value: str, flag: str) -> tuple[int, Optional[Rewind]]:
    """An epoch number as given, or the epoch a time names (resolve_time); UsageError otherwise."""
    if value.isdigit():
        return int(value), None
    if looks_like_time(value):
        rw = resolve_time(q, parse_time(value, flag), f"{flag} {value}")
        return rw.epoch, rw
    raise UsageError(f"invalid value for {flag}: {value[:80]!r} (an epoch number or an ISO-8601 time with its zone)")


def with_oldest_time(q: QueryInspection) -> QueryInspection:
    """`q` with the oldest epoch a rewind reaches and its batch's time (`inspect epochs`)."""
    from dataclasses import replace

    if q.committed is None or q.verdict == "unreadable":
        return q
    try:
        low = oldest_kept_epoch(q, q.committed + 1)
    except NoKeptWindow:
        return q
    return replace(q, oldest_kept=(low, batch_time(Storage.open(q.checkpoint), low)))


def check_epoch_or_time(value: Optional[str], flag: str) -> None:
    """A usage check, before anything is read, of a flag taking an epoch number or a time."""
    if value is None or value.isdigit():
        return
    if not looks_like_time(value):
        raise UsageError(f"invalid value for {flag}: {value[:80]!r} (an epoch number or an ISO-8601 time with its zone)")
    parse_time(value, flag)

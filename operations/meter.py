"""The progress meter of a running operation: files done, bytes, rate and eta, throttled."""
from __future__ import annotations

import time
from typing import Callable, Optional

METER_SECONDS = 0.2


class Meter:
    """Files done, bytes, rate and eta of a running operation, at most every METER_SECONDS (and
    at the last one); `what` names the things counted, `label` what is done to them."""

    def __init__(self, total: int, out: Optional[Callable[[str], None]], what: str = "files", label: str = "") -> None:
        self.total, self.out, self.what, self.label = total, out, what, label
        self.files = self.bytes = 0
        self.t0 = self.last = time.monotonic()

    def tick(self, size: int, files: int = 1) -> None:
        """`files` more done, of `size` bytes together."""
        if self.out is None:
            return
        self.files += files
        self.bytes += int(size)
        now = time.monotonic()
        if now - self.last < METER_SECONDS and self.files < self.total:
            return
        self.last = now
        rate = self.files / max(now - self.t0, 1e-6)
        eta = max(self.total - self.files, 0) / rate if rate else 0.0
        self.out(f"{self.label}{self.files:,}/{self.total:,} {self.what}, {self.bytes / 1e6:,.1f} MB, "
                 f"{rate:,.0f} {self.what}/s, eta {eta:,.0f} s")

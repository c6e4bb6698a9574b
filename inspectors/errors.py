"""The read side's helper for reporting an inspection's unreadable files as an error. The error
types themselves live below every room, in formats/errors.py."""
from __future__ import annotations

from typing import Any

from streamctl.formats.errors import StorageError


def raise_unreadable(q: Any) -> None:
    """StorageError (exit 3) naming the first file of an inspection that could not be read."""
    bad = [f for f in q.findings if f.code == "UNREADABLE"]
    if bad:
        raise StorageError(str(bad[0].details.get("path", q.checkpoint)), str(bad[0].details.get("reason", bad[0].message)))

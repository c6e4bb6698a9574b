"""Typed errors raised by the read side. They carry no exit codes: console/errors.py maps them."""
from __future__ import annotations

from typing import Any


class StreamctlError(Exception):
    """Base of every error streamctl reports as a one-line message instead of a traceback."""


class StorageError(StreamctlError):
    """A path could not be listed or read (missing, permission denied, unreachable, a loop...)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class NotACheckpoint(StorageError):
    """The folder exists but holds nothing a Spark checkpoint would."""


class UsageError(StreamctlError):
    """Bad values given by the user (flags, config, pipeline names): exit 2."""


def raise_unreadable(q: Any) -> None:
    """StorageError (exit 3) naming the first file of an inspection that could not be read."""
    bad = [f for f in q.findings if f.code == "UNREADABLE"]
    if bad:
        raise StorageError(str(bad[0].details.get("path", q.checkpoint)), str(bad[0].details.get("reason", bad[0].message)))

"""The error types every room raises, at the bottom of the layers (docs/development.md#layers).

They carry no exit codes: console/errors.py maps them (docs/model.md#verdicts-and-exit-codes).
"""
from __future__ import annotations


class StreamctlError(Exception):
    """Base of every error streamctl reports as a one-line message instead of a traceback."""


class PathError(StreamctlError):
    """An error about one file or folder: `path`, and `reason` in one line."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class StorageError(PathError):
    """A path could not be listed or read (missing, permission denied, unreachable, a loop...)."""


class NotACheckpoint(StorageError):
    """The path given as a checkpoint is none: it does not exist, is a file, or holds nothing a
    Spark checkpoint would."""


class UsageError(StreamctlError):
    """Bad values given by the user (flags, config, pipeline names): exit 2."""


class LogParseError(PathError):
    """A file Spark (or streamctl, for its own formats) would refuse to read."""

"""The streamctl agent's lease and stop request, as found in a checkpoint's `_streamctl/` folder.

A pure reader: bytes in, frozen dataclasses out, `LogParseError` (one-line reason) for a file
that exists but cannot be understood. Works on every file system `Storage` can open.

Files (written atomically by `streamctl.pipeline.agent` and `streamctl stop`; Spark ignores
unknown folders in a checkpoint root)::

    <checkpoint>/_streamctl/lease.json   {"version": 1, "query_id", "run_id", "name", "host", "pid",
                                          "started_at_ms", "heartbeat_ms", "expires_at_ms",
                                          "last_batch", "state": "running"|"stopping"|"released",
                                          "released_at_ms", "stop_request_ms"}
    <checkpoint>/_streamctl/stop.json    {"version": 1, "requested_at_ms",
                                          "requested_by": {"host", "pid", "user"}, "reason"}
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Optional

from streamctl.formats.errors import LogParseError
from streamctl.formats.layout import LEASE_FILE, STOP_FILE, STREAMCTL_DIR
from streamctl.formats.reader import load_json
from streamctl.inspectors.storage import Storage

FOLDER = STREAMCTL_DIR  # LEASE_FILE and STOP_FILE are formats/layout.py's (imported from here too)
LEASE_VERSION = 1
STOP_VERSION = 1
STATES = ("running", "stopping", "released")
_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Lease:
    version: int
    query_id: str
    run_id: str
    name: Optional[str]
    host: str
    pid: int
    started_at_ms: int
    heartbeat_ms: int
    expires_at_ms: int
    last_batch: Optional[int]
    state: str
    released_at_ms: Optional[int]
    stop_request_ms: Optional[int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class StopRequest:
    version: int
    requested_at_ms: int
    requested_by: dict[str, Any]
    reason: Optional[str]

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "requested_at_ms": self.requested_at_ms,
                "requested_by": dict(self.requested_by), "reason": self.reason}


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _load(storage: Storage, rel: str) -> Optional[dict[str, Any]]:
    if storage.lookup(rel) is None:
        return None
    path = storage.uri(rel)
    data = storage.read(rel, max_bytes=_MAX_BYTES)
    try:
        doc = load_json(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise LogParseError(path, "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise LogParseError(path, f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(doc, dict):
        raise LogParseError(path, "expected a JSON object")
    return doc


def _check(doc: dict[str, Any], path: str, spec: dict[str, tuple[str, bool]]) -> None:
    """spec: key -> (type name, nullable)."""
    for key, (kind, nullable) in spec.items():
        if key not in doc:
            raise LogParseError(path, f"missing key {key!r}")
        value = doc[key]
        if value is None:
            if nullable:
                continue
            raise LogParseError(path, f"{key!r} must not be null")
        ok = {"int": _int(value), "str": isinstance(value, str), "dict": isinstance(value, dict)}[kind]
        if not ok:
            raise LogParseError(path, f"{key!r} must be {'an int' if kind == 'int' else 'a ' + {'str': 'string', 'dict': 'JSON object'}[kind]}")


_LEASE_SPEC = {
    "version": ("int", False), "query_id": ("str", False), "run_id": ("str", False), "name": ("str", True),
    "host": ("str", False), "pid": ("int", False), "started_at_ms": ("int", False),
    "heartbeat_ms": ("int", False), "expires_at_ms": ("int", False), "last_batch": ("int", True),
    "state": ("str", False), "released_at_ms": ("int", True), "stop_request_ms": ("int", True),
}
_STOP_SPEC = {"version": ("int", False), "requested_at_ms": ("int", False), "requested_by": ("dict", False),
              "reason": ("str", True)}


def _read(storage: Storage, rel: str, what: str, version: int,
          spec: dict[str, tuple[str, bool]]) -> Optional[dict[str, Any]]:
    """The keys of `spec` from `rel`, checked; None when there is no such file. `what` names the
    document in the message of a version newer than `version`."""
    doc = _load(storage, rel)
    if doc is None:
        return None
    path = storage.uri(rel)
    if _int(doc.get("version")) and doc["version"] > version:
        raise LogParseError(path, f"unsupported {what} version {doc['version']} (this streamctl reads {version})")
    _check(doc, path, spec)
    return {k: doc[k] for k in spec}


def read_lease(storage: Storage) -> Optional[Lease]:
    """The lease in `<checkpoint>/_streamctl/lease.json`, None when there is none.
    StorageError when it cannot be read; LogParseError when it is malformed."""
    doc = _read(storage, LEASE_FILE, "lease", LEASE_VERSION, _LEASE_SPEC)
    if doc is None:
        return None
    if doc["state"] not in STATES:
        raise LogParseError(storage.uri(LEASE_FILE), f"'state' must be one of {', '.join(STATES)}")
    return Lease(**doc)


def read_stop_request(storage: Storage) -> Optional[StopRequest]:
    """The stop request in `<checkpoint>/_streamctl/stop.json`, None when there is none."""
    doc = _read(storage, STOP_FILE, "stop request", STOP_VERSION, _STOP_SPEC)
    return None if doc is None else StopRequest(**doc)


def now_ms() -> int:
    """The protocol's clock: wall-clock milliseconds, as the lease's and the request's `*_ms` keys."""
    return int(time.time() * 1000)


TOMBSTONE_KIND = "streamctl-retired-checkpoint"  # the `metadata` drop-sink leaves (docs/formats/streamctl.md#the-tombstone)


def retired_record(data: object) -> Optional[dict]:
    """The tombstone drop-sink wrote over `metadata` (its JSON object), None for anything else."""
    if not isinstance(data, (bytes, bytearray)) or b"streamctl" not in data:
        return None
    try:
        doc = load_json(bytes(data).decode("utf-8", "strict").strip())
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) and doc.get("streamctl") == TOMBSTONE_KIND else None


def lease_status(lease: Lease, now_ms: int) -> str:
    """`live` (running or stopping, not expired), `stale` (running or stopping but expired: the
    driver died without releasing it) or `released`."""
    if lease.state in ("running", "stopping"):
        return "live" if now_ms < lease.expires_at_ms else "stale"
    return "released"

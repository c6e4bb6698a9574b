"""streamctl's coordinated sink (pipeline/coordinated_sink.py; docs/coordinated-sink.md): writers stage
files under `_staging/<epoch>/`, the commit publishes them under `data/epoch=<e>/` and writes
`_commits/<epoch>.json`, one JSON record naming every writer of the epoch:
`{"version":1,"epoch":e,"num_writers":n,"rows":r,"writers":[{"partition":p,"files":[...],"rows":r}]}`.
"""
from __future__ import annotations

import json
import os
from typing import Any, NamedTuple, Optional

from streamctl.formats.errors import LogParseError
from streamctl.formats.reader import load_json

COORD_COMMITS = "_commits"
COORD_STAGING = "_staging"
COORD_DATA = "data"


def commit_record_name(epoch: int) -> str:
    return f"{epoch}.json"


def epoch_of_record_name(name: str) -> Optional[int]:
    """The epoch of a commit record's file name `<epoch>.json`, else None."""
    return int(name[:-5]) if name.endswith(".json") and name[:-5].isdigit() else None


def epoch_folder(epoch: int) -> str:
    """The folder under data/ the commit of an epoch publishes its files into."""
    return f"epoch={epoch}"


def epoch_of_folder(name: str) -> Optional[int]:
    return int(name[6:]) if name.startswith("epoch=") and name[6:].isdigit() else None


RECORD_VERSION = 1


def writer_entry(partition: int, attempt: int, rows: int, files: list[str]) -> dict[str, Any]:
    """One writer of a commit record: its partition, task attempt, rows and published files."""
    return {"partition": partition, "attempt": attempt, "rows": rows, "files": files}


def commit_record(epoch: int, query_id: Optional[str], committed_at_ms: int, writers: list[dict[str, Any]]) -> dict[str, Any]:
    """The commit record of an epoch, keys in the order docs/coordinated-sink.md gives."""
    return {
        "version": RECORD_VERSION,
        "epoch": epoch,
        "query_id": query_id,
        "committed_at_ms": committed_at_ms,
        "num_writers": len(writers),
        "writers": writers,
        "rows": sum(w["rows"] for w in writers),
    }


class Writer(NamedTuple):
    """One writer of a parsed commit record."""

    partition: int
    files: tuple[str, ...]
    rows: int


def record_writers(record: dict[str, Any]) -> list[Writer]:
    """The writers a record parsed by `parse_commit_record` names, in its order."""
    return [Writer(int(w["partition"]), tuple(w["files"]), int(w["rows"])) for w in record["writers"]]


def record_rows(record: dict[str, Any]) -> int:
    """The rows an epoch committed: `rows`, else the sum of its writers' rows."""
    return int(record.get("rows", sum(w["rows"] for w in record["writers"])))


def writer_count(record: dict[str, Any]) -> int:
    """The writers an epoch had: `num_writers`, else the writers the record lists."""
    return int(record.get("num_writers") or len(record["writers"]))


def serialize_commit_record(record: dict[str, Any]) -> bytes:
    """One commit record: compact JSON and a newline."""
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


def parse_commit_record(data: bytes, path: str, epoch: int) -> dict[str, Any]:
    if not data:
        raise LogParseError(path, "empty commit record")
    try:
        rec = load_json(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise LogParseError(path, f"commit record is not valid JSON ({why})") from None
    if not isinstance(rec, dict) or rec.get("epoch") != epoch or not isinstance(rec.get("writers"), list):
        raise LogParseError(path, f"not a commit record of epoch {epoch} (needs \"epoch\": {epoch} and \"writers\")")
    if rec.get("version", RECORD_VERSION) != RECORD_VERSION:
        raise LogParseError(path, f"unsupported commit record version {rec.get('version')!r}")
    for w in rec["writers"]:
        if not isinstance(w, dict) or "partition" not in w or not isinstance(w.get("files"), list):
            raise LogParseError(path, "a writer entry lacks partition or files")
        if not _count(w["partition"]):
            raise LogParseError(path, f"a writer's partition {w['partition']!r} is not a count from 0 to {MAX_WRITERS}")
        if not all(isinstance(f, str) for f in w["files"]) or not _count(w.setdefault("rows", 0), None):
            raise LogParseError(path, f"writer {w['partition']}: files must be strings and rows a count")
    n = rec.get("num_writers")
    if n is not None and not _count(n):
        raise LogParseError(path, f"num_writers {n!r} is not a count from 0 to {MAX_WRITERS} (an absurd value)")
    if "rows" in rec and not _count(rec["rows"], None):
        raise LogParseError(path, f"rows {rec['rows']!r} is not a count")
    return rec


MAX_WRITERS = 100_000  # writers (partitions) of one epoch; more is an absurd value, not a sink


def _count(v: Any, limit: Optional[int] = MAX_WRITERS) -> bool:
    """A non-negative int (not a bool), at most `limit`."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0 and (limit is None or v <= limit)


def committed_files(path: str) -> list[str]:
    """The data files of every committed epoch of the coordinated sink at the local folder `path`,
    in epoch order: what a reader of the sink reads (docs/coordinated-sink.md, *Reading the sink*).

    Every record is read with the parse streamctl's inspection uses, so a reader fails exactly
    where `inspect sink` says UNREADABLE: a record that is not one (`LogParseError`), a file it
    names outside its epoch's folder (`LogParseError`), a file it names that is gone
    (`FileNotFoundError`), something other than a file under a record's name (`LogParseError`).
    """
    commits = os.path.join(path, COORD_COMMITS)
    try:
        names = os.listdir(commits)
    except FileNotFoundError:
        return []
    out: list[str] = []
    for epoch, name in sorted((e, n) for n in names if (e := epoch_of_record_name(n)) is not None):
        rec_path = os.path.join(commits, name)
        if not os.path.isfile(rec_path):
            raise LogParseError(rec_path, "not a regular file where a commit record belongs")
        with open(rec_path, "rb") as fh:
            rec = parse_commit_record(fh.read(), rec_path, epoch)
        folder = f"{COORD_DATA}/{epoch_folder(epoch)}/"
        for w in record_writers(rec):
            for rel in w.files:
                if not rel.startswith(folder) or "/" in rel[len(folder):] or rel[len(folder):] in ("", ".", ".."):
                    raise LogParseError(rec_path, f"writer {w.partition} names {rel!r}, not a file of {folder}")
                full = os.path.join(path, *rel.split("/"))
                if not os.path.isfile(full):
                    raise FileNotFoundError(f"{full}: a data file the commit record {rec_path} names is gone")
                out.append(full)
    return out

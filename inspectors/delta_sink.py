"""A Delta sink (docs/formats/sinks.md#delta): the table's `txn` version for an app id, read with
the `deltalake` package (checkpoints, multi-part checkpoints and log compaction are the library's
business), and the log files a reader or the next commit reads, checked as files first
(`_delta_specials`). The `delta` reader of inspectors/sinks.py `READERS`."""
from __future__ import annotations

from typing import Any, Optional

from streamctl.formats.delta_txn import (
    DELTA_LOG,
    LAST_CHECKPOINT,
    checkpoint_part,
    checkpoint_txn_app_ids,
    commit_file,
    commit_files,
    commit_txn_app_ids,
    commit_txn_versions,
    log_file_version,
)
from streamctl.formats.errors import StorageError
from streamctl.inspectors.findings import missing_ranges
from streamctl.inspectors.sinks import SinkLog, _unreadable
from streamctl.inspectors.storage import Storage, parallel_map

READ_THREADS = 8  # object stores: the commits after the newest checkpoint, read on a few threads


def _delta_options(st: Storage) -> tuple[str, dict[str, str]]:
    """deltalake's table URI and storage options for a Storage location."""
    uri = st.display
    opts: dict[str, str] = {}
    if "?" in uri:  # s3://bucket/t?endpoint_override=host:port&scheme=http (pyarrow style)
        from urllib.parse import parse_qsl

        uri, _, query = uri.partition("?")
        q = dict(parse_qsl(query))
        if "endpoint_override" in q:
            scheme = q.get("scheme", "https")
            opts["AWS_ENDPOINT_URL"] = f"{scheme}://{q['endpoint_override']}"
            if scheme == "http":
                opts["AWS_ALLOW_HTTP"] = "true"
        if "region" in q:
            opts["AWS_REGION"] = q["region"]
    if uri.startswith("s3a://") or uri.startswith("s3n://"):
        uri = "s3://" + uri[6:]
    return uri, opts


def read_delta(st: Storage, app_id: Optional[str], detail: bool) -> SinkLog:
    try:
        from deltalake import DeltaTable
    except ImportError:  # pragma: no cover - deltalake is a dependency of the sink readers
        raise StorageError(st.display, "reading Delta tables needs the deltalake package (pip install deltalake)") from None
    uri, opts = _delta_options(st)
    listing = st.list_dir(DELTA_LOG) or []  # one listing for both checks of the log
    special = _delta_specials(st, listing)
    if special:
        return SinkLog("delta", st.display, None, app_id=app_id, findings=(_unreadable(st.uri(special[0]), special[1]),))
    try:
        table = DeltaTable(uri, storage_options=opts or None)
        version = table.version()
        txn = table.transaction_version(app_id) if app_id else None
    except Exception as exc:  # deltalake raises its own error types with multi-line texts
        reason = _deltalake_reason(exc)
        path = st.uri(DELTA_LOG)
        return SinkLog("delta", st.display, None, app_id=app_id,
                       findings=(_unreadable(path, f"Delta log cannot be loaded: {reason}"),))
    back = _log_checks(st, listing, app_id if txn is not None else None)
    if back:
        return SinkLog("delta", st.display, None, app_id=app_id, table_version=int(version),
                       findings=(_unreadable(st.uri(back[0]), back[1]),))
    epoch = int(txn) if txn is not None else None
    extra: dict[str, Any] = {}
    if not app_id:
        extra["note"] = "no app id given: the txn version needs --app-id or a checkpoint (its query id)"
    return SinkLog("delta", st.display, epoch, first_epoch=epoch, epoch_ids=(epoch,) if epoch is not None else (),
                   app_id=app_id, table_version=int(version), extra=extra)


def _log_checks(st: Storage, listing: list[Any], app_id: Optional[str]) -> Optional[tuple[str, str]]:
    """(the commit, why) for the first of these in the commits after the newest checkpoint:
    - the app's `txn` version below 0 or below an earlier commit's: a streaming writer's txn
      versions are its batch ids and only rise (a replayed batch is skipped, never written with a
      lower one), so the table's epoch would be read from an edit or changed bytes, and a replay
      of a batch the table holds would write its rows twice;
    - a data file added (and not removed since) whose size is not the one logged, or that is not
      there: readers fail on it (the parquet footer is read at the logged size; observed,
      deltalake 1.6: "Parquet magic bytes not found", "Cannot seek past end of file").
    Cost: those commits read, and a stat per file they add (on object stores on READ_THREADS
    threads)."""
    entries = [e for e in listing if not e.is_dir]
    named = [(v, e.name) for e in entries if (v := log_file_version(e.name)) is not None]
    floor = max((v for (v, cp), _n in named if cp), default=-1)
    commits = sorted((v, n) for (v, cp), n in named if not cp and v > floor)
    try:
        datas = [st.read(f"{DELTA_LOG}/{n}") for _v, n in commits] if st.is_local else \
            parallel_map(lambda c: st.read(f"{DELTA_LOG}/{c[1]}"), commits, READ_THREADS)
    except StorageError:
        return None  # deltalake loaded the table: a commit it read is there
    last: Optional[tuple[int, int]] = None
    added: dict[str, tuple[str, Any]] = {}
    for (version, name), data in zip(commits, datas, strict=True):
        rel = f"{DELTA_LOG}/{name}"
        for kind, path, size in commit_files(data):
            if kind == "add":
                added[path] = (rel, size)
            else:
                added.pop(path, None)
        got = commit_txn_versions(data).get(app_id) if app_id else None
        if got is None:
            continue
        if not isinstance(got, int) or isinstance(got, bool) or got < 0:
            return rel, (f"a replay of a batch the table holds would write its rows twice: txn version {got} of app "
                         f"{app_id} is not a batch id, which no streaming writer writes (an edit, or changed bytes)")
        if last is not None and got < last[1]:
            return rel, (f"a replay of a batch the table holds would write its rows twice: txn version {got} of app "
                         f"{app_id} is below version {last[0]}'s {last[1]}, and a streaming writer's only rise (an "
                         "edit, or changed bytes)")
        last = (version, got)
    files = sorted(p for p in added if "://" not in p and not p.startswith("/"))

    def size_of(path: str) -> Optional[int]:
        try:
            e = st.lookup(path)
        except StorageError:
            return None
        return e.size if e is not None and not e.is_dir else None

    sizes = [size_of(p) for p in files] if st.is_local else parallel_map(size_of, files, READ_THREADS)
    for path, size in zip(files, sizes, strict=True):
        rel, logged = added[path]
        if size != logged:
            return rel, (f"readers of the table fail on {path}: it adds it with size {logged}, and the file "
                         + ("is not there" if size is None else f"has {size} bytes") + " (an edit, changed bytes, "
                         "or a file changed or lost after the commit)")
    return None


def _delta_specials(st: Storage, entries: list[Any]) -> Optional[tuple[str, str]]:
    """(the first Delta log file readers and the next commit read, why) (`_last_checkpoint`, the
    newest checkpoint and every commit after it) that is a folder, or locally a named pipe or
    device: deltalake lists past a folder and would load the version before it, so the table
    looks one commit behind while a writer can never commit that version (observed: `Failed to
    commit transaction: 15`); or an empty commit, which no writer leaves (each carries its
    commitInfo) and readers take as a version without actions (observed, deltalake 1.6: its
    rows gone). Cost: the log's listing; locally a stat per file after the checkpoint."""
    named = [(v, e) for e in entries if (v := log_file_version(e.name)) is not None or e.name == LAST_CHECKPOINT]
    checkpoints = [v[0] for v, e in named if v is not None and v[1] and not e.is_dir]
    floor = max(checkpoints) if checkpoints else -1
    for v, e in sorted(named, key=lambda x: -1 if x[0] is None else x[0][0]):
        if v is not None and v[0] < floor:
            continue
        rel = f"{DELTA_LOG}/{e.name}"
        try:
            ends = st.read_ends(rel, 0, 0) if st.is_local and not e.is_dir else None
            size = ends[2] if ends is not None else e.size
            if e.is_dir or (st.is_local and ends is None):
                return rel, ("not a regular file where the Delta log's newest files belong: readers skip or block on "
                             "it, and a writer's commit of its version fails (\"Failed to commit transaction\")")
        except StorageError:
            return rel, "cannot be read where the Delta log's newest files belong"
        if v is not None and not v[1] and size == 0:
            return rel, ("empty commit (a crash or a full disk): no writer leaves one, and readers take it as a "
                         "version without actions, so the rows it added are gone from the table")
    # the commits after the newest checkpoint (every one from 0 without a checkpoint) are read in order
    commits = sorted(v[0] for v, e in named if v is not None and not v[1] and v[0] > floor)
    gaps = missing_ranges(commits, floor + 1, commits[-1]) if commits else []
    if gaps:
        return f"{DELTA_LOG}/{commit_file(gaps[0][0])}", (
            "missing: the commits after the Delta log's newest checkpoint (every one from version 0 without a "
            "checkpoint) must all be there; readers and writers fail on the gap (\"Expected contiguous commit "
            "files\")")
    return None


def delta_app_ids(st: Storage) -> Optional[list[str]]:
    """The app ids of every `txn` action the table's snapshot holds (its streaming writers' query
    ids), as a reader replays the log: the newest checkpoint's files and the commits after it
    (deltalake has no call that lists them). None when the log cannot be read. For a pre-flight
    only: cost is the checkpoint's `txn` column and every commit after it (on object stores on
    READ_THREADS threads)."""
    try:
        entries = [e for e in st.list_dir(DELTA_LOG) or [] if not e.is_dir]
        named = [(v, e.name) for e in entries if (v := log_file_version(e.name)) is not None]
        floor = max((v for (v, cp), _n in named if cp and _complete(v, named)), default=-1)
        reads = [(n, cp) for (v, cp), n in named if (cp and v == floor) or (not cp and v > floor)]

        def one(item: tuple[str, bool]) -> set[str]:
            name, cp = item
            if not cp:
                return commit_txn_app_ids(st.read(f"{DELTA_LOG}/{name}"))
            with st.open_random(f"{DELTA_LOG}/{name}") as fh:
                return checkpoint_txn_app_ids(fh, name)

        found = [one(r) for r in reads] if st.is_local else parallel_map(one, reads, READ_THREADS)
    except Exception:  # noqa: BLE001 - a log streamctl cannot read here: the ids are unknown
        return None
    return sorted(set().union(*found)) if found else []


def _complete(version: int, named: list[tuple[tuple[int, bool], str]]) -> bool:
    """Whether the checkpoint of `version` is whole: a multi-part one needs every part (a crash
    while it was written leaves some; readers fall back to an older checkpoint)."""
    parts = [p for (v, cp), n in named if cp and v == version and (p := checkpoint_part(n)) is not None]
    return not parts or len({p for p, _of in parts}) == parts[0][1]


def _deltalake_reason(exc: Exception) -> str:
    """deltalake's error, its first line cut before a Rust debug dump (`ParsedLogPath { ... }`)."""
    import re

    text = str(exc).strip().splitlines()
    reason = text[0] if text else type(exc).__name__
    return re.split(r":?\s+\w+ \{", reason, maxsplit=1)[0].rstrip(": ") or type(exc).__name__


def delta_version_of_epoch(st: Storage, app_id: str, epoch: int) -> Optional[int]:
    """The Delta table version whose commit wrote the query's epoch: the oldest version whose
    newest `txn` of `app_id` is `epoch` (a streaming writer's txn versions rise with the table's,
    so a bisection over the versions, each loaded by deltalake); None when no version holds it
    (a replayed epoch the writer skipped, a vacuumed log) or the table cannot be read."""
    from deltalake import DeltaTable

    uri, opts = _delta_options(st)

    def txn_at(version: int) -> int:
        got = DeltaTable(uri, version=version, storage_options=opts or None).transaction_version(app_id)
        return -1 if got is None else int(got)

    try:
        lo, hi = 0, DeltaTable(uri, storage_options=opts or None).version()
        while lo < hi:
            mid = (lo + hi) // 2
            if txn_at(mid) < epoch:
                lo = mid + 1
            else:
                hi = mid
        return lo if txn_at(lo) == epoch else None
    except Exception:  # noqa: BLE001 - deltalake's own errors: an old version's log is gone, or unreadable
        return None


def delta_add_paths(st: Storage) -> list[str]:
    """The data-file paths of a Delta table's current version as its log names them (relative
    to the table, or absolute: `streamctl copy` checks which); StorageError when the log cannot
    be loaded."""
    from deltalake import DeltaTable

    uri, opts = _delta_options(st)
    try:
        actions = DeltaTable(uri, storage_options=opts or None).get_add_actions(flatten=True)
        return [str(p) for p in actions.column("path").to_pylist()]
    except Exception as exc:  # deltalake raises its own error types with multi-line texts
        raise StorageError(st.uri(DELTA_LOG), f"Delta log cannot be loaded: {_deltalake_reason(exc)}") from None

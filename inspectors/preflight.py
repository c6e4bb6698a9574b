"""Would a new version of a query restart on this checkpoint? The judgments of `streamctl
preflight` (docs/model.md#preflight) over what the checkpoint holds and what the new query's
plan says (pipeline/preflight.py reads the plan with PySpark; these need none)."""
from __future__ import annotations

import json
import posixpath
import re
from typing import Any, Iterable, Optional
from urllib.parse import unquote, urlparse

from streamctl.formats.errors import StreamctlError
from streamctl.formats.kafka_offsets import parse_kafka_offsets
from streamctl.formats.layout import OFFSETS_DIR, STATE_DIR
from streamctl.formats.offsets import OffsetEntry, SourceId, offset_kind, parse_offsets
from streamctl.formats.state import SCHEMA_FILE, parse_state_schema, schema_field_types
from streamctl.inspectors.findings import Finding
from streamctl.inspectors.sources import SourceInfo
from streamctl.inspectors.storage import Storage


def compare_operators(committed: Optional[int], old: dict[int, Optional[str]], new: dict[int, tuple[str, str]],
                      verified: set[str]) -> list[Any]:
    """STATEFUL_OPERATORS_CHANGED when the restart of the new query fails on the checkpoint's
    operators: with operator metadata (Spark 3.5+ writes it) the ids and names must match
    (STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA); without it, a new operator id has no
    state folder (STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY). Names streamctl has not
    seen Spark write are compared by id only."""
    if committed is None:  # nothing ran: the new query starts fresh
        return []

    def text(ops: dict[int, str]) -> str:
        return "[" + ", ".join(f"{i}: {n}" for i, n in sorted(ops.items())) + "]" if ops else "none"

    new_names = {i: name for i, (_node, name) in new.items()}
    old_known = {i: n for i, n in old.items() if n}
    details = {"checkpoint_operators": {str(i): n for i, n in sorted(old.items())},
               "query_operators": {str(i): n for i, n in sorted(new_names.items())}}
    if old and len(old_known) == len(old):
        differ = set(old) != set(new) or any(
            old[i] != new_names[i] for i in old if old[i] in verified and new_names[i] in verified)
        if differ:
            return [Finding(
                "STATEFUL_OPERATORS_CHANGED",
                f"the new query's stateful operators {text(new_names)} differ from the checkpoint's {text(old_known)}: "
                "its restart fails (STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA). Keep the operators, or "
                "start the changed query on a new checkpoint",
                details=dict(details, restart_error="STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"))]
        return []
    added = sorted(set(new) - set(old))
    if added:
        return [Finding(
            "STATEFUL_OPERATORS_CHANGED",
            f"the new query has stateful operator(s) {', '.join(map(str, added))} the checkpoint has no state for: its "
            "restart fails (STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY)",
            details=dict(details, restart_error="STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY"))]
    return []


def compare_keys(checkpoint: str, old: dict[int, Optional[str]], new: dict[int, tuple[str, str]],
                 keys: dict[int, Optional[list[str]]]) -> list[Any]:
    """STATE_KEY_SCHEMA_CHANGED when an operator the new query keeps (same id, and the same name
    where the checkpoint's operator metadata names it: PySpark 3.5 checkpoints may have none) keys
    its state by other types than the checkpoint's state schema file records: Spark checks them
    when the first batch runs (StateSchemaCompatibilityChecker: field count and types, names and
    nullability aside) and fails with STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE; on 3.5 a task may
    first read an old state row under the new key and fail with InvalidUnsafeRowException."""
    st = Storage.open(checkpoint)
    out = []
    for op, want in sorted(keys.items()):
        if want is None or op not in old or (old[op] is not None and old[op] != new.get(op, ("", ""))[1]):
            continue
        rel = f"{STATE_DIR}/{op}/0/{SCHEMA_FILE}"
        try:
            data = st.read(rel)
        except StreamctlError:
            continue  # no schema file (Spark writes it from 3.x; transformWithState keeps v3 elsewhere)
        parsed = parse_state_schema(data, st.uri(rel))
        if parsed is None:
            continue
        have = schema_field_types(parsed[0])
        if have != want:
            out.append(Finding(
                "STATE_KEY_SCHEMA_CHANGED",
                f"operator {op} ({old[op] or new.get(op, ('', 'unnamed'))[1]}): the checkpoint's state is keyed by ({', '.join(have)}) "
                f"({st.uri(rel)}), the new query's by ({', '.join(want)}): the first batch of its restart fails "
                "(STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE; on Spark 3.5 a task may first fail reading an old state row, "
                "InvalidUnsafeRowException). Keep the keys, or start the changed query on a new checkpoint",
                details={"operator": op, "checkpoint_key_types": have, "query_key_types": want,
                         "path": st.uri(rel), "restart_error": "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"}))
    return out


# -- the path a file source reads ------------------------------------------------------------

GLOB_CHARS = set("{}[]*?\\")  # Hadoop's glob characters (`SparkHadoopUtil.isGlobPath`)


def _split_uri(uri: str) -> tuple[str, str, str]:
    """(scheme, authority, decoded path without a trailing slash) of a logged file's URI or a
    qualified path; `file:///p`, `file:/p` and `/p` are the same."""
    parsed = urlparse(uri)
    netloc = "" if parsed.netloc == "localhost" else parsed.netloc
    path = unquote(parsed.path)
    return parsed.scheme or "file", netloc, path.rstrip("/") or "/"


def _hadoop_text(parts: tuple[str, str, str]) -> str:
    """As Hadoop's `Path.toString` spells a qualified path (`file:/p`, `s3a://bucket/p`)."""
    scheme, netloc, path = parts
    return f"{scheme}:{'//' + netloc if netloc else ''}{path}"


def _under(parts: tuple[str, str, str], root: tuple[str, str, str]) -> bool:
    return parts[:2] == root[:2] and (root[2] == "/" or parts[2] == root[2] or parts[2].startswith(root[2] + "/"))


def _shown(parts: tuple[str, str, str]) -> str:
    return parts[2] if parts[0] == "file" and not parts[1] else _hadoop_text(parts)


def compare_source_paths(checkpoint: str, planned: Optional[int], sources: Iterable[SourceInfo],
                         query: Iterable[tuple[int, Optional[str], str, str]]) -> list[Any]:
    """SOURCE_PATH_CHANGED when a file source of the new query reads a path that does not hold
    the files the checkpoint's source log (`sources/<n>/`) names in its newest entry
    (docs/model.md#preflight). The restart decides by the newest batch `P`: Spark's `getBatch`
    of `P` reads the files it logged again with the query's path as `basePath` and refuses
    files outside it (`Wrong basePath`); when `P` read none (a no-data batch), nothing refuses
    the new path and its listing takes every file there for a new one (the log knows files by
    their full path). `query`: `pipeline/preflight.py` `file_sources` (a source matched by its
    `DataStreamReader.name` where the checkpoint has a folder of that name, else by ordinal);
    a glob path is not judged."""
    from streamctl.inspectors.replay import listed_files, log_offset

    if planned is None:  # nothing planned: the new query starts fresh
        return []
    st = Storage.open(checkpoint)
    files = {s.source_id: s for s in sources if s.kind == "file"}

    newest = _offsets_at(st, planned)
    before = _offsets_at(st, planned - 1) if planned > 0 else None
    out = []
    for ordinal, name, given, qualified in query:
        sid: SourceId = name if name is not None and name in files else ordinal
        if sid not in files:
            continue
        if GLOB_CHARS & set(given):
            continue  # a glob: Spark passes no basePath and matches each file itself
        hi = log_offset(newest, sid)
        if hi is None or hi < 0:
            continue  # the source read no file yet
        lo = log_offset(before, sid)
        try:
            logged = [_split_uri(u) for u in listed_files(st, sid, hi - 1, hi)]  # the log's newest entry
            batch = [_split_uri(u) for u in listed_files(st, sid, -1 if lo is None else lo, hi)]
        except StreamctlError:
            continue  # the log itself is judged by inspect (LOG_GAP, UNREADABLE)
        root = _split_uri(qualified)
        outside = [p for p in logged if not _under(p, root)]
        if not outside:
            continue
        folder = _common_folder(logged)
        prefix = _hadoop_text(root)
        refused = [p for p in batch if not _hadoop_text(p).startswith(prefix)]
        where = f"sources/{sid}/: the new query reads {given}, but the checkpoint's source log names its files under {folder}"
        if refused:
            restart, error = "fails", "Wrong basePath"
            what = (f"its restart fails (`Wrong basePath {given} for the root path: {_hadoop_text(refused[0])}`: Spark "
                    f"reads the files batch {planned} logged again, with the query's path as their base, and refuses "
                    "files outside it)")
        else:
            restart, error = "reads_again", None
            what = (f"its restart takes every file in {given} for a new one and reads it (batch {planned} read no file, "
                    "so nothing refuses the new path, and the log knows the files it read by their full path only): "
                    f"the rows of copies of files it read in {folder} are delivered again")
        out.append(Finding(
            "SOURCE_PATH_CHANGED",
            f"{where}: {what}. Keep the path the checkpoint's log names, or start the changed query on a new checkpoint "
            "(it reads every file of the new path from the start)",
            details={"source": sid, "epochs": [planned], "checkpoint_folder": folder, "query_path": given,
                     "restart": restart, "restart_error": error}))
    return out


def _offsets_at(st: Storage, batch: int) -> Optional[OffsetEntry]:
    """`offsets/<batch>`, or None when it cannot be read (inspect judges the log: LOG_GAP, UNREADABLE)."""
    try:
        return parse_offsets(st.read(f"{OFFSETS_DIR}/{batch}"), st.uri(f"{OFFSETS_DIR}/{batch}"), batch)
    except StreamctlError:
        return None


def _newest_offsets(checkpoint: str, planned: Optional[int]) -> Optional[OffsetEntry]:
    """`offsets/<planned>`, the offsets a restart starts from; None when nothing was planned (the
    new query starts fresh) or it cannot be read."""
    return None if planned is None else _offsets_at(Storage.open(checkpoint), planned)


def _common_folder(files: list[tuple[str, str, str]]) -> str:
    """The folder the logged files share, shown as a local path or a URI."""
    heads = {p[:2] for p in files}
    if len(heads) != 1:
        return ", ".join(sorted({_shown((p[0], p[1], posixpath.dirname(p[2]))) for p in files}))
    scheme, netloc = heads.pop()
    folder = posixpath.commonpath([posixpath.dirname(p[2]) for p in files])
    return _shown((scheme, netloc, folder))


def compare_sources(checkpoint: str, planned: Optional[int], query_sources: int,
                    kinds: Iterable[tuple[int, Optional[str], str]]) -> list[Any]:
    """SOURCES_CHANGED when the new query's sources do not fit the checkpoint's newest offsets:
    * another number of sources: a restart hands positional offsets (v1) to the query's sources
      by position and asserts the counts match (`OffsetSeq.toStreamProgress`: "There are [M]
      sources in the checkpoint offsets and now there are [N] sources requested by the query.
      Cannot continue.", observed 3.5.9 and 4.3.0: a stream-stream join's second source
      removed); named sources (v2) are matched by name, their count not judged;
    * a source of another kind where the offsets held one: a file source's `{"logOffset": n}`
      handed to a Kafka source, or a Kafka source's partition map to a file source; neither
      reads the other's offset, and the restart fails deserializing it (observed 4.3.0: a file
      query's checkpoint restarted reading a topic with streamctl's source).
    `query_sources`: `pipeline/preflight.py` `source_count`; `kinds`: (ordinal, the name
    `DataStreamReader.name` gave or None, `file` or `kafka`) of the sources whose kind is known."""
    newest = _newest_offsets(checkpoint, planned)
    if newest is None:
        return []
    lines = {s.source_id: s for s in newest.sources}
    held = len(newest.sources)
    details: dict[str, Any] = {"epochs": [planned], "checkpoint_sources": held, "query_sources": query_sources}
    if newest.version == 1 and held != query_sources:
        error = (f"assertion failed: There are [{held}] sources in the checkpoint offsets and now there are "
                 f"[{query_sources}] sources requested by the query. Cannot continue.")
        return [Finding(
            "SOURCES_CHANGED",
            f"the new query reads {query_sources} source(s) where offsets/{planned} holds {held}: its restart fails "
            f"({error}). Keep the query's sources, or start the changed query on a new checkpoint",
            details=dict(details, restart_error=error))]
    swapped = []
    for ordinal, name, kind in kinds:
        sid: SourceId = name if name is not None and name in lines else ordinal
        was = offset_kind(lines[sid]) if sid in lines else None
        if was is not None and was != kind:
            swapped.append((sid, was, kind))
    if not swapped:
        return []
    what = "; ".join(f"source {sid} is a {kind} source where offsets/{planned} holds a {was} source's offset"
                     for sid, was, kind in swapped)
    error = "the source cannot read the other kind's offset"
    return [Finding(
        "SOURCES_CHANGED",
        f"{what}: its restart fails ({error}). Keep the source's kind at its place, or start the changed query on a "
        "new checkpoint (with `streamctl kafka starting-offsets` for a Kafka source)",
        details=dict(details, sources=[{"source": sid, "checkpoint_kind": was, "query_kind": kind}
                                       for sid, was, kind in swapped], restart_error=error))]


# -- the topics a Kafka source reads -----------------------------------------------------------

def _subscribed(opts: dict[str, str], topic: str, partition: int) -> Optional[bool]:
    """Whether a Kafka source with these options (keys lower-cased) reads `topic`'s `partition`
    (`subscribe`: a comma list; `subscribePattern`: a Java regex, matched whole; `assign`: a JSON
    map of topic to partitions); None when no option says (the source then fails to start anyway)
    or the pattern is not one Python reads the same way."""
    if "assign" in opts:
        try:
            assigned = json.loads(opts["assign"])
        except ValueError:
            return None
        return isinstance(assigned, dict) and partition in (assigned.get(topic) or [])
    if "subscribe" in opts:
        return topic in {t.strip() for t in opts["subscribe"].split(",") if t.strip()}
    if "subscribepattern" in opts:
        try:
            return re.fullmatch(opts["subscribepattern"], topic) is not None
        except re.error:
            return None
    return None


def compare_kafka_topics(checkpoint: str, planned: Optional[int],
                         query: Iterable[tuple[int, Optional[str], dict[str, str]]]) -> list[Any]:
    """SOURCE_TOPICS_CHANGED when a Kafka source of the new query no longer reads a topic
    partition the checkpoint's newest offsets hold for it (docs/model.md#preflight): the
    restart's first batch finds partitions it read before missing from its end offsets, which
    is data loss to Spark's Kafka source and to streamctl's (failOnDataLoss, on by default:
    the restart fails; off: those partitions are dropped from the query). Topics the new query
    adds are read from their earliest offsets, as new partitions are: no finding. `query`:
    `pipeline/preflight.py` `kafka_sources` (ordinal, the name `DataStreamReader.name` gave or
    None, the source's options)."""
    newest = _newest_offsets(checkpoint, planned)
    if newest is None:
        return []
    lines = {s.source_id: s.raw for s in newest.sources}
    out = []
    for ordinal, name, options in query:
        sid: SourceId = name if name is not None and name in lines else ordinal
        held = parse_kafka_offsets(lines.get(sid))
        if not held:
            continue
        opts = {k.lower(): v for k, v in options.items()}
        gone = sorted((t, p) for t, parts in held.items() for p in parts if _subscribed(opts, t, p) is False)
        if not gone:
            continue
        lenient = opts.get("failondataloss", "true").strip().lower() == "false"
        shown_gone = ", ".join(f"{t}-{p}" for t, p in gone[:6]) + (f" and {len(gone) - 6} more" if len(gone) > 6 else "")
        what = ("its restart drops them (failOnDataLoss=false): their records after the checkpoint's offsets are "
                "never read" if lenient else
                "its restart fails: Spark's Kafka source (and streamctl's) takes partitions it read before that are "
                "missing from the batch's end offsets for data loss (failOnDataLoss)")
        out.append(Finding(
            "SOURCE_TOPICS_CHANGED",
            f"source {sid}: the new query no longer reads {shown_gone}, which offsets/{planned} holds positions for: "
            f"{what}. Keep reading those topics, or start the changed query on a new checkpoint (with "
            "startingOffsets from `streamctl kafka starting-offsets`)",
            details={"source": sid, "epochs": [planned], "partitions": [f"{t}-{p}" for t, p in gone],
                     "restart": "drops" if lenient else "fails", "restart_error": None if lenient else "data loss"}))
    return out

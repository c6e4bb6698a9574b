"""Physical damage align repairs before it plans (docs/model.md#physical-damage).

A crash or a full disk leaves the newest file of a log empty or torn, and a hand clean-up can
lose `metadata`. Spark's restart fails on each (`Incomplete log file`,
`STREAMING_CHECKPOINT_MISSING_METADATA_FILE`), and `inspect epochs` says UNREADABLE. align
repairs what the evidence proves, through the same plan, backup, journal, verify and undo:

- a torn newest `offsets/P` of a batch nothing committed, or one holding a source offset Spark
  never writes after `offsets/P-1`'s (formats/offsets.offsets_go_back): moved aside, Spark plans batch P anew
  (the batch never ran: offsets are written before the batch starts);
- a torn newest `commits/C`: taken as missing, so the planner either writes it as Spark does (a
  roll forward, when the sink and every state store prove batch C complete) or keeps it moved
  aside and batch C is replayed;
- a torn newest plain `_spark_metadata/N` of a file sink: taken as missing (its batch is rolled
  back with it and its data files, which no other entry lists, go to the backup);
- a lost or torn `metadata`: written with the query id the evidence proves (the agent's lease)
  or the operator gives (`--query-id`); refused, naming the flag, when neither says it.

Anything else unreadable stays UNREADABLE (exit 3): nothing is planned on a file streamctl
cannot read. The planner then inspects the checkpoint as the plan leaves it (the torn files
taken as absent: inspectors/masked.py)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from streamctl.formats.checksum import crc_name, hadoop_crc
from streamctl.formats.commits import parse_commit
from streamctl.formats.errors import StorageError, StreamctlError
from streamctl.formats.file_sink_log import FILE_SINK_LOG
from streamctl.formats.layout import COMMITS_DIR, METADATA_FILE, OFFSETS_DIR
from streamctl.formats.metadata import parse_query_metadata, serialize_query_metadata
from streamctl.formats.offsets import offsets_go_back, parse_offsets
from streamctl.inspectors.storage import Storage
from streamctl.operations.plan import Refused, Step


@dataclass
class Damage:
    absent: frozenset[str] = frozenset()  # checkpoint files the plan moves aside
    sink_absent: frozenset[str] = frozenset()  # sink files the plan moves aside
    query_id: Optional[str] = None  # the id written into a lost or torn `metadata`
    metadata: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)  # the damaged files, as the inspection named them
    # with no damage: the inspection that found none, as the plan's own would be (the same
    # arguments, nothing masked): the plan takes it instead of inspecting again
    inspection: Optional[Any] = None
    # the positions as the files on disk stand, torn files included (what an undo puts back)
    on_disk: dict[str, Any] = field(default_factory=dict)

    def first_steps(self, later: list[Step]) -> list[Step]:
        """The steps that go before the plan's own: `metadata` written, then every torn file
        moved aside unless a later step writes it anew (its write moves the torn content into
        the backup)."""
        written = {(s.root, s.path) for s in later if s.action == "write"}
        moves = [Step("move", root, rel, "torn file moved aside (a restart cannot read it)")
                 for root, rels in (("checkpoint", self.absent), ("sink", self.sink_absent))
                 for rel in sorted(rels) if (root, rel) not in written]
        return self.metadata + moves


def _offsets_at(batch: int, data: bytes, path: str) -> Any:
    return parse_offsets(data, path, batch)


def _goes_back(st: Storage, batch: int) -> Optional[str]:
    """What in offsets/batch Spark never writes after offsets/batch-1 (offsets_go_back): a batch
    planned from it cannot run, and Spark plans it anew once it is moved aside, as a torn one."""
    try:
        cur = parse_offsets(st.read(f"{OFFSETS_DIR}/{batch}"), st.uri(f"{OFFSETS_DIR}/{batch}"), batch)
    except StreamctlError:
        return None
    try:
        prev = parse_offsets(st.read(f"{OFFSETS_DIR}/{batch - 1}"), st.uri(f"{OFFSETS_DIR}/{batch - 1}"), batch - 1)
    except StreamctlError:
        prev = None  # trimmed or unreadable: the offset is judged alone
    return offsets_go_back(prev, cur)


def _commit_at(batch: int, data: bytes, path: str) -> Any:
    return parse_commit(data, path, batch)


def rel_of(uri: str, base: str) -> Optional[str]:
    """`uri` relative to the root `base`; None when it lies outside."""
    base = base.rstrip("/")
    b, _, _ = base.partition("?")
    u, _, _ = uri.partition("?")
    if u.startswith(b + "/"):
        return u[len(b) + 1:]
    return None


def _torn(st: Storage, rel: str, parse: Callable[[bytes, str], Any]) -> Optional[str]:
    """Why `rel` is torn: it reads, but its format refuses it, or something other than a file (a
    folder, a named pipe) stands where the file belongs. None when it cannot be read for another
    reason (a permission, an I/O error: not damage streamctl can judge) or parses."""
    try:
        data = st.read(rel)
    except StorageError as exc:
        reason = str(getattr(exc, "reason", exc))
        return reason if "is a folder" in reason or "not a regular file" in reason else None
    try:
        parse(data, st.uri(rel))
    except StorageError:
        return None
    except StreamctlError as exc:
        return str(getattr(exc, "reason", exc))
    return None


def _with_crc(st: Storage, rel: str) -> set[str]:
    crc = crc_name(rel)
    return {rel} | ({crc} if st.lookup(crc) is not None else set())


def assess(req: Any) -> Damage:
    """The damage align repairs in the checkpoint (and sink) of `req`, from one plain inspection."""
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    q = inspect_checkpoint(req.checkpoint, sink=req.sink, sink_kind=req.sink_kind,
                           app_id=req.app_id or req.query_id, quiet_period_s=req.quiet_period_s, deep=True)
    bad = [f for f in q.findings if f.code == "UNREADABLE"]
    given = req.query_id
    if not bad:
        if given and q.query_id and given != q.query_id:
            raise Refused(f"{q.checkpoint}: --query-id {given} differs from the id in metadata ({q.query_id}); "
                          "streamctl rewrites metadata only when it is lost or torn")
        # the plan's inspection has these arguments: app_id req.app_id, else the checkpoint's id,
        # which is `given` when given (checked just above)
        return Damage(inspection=q)
    st = Storage.open(req.checkpoint)
    sink_st = Storage.open(req.sink) if req.sink else None
    absent: set[str] = set()
    sink_absent: set[str] = set()
    dmg = Damage(on_disk={"planned": q.offsets.latest, "committed": q.commits.latest,
                          "sink_epoch": q.sink.epoch if q.sink is not None else None})
    for f in bad:
        path, reason = str(f.details.get("path", "")), str(f.details.get("reason", ""))
        rel = rel_of(path, st.display)
        if rel is not None:
            if rel == METADATA_FILE:
                why = "missing" if reason == "missing" else _torn(st, rel, parse_query_metadata)
                if why is not None:
                    _metadata(dmg, st, q, given, why)
                continue
            P, C = q.offsets.latest, q.commits.latest
            if P is not None and rel == f"{OFFSETS_DIR}/{P}" and (C is None or C < P):
                why = _torn(st, rel, functools.partial(_offsets_at, P)) or _goes_back(st, P)
                if why is not None:
                    absent |= _with_crc(st, rel)
                    dmg.torn.append(rel)
                    dmg.notes.append(f"offsets/{P} is damaged ({why}) and nothing committed batch {P}: moved aside, "
                                     f"Spark plans batch {P} anew from the input after offsets/{P - 1}")
            elif C is not None and rel == f"{COMMITS_DIR}/{C}":
                why = _torn(st, rel, functools.partial(_commit_at, C))
                if why is not None:
                    absent |= _with_crc(st, rel)
                    dmg.torn.append(rel)
                    dmg.notes.append(f"commits/{C} is torn ({why}): taken as missing; the plan writes it as Spark "
                                     f"does when the sink and every state store hold batch {C}, else batch {C} is "
                                     "replayed (exactly once only into a sink that skips a batch it holds: "
                                     "a file sink or Delta, checked with --sink)")
        elif sink_st is not None and (srel := rel_of(path, sink_st.display)) is not None:
            why = _torn_sink_entry(sink_st, srel)
            if why is not None:
                sink_absent |= _with_crc(sink_st, srel)
                dmg.torn.append(f"{sink_st.display}/{srel}")
                dmg.notes.append(f"{FILE_SINK_LOG}/{srel.rpartition('/')[2]} of the sink is torn ({why}): taken as "
                                 "missing, its batch is rolled back with it and replayed")
    dmg.absent, dmg.sink_absent = frozenset(absent), frozenset(sink_absent)
    return dmg


def _torn_sink_entry(sink: Storage, rel: str) -> Optional[str]:
    """Why the newest plain entry `rel` of a file sink's log is torn; None for any other file."""
    from streamctl.inspectors.sinks import list_file_sink_log

    head, _, name = rel.rpartition("/")
    if head != FILE_SINK_LOG or not name.isdigit():
        return None  # a .compact merges earlier batches: streamctl does not rebuild it
    try:
        log = list_file_sink_log(sink)
    except StreamctlError:
        return None
    b = int(name)
    if not log.ids or b != max(log.ids) or log.present.get(b):
        return None
    return _torn(sink, rel, lambda d, p: log.read(sink, b))


def _metadata(dmg: Damage, st: Storage, q: Any, given: Optional[str], why: str) -> None:
    """`metadata` written with the query id evidence proves or the operator gives."""
    evidence: dict[str, str] = {}
    lease = q.lease or {}
    if lease.get("query_id"):
        evidence["the agent's lease"] = str(lease["query_id"])
    ids = set(evidence.values())
    where = st.uri(METADATA_FILE)
    if given:
        if ids and ids != {given}:
            raise Refused(f"{where}: --query-id {given} differs from the id "
                          + ", ".join(f"{k} names ({v})" for k, v in evidence.items()))
        qid, source = given, "--query-id"
    elif len(ids) == 1:
        qid, source = ids.pop(), next(iter(evidence))
    elif q.sink is not None and q.sink.kind == "file" and not any(f.code == "UNREADABLE" for f in q.sink.findings):
        # a file sink skips a batch by its id, never by the query's: a new id changes no delivery
        import uuid

        qid, source = str(uuid.uuid4()), "a fresh id (the file sink keys its batches by batch id, not query id)"
    else:
        raise Refused(f"{where}: {why}: the query id is lost and nothing in the checkpoint proves it"
                      + ("" if q.sink is not None else " (a file sink, named with --sink, would take a fresh id)")
                      + "; pass --query-id ID (the id of the query's earlier runs, from its logs or "
                      "StreamingQueryListener) to write it, or start the query on a new checkpoint")
    content = serialize_query_metadata(qid)
    dmg.query_id = qid
    dmg.torn.append(METADATA_FILE)
    dmg.metadata = [Step("write", "checkpoint", METADATA_FILE, f"the query id {qid} ({source})", content),
                    Step("write", "checkpoint", crc_name(METADATA_FILE), "its checksum", hadoop_crc(content))]
    dmg.notes.append(f"metadata is {why}: written with query id {qid} from {source}"
                     + ("; a sink keyed on the query id (Delta's txn app id) treats a different id as a new query"
                        if source == "--query-id" else "")
                     + ("; exactly-once: the sink skips what it holds by batch id" if source.startswith("a fresh") else ""))

"""Kafka: where a query's Kafka sources stand, what the broker holds, and the risks in between.

Source positions come from the checkpoint (offsets/C consumed through, offsets/P planned
through, `sources/<n>/0` initial offsets), in the official connector's JSON and in the spacing a
Python data source writes; offsets are parsed, never rewritten. Broker positions come from
kafka-python (imported lazily), with a bounded timeout and with secrets kept out of every
message. The comparison gives SOURCE_EXPIRED, SOURCE_RESET and SOURCE_NEW_PARTITION.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from streamctl.formats.errors import StreamctlError, UsageError
from streamctl.formats.kafka_offsets import Offsets, parse_kafka_offsets
from streamctl.formats.layout import OFFSETS_DIR
from streamctl.formats.offsets import SourceId
from streamctl.inspectors.findings import Finding, summarize
from streamctl.inspectors.query_inspection import QueryInspection

SECRET_MARKERS = ("password", "secret", "jaas", "token", "credential")



class KafkaError(StreamctlError):
    """The broker could not be reached or answered with an error (exit 3). The message never
    holds a secret."""


class KafkaConfigError(UsageError):
    """kafka-python rejected a client setting (an unknown key, a value of the wrong type):
    a config error (exit 2), not an unreachable broker. The message never holds a secret."""


class GroupActive(KafkaError):
    """The consumer group has active members: its offsets must not be changed (exit 4)."""


# Answers to an offset commit from outside the group while the group has members.
ACTIVE_GROUP_ERRORS = ("UnknownMemberIdError", "IllegalGenerationError", "RebalanceInProgressError")
ACTIVE_STATES = ("Stable", "PreparingRebalance", "CompletingRebalance")


def is_secret_key(key: str) -> bool:
    k = key.lower()
    return any(m in k for m in SECRET_MARKERS) or k.endswith(".key") or k.endswith("_key")


@dataclass(frozen=True)
class KafkaSource:
    """One Kafka source of a query, as the checkpoint records it."""

    source_id: SourceId
    committed: Optional[Offsets]  # offsets/C: consumed through (exclusive end of batch C)
    planned: Optional[Offsets]  # offsets/P
    committed_raw: Optional[str]
    planned_raw: Optional[str]
    initial: Optional[Offsets] = None  # sources/<n>/0 (the official connector only)

    @property
    def topics(self) -> list[str]:
        names = set(self.committed or {}) | set(self.planned or {}) | set(self.initial or {})
        return sorted(names)


def kafka_sources(q: QueryInspection, epoch: Optional[int] = None) -> list[KafkaSource]:
    """Every Kafka-shaped source of the query. `epoch` picks another committed epoch's offsets
    (the caller reads that offsets file; see `offsets_at`)."""
    initial = {s.source_id: s.kafka_initial for s in q.sources if s.kafka_initial is not None}
    committed = {s.source_id: s.raw for s in (q.committed_offsets.sources if q.committed_offsets else ())}
    planned = {s.source_id: s.raw for s in (q.latest_offsets.sources if q.latest_offsets else ())}
    out = []
    for sid in sorted(set(committed) | set(planned) | set(initial)):
        c, p = parse_kafka_offsets(committed.get(sid)), parse_kafka_offsets(planned.get(sid))
        init = initial.get(sid)
        init_offsets = {t: {int(k): v for k, v in parts.items()} for t, parts in init.offsets.items()} if init else None
        if c is None and p is None and init_offsets is None:
            continue
        out.append(KafkaSource(sid, c, p, committed.get(sid), planned.get(sid), init_offsets))
    return out


# --- the broker -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerView:
    """What the broker says about a set of topics."""

    partitions: Mapping[str, Optional[tuple[int, ...]]]  # None: the topic does not exist
    earliest: Mapping[tuple[str, int], int]
    latest: Mapping[tuple[str, int], int]
    group_offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)


def client_settings(config: Mapping[str, str]) -> dict[str, Any]:
    """Kafka client properties (`security.protocol`, `sasl.mechanism`, `ssl.cafile`, ...) as
    kafka-python keyword arguments. Values are kept as given; numbers are converted."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        k = key.removeprefix("kafka.").replace(".", "_").replace("-", "_")
        if k in ("bootstrap", "bootstrap_servers"):
            continue
        if isinstance(value, str) and value.isdigit() and not is_secret_key(key):
            out[k] = int(value)
        else:
            out[k] = value
    return out


def redact(text: str, config: Mapping[str, str]) -> str:
    """Remove every secret value of `config` from `text`."""
    for key, value in config.items():
        if is_secret_key(key) and value and str(value) in text:
            text = text.replace(str(value), "***")
    return text


class KafkaBroker:
    """A kafka-python client bounded by `timeout` seconds per call. Use as a context manager."""

    def __init__(self, bootstrap: str, config: Optional[Mapping[str, str]] = None, timeout: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.config = dict(config or {})
        self.timeout = timeout
        self._consumer: Any = None
        self._admin: Any = None

    def _fail(self, what: str, exc: BaseException) -> KafkaError:
        name = type(exc).__name__
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else name
        if "Unable to bootstrap" in text or name in ("NoBrokersAvailable", "KafkaTimeoutError"):
            text = f"no broker answered within {self.timeout:g}s"
        text = redact(text, self.config)
        return KafkaError(f"kafka {self.bootstrap}: {what}: {text}")

    def _connect_error(self, exc: BaseException) -> StreamctlError:
        """Why a client could not be made: a setting kafka-python rejects (KafkaConfigurationError,
        or a TypeError/ValueError/AssertionError of a wrongly typed value) is a config error."""
        if type(exc).__name__ == "KafkaConfigurationError" or isinstance(exc, (TypeError, ValueError, AssertionError)):
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            text = text.removeprefix("KafkaConfigurationError: ")
            return KafkaConfigError(redact(f"kafka {self.bootstrap}: invalid Kafka client setting "
                                           f"(--kafka-config or a pipeline's kafka table): {text}", self.config))
        return self._fail("cannot connect", exc)

    def _kwargs(self) -> dict[str, Any]:
        ms = int(self.timeout * 1000)
        kw = {"bootstrap_servers": self.bootstrap.split(","), "request_timeout_ms": ms,
              "bootstrap_timeout_ms": ms, "client_id": "streamctl"}
        kw.update(client_settings(self.config))
        return kw

    def consumer(self, group_id: Optional[str] = None) -> Any:
        try:
            from kafka import KafkaConsumer
        except ImportError:  # pragma: no cover
            raise KafkaError("the kafka-python package is needed: pip install 'streamctl[kafka]'") from None
        try:
            if group_id is not None:
                return KafkaConsumer(group_id=group_id, enable_auto_commit=False, **self._kwargs())
            if self._consumer is None:
                self._consumer = KafkaConsumer(enable_auto_commit=False, **self._kwargs())
            return self._consumer
        except Exception as exc:
            raise self._connect_error(exc) from None

    def admin(self) -> Any:
        try:
            from kafka import KafkaAdminClient
        except ImportError:  # pragma: no cover
            raise KafkaError("the kafka-python package is needed: pip install 'streamctl[kafka]'") from None
        if self._admin is None:
            try:
                kw = self._kwargs()
                self._admin = KafkaAdminClient(**kw)
            except Exception as exc:
                raise self._connect_error(exc) from None
        return self._admin

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in (self._consumer, self._admin):
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass

    def view(self, topics: list[str], group: Optional[str] = None) -> BrokerView:
        """Partitions, earliest and latest offsets of `topics` (and a group's offsets)."""
        from kafka import TopicPartition

        consumer = self.consumer()
        partitions: dict[str, Optional[tuple[int, ...]]] = {}
        try:
            existing = set(consumer.topics())
            for t in topics:
                parts = consumer.partitions_for_topic(t) if t in existing else None
                partitions[t] = tuple(sorted(parts)) if parts else None
            tps = [TopicPartition(t, p) for t, ps in partitions.items() for p in ps or ()]
            earliest = {(tp.topic, tp.partition): o for tp, o in consumer.beginning_offsets(tps).items()} if tps else {}
            latest = {(tp.topic, tp.partition): o for tp, o in consumer.end_offsets(tps).items()} if tps else {}
        except KafkaError:
            raise
        except Exception as exc:
            raise self._fail("cannot read offsets", exc) from None
        groups = self.group_offsets(group) if group else {}
        return BrokerView(partitions, earliest, latest, groups)

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        try:
            answer = self.admin().list_group_offsets({group: None})
        except KafkaError:
            raise
        except Exception as exc:
            raise self._fail(f"cannot read offsets of group {group!r}", exc) from None
        return {(tp.topic, tp.partition): om.offset for tp, om in (answer.get(group) or {}).items() if om.offset >= 0}

    def group_state(self, group: str) -> Optional[str]:
        """The group's state ('Empty', 'Stable', ...; None: the broker does not know the group).

        DescribeGroups first; brokers whose answer kafka-python cannot parse (Tansu) fall back to
        ListGroups, which may say 'Unknown'. A commit then still refuses an active group: the
        broker answers UNKNOWN_MEMBER_ID (see commit_group_offsets)."""
        admin = self.admin()
        try:
            for g in admin.describe_groups([group]):
                state = g.get("state") if isinstance(g, dict) else getattr(g, "state", None)
                if state and state != "Dead":
                    return str(state)
        except Exception:
            pass  # fall back to ListGroups
        try:
            groups = admin.list_groups()
        except Exception as exc:
            raise self._fail("cannot list groups", exc) from None
        for g in groups:
            if g.get("group_id") == group:
                return str(g.get("group_state") or "Unknown")
        return None

    def commit_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int], metadata: str) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        payload = {TopicPartition(t, p): OffsetAndMetadata(o, metadata, -1) for (t, p), o in offsets.items()}
        try:
            result = self.admin().alter_group_offsets(group, payload)
        except KafkaError:
            raise
        except Exception as exc:
            raise self._fail(f"cannot commit offsets of group {group!r}", exc) from None
        bad = {f"{tp.topic}/{tp.partition}": err.__name__ for tp, err in result.items() if err.__name__ != "NoError"}
        if any(name in ACTIVE_GROUP_ERRORS for name in bad.values()):
            raise GroupActive(f"kafka {self.bootstrap}: group {group!r} has active members "
                              f"(the broker answered {sorted(set(bad.values()))[0]}); stop its consumers first")
        if bad:
            raise KafkaError(f"kafka {self.bootstrap}: group {group!r} refused offsets: "
                             + ", ".join(f"{k} {v}" for k, v in sorted(bad.items())))


    def delete_group_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        """Remove the group's committed offsets of these partitions (OffsetDelete); a broker
        without that request is a KafkaError before anything changed."""
        from kafka import TopicPartition

        try:
            result = self.admin().delete_group_offsets(group, [TopicPartition(t, p) for t, p in partitions])
        except Exception as exc:
            raise self._fail(f"cannot delete offsets of group {group!r}", exc) from None
        bad = {f"{tp.topic}/{tp.partition}": err.__name__ for tp, err in result.items() if err.__name__ != "NoError"}
        if bad:
            raise KafkaError(f"kafka {self.bootstrap}: group {group!r} kept offsets: "
                             + ", ".join(f"{k} {v}" for k, v in sorted(bad.items())))

    def delete_group(self, group: str) -> None:
        """Delete a group without members (DeleteGroups): what a group that did not exist before comes back to."""
        try:
            answer = self.admin().delete_groups([group])
        except Exception as exc:
            raise self._fail(f"cannot delete group {group!r}", exc) from None
        name = str(dict(answer or {}).get(group, "OK"))  # {group: 'OK' or the error's name}
        if name != "OK":
            if name in ("NonEmptyGroupError",) + ACTIVE_GROUP_ERRORS:
                raise GroupActive(f"kafka {self.bootstrap}: group {group!r} has active members (the broker answered "
                                  f"{name}); stop its consumers first")
            raise KafkaError(f"kafka {self.bootstrap}: group {group!r} was not deleted: {name}")


# --- positions and findings -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionPosition:
    topic: str
    partition: int
    source_id: SourceId
    committed: Optional[int]
    planned: Optional[int]
    earliest: Optional[int]
    latest: Optional[int]
    status: str  # ok | expired | reset | new | unknown topic | unknown partition
    lag: Optional[int]  # latest - committed (records not yet consumed)
    lost: int = 0  # expired: records deleted before the query read them
    at_risk: int = 0  # reset: committed offset beyond what the broker holds

    def to_record(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "source": self.source_id,
                "committed": self.committed, "planned": self.planned, "earliest": self.earliest,
                "latest": self.latest, "lag": self.lag, "status": self.status, "lost": self.lost,
                "at_risk": self.at_risk}


def compare(sources: list[KafkaSource], view: BrokerView) -> tuple[list[PartitionPosition], list[Finding]]:
    """Per topic-partition positions and the SOURCE_* findings."""
    rows: list[PartitionPosition] = []
    for src in sources:
        base = src.committed if src.committed is not None else (src.initial or {})
        tracked: dict[tuple[str, int], tuple[Optional[int], Optional[int]]] = {}
        for topic in src.topics:
            for p in set((base or {}).get(topic, {})) | set((src.planned or {}).get(topic, {})):
                tracked[(topic, p)] = ((base or {}).get(topic, {}).get(p), (src.planned or {}).get(topic, {}).get(p))
        for (topic, p), (c, pl) in sorted(tracked.items()):
            broker_parts = view.partitions.get(topic)
            e, l = view.earliest.get((topic, p)), view.latest.get((topic, p))
            if broker_parts is None:
                rows.append(PartitionPosition(topic, p, src.source_id, c, pl, None, None, "unknown topic", None))
                continue
            if p not in broker_parts or e is None or l is None:
                rows.append(PartitionPosition(topic, p, src.source_id, c, pl, e, l, "unknown partition", None))
                continue
            start = c if c is not None else pl
            status, lost, risk = "ok", 0, 0
            if start is not None and start < e:
                status, lost = "expired", e - start
            elif (start is not None and start > l) or (pl is not None and pl > l):
                status, risk = "reset", max(start or 0, pl or 0) - l
            lag = None if start is None else max(l - start, 0)
            rows.append(PartitionPosition(topic, p, src.source_id, c, pl, e, l, status, lag, lost, risk))
        for topic in src.topics:
            for p in view.partitions.get(topic) or ():
                if (topic, p) not in tracked:
                    e, l = view.earliest.get((topic, p)), view.latest.get((topic, p))
                    rows.append(PartitionPosition(topic, p, src.source_id, None, None, e, l, "new",
                                                  None if l is None or e is None else l - e))
    return rows, _findings(rows)


def _findings(rows: list[PartitionPosition]) -> list[Finding]:
    out = []
    expired = [r for r in rows if r.status == "expired"]
    if expired:
        out.append(Finding(
            "SOURCE_EXPIRED",
            f"retention deleted {sum(r.lost for r in expired)} record(s) the query has not read: "
            + summarize([f"{r.topic}/{r.partition} (next offset {r.committed}, earliest {r.earliest}, {r.lost} lost)" for r in expired], 3),
            details={"partitions": [{"topic": r.topic, "partition": r.partition, "committed": r.committed,
                                     "earliest": r.earliest, "lost": r.lost} for r in expired],
                     "lost": sum(r.lost for r in expired)}))
    reset = [r for r in rows if r.status in ("reset", "unknown topic", "unknown partition")]
    if reset:
        out.append(Finding(
            "SOURCE_RESET",
            "the topic was recreated, truncated or deleted under the query: "
            + summarize([f"{r.topic}/{r.partition} ({_reset_reason(r)})" for r in reset], 3),
            details={"partitions": [{"topic": r.topic, "partition": r.partition, "committed": r.committed,
                                     "planned": r.planned, "latest": r.latest, "status": r.status,
                                     "at_risk": r.at_risk} for r in reset]}))
    new = [r for r in rows if r.status == "new"]
    if new:
        out.append(Finding(
            "SOURCE_NEW_PARTITION",
            f"the broker has {len(new)} partition(s) the checkpoint does not track: "
            + summarize([f"{r.topic}/{r.partition}" for r in new]),
            details={"partitions": [{"topic": r.topic, "partition": r.partition, "latest": r.latest} for r in new]}))
    return out


def _reset_reason(r: PartitionPosition) -> str:
    if r.status == "unknown topic":
        return "topic does not exist"
    if r.status == "unknown partition":
        return "partition does not exist"
    return f"checkpoint at {max(r.committed or 0, r.planned or 0)}, broker latest {r.latest}"


def totals(rows: list[PartitionPosition]) -> dict[str, dict[str, int]]:
    """Per topic: partitions, lag, lost, at_risk."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        t = out.setdefault(r.topic, {"partitions": 0, "lag": 0, "lost": 0, "at_risk": 0})
        t["partitions"] += 1
        t["lag"] += r.lag or 0
        t["lost"] += r.lost
        t["at_risk"] += r.at_risk
    return dict(sorted(out.items()))


def with_kafka(q: QueryInspection, broker: KafkaBroker, group: Optional[str] = None) -> tuple[QueryInspection, list[PartitionPosition]]:
    """The query with its Kafka positions (`kafka` record) and SOURCE_* findings added.
    KafkaError when the broker cannot be asked."""
    from dataclasses import replace

    sources = kafka_sources(q)
    if not sources:
        return replace(q, kafka={"bootstrap": broker.bootstrap, "sources": 0, "lag": None, "topics": {}}), []
    topics = sorted({t for s in sources for t in s.topics})
    view = broker.view(topics, group)
    rows, findings = compare(sources, view)
    record = {"bootstrap": broker.bootstrap, "sources": len(sources),
              "lag": sum(r.lag or 0 for r in rows if r.status != "new"), "topics": totals(rows)}
    return replace(q, findings=q.findings + tuple(findings), kafka=record), rows


def epoch_offsets(location: str, epoch: str) -> tuple[Any, int, dict[tuple[str, int], int], list[tuple[int, str]]]:
    """The query, the epoch `epoch` names (committed, planned or a batch id), its Kafka offsets
    merged over the query's Kafka sources, and each Kafka source's raw line (byte-exact as Spark
    logged it: a successor's startingOffsets). UsageError names what is missing."""
    from streamctl.formats.errors import UsageError
    from streamctl.formats.offsets import parse_offsets
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.errors import raise_unreadable
    from streamctl.inspectors.rewind_time import check_epoch_or_time, epoch_or_time, looks_like_time
    from streamctl.inspectors.storage import Storage

    if epoch not in ("committed", "planned"):
        check_epoch_or_time(epoch, "--epoch")  # before anything is read
    q = inspect_checkpoint(location)
    raise_unreadable(q)
    if epoch == "committed":
        chosen = q.committed
    elif epoch == "planned":
        chosen = q.planned
    elif epoch.isdigit() or looks_like_time(epoch):
        chosen = epoch_or_time(q, epoch, "--epoch")[0]  # a time: the epoch align --to TIME rewinds to
    else:
        raise UsageError(f"invalid value for --epoch: {epoch!r} (committed, planned, a batch id or an ISO-8601 time)")
    if chosen is None:
        raise UsageError(f"{location}: no {epoch} epoch in this checkpoint")
    st = Storage.open(location)
    if chosen not in q.offsets.batch_ids:
        raise UsageError(f"{location}: offsets/{chosen} does not exist (retained: "
                         f"{q.offsets.oldest}..{q.offsets.latest})")
    entry = parse_offsets(st.read(f"{OFFSETS_DIR}/{chosen}"), st.uri(f"{OFFSETS_DIR}/{chosen}"), chosen)
    merged: dict[tuple[str, int], int] = {}
    raws: list[tuple[Any, str]] = []
    for src in entry.sources:
        parsed = parse_kafka_offsets(src.raw)
        if parsed is None or src.raw is None:
            continue
        raws.append((src.source_id, src.raw))
        for topic, parts in parsed.items():
            for p, off in parts.items():
                if (topic, p) in merged and merged[(topic, p)] != off:
                    raise UsageError(f"{topic}/{p} is read by two sources at different offsets")
                merged[(topic, p)] = off
    if not raws:
        raise UsageError(f"{location}: offsets/{chosen} has no Kafka source")
    return q, chosen, merged, raws

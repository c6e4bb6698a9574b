"""Spark lines: which line wrote a checkpoint, and what the line that will restart it refuses
(docs/model.md#spark-lines).

Spark records no version in a checkpoint. What a line reads is known from the files themselves:
the version line of each log (a reader refuses a version above its maximum:
`HDFSMetadataLog.validateVersion`, "UnsupportedLogVersion ... produced by a newer version of
Spark"), and the keys a line adds to the newest offsets' conf (evidence of a lower bound for the
line that wrote it). Every rule below names how it is known; the ones marked *observed* were
proven by a real restart on the line (tests/test_spark_upgrade.py).

`--target-spark VERSION` (inspect epochs, diagnose) asks: what does a restart on that line
refuse? `installed` takes the PySpark beside streamctl (read from its package metadata, no
import)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

from streamctl.formats.errors import UsageError

Line = tuple[int, int]

# keys the newest offsets conf holds only when a line at least this new wrote it (observed in
# offsets PySpark 4.3.0 and 4.1.1 wrote; absent from 3.5.9's and the 4.0.0 corpus checkpoints)
CONF_EVIDENCE: tuple[tuple[str, Line], ...] = (
    ("spark.sql.streaming.stateStore.rowChecksum.enabled", (4, 1)),
)

# (log, version) -> the oldest line that reads it
LOG_VERSIONS: dict[tuple[str, int], tuple[Line, str]] = {
    # checkpoint format 2 (stateStore.checkpointFormatVersion=2): observed 3.5.9 refuses
    ("commits", 2): ((4, 0), "observed"),
    # OffsetMap, offsetLog.formatVersion=2 or named sources: released in 4.3.0 (docs/formats/checkpoint.md)
    ("offsets", 2): ((4, 3), "observed"),
}


def parse_line(text: str, flag: str = "--target-spark") -> Line:
    """"3.5", "4.3.0", "4.3.0.dev1" -> (major, minor); `installed`: the PySpark beside streamctl."""
    raw = text.strip()
    if raw.lower() == "installed":
        from importlib import metadata

        try:
            raw = metadata.version("pyspark")
        except metadata.PackageNotFoundError:
            raise UsageError(f"{flag} installed: no PySpark is installed beside streamctl; name the line "
                             "(for example 3.5 or 4.3)") from None
    m = re.fullmatch(r"(\d{1,3})\.(\d{1,3})(?:\.\d{1,4})?(?:[.+\-]?[A-Za-z0-9.]*)?", raw)
    if not m:
        raise UsageError(f"invalid value for {flag}: {text!r} (a Spark version such as 3.5 or 4.3.0, or installed)")
    return int(m.group(1)), int(m.group(2))


def line_text(line: Line) -> str:
    return f"{line[0]}.{line[1]}"


def written_at_least(conf: Mapping[str, object]) -> Optional[tuple[Line, str]]:
    """The newest line the newest offsets' conf proves wrote the checkpoint, and the key that shows it."""
    best: Optional[tuple[Line, str]] = None
    for key, line in CONF_EVIDENCE:
        if key in conf and (best is None or line > best[0]):
            best = (line, key)
    return best


# From this line on, a stream-stream join's restart proposes the join key column it stores in a
# `keyWithIndexToValue` value as nullable where older lines stored it as the inferred `isnotnull`
# filter under the join left it, not nullable, and the compatibility check refuses that
# (StateSchemaCompatibilityChecker: equalsIgnoreNameAndCompatibleNullability(new, stored)).
# Observed on 4.3.0 (docs/model.md#spark-lines); other non-nullable value fields restart.
JOIN_KEY_NULLABLE: Line = (4, 3)
JOIN_VALUE_STORES = ("left-keyWithIndexToValue", "right-keyWithIndexToValue")
Fields = list[tuple[str, str, bool]]  # a schema's (name, type, nullable): formats/state.py schema_fields


@dataclass(frozen=True)
class Refusal:
    file: str  # relative to the checkpoint
    why: str
    needs: Optional[Line]  # the oldest line that reads it; None: only lines below the target do
    evidence: str  # observed | code
    error: Optional[str] = None  # the error the restart fails with, where it is not UnsupportedLogVersion


def log_refusals(target: Line, versions: Mapping[str, tuple[str, int]]) -> list[Refusal]:
    """What the target refuses among the newest log files: `versions` maps a log name to (its
    newest file, that file's version line)."""
    out = []
    for log, (rel, version) in sorted(versions.items()):
        need = LOG_VERSIONS.get((log, version))
        if need is None:
            continue
        line, evidence = need
        if target < line:
            out.append(Refusal(rel, f"{rel} is `v{version}`, which Spark {line_text(line)}+ writes; Spark "
                                    f"{line_text(target)} refuses it (UnsupportedLogVersion: \"produced by a newer "
                                    f"version of Spark\")", line, evidence))
    return out


def join_schema_refusals(target: Line, schemas: Mapping[str, tuple[Fields, Fields]]) -> list[Refusal]:
    """What the target refuses among a stream-stream join's `keyWithIndexToValue` schema files:
    `schemas` maps each file (`state/<op>/0/<side>-keyWithIndexToValue/_metadata/schema`, v1 or
    v2) to its key and value fields (formats/state.py `schema_fields`). The file does not say which
    value field is the join key: a value field that is not nullable while a key field of its type
    is (the key is the join key expression before the filter) is taken for it."""
    if target < JOIN_KEY_NULLABLE:
        return []
    out = []
    for rel, (key, value) in sorted(schemas.items()):
        nullable_key_types = {t for name, t, nullable in key if nullable and name != "index"}
        fields = [name for name, t, nullable in value if not nullable and t in nullable_key_types]
        if fields:
            error = "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
            out.append(Refusal(rel, f"{rel} stores the join key column(s) {', '.join(fields)} as not nullable; Spark "
                                    f"{line_text(target)} proposes them nullable and refuses it ({error})",
                               None, "observed", error))
    return out

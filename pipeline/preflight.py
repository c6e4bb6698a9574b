"""The PySpark side of `streamctl preflight` (docs/model.md#preflight): the stateful operators a
new version of a query would run, read from its plan without starting it.

Spark assigns stateful operator ids in plan order when it plans a micro-batch
(`IncrementalExecution`); `explain` of a streaming DataFrame plans it the same way, without a
checkpoint, and prints each stateful operator with its `opId`. On restart Spark compares the
operators of the first batch with the checkpoint's operator metadata
(`IncrementalExecution.checkOperatorValidWithMetadata`: the ids and the names must be the same,
else STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA)."""
from __future__ import annotations

import importlib
import re
import sys
from typing import Any, Callable, Optional

from streamctl.pipeline.kafka_options import SHORT_NAME

# the physical operator of the explain string -> the operator name Spark writes into the state
# metadata (`StateStoreWriter.shortName`); names marked VERIFIED were seen in real checkpoints
OPERATOR_NAMES = {
    "StateStoreSave": "stateStoreSave",
    "StateStoreRestore": "stateStoreSave",
    "StreamingDeduplicate": "dedupe",
    "StreamingSymmetricHashJoin": "symmetricHashJoin",
    "TransformWithState": "transformWithStateExec",
    "StreamingDeduplicateWithinWatermark": "dedupeWithinWatermark",
    "SessionWindowStateStoreSave": "sessionWindowStateStoreSaveExec",
    "SessionWindowStateStoreRestore": "sessionWindowStateStoreSaveExec",
    "FlatMapGroupsWithState": "flatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState": "applyInPandasWithState",
    "TransformWithStateInPySpark": "transformWithStateInPySparkExec",
    "TransformWithStateInPandas": "transformWithStateInPandasExec",
    "StreamingGlobalLimit": "globalLimit",
}
# seen in checkpoints Spark wrote (tests/test_preflight.py, the corpus of Spark's test checkpoints)
VERIFIED = {"stateStoreSave", "dedupe", "symmetricHashJoin", "transformWithStateExec"}

_NODE = re.compile(r"^[\s:+\-*()0-9]*([A-Za-z]+?)(?:Exec)?\b[^\n]*?state info \[[^\]]*?opId = (\d+)", re.MULTILINE)


def load_query(ref: str) -> Callable[[Any], Any]:
    """`module:function` -> the function (it takes a SparkSession and returns the streaming
    DataFrame the query writes). ValueError with one line for a bad reference."""
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"--query {ref!r}: expected module:function")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--query {ref!r}: {exc}") from None
    if not callable(fn):
        raise ValueError(f"--query {ref!r}: not a function")
    return fn


def stateful_operators(df: Any) -> dict[int, tuple[str, str]]:
    """{operator id: (physical operator, state metadata name)} of a streaming DataFrame's plan."""
    spark = df.sparkSession
    text = spark._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "simple")
    return operators_in_plan(text)


def operators_in_plan(text: str) -> dict[int, tuple[str, str]]:
    out: dict[int, tuple[str, str]] = {}
    for m in _NODE.finditer(text):
        node, op = m.group(1), int(m.group(2))
        out.setdefault(op, (node, OPERATOR_NAMES.get(node, node)))
    return out


# the operators whose state key is the bracketed list that follows them in the explain string
# (`StreamingDeduplicate [id#0L]`: the deduplication keys; `StateStoreSave [key#1]`: the grouping keys)
KEYED = {"StreamingDeduplicate": "dedupe", "StateStoreSave": "stateStoreSave"}
_KEYED_NODE = re.compile(r"\b(StreamingDeduplicate|StateStoreSave)(?:Exec)?\s*\[([^\n]*?)\], state info \[[^\]]*?opId = (\d+)")
_ATTRIBUTE = re.compile(r"^(?P<name>.+)#(?P<id>\d+)(?:L|-T\d+ms)?$")


def _split_top(text: str) -> list[str]:
    """`a#1, f(b#2, c#3)` -> the comma-separated items at depth 0."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _attribute_types(plan_json: str) -> dict[int, Any]:
    """exprId -> dataType (as Spark's JSON writes it) of every attribute in a plan's `toJSON`."""
    import json

    out: dict[int, Any] = {}
    stack: list[Any] = [json.loads(plan_json)]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            if str(o.get("class", "")).endswith(".AttributeReference") and isinstance(o.get("exprId"), dict):
                out.setdefault(int(o["exprId"].get("id", -1)), o.get("dataType"))
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return out


def keys_in_plan(text: str, types: dict[int, Any]) -> dict[int, Optional[list[str]]]:
    """{operator id: the data types of its state key, as compact JSON} for deduplication and
    aggregation operators; None where a key is not a plain attribute of known type."""
    import json

    out: dict[int, Optional[list[str]]] = {}
    for m in _KEYED_NODE.finditer(text):
        op = int(m.group(3))
        if op in out:
            continue
        got: Optional[list[str]] = []
        for item in _split_top(m.group(2)):
            a = _ATTRIBUTE.match(item)
            t = types.get(int(a.group("id"))) if a else None
            if t is None:
                got = None
                break
            got.append(json.dumps(t, sort_keys=True, separators=(",", ":")))  # type: ignore[union-attr]
        out[op] = got
    return out


def state_keys(df: Any) -> dict[int, Optional[list[str]]]:
    """The state key types of a streaming DataFrame's deduplication and aggregation operators."""
    spark = df.sparkSession
    text = spark._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "simple")
    return keys_in_plan(text, _attribute_types(df._jdf.queryExecution().analyzed().toJSON()))



def _streaming_relations(df: Any) -> list[Any]:
    """The distinct streaming relations of a DataFrame's analyzed plan, top-down, left to right
    (the order `MicroBatchExecution` numbers its sources in)."""
    found: list[Any] = []
    stack = [df._jdf.queryExecution().analyzed()]
    while stack:
        node = stack.pop()
        if node.getClass().getSimpleName() in ("StreamingRelation", "StreamingRelationV2"):
            if not any(node.equals(seen) for seen in found):
                found.append(node)
        children = node.children()
        stack.extend(children.apply(i) for i in reversed(range(children.size())))
    return found


def source_count(df: Any) -> int:
    """How many sources a restart of the query numbers (one per distinct streaming relation)."""
    return len(_streaming_relations(df))


def file_sources(df: Any) -> list[tuple[int, Optional[str], str, str]]:
    """The file sources of a streaming DataFrame's plan, numbered as a restart numbers its
    sources (`MicroBatchExecution` replaces each streaming relation top-down, left to right, one
    id per distinct relation): (ordinal, the name `DataStreamReader.name` gave or None, the path
    as given, the path qualified as `FileStreamSource` qualifies it; a glob is left as given)."""
    spark = df.sparkSession
    jvm = spark._jvm
    hadoop_conf = spark._jsc.hadoopConfiguration()
    found = _streaming_relations(df)
    out = []
    for ordinal, node in enumerate(found):
        source_name = str(node.sourceName())
        if not (source_name.startswith("FileSource[") and source_name.endswith("]")):
            continue
        path = source_name[len("FileSource["):-1]  # `DataSource.sourceSchema`: s"FileSource[$path]"
        out.append((ordinal, _given_name(node), path, _qualified(jvm, hadoop_conf, path)))
    return out


KAFKA_SOURCES = ("kafka", SHORT_NAME)  # Spark's connector, streamctl's Python source


def kafka_sources(df: Any) -> list[tuple[int, Optional[str], dict[str, str]]]:
    """The Kafka sources of a streaming DataFrame's plan, numbered as `file_sources` numbers them:
    (ordinal, the name `DataStreamReader.name` gave or None, the source's options)."""
    out = []
    for ordinal, node in enumerate(_streaming_relations(df)):
        if str(node.sourceName()) not in KAFKA_SOURCES:
            continue
        try:
            opts = node.extraOptions().asCaseSensitiveMap()
            options = {str(k): str(opts.get(k)) for k in opts.keySet().toArray()}
        except Exception:  # noqa: BLE001 - a V1 relation or another line's shape: its options are not read
            continue
        out.append((ordinal, _given_name(node), options))
    return out


def _given_name(node: Any) -> Optional[str]:
    """The name `DataStreamReader.name` gave the source (PySpark 4.2+), else None."""
    try:
        opt = node.sourceIdentifyingName().nameOpt()
        return str(opt.get()) if opt.isDefined() else None
    except Exception:  # noqa: BLE001 - a line without source names (3.5): py4j raises its own errors
        return None


def _qualified(jvm: Any, hadoop_conf: Any, path: str) -> str:
    """`path` as `fs.makeQualified(new Path(path))` spells it (`file:/abs/path`), as a URI."""
    try:
        p = jvm.org.apache.hadoop.fs.Path(path)
        return str(p.getFileSystem(hadoop_conf).makeQualified(p).toUri().toString())
    except Exception:  # noqa: BLE001 - no file system for the scheme here: the path as given
        return path

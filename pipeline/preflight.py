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
from typing import Any, Callable

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

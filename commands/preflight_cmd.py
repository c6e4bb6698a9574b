"""`streamctl preflight`: does a new version of a query fit its checkpoint? (docs/model.md#preflight)"""
from __future__ import annotations

from typing import Any, Optional

import typer

from streamctl.console import render
from streamctl.console.errors import handle_errors
from streamctl.inspectors.findings import API_VERSION

# operator names Spark writes that streamctl has seen in real checkpoints (pipeline/preflight.py)
_DOC = "docs/model.md#preflight"


def compare_operators(committed: Optional[int], old: dict[int, Optional[str]], new: dict[int, tuple[str, str]],
                      verified: set[str]) -> list[Any]:
    """STATEFUL_OPERATORS_CHANGED when the restart of the new query fails on the checkpoint's
    operators: with operator metadata (Spark 3.5+ writes it) the ids and names must match
    (STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA); without it, a new operator id has no
    state folder (STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY). Names streamctl has not
    seen Spark write are compared by id only."""
    from streamctl.inspectors.findings import Finding

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
    """STATE_KEY_SCHEMA_CHANGED when an operator the new query keeps (same id, same name) keys its
    state by other types than the checkpoint's state schema file records: Spark checks them when
    the first batch runs (StateSchemaCompatibilityChecker: field count and types, names and
    nullability aside) and fails with STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE."""
    from streamctl.inspectors.errors import StreamctlError
    from streamctl.inspectors.findings import Finding
    from streamctl.inspectors.state import SCHEMA_FILE, parse_state_schema, schema_field_types
    from streamctl.inspectors.storage import Storage

    st = Storage.open(checkpoint)
    out = []
    for op, want in sorted(keys.items()):
        if want is None or op not in old or old[op] != new.get(op, ("", ""))[1]:
            continue
        rel = f"state/{op}/0/{SCHEMA_FILE}"
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
                f"operator {op} ({old[op]}): the checkpoint's state is keyed by ({', '.join(have)}) "
                f"({st.uri(rel)}), the new query's by ({', '.join(want)}): the first batch of its restart fails "
                "(STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE). Keep the keys, or start the changed query on a new checkpoint",
                details={"operator": op, "checkpoint_key_types": have, "query_key_types": want,
                         "path": st.uri(rel), "restart_error": "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"}))
    return out


@handle_errors
def preflight(
    checkpoint: str = typer.Argument(..., help="The checkpoint the new version of the query will restart on."),
    query: str = typer.Option(..., "--query", help="module:function returning the new query's streaming DataFrame "
                                                   "(it is given a SparkSession); the module is imported from the "
                                                   "current folder or PYTHONPATH."),
    as_json: bool = typer.Option(False, "--json", help="A Preflight JSON document."),
) -> None:
    """Before a deploy: would the new version of a query restart on this checkpoint?

    Plans the new query (without starting it: its plan only, no data read, nothing written) and
    compares its stateful operators (ids and names, as Spark numbers them) with the checkpoint's
    operator metadata, as Spark's restart does, then the state key types of the deduplication and
    aggregation operators it keeps with the checkpoint's state schema files, as Spark's first batch
    does. Exit 0 when they fit, 1 when the restart would fail (STATEFUL_OPERATORS_CHANGED,
    STATE_KEY_SCHEMA_CHANGED, naming Spark's error), 2 for a bad --query, 3 for an unreadable
    checkpoint. Value schemas, joins and transformWithState keys are not compared.

    Examples:

    \b
      streamctl preflight /data/chk/orders --query orders_job:build
      PYTHONPATH=deploy/v2 streamctl preflight /data/chk/orders --query orders_job:build --json
    """
    from streamctl.console.errors import fail
    from streamctl.console.exit_codes import ExitCode
    from streamctl.inspectors.checkpoint import inspect_checkpoint
    from streamctl.inspectors.errors import StorageError, UsageError
    from streamctl.inspectors.findings import finding_records, verdict_of
    from streamctl.pipeline.preflight import VERIFIED, load_query, state_keys, stateful_operators

    try:
        build = load_query(query)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    q = inspect_checkpoint(checkpoint, quiet_period_s=0)
    bad = [f for f in q.findings if f.code == "UNREADABLE"]
    if bad:
        raise StorageError(str(bad[0].details.get("path", checkpoint)), str(bad[0].details.get("reason", "")))
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession.builder.master("local[1]").config(
        "spark.ui.enabled", "false").getOrCreate()
    try:
        df = build(spark)
        new = stateful_operators(df)
        keys = state_keys(df)
    except Exception as exc:  # the user's code: its own error, one line
        raise fail(f"--query {query}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                   ExitCode(2)) from None
    old = {op.operator_id: op.name for op in q.operators}
    findings = compare_operators(q.committed, old, new, VERIFIED)
    if not findings and q.committed is not None:
        findings = compare_keys(q.checkpoint, old, new, keys)
    verdict = "misaligned" if findings else "aligned"
    doc = {"api_version": API_VERSION, "kind": "Preflight", "checkpoint": q.checkpoint, "query": query,
           "committed": q.committed,
           "checkpoint_operators": [{"id": i, "name": n} for i, n in sorted(old.items())],
           "query_operators": [{"id": i, "operator": node, "name": name} for i, (node, name) in sorted(new.items())],
           "findings": finding_records(findings), "verdict": verdict_of(findings) if findings else verdict}
    if as_json:
        render.emit_json(doc)
    else:
        lines = [f"checkpoint {q.checkpoint} (committed {q.committed})",
                 "  checkpoint operators: " + (", ".join(f"{i}: {n}" for i, n in sorted(old.items())) or "none"),
                 "  query operators:      " + (", ".join(f"{i}: {name} ({node})" for i, (node, name) in sorted(new.items()))
                                               or "none")]
        lines += [f"{f.severity}  {f.code}  {f.message}" for f in findings]
        lines.append(f"verdict: {'the restart fails' if findings else 'fits: the operators and their state keys match'}")
        render.emit_lines(lines, "plain")
    raise typer.Exit(1 if findings else 0)

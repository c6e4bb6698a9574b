"""Would a new version of a query restart on this checkpoint? The judgments of `streamctl
preflight` (docs/model.md#preflight) over what the checkpoint holds and what the new query's
plan says (pipeline/preflight.py reads the plan with PySpark; these need none)."""
from __future__ import annotations

from typing import Any, Optional

from streamctl.formats.errors import StreamctlError
from streamctl.formats.state import SCHEMA_FILE, parse_state_schema, schema_field_types
from streamctl.inspectors.findings import Finding
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
    """STATE_KEY_SCHEMA_CHANGED when an operator the new query keeps (same id, same name) keys its
    state by other types than the checkpoint's state schema file records: Spark checks them when
    the first batch runs (StateSchemaCompatibilityChecker: field count and types, names and
    nullability aside) and fails with STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE."""
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

"""JSON text as streamctl writes it: keys sorted, UTF-8, by orjson, and by json.dumps for what
orjson refuses (a str with a lone surrogate: a file name that is not UTF-8; a key that is no str;
an int beyond 64 bits), which escapes it the way the JSON readers read it back. What neither
encodes raises TypeError. Used by the journal, `plan.json`, `manifest.json` (indented) and `--json`
output (indented; docs/json.md)."""
from __future__ import annotations

import json
from typing import Any

import orjson

_SORTED = orjson.OPT_SORT_KEYS
_INDENTED = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2


def dumps(value: Any) -> bytes:
    """Compact JSON of `value`, keys sorted."""
    try:
        return orjson.dumps(value, option=_SORTED)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def dumps_each(values: list[Any]) -> list[bytes]:
    """`dumps` of each value, in order: one orjson call each in one loop (no call chain per
    value), `dumps` for the values of a list orjson refuses."""
    try:
        return [orjson.dumps(v, option=_SORTED) for v in values]
    except TypeError:
        return [dumps(v) for v in values]


def dumps_file(value: Any) -> bytes:
    """A whole JSON file (`plan.json`, `manifest.json`): indented by two spaces, keys sorted, a
    trailing newline, in one orjson call; json.dumps (ASCII escapes) for what orjson refuses."""
    try:
        return orjson.dumps(value, option=_INDENTED | orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return (json.dumps(value, sort_keys=True, indent=2) + "\n").encode()


def dumps_indented(value: Any) -> str:
    """JSON of `value` indented by two spaces, as json.dumps(indent=2) lays it out (a float may
    be written shorter: 1e-05 as 0.00001)."""
    try:
        return orjson.dumps(value, option=_INDENTED).decode("utf-8")
    except TypeError:
        return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)

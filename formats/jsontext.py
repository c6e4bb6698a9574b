"""JSON text as streamctl writes it: keys sorted, UTF-8, by orjson (issue 23), and by json.dumps
for what orjson refuses (a str with a lone surrogate: a file name that is not UTF-8; a key that is
no str; an int beyond 64 bits), which escapes it the way the JSON readers read it back. What
neither encodes raises TypeError. Used by the journal, `plan.json`, `manifest.json` (compact) and
`--json` output (indented; docs/json.md)."""
from __future__ import annotations

import json
from typing import Any, Optional

import orjson

_SORTED = orjson.OPT_SORT_KEYS
_INDENTED = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2


class Encoded:
    """A value's compact JSON, encoded already (`data`): `dumps` writes it as it is
    (orjson.Fragment, no copy), or, where json.dumps writes the document, the value it reads
    back to."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _fragment(value: Any) -> Any:
    if isinstance(value, Encoded):
        return orjson.Fragment(value.data)
    raise TypeError(type(value).__name__)


def _decoded(value: Any) -> Any:
    if isinstance(value, Encoded):
        return json.loads(value.data)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    """Compact JSON of `value` (a quarter of the time of the hand-written encoders this replaced,
    and of json.dumps)."""
    try:
        return orjson.dumps(value, default=_fragment, option=_SORTED)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_decoded).encode()


_CONTROL = bytes(range(0x20))


def plain_texts(texts: list[str]) -> bool:
    """Whether JSON writes each of these texts as it is between its quotes (no escape: no quote,
    backslash or control character; UTF-8 text), checked at once: joined by line breaks, the
    UTF-8 bytes hold no quote or backslash and no control character but those line breaks."""
    try:
        data = "\n".join(texts).encode()
    except UnicodeEncodeError:  # a lone surrogate: a file name that is not UTF-8
        return False
    return b'"' not in data and b"\\" not in data and len(data) - len(data.translate(None, _CONTROL)) == len(texts) - 1


def plain_rows(rows: list[str], quotes: int) -> Optional[bytes]:
    """Rows of JSON formatted from texts (a record each, `quotes` quote characters of its own),
    their UTF-8 joined by line breaks when no text added a quote, a backslash or a control
    character (the line breaks between the rows are the only ones): each text is then written
    as it is between its quotes, as `dumps` writes it. None otherwise (also for a lone
    surrogate: a file name that is not UTF-8)."""
    try:
        data = "\n".join(rows).encode()
    except UnicodeEncodeError:
        return None
    if (data.count(b'"') != quotes * len(rows) or b"\\" in data
            or len(data) - len(data.translate(None, _CONTROL)) != len(rows) - 1):
        return None
    return data


def dumps_joined(values: Any, sep: bytes, first: bytes = b"", buf: Optional[bytearray] = None) -> bytearray:
    """`first`, then each value's `dumps`, `sep` between them, in one growing buffer (the journal's
    lines, plan.json's and manifest.json's lists: 66,000 items; `dumps` inlined, a call less per
    item, issue 23): `buf`, appended to, or a new one."""
    if buf is None:
        buf = bytearray()
    buf += first
    if type(values) is list and len(values) > 1 and set(map(type, values)) == {dict}:
        # a list of objects: encoded in one call, then split where one object ends and the next
        # begins (`},{`: in a list of objects every boundary is one, so when there are no more
        # of them than boundaries, no string holds one); half the time of a call per item
        try:
            whole = orjson.dumps(values, option=_SORTED)
        except TypeError:  # what orjson refuses: item by item below
            whole = b""
        if whole and whole.count(b"},{") == len(values) - 1:
            buf += whole[1:-1].replace(b"},{", b"}" + sep + b"{")
            return buf
    enc, opt = orjson.dumps, _SORTED
    it = iter(values)
    for v in it:  # the first, without a separator before it
        try:
            buf += enc(v, option=opt)
        except TypeError:
            buf += dumps(v)
        break
    for v in it:
        buf += sep
        try:
            buf += enc(v, option=opt)
        except TypeError:
            buf += dumps(v)
    return buf


def dumps_indented(value: Any) -> str:
    """JSON of `value` indented by two spaces, as json.dumps(indent=2) lays it out (a float may
    be written shorter: 1e-05 as 0.00001); with an indent json.dumps runs its Python encoder, a
    tenth of orjson's speed."""
    try:
        return orjson.dumps(value, option=_INDENTED).decode("utf-8")
    except TypeError:
        return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)

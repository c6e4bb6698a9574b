"""The one bounded reader of the text formats (docs/formats/README.md#the-reader): bytes to text,
lines split as Scala's getLines splits them, Spark's `v<N>` version lines, and JSON with bounds (an
integer fits a Long, a number is finite, nesting is bounded). Every format module parses through it.
"""
from __future__ import annotations

import json
import re
from typing import Any, Union

from streamctl.formats.errors import LogParseError

_VERSION_RE = re.compile(r"^v([0-9]+)$")


def decode_text(data: bytes, path: str) -> str:
    if not data:
        raise LogParseError(path, "empty file (incomplete log file)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogParseError(path, f"not UTF-8 text (byte {exc.start})") from None


def split_lines(text: str) -> list[str]:
    """Split like Scala's getLines: a final newline does not add an empty line."""
    lines = text.split("\n")
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def parse_version_line(line: str, path: str, max_version: int) -> int:
    """MetadataVersionUtil.validateVersion: `v<positive int>`, at most max_version."""
    m = _VERSION_RE.match(line.strip())
    if not m or len(m.group(1)) > 10 or int(m.group(1)) <= 0:  # an Int: never int() of 100,000 digits
        shown = line[:20] + ("..." if len(line) > 20 else "")
        raise LogParseError(path, f"malformed log file: bad version line {shown!r}")
    version = int(m.group(1))
    if version > max_version:
        raise LogParseError(path, f"unsupported log version v{version} (streamctl reads up to v{max_version})")
    return version


MAX_INT_CHARS = 20  # a Long: 19 digits and a sign (docs/formats/README.md#the-reader)


class BoundError(json.JSONDecodeError):
    """A number the reader's bounds refuse (its position is not known)."""
MAX_FLOAT_CHARS = 40


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_CHARS:
        raise BoundError(f"an integer of {len(text)} characters is not a Long", text[:20], 0)
    value = int(text)
    if not -(1 << 63) <= value < (1 << 63):
        raise BoundError(f"integer {text} is out of the Long range", text, 0)
    return value


def _bounded_float(text: str) -> float:
    if len(text) > MAX_FLOAT_CHARS:
        raise BoundError(f"a number of {len(text)} characters", text[:20], 0)
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise BoundError(f"number {text} is out of range (not finite)", text, 0)
    return value


def _no_constant(name: str) -> Any:
    raise BoundError(f"{name} is not a JSON number", name, 0)


# one decoder, built once: json.loads with hooks builds a decoder per call (2.3x slower on a
# sink log's entries); this one parses them near json.loads' speed (measured: 68 ms against 58 ms
# for 20,000 file-sink entries)
_DECODER = json.JSONDecoder(parse_int=_bounded_int, parse_float=_bounded_float, parse_constant=_no_constant)


def load_json(text: Union[str, bytes]) -> Any:
    """json.loads with bounds (docs/formats/README.md#the-reader): an integer fits a Long (no
    100,000-digit integer reaches int()), a number is finite (no 1e400, no NaN or Infinity), and a
    document nested too deeply for the parser (Python's recursion limit) is malformed JSON like
    any other. Every failure is a json.JSONDecodeError, never a ValueError or RecursionError."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = text.decode("utf-8")
        return _DECODER.decode(text)
    except UnicodeDecodeError as exc:
        raise BoundError(f"not UTF-8 text (byte {exc.start})", "", 0) from None
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None
    except ValueError as exc:  # int() past Python's digit limit, or a JSONDecodeError from the hooks
        if isinstance(exc, json.JSONDecodeError):
            raise
        raise BoundError(str(exc).split(":")[0], "", 0) from None


_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__, untyped in typeshed
_JSON_SPACE = " \t\n\r"  # JSON's whitespace, the only characters decode() passes over


def json_object_line(line: str, path: str, line_no: int) -> dict[str, Any]:
    """json_object for one line of a log, by the decoder's scanner directly: a compaction holds an
    entry per file ever read, and decode()'s own steps cost as much as the scan. Anything but one
    whole object goes through json_object, which says what is wrong (naming "line `line_no`")."""
    s = line.strip(_JSON_SPACE)
    try:
        value, end = _SCAN(s, 0)
    except Exception:  # noqa: BLE001 - StopIteration, JSONDecodeError, a bound's ValueError: json_object names it
        end = -1
    if end == len(s) and type(value) is dict:
        return value  # type: ignore[no-any-return]
    return json_object(line, path, f"line {line_no}")


def json_object(text: str, path: str, what: str) -> dict[str, Any]:
    try:
        value = load_json(text)
    except json.JSONDecodeError as exc:
        where = "" if isinstance(exc, BoundError) else f" at column {exc.colno}"
        raise LogParseError(path, f"{what} is not valid JSON ({exc.msg}{where})") from None
    if not isinstance(value, dict):
        raise LogParseError(path, f"{what} is not a JSON object")
    return value

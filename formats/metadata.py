"""A checkpoint's `metadata` file: the query id, `{"id":"<uuid>"}` (StreamMetadata;
docs/formats/checkpoint.md#metadata)."""
from __future__ import annotations

import json

from streamctl.formats.errors import LogParseError
from streamctl.formats.reader import decode_text, json_object


def parse_query_metadata(data: bytes, path: str) -> str:
    """The query id in a checkpoint's `metadata` file (compact or pretty-printed JSON)."""
    obj = json_object(decode_text(data, path).strip(), path, "metadata")
    qid = obj.get("id")
    if not isinstance(qid, str) or not qid:
        raise LogParseError(path, 'metadata has no string "id"')
    return qid


def serialize_query_metadata(query_id: str) -> bytes:
    """`metadata` as Spark writes it (compact JSON, no newline)."""
    return json.dumps({"id": query_id}, separators=(",", ":")).encode()

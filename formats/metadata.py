"""A checkpoint's `metadata` file: the query id, `{"id":"<uuid>"}` (StreamMetadata;
docs/formats/checkpoint.md#metadata)."""
from __future__ import annotations

import json
import os
import re

from streamctl.formats.errors import LogParseError
from streamctl.formats.layout import METADATA_FILE
from streamctl.formats.reader import decode_text, json_object


def parse_query_metadata(data: bytes, path: str) -> str:
    """The query id in a checkpoint's `metadata` file (compact or pretty-printed JSON)."""
    obj = json_object(decode_text(data, path).strip(), path, "metadata")
    qid = obj.get("id")
    if not isinstance(qid, str) or not qid:
        raise LogParseError(path, 'metadata has no string "id"')
    if not _UUID.match(qid):
        # the restart parses it with java.util.UUID.fromString and fails ("Invalid UUID string")
        raise LogParseError(path, f"metadata's id {qid[:40]!r} is not a UUID (the restart fails: Invalid UUID string)")
    return qid


# java.util.UUID.fromString: five dash-separated groups of hex digits, at most 36 characters
_UUID = re.compile(r"\A[0-9a-fA-F]{1,8}-[0-9a-fA-F]{1,4}-[0-9a-fA-F]{1,4}-[0-9a-fA-F]{1,4}-[0-9a-fA-F]{1,12}\Z")


def serialize_query_metadata(query_id: str) -> bytes:
    """`metadata` as Spark writes it (compact JSON, no newline)."""
    return json.dumps({"id": query_id}, separators=(",", ":")).encode()


def query_id_of(checkpoint: str | os.PathLike[str]) -> str:
    """The query id of a local checkpoint folder, from its `metadata` file."""
    path = os.path.join(checkpoint, METADATA_FILE)
    with open(path, "rb") as fh:
        return parse_query_metadata(fh.read(), path)

"""The envelope of every JSON document streamctl prints or writes (docs/json.md): `api_version`
(inspectors/findings.py API_VERSION, defined once) and `kind` first, then the document's own
keys. Every document is made here, by `document`; a test finds no other spelling of the
envelope in the tree."""
from __future__ import annotations

from typing import Any

from streamctl.inspectors.findings import API_VERSION


def document(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """The document of `kind` with `body`'s keys after the envelope, in their order."""
    return {"api_version": API_VERSION, "kind": kind, **body}

"""Relative paths inside a root: what every step's path is checked against (operations/files.py
`Root`), so that no step can touch a path outside the roots the user named."""
from __future__ import annotations

import re

from streamctl.formats.errors import StorageError

_NOT_NORMAL = re.compile(r"(^|/)\.{0,2}(/|$)|\\")  # a leading, trailing or double "/", a "." or ".." part, a backslash


def is_normal_rel(rel: str) -> bool:
    """What `_NOT_NORMAL` finds nothing in, by substring tests (cheaper than the regex search,
    made for every step path): a "." or ".." part is at the start, between two "/" or at the end."""
    if not rel or "\\" in rel or "//" in rel or rel[0] == "/" or rel[-1] == "/":
        return False
    if rel[0] == "." and (rel in (".", "..") or rel.startswith(("./", "../"))):
        return False
    return "/." not in rel or not ("/./" in rel or "/../" in rel or rel.endswith(("/.", "/..")))


def check_rel(rel: str, where: str) -> str:
    """A relative, normalised path that cannot leave its root."""
    if is_normal_rel(rel):  # already normal: the usual case
        return rel
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts) or rel.startswith("/"):
        raise StorageError(f"{where}/{rel}", "refusing a path outside the root")
    return "/".join(parts)

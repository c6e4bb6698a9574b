"""The places of `streamctl copy` (docs/model.md#copy): the new place must not nest
with the old one and must hold nothing; the absolute paths the old place's logs name are
rewritten to the new place (a file sink's data files, with `--source-path` a file source's input
files), each spelled the way Spark spells the new location.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

from streamctl.formats.compactible import rewrite_entry_paths
from streamctl.formats.errors import UsageError
from streamctl.formats.layout import LOCK_FILE
from streamctl.inspectors.placement import new_root_spelling, norm_uri, root_of, sink_rel
from streamctl.inspectors.storage import Storage
from streamctl.operations.files import Root
from streamctl.operations.plan import Refused


def place_key(st: Storage) -> str:
    """A location compared for nesting: a local path resolved (symlinks followed), an object
    store's URI without its options, one spelling per scheme."""
    if st.is_local:
        return os.path.realpath(st.display).rstrip("/") or "/"
    return norm_uri(st.display.partition("?")[0]).rstrip("/")


def nests(a: str, b: str) -> bool:
    """Whether location keys `a` and `b` are the same place or one holds the other."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def check_places(places: dict[str, str]) -> None:
    """Refuse (exit 4) when two of the named places (what -> location) are one or nest: a copy
    into its own source, or a sink inside its checkpoint's new place, would read what it writes."""
    keys = {what: place_key(Storage.open(loc)) for what, loc in places.items()}
    names = list(keys)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if nests(keys[a], keys[b]):
                raise Refused(f"{places[a]} ({a}) and {places[b]} ({b}) are the same place or one holds the other; "
                              "name a new place apart from the old one")


def first_file(root: Root, under_lock: bool = False) -> Optional[str]:
    """The first file (or, local, empty folder) the new place holds, None when it holds nothing;
    `under_lock`: the copy's own lock file does not count."""
    if root.is_local:
        if not os.path.exists(root.location):
            return None
        if not os.path.isdir(root.location):
            return ""
        for dirpath, dirs, files in os.walk(root.location):
            rel = os.path.relpath(dirpath, root.location)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in sorted(files):
                if not (under_lock and rel + name == LOCK_FILE):
                    return rel + name
            if not dirs and not files and rel and not (under_lock and LOCK_FILE.startswith(rel)):
                return rel.rstrip("/")
        return None
    for rel, _size in root.walk_sizes(""):
        if not (under_lock and rel == LOCK_FILE):
            return rel
    return None


def check_empty(root: Root, what: str, under_lock: bool = False) -> None:
    """Refuse a new place that holds anything: a copy never writes over or beside other files."""
    held = first_file(root, under_lock)
    if held == "":
        raise Refused(f"{root.location} ({what}): is a file, not a folder; name a new or empty folder")
    if held is not None:
        raise Refused(f"{root.location} ({what}): not empty (it holds {held}); a copy writes only into a new or "
                      "empty folder: name another, or remove what is there")


def parse_source_paths(pairs: list[str]) -> list[tuple[str, str]]:
    """`--source-path OLD=NEW` values, each split once at its first `=`."""
    out = []
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise UsageError(f"--source-path {pair!r}: give OLD=NEW (the input folder the source log names, "
                             "and where it is now)")
        out.append((old.strip(), new.strip()))
    return out


def relocator(old: Storage, new: Storage, encoded: bool = True) -> Callable[[str], Optional[str]]:
    """A logged path under `old` to the same relative path under `new` (its last components
    exactly as Spark encoded them); None for a path not under `old`. `encoded`: the new root as
    a URI spells it (False: as Hadoop's `Path.toString` does, placement.new_root_spelling)."""
    old_root, local = root_of(old), old.is_local
    roots = [old_root]
    if local and os.path.realpath(old_root) != old_root:  # Spark logs the path it was given, or resolved
        roots.append(os.path.realpath(old_root))

    def move(raw: str) -> Optional[str]:
        rel = next((r for r in (sink_rel(raw, root, local) for root in roots) if r is not None), None)
        if rel is None:
            return None
        tail = "/".join(raw.partition("?")[0].split("/")[-(rel.count("/") + 1):])
        return f"{new_root_spelling(raw, new, encoded)}/{tail}"

    return move


def rewrite_log(content: bytes, moves: list[Callable[[str], Optional[str]]]) -> tuple[bytes, int]:
    """A compactible log file with every entry path the first matching `moves` gives a new one
    rewritten; (the new bytes, how many paths changed)."""
    count = 0

    def new_path(raw: str) -> Optional[str]:
        nonlocal count
        for move in moves:
            got = move(raw)
            if got is not None:
                count += got != raw
                return got
        return None

    return rewrite_entry_paths(content, new_path), count

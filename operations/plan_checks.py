"""The invariants every mutation's plan is checked against before anything changes
(docs/model.md#the-mutation-path, step 4); each refusal raises `Refused` (exit 4, nothing changed):

* `check_backup_target` (before the lock): a named backup/archive folder is new or empty, is a
  folder (not a file) and on a supported scheme; so an early failure never leaves a lock behind.
* `check_plan` (under the lock, before the plan file): no two steps of one root whose paths nest
  (a folder moved after the files in it would land on their backup path), and every step's path,
  resolved (symlinks followed), stays inside its root (a copy step's source path inside the root
  it reads from).
"""
from __future__ import annotations

import os
import stat
from collections import Counter
from operator import attrgetter
from typing import Any, Optional

from streamctl.formats.errors import StorageError
from streamctl.operations.files import Root, check_rel, is_normal_rel
from streamctl.operations.plan import COPY_FROM, PUT_BACK_TO, Plan, Refused


def check_backup_target(location: str, what: str = "--backup-dir", name: str = "backup") -> Root:
    """The backup (or archive) root for a new operation: refuse a file, an unsupported scheme or
    a folder that already holds anything (a backup never overwrites or deletes a file)."""
    try:
        root = Root(name, location)
        kind = root.storage.kind()
    except StorageError as exc:
        raise Refused(f"{what}: {exc}") from None
    if kind == "file":
        raise Refused(f"{what} {root.location}: is a file, not a folder; name a new or empty folder")
    if kind == "dir":
        try:
            held = _entries(root)
        except (OSError, StorageError) as exc:
            raise Refused(f"{what} {root.location}: cannot be listed ({exc})") from None
        if held:
            raise Refused(f"{what} {root.location}: is not empty (it holds {held[0]}); a backup never "
                          "overwrites anything: name a new or empty folder")
        if root.is_local and not os.access(root.location, os.W_OK | os.X_OK):
            raise Refused(f"{what} {root.location}: not writable")
    elif root.is_local:
        parent = _existing_parent(root.location)
        if parent is None or not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
            raise Refused(f"{what} {root.location}: cannot be created (no writable folder above it)")
    return root


def _entries(root: Root) -> list[str]:
    """Whatever a folder holds (files, links, empty sub-folders count too), at most a few names."""
    if root.is_local:
        for dirpath, dirs, files in os.walk(root.location):
            found = files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]
            if found or dirs:
                rel = os.path.relpath(os.path.join(dirpath, (found or dirs)[0]), root.location)
                return [rel.replace(os.sep, "/")]
        return []
    import pyarrow.fs as pafs

    sel = pafs.FileSelector(root._fs_root, recursive=True, allow_not_found=True)  # noqa: SLF001
    return [i.path[len(root._fs_root):].lstrip("/") for i in root._fs.get_file_info(sel)[:1]]  # type: ignore[union-attr]  # noqa: SLF001


def _existing_parent(path: str) -> Any:
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        up = os.path.dirname(p)
        if up == p:
            return None
        p = up
    return p


def nested_steps(plan: Plan) -> list[tuple[str, str]]:
    """Pairs of step paths of one root where one is inside the other (or equal)."""
    return [pair for root, paths in _paths_by_root(plan).items()
            for pair in _nested(root, paths, [p.rpartition("/") for p in paths])]


def _paths_by_root(plan: Plan) -> dict[str, list[str]]:
    roots = set(map(_ROOT, plan.steps))
    if len(roots) == 1:  # the usual plan: the paths at once
        return {roots.pop(): list(map(_PATH, plan.steps))}
    by_root: dict[str, list[str]] = {}
    for s in plan.steps:
        got = by_root.get(s.root)
        if got is None:
            got = by_root[s.root] = []
        got.append(s.path)
    return by_root


_ROOT, _PATH, _ACTION = attrgetter("root"), attrgetter("path"), attrgetter("action")


def step_actions(plan: Plan) -> set[str]:
    """The actions a plan's steps take."""
    return set(map(_ACTION, plan.steps))


def _nested(root: str, paths: list[str], parts: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """`nested_steps` of one root's paths; `parts`: each path's rpartition("/")."""
    if not _may_nest(paths, [head for head, _, _ in parts]):
        return []
    out = []
    ordered = sorted([p + "/" for p in paths])  # a folder sorts right before its contents
    for a, b in zip(ordered, ordered[1:], strict=False):
        if b.startswith(a):  # equal, or b inside a
            out.append((f"{root}:{a[:-1]}", f"{root}:{b[:-1]}"))
    return out


def _may_nest(paths: list[str], heads: Optional[list[str]] = None) -> bool:
    """Whether two of these paths may be equal or one inside the other: a path met twice, or one
    that is a folder above another's (every prefix ending before a "/"). One pass with sets;
    True sends them to the sort. `heads`: each path's folder, when known."""
    uniq = set(paths)
    if len(uniq) != len(paths) or "" in uniq:
        return True
    above: set[str] = set()
    for folder in set(heads) if heads is not None else {p.rpartition("/")[0] for p in uniq}:
        while folder and folder not in above:  # its own prefixes were added with it
            above.add(folder)
            folder = folder.rpartition("/")[0]
    return not uniq.isdisjoint(above)


def escaping_steps(plan: Plan, roots: dict[str, Root]) -> list[str]:
    """Step paths that, resolved (symlinks followed, on local roots), leave their root."""
    by_root = _paths_by_root(plan)
    if "put_back" in step_actions(plan):
        by_root[PUT_BACK_TO] = [s.path for s in plan.steps if s.action == "put_back"]
    return [e for name, paths in by_root.items() for e in _escaping(name, roots.get(name), paths)]


def _escaping(root_name: str, root: Optional[Root], paths: list[str],
              parts: Optional[list[tuple[str, str, str]]] = None) -> list[str]:
    """`escaping_steps` of one root's paths (`parts`: their rpartition("/"), when made). Each
    folder is checked and resolved once; a step's own name is resolved only when it is a symlink
    (found by one listing of a folder many steps touch, else one lstat). A name that is no
    symlink resolves inside its resolved folder, so a folder that resolves inside its root keeps
    every such name inside it."""
    if root is None or not root.is_local:
        return []  # object stores have no symlinks; a Kafka group is no file root
    # normal paths as they are; else each is checked (the first outside its root raises) and normalised
    if not all(map(is_normal_rel, paths)):
        parts = [check_rel(p, root.location).rpartition("/") for p in paths]
    elif parts is None:
        parts = [p.rpartition("/") for p in paths]
    counts = Counter([head for head, _, _ in parts])  # folder -> steps in it, in the steps' order
    small = {head for head, n in counts.items() if n < LISTING_FROM}  # their names are lstat'ed
    index: dict[str, dict[str, str]] = {}  # folder -> name -> path: the small folders', then every one

    def names_in(head: str) -> dict[str, str]:
        got = index.get(head)
        if got is None:  # at most two passes: the small folders (and this one), then all
            want = None if index else small | {head}
            for (h, _, name), path in zip(parts, paths, strict=True):
                if want is None or h in want:
                    names = index.get(h)
                    if names is None:
                        names = index[h] = {}
                    names[name] = path
            got = index[head]
        return got

    out: list[str] = []
    top = os.path.realpath(root.location)
    resolved: dict[tuple[str, str], str] = {}  # (root, folder) -> its real path, one lstat each (_real_folder)
    for head, n in counts.items():
        parent = root.local(head) if head else root.location
        real_parent = _real_folder(root, root_name, head, top, resolved)
        inside = real_parent == top or real_parent.startswith(top.rstrip(os.sep) + os.sep)
        if not inside:
            names, links = names_in(head), _links(parent, names_in(head))
        else:
            links = _links(parent, None if n >= LISTING_FROM else names_in(head))
            if not links:
                continue
            names = names_in(head)
            links &= names.keys()
        for name in (names if not inside else links):
            path = os.path.join(parent, name)
            real = os.path.realpath(path) if name in links else os.path.join(real_parent, name)
            if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
                out.append(f"{root.uri(names[name])} (resolves to {real})")
    return out


def _real_folder(root: Root, root_name: str, head: str, top: str, resolved: dict[tuple[str, str], str]) -> str:
    """os.path.realpath of the root's folder `head` (a checked relative path), from its parent's
    real path when the folder is no symlink (one lstat, where realpath lstats every component
    from /); a symlink is resolved by realpath itself. `top`: the root's own real path."""
    if not head:
        return top
    key = (root_name, head)
    got = resolved.get(key)
    if got is not None:
        return got
    up, _, name = head.rpartition("/")  # a normal path: no "", "." or ".." part
    path = root.local(head)
    try:
        link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        link = False  # as realpath: a name it cannot lstat is kept as it is
    got = os.path.realpath(path) if link else os.path.join(_real_folder(root, root_name, up, top, resolved), name)
    resolved[key] = got
    return got


LISTING_FROM = 16  # steps in one folder from which one listing is cheaper than an lstat each


def _links(parent: str, names: Optional[dict[str, str]]) -> set[str]:
    """Which of these names (entries of `parent`; checked: no "." or ".." names; None: any entry)
    are symlinks. A name that is not one resolves to itself inside its resolved folder."""
    if names is None or len(names) >= LISTING_FROM:
        try:
            with os.scandir(parent) as it:  # the kind comes with the listing: filter's C loop, no Python per entry
                found = {e.name for e in filter(os.DirEntry.is_symlink, it)}
            return found if names is None else found & names.keys()
        except OSError:
            if names is None:
                return set()  # not listable: no entry of it can be renamed either (each step then fails as always)
    out = set()
    for name in names or ():
        try:
            if stat.S_ISLNK(os.lstat(os.path.join(parent, name)).st_mode):
                out.add(name)
        except OSError:
            pass  # nothing there (yet): realpath would keep the name as it is
    return out


def check_plan(plan: Plan, roots: dict[str, Root]) -> None:
    """Refuse a plan that could lose a byte or touch a path outside its roots (each root's paths
    split once for both checks)."""
    by_root = _paths_by_root(plan)
    parts = {name: [p.rpartition("/") for p in paths] for name, paths in by_root.items()}
    nested = [pair for name, paths in by_root.items() for pair in _nested(name, paths, parts[name])]
    if nested:
        a, b = nested[0]
        raise Refused(f"the plan has steps whose paths nest ({a} holds {b}"
                      + (f"; {len(nested) - 1} more" if len(nested) > 1 else "")
                      + "): a folder and files in it are never moved separately; refusing")
    if "put_back" in step_actions(plan):
        by_root[PUT_BACK_TO] = [s.path for s in plan.steps if s.action == "put_back"]
        parts.pop(PUT_BACK_TO, None)
    if "copy" in step_actions(plan):  # the files a copy reads stay inside the old place's roots too
        for s in plan.steps:
            if s.action == "copy":
                by_root.setdefault(COPY_FROM[s.root], []).append(s.path)
        for name in COPY_FROM.values():  # split again with the copy's sources (copy --move also writes there)
            parts.pop(name, None)
    escaping = [e for name, paths in by_root.items()
                for e in _escaping(name, roots.get(name), paths, parts.get(name))]
    if escaping:
        raise Refused(f"refusing a path outside the named roots: {escaping[0]}"
                      + (f" (+{len(escaping) - 1} more)" if len(escaping) > 1 else ""))

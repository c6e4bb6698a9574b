"""The invariants every mutation holds, checked once for align, trim, drop-sink and the Kafka
offset commit (docs/model.md#the-mutation-path):

* `check_backup_target` (before the lock): a named backup/archive folder is new or empty, is a
  folder (not a file) and on a supported scheme; so an early failure never leaves a lock behind.
* `check_plan` (under the lock, before the plan file): no two steps of one root whose paths nest
  (a folder moved after the files in it would land on their backup path), and every step's path,
  resolved (symlinks followed), stays inside its root.

Each raises `Refused` (exit 4, nothing changed)."""
from __future__ import annotations

import os
from typing import Any

from streamctl.inspectors.errors import StorageError
from streamctl.operations.files import Root
from streamctl.operations.plan import Plan, Refused


def check_backup_target(location: str, what: str = "--backup-dir") -> Root:
    """The backup (or archive) root for a new operation: refuse a file, an unsupported scheme or
    a folder that already holds anything (a backup never overwrites or deletes a file)."""
    try:
        root = Root("backup", location)
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
    out: list[tuple[str, str]] = []
    by_root: dict[str, list[str]] = {}
    for s in plan.steps:
        by_root.setdefault(s.root, []).append(s.path)
    for root, paths in by_root.items():
        ordered = sorted(paths, key=lambda p: (p + "/"))  # a folder sorts right before its contents
        for a, b in zip(ordered, ordered[1:]):
            if b == a or b.startswith(a + "/"):
                out.append((f"{root}:{a}", f"{root}:{b}"))
    return out


def escaping_steps(plan: Plan, roots: dict[str, Root]) -> list[str]:
    """Step paths that, resolved (symlinks followed, on local roots), leave their root."""
    out: list[str] = []
    real_roots: dict[str, str] = {}
    for s in plan.steps:
        root = roots[s.root]
        if not root.is_local:
            continue  # object stores have no symlinks
        if s.root not in real_roots:
            real_roots[s.root] = os.path.realpath(root.location)
        top = real_roots[s.root]
        real = os.path.realpath(root.local(s.path))
        if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
            out.append(f"{root.uri(s.path)} (resolves to {real})")
    return out


def check_plan(plan: Plan, roots: dict[str, Root]) -> None:
    """Refuse a plan that could lose a byte or touch a path outside its roots."""
    nested = nested_steps(plan)
    if nested:
        a, b = nested[0]
        raise Refused(f"the plan has steps whose paths nest ({a} holds {b}"
                      + (f"; {len(nested) - 1} more" if len(nested) > 1 else "")
                      + "): a folder and files in it are never moved separately; refusing")
    escaping = escaping_steps(plan, roots)
    if escaping:
        raise Refused(f"refusing a path outside the named roots: {escaping[0]}"
                      + (f" (+{len(escaping) - 1} more)" if len(escaping) > 1 else ""))

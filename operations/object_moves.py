"""Moves where an object store is on either side: copy -> verify -> delete, with the copies in
flight on COPY_THREADS threads and the deletes in batched requests (S3 DeleteObjects, Azure
Blob batches); and --purge deletes on object stores, batched the same way. A crash between a
copy and its delete leaves source and copy both, which the general path of a resume settles
(operations/apply_steps.py)."""
from __future__ import annotations

from typing import Any, Callable

from streamctl.inspectors.storage import parallel_map
from streamctl.operations.apply_steps import entry_base, moved_entry
from streamctl.operations.backup_folder import backup_rel
from streamctl.operations.files import Root
from streamctl.operations.plan import Step

COPY_THREADS = 8  # object-store reads and copies in flight at once


def parallel(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """fn over items on at most COPY_THREADS threads, one item per task (object-store requests
    overlap), in order."""
    return parallel_map(fn, items, COPY_THREADS)


def _delete_by_root(roots: dict[str, Root], steps: list[Step]) -> None:
    by_root: dict[str, list[str]] = {}
    for step in steps:
        by_root.setdefault(step.root, []).append(step.path)
    for name, paths in by_root.items():
        roots[name].delete_many(paths)


def move_by_copy(roots: dict[str, Root], backup: Root, steps: list[Step], pres: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Move plain files into the backup by copy: the copies in parallel, each read back and
    checked against its begin record's digest (`pres`), then the sources deleted in batched
    requests once every copy is whole (never a delete at a backup path). The manifest entries,
    in order."""
    def copy(k: int) -> None:
        step, pre = steps[k], pres[k]
        roots[step.root].copy_checked(step.path, backup, backup_rel(step), (pre["size"], pre["sha256"]))

    parallel(copy, list(range(len(steps))))
    _delete_by_root(roots, steps)
    return [moved_entry(step, roots[step.root], pre["size"], pre["sha256"]) for step, pre in zip(steps, pres, strict=True)]


def delete_remote(roots: dict[str, Root], steps: list[Step], pres: list[Any]) -> list[dict[str, Any]]:
    """The --purge deletes of these steps on object stores, in batched requests; their manifest
    entries (size and sha256 from the begin records), in order."""
    _delete_by_root(roots, steps)
    out = []
    for step, pre in zip(steps, pres, strict=True):
        known = isinstance(pre, dict)
        out.append(dict(entry_base(step, roots[step.root]), backup=None, action="absent" if pre is None else "deleted",
                        size=pre.get("size") if known else None, sha256=pre.get("sha256") if known else None))
    return out


def put_back_by_copy(roots: dict[str, Root], backup: Root, steps: list[Step], entries: list[dict[str, Any]]) -> list[bool]:
    """Undo of moves by copy: each backed-up file copied to its path and read back against its
    manifest entry's sha256 (a path that holds it again already, checked identical before the
    undo began, keeps its backup copy), then the backup copies deleted in batched requests once
    every copy is whole. Which were copied back, in order."""
    def put_back(k: int) -> bool:
        step, m = steps[k], entries[k]
        root = roots[step.root]
        if root.exists(step.path):
            return False
        backup.copy_checked(backup_rel(step), root, step.path, (m["size"], m["sha256"]))
        return True

    done = parallel(put_back, list(range(len(steps))))
    backup.delete_many([backup_rel(step) for step, copied in zip(steps, done, strict=True) if copied])
    return done

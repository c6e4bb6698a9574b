"""What one step does to the files (docs/model.md#the-mutation-path): `move` into the backup,
`write` (the previous content backed up first), `put_back` (an archived input file back where
the source's log names it), `delete` (--purge), `catalog_rollback` (an Iceberg table's
snapshot) and `copy` (a file of the old place to the new one, streamctl copy). Each is idempotent: run again after a crash, it finds what the first run did and
returns the same manifest entry."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

from streamctl.formats.errors import StreamctlError
from streamctl.operations.backup_folder import backup_rel
from streamctl.operations.files import Root
from streamctl.operations.journal import Conflict
from streamctl.operations.plan import COPY_FROM, PUT_BACK_TO, Step


def entry_base(step: Step, root: Root) -> dict[str, Any]:
    """The manifest entry's common keys of a step."""
    return {"root": step.root, "path": step.path, "uri": root.uri(step.path), "backup": backup_rel(step)}


def moved_entry(step: Step, root: Root, size: Any, sha256: Any) -> dict[str, Any]:
    """The manifest entry of a file moved into the backup."""
    return dict(entry_base(step, root), action="moved", size=size, sha256=sha256)


def catalog_order(step: Step) -> dict[str, Any]:
    """A catalog_rollback step's order: the catalog, the snapshots from and to, the metadata file."""
    try:
        order = json.loads((step.content or b"{}").decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        order = None
    if not isinstance(order, dict) or not {"catalog", "from_snapshot", "to_snapshot", "metadata"} <= set(order):
        raise StreamctlError("a catalog_rollback step without its order (catalog, from and to snapshot, metadata)")
    return order


class StepApplier:
    """Carries out single steps between the plan's roots and the backup root."""

    def __init__(self, roots: dict[str, Root], backup: Root) -> None:
        self.roots = roots
        self.backup = backup

    def apply(self, step: Step, pre: Any) -> Optional[dict[str, Any]]:
        """Run one step whose begin record (with `pre`, what was there) is durable; its manifest entry."""
        root = self.roots[step.root]
        base = entry_base(step, root)
        if step.action == "move":
            return self._move(step, root, base, pre)
        if step.action == "put_back":
            return self._put_back(step, root, base, pre)
        if step.action == "catalog_rollback":
            return self._catalog_rollback(step, base)
        if step.action == "delete":  # --purge: no backup copy, the manifest keeps size and sha256
            if root.exists(step.path):
                size, sha = root.digest(step.path)
                root.delete(step.path)
                return dict(base, backup=None, action="deleted", size=size, sha256=sha)
            if isinstance(pre, dict):
                return dict(base, backup=None, action="deleted", size=pre.get("size"), sha256=pre.get("sha256"))
            return dict(base, backup=None, action="absent", size=None, sha256=None)
        if step.action == "write":
            return self._write(step, root, base, pre)
        if step.action == "copy":
            return self._copy(step, root, base, pre)
        raise StreamctlError(f"unknown step action {step.action!r} in the plan")

    def _move(self, step: Step, root: Root, base: dict[str, Any], pre: Any) -> dict[str, Any]:
        b = backup_rel(step)
        if isinstance(pre, dict) and root.rename_into(step.path, self.backup, b):
            # one rename, never over anything: the file the begin record hashed was there and
            # nothing was at its backup path (else the checks below decide)
            return dict(base, action="moved", size=pre["size"], sha256=pre["sha256"])
        if root.exists(step.path):
            # the begin record hashed it already (the file is only moved after that record)
            size, sha = (pre["size"], pre["sha256"]) if isinstance(pre, dict) else root.digest(step.path)
            if self.backup.exists(b) and isinstance(pre, dict) and self._recreated_empty(root, step.path, b, pre):
                # moved before a crash, then made again, empty, after it: a restart attempt of the
                # old query creates the sink's `_spark_metadata` folder before it reads the
                # checkpoint (and fails on the tombstone). An empty folder holds nothing; left in
                # place it would hide the retired sink's files from readers of its log.
                root.delete(step.path)
                return dict(base, action="moved", size=pre["size"], sha256=pre["sha256"])
            if self.backup.exists(b):  # a copy-based move interrupted before its delete:
                # never delete at a backup path; the source goes only when the copy is whole
                if self.backup.digest(b) != (size, sha) or root.digest(step.path) != (size, sha):
                    raise Conflict(f"{self.backup.uri(b)} already holds other content than "
                                   f"{root.uri(step.path)}; refusing to overwrite a backed-up file")
                root.delete(step.path)
                return dict(base, action="moved", size=size, sha256=sha)
            root.move_to(step.path, self.backup, b)
            return dict(base, action="moved", size=size, sha256=sha)
        if self.backup.exists(b):
            size, sha = self.backup.digest(b)
            return dict(base, action="moved", size=size, sha256=sha)
        return dict(base, action="absent", size=None, sha256=None)

    def _recreated_empty(self, root: Root, rel: str, b: str, pre: dict[str, Any]) -> bool:
        """True when the backup holds exactly what the begin record hashed at `rel` and `rel` is now
        an empty folder: the move was done, and something made the folder again afterwards."""
        return (root.kind(rel) == "dir" and not root.walk_files(rel)
                and self.backup.digest(b) == (pre.get("size"), pre.get("sha256")))

    def _write(self, step: Step, root: Root, base: dict[str, Any], pre: Any) -> dict[str, Any]:
        assert step.content is not None
        b = backup_rel(step)
        want = hashlib.sha256(step.content).hexdigest()
        written = {"written_size": len(step.content), "written_sha256": want}
        if root.exists(step.path):
            size, sha = root.digest(step.path)
            if sha == want:
                prev = self.backup.digest(b) if self.backup.exists(b) else None
                if prev is None and isinstance(pre, dict) and pre.get("sha256") == want:
                    return dict(base, action="unchanged", size=size, sha256=sha, **written)
                return dict(base, action="replaced" if prev else "created",
                            size=None if prev is None else prev[0], sha256=None if prev is None else prev[1], **written)
            if self.backup.exists(b):
                raise Conflict(f"{root.uri(step.path)} changed while the operation ran (its earlier content is "
                               f"already in {self.backup.uri(b)}); refusing to overwrite it")
            root.move_to(step.path, self.backup, b)
            root.write_atomic(step.path, step.content)
            return dict(base, action="replaced", size=size, sha256=sha, **written)
        prev = self.backup.digest(b) if self.backup.exists(b) else None
        root.write_atomic(step.path, step.content)
        return dict(base, action="replaced" if prev else "created",
                    size=None if prev is None else prev[0], sha256=None if prev is None else prev[1], **written)

    def _copy(self, step: Step, root: Root, base: dict[str, Any], pre: Any) -> dict[str, Any]:
        """Copy the old place's file to the same path under `root`, read back against the
        source's digest. What is there already: the same bytes (a run before a crash) is done;
        other bytes are a torn copy of this step when its begin record found nothing there (the
        new place was checked empty and is locked), else a Conflict (never overwritten)."""
        src = self.roots[COPY_FROM[step.root]]
        want = src.file_digest(step.path)
        if want is None:
            raise Conflict(f"{src.uri(step.path)} is gone since the plan was made; the copy stops here (resume once "
                           "it is back, or undo the copy)")
        # what is there: on an object store one read (None: no object; a key never replaces a folder's)
        got = root.digest_if_exists(step.path) if root.is_local else root.file_digest(step.path)
        if got is not None:
            if got != want and pre is not None:
                raise Conflict(f"{root.uri(step.path)} holds other content than {src.uri(step.path)}; refusing to "
                               "overwrite it")
            if got == want:
                return dict(base, backup=None, action="copied", size=None, sha256=None, written_size=want[0],
                            written_sha256=want[1])
        src.copy_checked(step.path, root, step.path, want)
        return dict(base, backup=None, action="copied", size=None, sha256=None, written_size=want[0],
                    written_sha256=want[1])

    def _catalog_rollback(self, step: Step, base: dict[str, Any]) -> dict[str, Any]:
        """Iceberg's rollback_to_snapshot through the table's catalog (pyiceberg), only from the
        state the plan saw: the catalog must still name the metadata file and snapshot it read
        (else Conflict: the table moved on); already at the target (a resumed run): done."""
        from streamctl.inspectors.iceberg import catalog_table, pin

        order = catalog_order(step)
        table = catalog_table(order["catalog"])
        current = table.metadata.current_snapshot_id
        if current != order["to_snapshot"]:
            if current != order["from_snapshot"] or \
                    str(table.metadata_location).rsplit("/", 1)[-1] != str(order["metadata"]).rsplit("/", 1)[-1]:
                raise Conflict(f"{order['catalog']}: the table moved on since the plan was made (current snapshot "
                               f"{current}, the plan expected {order['from_snapshot']}); nothing was changed")
            table.manage_snapshots().rollback_to_snapshot(int(order["to_snapshot"])).commit()
            table = catalog_table(order["catalog"])
        pin(str(table.metadata.location), str(table.metadata_location), order["catalog"])
        return dict(base, backup=None, action="catalog_rollback", size=None, sha256=None)

    def _put_back(self, step: Step, root: Root, base: dict[str, Any], pre: Any) -> dict[str, Any]:
        """Move an archived file back to the same path under the `input` root, never over a file
        there: other content at the destination is a conflict (nothing moved); the same content
        there with the archive copy gone is a put-back done before a crash."""
        dest = self.roots[PUT_BACK_TO]
        base = dict(base, backup=None)
        want = (pre["size"], pre["sha256"]) if isinstance(pre, dict) else None
        if root.exists(step.path):
            size, sha = want if want is not None else root.digest(step.path)
            if root.rename_into(step.path, dest, step.path):
                return dict(base, action="put_back", size=size, sha256=sha)
            if dest.exists(step.path):
                if dest.digest(step.path) != (size, sha):
                    raise Conflict(f"{dest.uri(step.path)} exists with other content than the archived "
                                   f"{root.uri(step.path)}; refusing to overwrite an input file")
                root.delete(step.path)  # a copy-based move interrupted before its delete
                return dict(base, action="put_back", size=size, sha256=sha)
            root.move_to(step.path, dest, step.path)
            return dict(base, action="put_back", size=size, sha256=sha)
        if dest.exists(step.path):
            got = dest.digest(step.path)
            if want is not None and got != want:
                raise Conflict(f"{dest.uri(step.path)} exists with other content than the archived file the plan "
                               f"puts back ({root.uri(step.path)} is gone); refusing")
            return dict(base, action="put_back", size=got[0], sha256=got[1])
        return dict(base, action="absent", size=None, sha256=None)

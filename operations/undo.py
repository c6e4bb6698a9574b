"""Undo of a file operation (docs/model.md#the-mutation-path, step 11): every backed-up file is
checked against the manifest and every touched path against the journal before anything
changes (any mismatch refuses, nothing changed); then, in reverse order, the exact bytes go
back and the files the operation created (or copied, streamctl copy) are taken out into
`undone/<root>/<path>`. Journaled
with the same group commit as a run: an `undo_done` record is durable only after its effect."""
from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any, Optional

from streamctl.formats.coordinated_log import COORD_COMMITS
from streamctl.formats.file_sink_log import FILE_SINK_LOG
from streamctl.formats.journal import Event, JournalState
from streamctl.formats.layout import BACKED_UP_DIR, UNDONE_DIR
from streamctl.operations.apply_steps import catalog_order
from streamctl.operations.backup_folder import backup_rel
from streamctl.operations.files import Root
from streamctl.operations.journal import Conflict, journal_location
from streamctl.operations.meter import Meter
from streamctl.operations.object_moves import put_back_by_copy
from streamctl.operations.plan import PUT_BACK_TO, Step

if TYPE_CHECKING:
    from streamctl.operations.executor import Executor

UNDO_COPY_BATCH = 256  # undo on object stores: copies put back per batched delete of their backups


def _some(items: list[str], limit: int = 3) -> str:
    return ", ".join(items[:limit]) + (", ..." if len(items) > limit else "")


class Undo:
    """One undo of the executor's operation (`Executor.undo`)."""

    def __init__(self, ex: Executor) -> None:
        self.ex = ex
        self.plan, self.roots, self.backup = ex.plan, ex.roots, ex.backup

    def run(self) -> list[str]:
        """Put back every file the operation moved or replaced, take out every file it created;
        exact bytes, checked against the manifest's sha256. Refuses (Conflict, nothing changed)
        when a file was changed after the operation (for example Spark ran again). The URIs put
        back."""
        ex = self.ex
        state = ex.read_journal()
        todo = self._check(state)
        pending: list[dict[str, Any]] = [{"event": Event.UNDO_START, "steps": len(todo)}]
        ex.meter = Meter(len(todo), ex.meter.out, label="undo: ")
        restored: list[str] = []
        touched: list[Step] = []
        copyable = self._copyable(todo, state)
        copies: list[int] = []  # object stores: put back by parallel copies, then batched deletes
        t0 = time.monotonic()
        for i in todo:  # group commit as in a run: an undo_done record is durable only after its effect
            step = self.plan.steps[i]
            if ex.say is not None:
                ex.say(f"undo step {i + 1}: {ex.describe(step)}")
            if i in copyable:
                copies.append(i)
                if len(copies) < UNDO_COPY_BATCH:
                    continue
            else:
                self._by_copy(copies, state, pending, touched, restored)
                restored.extend(self._undo_step(i, state))
                self._undo_done(i, state, pending, touched)
            self._by_copy(copies, state, pending, touched, restored)
            copies = []
            if len(touched) >= ex.batch_steps or time.monotonic() - t0 > ex.batch_seconds:
                ex.commit_done(touched, pending)
                pending, touched, t0 = [], [], time.monotonic()
        self._by_copy(copies, state, pending, touched, restored)
        ex.commit_done(touched, pending + [{"event": Event.UNDONE}])
        return restored

    def _check(self, state: JournalState) -> list[int]:
        """The steps to undo, last first, once every check passed (else Conflict, nothing changed)."""
        steps = self.plan.steps
        if not state.started and not state.begun:
            raise Conflict(f"undo refused: {journal_location(self.backup)} holds no record of the operation (empty or "
                           f"torn), so nothing shows what it changed; the files it moved are under "
                           f"{self.backup.uri('files')}; nothing was changed")
        unrecorded = [s.path for i, s in enumerate(steps)
                      if i not in state.begun and s.action == "move" and self.backup.exists(backup_rel(s))]
        if unrecorded:  # the backup holds what the journal does not say was moved: its tail is lost
            raise Conflict(f"undo refused: the backup holds {len(unrecorded)} file(s) the journal "
                           f"{journal_location(self.backup)} does not record as moved ({_some(unrecorded)}"
                           f"): the journal is torn; nothing was changed")
        todo = [i for i in sorted(state.begun, reverse=True) if i not in state.undone]
        purged = [steps[i].path for i in todo if steps[i].action == "delete"]
        if purged:
            raise Conflict(f"undo refused: {len(purged)} file(s) were deleted with --purge and cannot be restored "
                           f"({_some(purged)})")
        broken = self._backup_mismatches(todo, state)
        if broken:
            raise Conflict(f"undo refused, the backup {self.backup.location} does not match its manifest: "
                           + "; ".join(broken[:5]) + (f" (+{len(broken) - 5} more)" if len(broken) > 5 else "")
                           + "; nothing was changed")
        conflicts = [c for c in (self._conflict(i, state) for i in todo) if c]
        if conflicts:
            raise Conflict("undo refused, files changed after the operation: " + "; ".join(conflicts[:5])
                           + (f" (+{len(conflicts) - 5} more)" if len(conflicts) > 5 else ""))
        return todo

    def _undo_done(self, i: int, state: JournalState, pending: list[dict[str, Any]], touched: list[Step]) -> None:
        self.ex.meter.tick(((state.done.get(i) or {}).get("manifest") or {}).get("size") or 0)
        pending.append({"event": Event.UNDO_DONE, "step": i})
        touched.append(self.plan.steps[i])

    def _copyable(self, todo: list[int], state: JournalState) -> set[int]:
        """Moves an undo puts back by copy -> verify -> batched delete: an object store on either
        side, the backup one plain file (one recursive listing of the backup's files/) whose
        manifest entry has its sha256."""
        if self.backup.is_local and all(r.is_local for r in self.roots.values()):
            return set()
        files = {f"{BACKED_UP_DIR}/{rel}" for rel, _size in self.backup.walk_sizes(BACKED_UP_DIR)}
        out = set()
        for i in todo:
            step, m = self.plan.steps[i], ((state.done.get(i) or {}).get("manifest") or {})
            if (step.action == "move" and m.get("action") == "moved" and m.get("sha256") and backup_rel(step) in files
                    and not (self.backup.is_local and self.roots[step.root].is_local)):
                out.add(i)
        return out

    def _by_copy(self, indices: list[int], state: JournalState, pending: list[dict[str, Any]],
                 touched: list[Step], restored: list[str]) -> None:
        """Put back these moved files by copy (operations/object_moves.py `put_back_by_copy`)."""
        if not indices:
            return
        steps = [self.plan.steps[i] for i in indices]
        done = put_back_by_copy(self.roots, self.backup, steps, [state.done[i]["manifest"] for i in indices])
        for i, step, copied in zip(indices, steps, done, strict=True):
            if copied:
                restored.append(self.roots[step.root].uri(step.path))
            self._undo_done(i, state, pending, touched)

    def _backup_mismatches(self, todo: list[int], state: JournalState) -> list[str]:
        """Every backed-up file of these steps checked against the manifest (size and sha256)
        before undo changes anything: an edited or missing backup file is a refusal."""
        out: list[str] = []
        for i in todo:
            rec = state.done.get(i)
            m = rec.get("manifest") if rec else None
            if not m or m.get("action") not in ("moved", "replaced") or not m.get("sha256"):
                continue
            step = self.plan.steps[i]
            b = backup_rel(step)
            want = (m.get("size"), m.get("sha256"))
            got = self.backup.digest_if_exists(b)
            if got is None:
                if step.action == "move" and self.roots[step.root].digest_if_exists(step.path) == want:
                    continue  # already put back by an interrupted undo
                out.append(f"{self.backup.uri(b)} is missing")
            elif tuple(got) != want:
                out.append(f"{self.backup.uri(b)} differs from the manifest (sha256 {got[1][:12]}..., "
                           f"expected {str(want[1])[:12]}...)")
        return out

    @staticmethod
    def _pre(i: int, state: JournalState) -> Optional[dict[str, Any]]:
        pre = state.begun[i].get("pre")
        return pre if isinstance(pre, dict) else None

    def _conflict(self, i: int, state: JournalState) -> Optional[str]:
        """Why step `i` cannot be undone now (its path changed after the operation), or None."""
        step = self.plan.steps[i]
        root = self.roots[step.root]
        b = backup_rel(step)
        if step.action == "move":
            if self.backup.exists(b) and root.exists(step.path):
                if root.digest(step.path) != self.backup.digest(b):
                    return self._recreated(root, step.path)
            return None
        if step.action == "catalog_rollback":
            from streamctl.inspectors.iceberg import catalog_table

            order = catalog_order(step)
            current = catalog_table(order["catalog"]).metadata.current_snapshot_id
            if current not in (order["to_snapshot"], order["from_snapshot"]):
                return (f"{order['catalog']}: the table moved on after the rollback (current snapshot {current}, not "
                        f"{order['to_snapshot']}): setting {order['from_snapshot']} current again would drop what came after")
            return None
        if step.action == "put_back":
            dest, m = self.roots[PUT_BACK_TO], ((state.done.get(i) or {}).get("manifest") or {})
            if dest.exists(step.path):
                if root.exists(step.path):
                    return f"{root.uri(step.path)} is in the archive again while {dest.uri(step.path)} exists too"
                if m.get("sha256") and dest.digest(step.path) != (m.get("size"), m.get("sha256")):
                    return f"{dest.uri(step.path)} was changed after the operation"
            return None
        if step.action == "copy":  # the copy at the new place, as the step wrote it
            m = (state.done.get(i) or {}).get("manifest") or {}
            if root.exists(step.path) and m.get("written_sha256") and \
                    root.digest(step.path) != (m.get("written_size"), m.get("written_sha256")):
                return f"{root.uri(step.path)} was changed after the copy"
            return None
        want = hashlib.sha256(step.content or b"").hexdigest()
        pre = self._pre(i, state)
        if root.exists(step.path):
            _, sha = root.digest(step.path)
            if sha != want and (pre is None or sha != pre.get("sha256")):
                return f"{root.uri(step.path)} was changed after the operation"
        return None

    @staticmethod
    def _recreated(root: Root, rel: str) -> str:
        """What is in the way of putting `rel` back, and what to do (a retired sink's
        `_spark_metadata` made again by a later restart, for one)."""
        where = root.uri(rel)
        if root.kind(rel) != "dir":
            return f"{where} exists again with other content: something wrote it after the operation; move it aside, then undo again"
        files = sorted(root.walk_files(rel))
        what = f"{len(files)} file(s): {_some(files)}" if files else "empty"
        who = (" (a query started on this sink after it was retired wrote a new log)"
               if rel.rstrip("/").endswith((FILE_SINK_LOG, COORD_COMMITS)) else "")
        return (f"{where} was made again after the operation{who}, {what}; move it aside (keep it if that query's "
                "output matters), then undo again")

    def _undo_step(self, i: int, state: JournalState) -> list[str]:
        """Undo one step; the URIs it put back."""
        step = self.plan.steps[i]
        root = self.roots[step.root]
        b = backup_rel(step)
        done: list[str] = []
        if step.action == "catalog_rollback":
            from streamctl.inspectors.iceberg import catalog_table, pin

            order = catalog_order(step)
            table = catalog_table(order["catalog"])
            if table.metadata.current_snapshot_id == order["to_snapshot"]:
                table.manage_snapshots().set_current_snapshot(snapshot_id=int(order["from_snapshot"])).commit()
                table = catalog_table(order["catalog"])
                done.append(f"{order['catalog']} (snapshot {order['from_snapshot']} current again)")
            pin(str(table.metadata.location), str(table.metadata_location), order["catalog"])
            return done
        if step.action == "put_back":
            # back into the archive; gone from the input already: Spark archived it again after
            # its replayed batch committed, and the archive holds it as before
            dest = self.roots[PUT_BACK_TO]
            if dest.exists(step.path) and not root.exists(step.path):
                dest.move_to(step.path, root, step.path)
                done.append(root.uri(step.path))
            return done
        if step.action == "move":
            if self.backup.exists(b):
                if root.exists(step.path):  # identical content is back already (checked): keep the backup copy
                    return done
                self.backup.move_to(b, root, step.path)
                done.append(root.uri(step.path))
            return done
        if step.action == "copy":  # taken out into undone/; the old place was never changed
            if root.exists(step.path):
                root.move_to(step.path, self.backup, f"{UNDONE_DIR}/{step.root}/{step.path}")
                done.append(root.uri(step.path))
            return done
        want = hashlib.sha256(step.content or b"").hexdigest()
        pre = self._pre(i, state)
        if pre is not None and pre.get("sha256") == want:
            return done  # the step changed nothing
        if root.exists(step.path) and root.digest(step.path)[1] == want:
            root.move_to(step.path, self.backup, f"{UNDONE_DIR}/{step.root}/{step.path}")
        if self.backup.exists(b):
            self.backup.move_to(b, root, step.path)
            done.append(root.uri(step.path))
        return done

"""How the runner (operations/runner.py) carries out `streamctl copy`: verification (the new place
inspects with the old place's verdict and the same positions), the checks before a resume (the
old place has not moved on) and an undo (the query has not run at the new place), and the check
after an undo (the copied files are gone from the new place, the old place's `metadata` back). With
`--move`, the gate before the old place is retired (`check_before_retiring`)."""
from __future__ import annotations

from typing import Any, Optional

from streamctl.operations.files import Root
from streamctl.operations.plan import Plan

POSITIONS = ("planned", "committed", "sink_epoch", "state_epoch")


def _look(location: str, sink: Optional[str], plan: Plan) -> dict[str, Any]:
    """One place's positions, verdict, findings and query id (no quiet period: the copy has just
    written the new place)."""
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    q = inspect_checkpoint(location, sink=sink, sink_kind=plan.settings.get("sink_kind") or "auto",
                           app_id=plan.settings.get("app_id"), quiet_period_s=0, deep=True)
    retired = next((f.details.get("op_id") for f in q.findings if f.code == "RETIRED"), None)
    return {"checkpoint": q.checkpoint, "sink": sink, "planned": q.planned, "committed": q.committed,
            "sink_epoch": q.sink.epoch if q.sink else None, "state_epoch": q.state_epoch, "verdict": q.verdict,
            "query_id": q.query_id, "findings": sorted({f.code for f in q.findings}),
            "live": any(f.code == "LIVE_QUERY" for f in q.findings), "retired": retired}


def _changed(plan: Plan, old: dict[str, Any]) -> list[str]:
    """The old place's positions (and query id) that differ from the plan's; once this copy's
    tombstone is there the sink is not read and the id is the tombstone's to keep."""
    ours = old["retired"] is not None and old["retired"] == plan.op_id
    keys = [k for k in POSITIONS if not (ours and k == "sink_epoch")] + ([] if ours else ["query_id"])
    return [k for k in keys if old[k] != plan.before.get(k)]


def _new_ok(plan: Plan, new: dict[str, Any]) -> bool:
    want_id = plan.after.get("query_id") or plan.before.get("query_id")
    return (new["verdict"] == plan.expected_verdict and new["query_id"] == want_id
            and all(new[k] == plan.before.get(k) for k in POSITIONS))


def verify_copy(plan: Plan, _roots: Any = None) -> tuple[bool, dict[str, Any]]:
    """Both places inspected: the new one must read the old one's verdict (aligned, or
    recoverable with the same in-flight batch) with the same positions and query id (the new one
    with --new-query-id); the old one unchanged, with --move retired by this copy."""
    old = _look(plan.roots["from_checkpoint"], plan.roots.get("from_sink"), plan)
    new = _look(plan.roots["checkpoint"], plan.roots.get("sink"), plan)
    retired = not plan.settings.get("move") or old["retired"] == plan.op_id
    ok = _new_ok(plan, new) and not _changed(plan, old) and retired
    got = {k: new[k] for k in POSITIONS + ("verdict", "findings")}
    return ok, dict(got, old=old, new=new)


def resumable(plan: Plan, _journal: Any = None) -> Optional[str]:
    """A crashed copy goes on only from the old place the plan read: not live, same positions."""
    old = _look(plan.roots["from_checkpoint"], plan.roots.get("from_sink"), plan)
    if old["live"]:
        return f"{plan.roots['from_checkpoint']}: LIVE_QUERY: the old place runs again; undo the copy and copy anew"
    moved = _changed(plan, old)
    if moved:
        return (f"{plan.roots['from_checkpoint']}: the old place moved on since the copy began ({moved[0]} "
                f"{plan.before.get(moved[0])} -> {old[moved[0]]}); undo the copy (--undo) and copy anew")
    return None


def undoable(plan: Plan, _journal: Any = None) -> Optional[str]:
    """An undo takes the copy out only while no query has run at the new place."""
    from streamctl.inspectors.checkpoint import inspect_checkpoint

    q = inspect_checkpoint(plan.roots["checkpoint"], quiet_period_s=0)
    if any(f.code == "LIVE_QUERY" for f in q.findings):
        return f"{plan.roots['checkpoint']}: LIVE_QUERY: the query runs at the new place; stop it before an undo"
    if q.planned is not None and (q.planned, q.committed) != (plan.before.get("planned"), plan.before.get("committed")):
        return (f"{plan.roots['checkpoint']}: the query ran at the new place since the copy (planned {q.planned}, "
                f"committed {q.committed}); undo would leave its new files behind: refused")
    return None


def check_before_retiring(plan: Plan, backup: str) -> None:
    """--move's gate, after the copy steps and before the old place is retired: the new place
    verifies (as `verify_copy`) and the old place did not change during the copy (positions,
    query id, no live lease, no other streamctl operation's lock). Else refused (exit 4) with the
    old place untouched and the copy kept at the new place (the lock released)."""
    from streamctl.formats.layout import LOCK_FILE
    from streamctl.operations.runner import Untouched

    old = _look(plan.roots["from_checkpoint"], plan.roots.get("from_sink"), plan)
    new = _look(plan.roots["checkpoint"], plan.roots.get("sink"), plan)
    where = plan.roots["from_checkpoint"]
    changed = _changed(plan, old)
    why = None
    if old["live"]:
        why = f"{where}: LIVE_QUERY: the old place runs again"
    elif changed:
        why = f"{where}: changed during the copy ({changed[0]} {plan.before.get(changed[0])} -> {old[changed[0]]})"
    elif Root("from_checkpoint", where).exists(LOCK_FILE) and old["retired"] != plan.op_id:
        why = f"{where}: another streamctl operation holds the old place"
    elif not _new_ok(plan, new):
        why = (f"{plan.roots['checkpoint']}: the copy does not verify (verdict {new['verdict']}, committed "
               f"{new['committed']}, query id {new['query_id']})")
    if why:
        raise Untouched(f"{why}: the old place was not retired and is as it was; the copy at the new place is kept: "
                        f"take it out with `streamctl copy --undo {backup}` and copy anew")


def copy_removed(plan: Plan, roots: dict[str, Root]) -> tuple[bool, dict[str, Any]]:
    """After an undo: no file the copy wrote is left at the new place; with --move the old
    place no longer carries this copy's tombstone."""
    left = [s.path for s in plan.steps if s.root in ("checkpoint", "sink") and roots[s.root].exists(s.path)]
    if plan.settings.get("move"):
        old = _look(plan.roots["from_checkpoint"], plan.roots.get("from_sink"), plan)
        back = old["retired"] != plan.op_id  # the tombstone gone (the old place's own moves since are not undone)
        return not left and back, {"planned": old["planned"], "committed": old["committed"],
                                   "sink_epoch": old["sink_epoch"], "left": left[:5],
                                   "verdict": (f"{len(left)} copied file(s) left" if left else
                                               "copy removed, old place back" if back else "old place not back")}
    return not left, {"planned": None, "committed": None, "sink_epoch": None,
                      "verdict": "copy removed" if not left else f"{len(left)} copied file(s) left", "left": left[:5]}


def operation() -> Any:
    """copy, as the runner runs, resumes and undoes it."""
    from streamctl.operations.runner import Operation

    return Operation("copy", verify_copy, resumable=resumable, undoable=undoable, undo_check=copy_removed,
                     steps=_steps)


def _steps(plan: Plan, roots: dict[str, Root], backup: Root, say: Any, meter: Any) -> Any:
    """The runner's executor, with --move's gate before the first retiring step and the copies on
    object stores on threads, wave by wave (copy.py's `copy_wave`)."""
    from streamctl.operations.copy import copy_wave
    from streamctl.operations.executor import Executor

    at = plan.settings.get("retire_from")
    gate = (at, lambda: check_before_retiring(plan, backup.location)) if at is not None else None
    return Executor(plan, roots, backup, progress=say, meter=meter, manifest_ahead=True, gate=gate,
                    copy_wave=copy_wave)

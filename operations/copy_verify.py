"""How the runner (operations/runner.py) carries out `streamctl copy`: verification (the new place
inspects with the old place's verdict and the same positions), the checks before a resume (the
old place has not moved on) and an undo (the query has not run at the new place), and the check
after an undo (the copied files are gone from the new place)."""
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
    return {"checkpoint": q.checkpoint, "sink": sink, "planned": q.planned, "committed": q.committed,
            "sink_epoch": q.sink.epoch if q.sink else None, "state_epoch": q.state_epoch, "verdict": q.verdict,
            "query_id": q.query_id, "findings": sorted({f.code for f in q.findings}),
            "live": any(f.code == "LIVE_QUERY" for f in q.findings)}


def verify_copy(plan: Plan, _roots: Any = None) -> tuple[bool, dict[str, Any]]:
    """Both places inspected: the new one must read the old one's verdict (aligned, or
    recoverable with the same in-flight batch) with the same positions and query id."""
    old = _look(plan.roots["from_checkpoint"], plan.roots.get("from_sink"), plan)
    new = _look(plan.roots["checkpoint"], plan.roots.get("sink"), plan)
    ok = (new["verdict"] == plan.expected_verdict and new["query_id"] == plan.before.get("query_id")
          and all(new[k] == old[k] == plan.before.get(k) for k in POSITIONS))
    got = {k: new[k] for k in POSITIONS + ("verdict", "findings")}
    return ok, dict(got, old=old, new=new)


def resumable(plan: Plan, _journal: Any = None) -> Optional[str]:
    """A crashed copy goes on only from the old place the plan read: not live, same positions."""
    old = _look(plan.roots["from_checkpoint"], plan.roots.get("from_sink"), plan)
    if old["live"]:
        return f"{plan.roots['from_checkpoint']}: LIVE_QUERY: the old place runs again; undo the copy and copy anew"
    moved = [k for k in POSITIONS if old[k] != plan.before.get(k)]
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


def copy_removed(plan: Plan, roots: dict[str, Root]) -> tuple[bool, dict[str, Any]]:
    """After an undo: no file the copy wrote is left at the new place."""
    left = [s.path for s in plan.steps if roots[s.root].exists(s.path)]
    return not left, {"planned": None, "committed": None, "sink_epoch": None,
                      "verdict": "copy removed" if not left else f"{len(left)} copied file(s) left", "left": left[:5]}


def operation() -> Any:
    """copy, as the runner runs, resumes and undoes it."""
    from streamctl.operations.runner import Operation

    return Operation("copy", verify_copy, resumable=resumable, undoable=undoable, undo_check=copy_removed)

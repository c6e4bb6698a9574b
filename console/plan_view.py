"""How a mutation's plan and outcome read (align, trim, drop-sink, kafka commit-offsets): its
numbered steps, the result, the undo and refusal documents. Exit codes come from
console/errors.py's table: a refusal is `Refused` (4), a failed verification `NotVerified` (5)."""
from __future__ import annotations

from typing import Any, Callable

import typer

from streamctl.console import render
from streamctl.console.errors import exit_code_for, fail
from streamctl.inspectors.documents import document
from streamctl.inspectors.findings import positions_text

Lines = Callable[..., list[str]]  # (plan, executed=False) -> the plan's lines


def title(name: str) -> str:
    """`drop-sink` -> `DropSink`: the prefix of a command's JSON kinds."""
    return "".join(w.title() for w in name.replace("-", " ").split())


FULL_PLAN_STEPS = 40  # more steps than this are summarized on a terminal unless --verbose
SHOWN_PER_GROUP = 3


def step_lines(plan: Any, backup_word: str = "backup") -> list[str]:
    """The numbered steps of a plan (docs/model.md#the-mutation-path: plans are shown in full):
    every one up to FULL_PLAN_STEPS or with --verbose; above, one line per kind of step and
    folder, with counts, the first few paths and "... N more" (the JSON lists every step)."""
    from streamctl.console import context

    def text(s: Any) -> str:
        return s.describe().replace("to the backup", f"to the {backup_word}")

    steps = plan.steps
    # the evidence the plan took for a stopped query comes first: --execute acts on it
    live = [f"  query stopped? {plan.before['liveness']}"] if plan.before.get("liveness") else []
    if len(steps) <= FULL_PLAN_STEPS or context.VERBOSE:
        return live + [f"  steps ({len(steps)}):"] + [f"    {i:>4}. {text(s)}" for i, s in enumerate(steps, 1)]
    groups: dict[tuple[str, str, str], list[Any]] = {}
    for s in steps:
        folder = s.path.rsplit("/", 1)[0] if "/" in s.path else ""
        groups.setdefault((s.action, s.root, folder), []).append(s)
    lines = live + [f"  steps ({len(steps)}, summarized by kind and folder; every step: --verbose or --json):"]
    for (action, root, folder), items in groups.items():
        where = f"{root}:{folder + '/' if folder else ''}"
        verb = {"move": f"move to the {backup_word}", "write": "write", "delete": "delete",
                "put_back": "put back to the input"}.get(action, action)
        names = ", ".join(s.path.rsplit("/", 1)[-1] for s in items[:SHOWN_PER_GROUP])
        more = f", ... {len(items) - SHOWN_PER_GROUP} more" if len(items) > SHOWN_PER_GROUP else ""
        prep = "from" if action == "put_back" else "in"
        lines.append(f"    {verb} {len(items):>6} {prep} {where} ({names}{more}): {items[0].reason}")
    return lines


def emit(doc: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        render.emit_json(doc)
    else:
        for line in lines:
            render.emit_text(line + "\n")


def refused(exc: Any, as_json: bool, kind: str) -> typer.Exit:
    if as_json:
        render.emit_json(document(kind, {"reason": str(exc),
                          "options": [o.to_record() for o in getattr(exc, "options", [])]}))
    return fail(str(exc), exit_code_for(exc))


def show_result(name: str, outcome: Any, as_json: bool, lines: Lines) -> None:
    """An executed or resumed align/trim: the result document, then exit 5 when not verified."""
    from streamctl.operations.plan import NotVerified

    plan, got, ok = outcome.plan, outcome.got, outcome.verified
    doc = document(f"{title(name)}Result", {"executed": True, "resumed": outcome.resumed,
           "backup": outcome.backup.location, "journal": outcome.journal, "plan": plan.to_record(),
           "verified": ok, "after": got})
    out = [] if as_json else lines(plan, True) + [  # every step, described: not for --json
        f"backup and journal: {outcome.backup.location} ({_backup_size(outcome.backup)}; undo: streamctl {name} --undo "
        f"{outcome.backup.location}; elsewhere next time: --backup-dir)",
        f"verified: {'yes' if ok else 'NO'} — now {positions_text(got, 'sink' in plan.roots)}, verdict "
        f"{got.get('verdict')} (expected {plan.expected_verdict})"]
    emit(doc, as_json, out)
    if not ok:
        raise NotVerified(f"{plan.roots['checkpoint']}: {name} ran but the checkpoint is {got.get('verdict')} "
                          f"({', '.join(got.get('findings') or [])}), not the promised {plan.expected_verdict}")


def _backup_size(backup: Any) -> str:
    """`N file(s), X MiB` the backup holds (its files/ folder: one listing), or `size unknown`."""
    from streamctl.formats.errors import StorageError
    from streamctl.inspectors.findings import human_bytes

    try:
        files, total = backup.tree_size("files")
    except (StorageError, OSError):
        return "size unknown"
    return f"{files} file(s), {human_bytes(total)}"


def show_undo(name: str, done: Any, as_json: bool) -> None:
    """An undo: what was restored and whether the positions are those from before the operation."""
    from streamctl.operations.plan import NotVerified

    after = done.after
    doc = document(f"{title(name)}Undo", {"backup": done.backup.location,
           "restored": len(done.restored), "after": after, "before_operation": done.plan.before, "verified": done.verified})
    emit(doc, as_json, [f"Undone: {len(done.restored)} file(s) restored from {done.backup.location}",
                        f"now {positions_text(after, 'sink' in done.plan.roots)}, verdict {after.get('verdict')} "
                        f"(as before the operation: {'yes' if done.verified else 'NO'})"])
    if not done.verified:
        raise NotVerified(f"{done.plan.roots['checkpoint']}: undo ran but the positions differ from before the operation")

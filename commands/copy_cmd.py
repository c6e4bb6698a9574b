"""`streamctl copy`: plan, and with --execute carry out, the copy of a query (its checkpoint and
sink) to a new place where it restarts exactly once. Same lock, journal, resume and undo as the
other mutations (streamctl.operations.runner); the lock and the backup folder are the new
place's: the old place is only read."""
from __future__ import annotations

from typing import Any, Optional

import typer

from streamctl.commands import options


def plan_lines(plan: Any, executed: bool = False) -> list[str]:
    head = "Executed" if executed else "Plan (nothing changed; add --execute to carry it out)"
    r = plan.roots
    lines = [f"{head}: copy {r['from_checkpoint']} to {r['checkpoint']}"
             + (f", sink {r['from_sink']} to {r['sink']}" if "sink" in r else ""),
             f"  old place: planned {plan.before.get('planned')}, committed {plan.before.get('committed')}, "
             f"verdict {plan.before.get('verdict')}, query id {plan.before.get('query_id')}"]
    parts = plan.after.get("parts") or {}
    total_f = sum(v["files"] for v in parts.values())
    total_b = sum(v["bytes"] for v in parts.values())
    lines.append(f"  copies: {total_f} file(s), {options.human_bytes(total_b)}")
    for part, v in parts.items():
        if v["files"]:
            lines.append(f"    {part:<10} {v['files']:>7} file(s) {options.human_bytes(v['bytes']):>12}")
    left = plan.after.get("left_out") or {}
    if left.get("files"):
        lines.append(f"  left out: {left['files']} file(s), {options.human_bytes(left['bytes'])} that no restart and "
                     f"no kept rollback reads (--all copies them too)")
    for rw in plan.after.get("rewrites") or []:
        lines.append(f"  rewrites {rw['root']}:{rw['path']}: {rw['paths']} path(s) to the new place")
    if plan.after.get("query_id") != plan.before.get("query_id"):
        lines.append(f"  new query id: {plan.after.get('query_id')} (was {plan.before.get('query_id')})")
    lines.append("  old place: " + ("retired once the copy verifies (its `metadata` becomes a tombstone)"
                                    if plan.settings.get("move") else "only read, left as it is"))
    from streamctl.console.plan_view import step_lines

    return lines + [f"  note: {n}" for n in plan.notes] + step_lines(plan)


def copy(
    checkpoint: Optional[str] = options.CHECKPOINT_ARG,
    dest: Optional[str] = typer.Argument(None, help="The new place of the checkpoint: a new or empty folder (path or URI)."),
    sink: Optional[str] = options.ONE_SINK_OPT,
    sink_dest: Optional[str] = typer.Option(None, "--sink-dest", help="The new place of the sink (with --sink)."),
    source_path: list[str] = typer.Option([], "--source-path", help="OLD=NEW: the file source's input folder moved "
                                          "too; its logged input paths under OLD are rewritten to NEW (repeatable)."),
    sink_kind: options.SinkKind = options.SINK_KIND_OPT,
    app_id: Optional[str] = options.APP_ID_OPT,
    keep_epochs: int = typer.Option(10, "--keep-epochs", min=1, help="Copy what `trim --keep-epochs N` keeps (default 10)."),
    copy_all: bool = typer.Option(False, "--all", help="Copy every file, also those no restart reads."),
    move: bool = typer.Option(False, "--move", help="Retire the old place once the copy verifies: its `metadata` "
                              "becomes a tombstone (kept in the backup; undone by --undo), nothing deleted."),
    new_query_id: bool = typer.Option(False, "--new-query-id", help="Give the copy a fresh query id instead of "
                                      "keeping it (the plan says what that costs)."),
    execute: bool = options.EXECUTE_OPT,
    backup_dir: Optional[str] = typer.Option(None, "--backup-dir", help="Where the plan and the journal go (default: "
                                             "_streamctl/backups/<operation id> under the new place)."),
    break_lock: bool = options.BREAK_LOCK_OPT,
    quiet_period: Optional[float] = options.QUIET_OPT,
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a crashed --execute from its backup folder."),
    undo: Optional[str] = typer.Option(None, "--undo", help="Take out what an earlier copy wrote (its backup folder)."),
    as_json: bool = typer.Option(False, "--json", help="A CopyPlan / CopyResult JSON document."),
) -> None:
    """Copy a query to a new place (folder, bucket or store) to restart there exactly once.

    Copies what a restart reads (what trim keeps; every file with --all), carries every checksum
    sidecar, rewrites the file sink log's data-file paths to --sink-dest and, with --source-path,
    the file source's logged input paths; keeps the query id (--new-query-id: a fresh one).
    Carries every intact savepoint (its sink's URI the new sink's).
    Refuses a live or misaligned query and a new place that holds any file. Verified: the new
    place inspects with the old one's verdict and positions. The old place is only read, or with
    --move retired once the copy verifies (a tombstone `metadata`). Run the query at one place only.

    Examples:

    \b
      streamctl copy /data/chk/orders /mnt/new/chk/orders --sink /data/out/orders --sink-dest /mnt/new/out/orders
      streamctl copy /data/chk/orders 's3://bucket/chk/orders' --move --execute
      streamctl copy --resume /mnt/new/chk/orders/_streamctl/backups/copy-20261128T100000Z-1a2b
    """
    from streamctl.commands import mutation
    from streamctl.operations.copy import CopyRequest, plan_copy
    from streamctl.operations.copy_verify import operation

    target = mutation.front("copy", checkpoint, sink, str(sink_kind), app_id, resume, undo, break_lock, operation,
                            plan_lines, as_json)
    if target is None:
        return
    from streamctl.formats.errors import UsageError
    from streamctl.operations.copy_paths import parse_source_paths

    if not dest:
        raise UsageError("name the DEST folder the checkpoint is copied to")
    location, sink, kind, app_id, config = target
    req = CopyRequest(location, sink, kind, app_id, options.quiet_period(quiet_period, config), dest=dest,
                      sink_dest=sink_dest, source_paths=parse_source_paths(source_path), keep_epochs=keep_epochs,
                      copy_all=copy_all, move=move, new_query_id=new_query_id)
    if not execute:
        mutation.plan_or_execute("copy", location, lambda: plan_copy(req), None, break_lock, False, None, plan_lines,
                                 as_json)
        return
    _execute(req, backup_dir, break_lock, as_json)


def _execute(req: Any, backup_dir: Optional[str], break_lock: bool, as_json: bool) -> None:
    """Checked before the lock (a refusal creates nothing at the new place), then the runner with
    the new place as the locked root; the plan is made again under its lock."""
    from streamctl.commands import mutation
    from streamctl.console.plan_view import refused
    from streamctl.inspectors.checkpoint import require_checkpoint
    from streamctl.inspectors.storage import Storage
    from streamctl.operations.copy import plan_copy
    from streamctl.operations.copy_paths import check_places
    from streamctl.operations.copy_verify import operation
    from streamctl.operations.plan import Refused
    from streamctl.operations.runner import Request

    require_checkpoint(Storage.open(req.checkpoint))
    try:
        if backup_dir:  # never written into the old place
            check_places({"checkpoint": req.checkpoint, "--backup-dir": backup_dir,
                          **({"sink": req.sink} if req.sink else {})})
        plan_copy(req)  # every refusal (a live query, a full destination, ...) before the lock creates anything
    except Refused as exc:
        raise refused(exc, as_json, "CopyRefusal") from None
    planner = lambda op_id, backup: plan_copy(req, True, op_id, backup.location)  # noqa: E731
    mutation.execute("copy", Request(req.dest, planner, backup_dir, break_lock), operation(), plan_lines, as_json)

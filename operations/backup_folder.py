"""The backup folder of an operation: its layout, its plan and manifest files, and loading an
earlier operation from it (docs/formats/streamctl.md).

Layout (`--backup-dir`, by default `<checkpoint>/_streamctl/backups/<op id>`):

    plan.json        the plan, steps and the contents of written files included
    journal.jsonl    one JSON object per line: start, begin/done per step, finished, verified, undo
                     (local file systems: appended, one fsync per group commit)
    journal/<n>.jsonl  the same records on object stores, which cannot append: one segment object
                     per group commit, numbered from 000001, read in order (a journal.jsonl of the
                     earlier single-object layout is read first)
    manifest.json    every file moved or replaced: root, path, backup path, size, sha256 (written when
                     the steps are done; until then the journal's `done` records carry the same entries,
                     a move done by one rename as `renamed` or in a `done_chunk`: its entry is made
                     from its begin record or `begin_chunk`)
    files/<root>/<path>   the backed-up files, at their original relative paths
    undone/<root>/<path>  files `--undo` took out again (files the operation had created)
"""
from __future__ import annotations

import re
from typing import Any

from streamctl.formats.errors import StorageError
from streamctl.formats.journal import JOURNAL_FILE, SEGMENT_DIR, json_file
from streamctl.formats.layout import BACKED_UP_DIR, MANIFEST_FILE, PLAN_FILE
from streamctl.formats.reader import load_json
from streamctl.operations.files import Pending, Root
from streamctl.operations.journal import Conflict
from streamctl.operations.plan import Plan, Step


def backup_rel(step: Step) -> str:
    """Where a step's file is kept in the backup folder."""
    return f"{BACKED_UP_DIR}/{step.root}/{step.path}"


def write_plan(backup: Root, plan: Plan) -> None:
    """plan.json into a backup folder that holds none (a backup never overwrites anything)."""
    write_plan_started(backup, plan).wait()


def write_plan_started(backup: Root, plan: Plan) -> Pending:
    """`write_plan`, its bytes written on a thread (`Root.write_atomic_started`); checked and
    encoded here."""
    if backup.exists(PLAN_FILE):
        raise Conflict(f"{backup.uri(PLAN_FILE)} already exists: the backup folder holds another operation "
                       "(use --resume with its journal, or another --backup-dir)")
    return backup.write_atomic_started(PLAN_FILE, json_file(plan.to_record()))


def write_manifest(backup: Root, plan: Plan, **entries: Any) -> None:
    write_manifest_started(backup, plan, **entries).wait()


def write_manifest_started(backup: Root, plan: Plan, **entries: Any) -> Pending:
    """manifest.json, its bytes written on a thread (durable once the result's `wait()` returned)."""
    doc = {"op_id": plan.op_id, "command": plan.command, "roots": plan.roots, **entries}
    return backup.write_atomic_started(MANIFEST_FILE, json_file(doc))


_BACKUP_FILE = re.compile(rf"/(?:{re.escape(PLAN_FILE)}|{re.escape(MANIFEST_FILE)}|{re.escape(JOURNAL_FILE)}"
                          rf"|{SEGMENT_DIR}/[0-9]+\.jsonl)/*$")
_SEGMENT_FOLDER = re.compile(rf"/{SEGMENT_DIR}/*$")


def _without(location: str, pattern: re.Pattern[str]) -> str:
    """`location` without the end `pattern` matches; a URI's query (an object store's endpoint
    options) is kept."""
    head, sep, query = location.partition("?") if "://" in location else (location, "", "")
    return pattern.sub("", head.rstrip("/")) + sep + query


def load(backup_location: str) -> tuple[Plan, Root]:
    """The plan and backup root of an earlier operation, from its backup folder, one of its files
    or its journal/ folder."""
    folder = _without(backup_location, _BACKUP_FILE)  # the folder, or one of its files
    backup = Root("backup", folder)
    if not backup.exists(PLAN_FILE) and _without(folder, _SEGMENT_FOLDER) != folder:
        backup = Root("backup", _without(folder, _SEGMENT_FOLDER))  # its journal/ folder of segments
    if not backup.exists(PLAN_FILE):
        raise StorageError(backup.uri(PLAN_FILE), "does not exist: not a streamctl backup folder (give the folder "
                                                  "that holds plan.json and journal.jsonl)")
    try:
        rec = load_json(backup.read(PLAN_FILE))
        plan = Plan.from_record(rec)
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageError(backup.uri(PLAN_FILE), f"not a valid plan ({type(exc).__name__}: {exc})") from None
    return plan, backup

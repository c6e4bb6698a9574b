"""How a fleet mutation reads (`streamctl trim '/data/chk/*'`): one row per checkpoint (its kept
window, delivery class, files and bytes, or its refusal and why), the summary (how many were done,
refused by reason, failed; bytes reclaimed), the JSON documents (docs/json.md#fleet-runs), the
JSONL and Parquet files, and the fleet's exit code."""
from __future__ import annotations

import json
import re
from typing import Any, Optional

import typer

from streamctl.console import render
from streamctl.console.exit_codes import exit_for_fleet, fleet_exit_code
from streamctl.inspectors.documents import document
from streamctl.inspectors.findings import human_bytes

PARQUET_COLUMNS = ("checkpoint", "sink", "status", "reason_code", "reason", "exit_code", "kept_from", "kept_to",
                   "delivery", "files", "bytes", "backup")


def reason_code(row: dict[str, Any]) -> str:
    """A short name of why a checkpoint was refused or failed, for counting: the refusal's own
    code (`Refused.code`: LIVE_QUERY, RETIRED, ..., `misaligned`, `locked`) when the row carries
    it; else, for a row written without one (an older run record), the finding code its message
    names, `misaligned`, `locked`, else the status."""
    reason = row.get("reason") or ""
    if not reason:
        return ""
    if row.get("reason_code"):
        return str(row["reason_code"])
    reason = _short(row)  # not the checkpoint's own path
    if "misaligned (" in reason:
        return "misaligned"
    if "--break-lock" in reason or "locked" in reason:
        return "locked"
    codes = re.findall(r"\b([A-Z][A-Z_]{3,})\b", reason)
    return codes[0] if codes else str(row["status"])


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    refused: dict[str, int] = {}
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        if r["status"] == "refused":
            refused[reason_code(r)] = refused.get(reason_code(r), 0) + 1
    done = [r for r in rows if r["status"] in ("done", "planned", "undone")]
    return {"checkpoints": len(rows), "by_status": dict(sorted(by_status.items())),
            "refused_by_reason": dict(sorted(refused.items())),
            "files": sum(int(r.get("files") or 0) for r in done), "bytes": sum(int(r.get("bytes") or 0) for r in done),
            "exit_code": fleet_exit_code([int(r["exit_code"]) for r in rows])}


def _record(row: dict[str, Any]) -> dict[str, Any]:
    return dict(row, reason_code=reason_code(row))


def _window(row: dict[str, Any]) -> str:
    kept = row.get("kept")
    return f"{kept[0]}..{kept[1]}" if kept and kept[0] is not None else "-"


def _table(rows: list[dict[str, Any]], fmt: str, title: str, name: str) -> None:
    if name == "trim":
        headers: tuple[str, ...] = ("checkpoint", "status", "kept", "delivery", "files", "bytes", "reason")
        cells = [(r["checkpoint"], r["status"], _window(r), r["delivery"] or "-", r["files"],
                  human_bytes(int(r["bytes"] or 0)), _short(r)) for r in rows]
    else:
        headers = ("checkpoint", "status", "strategy", "target", "delivery", "steps", "reason")
        cells = [(r["checkpoint"], r["status"], r["strategy"] or "-", "-" if r["target"] is None else r["target"],
                  r["delivery"] or "-", r["steps"], _short(r)) for r in rows]
    render.emit_table(headers, cells, fmt, title)


def _short(row: dict[str, Any]) -> str:
    """The reason without the checkpoint's path in front (the row names it)."""
    reason = row["reason"] or "-"
    return reason[len(row["checkpoint"]) + 2:] if reason.startswith(row["checkpoint"] + ": ") else reason


def summary_lines(s: dict[str, Any], mode: str, run: Any = None, name: str = "trim") -> list[str]:
    """The summary under the table; `mode`: plan, execute, resume or undo."""
    st = s["by_status"]
    failed = st.get("failed", 0) + st.get("not_verified", 0)
    if mode == "undo":
        head = (f"{s['checkpoints']} checkpoint(s) to put back: {st.get('undone', 0)} undone, {st.get('refused', 0)} "
                f"refused, {st.get('unreadable', 0)} unreadable, {failed} failed")
    else:
        verb = "reclaimable" if mode == "plan" else "reclaimed"
        done = f"to {name}" if mode == "plan" else {"trim": "trimmed", "align": "aligned"}.get(name, "done")
        head = (f"{s['checkpoints']} checkpoint(s): {st.get('planned' if mode == 'plan' else 'done', 0)} {done}, "
                f"{st.get('nothing_to_do', 0)} with nothing to do, {st.get('refused', 0)} refused, "
                f"{st.get('unreadable', 0)} unreadable, {failed} failed")
        if name == "trim":
            head += f"; {s['files']} file(s), {human_bytes(s['bytes'])} {verb}"
    lines = [head] + [f"  refused ({code}): {n}" for code, n in s["refused_by_reason"].items()]
    if run is not None:
        lines.append(f"run record: {run.location}")
        if mode != "undo" and (failed or any(e.status in ("pending", "running", "failed") for e in run.entries)):
            lines.append(f"  resume: streamctl {name} --resume-run {run.location}")
        if any(e.status in ("running", "done", "not_verified", "failed") for e in run.entries):
            lines.append(f"  undo:   streamctl {name} --undo-run {run.location}")
    return lines


def emit(kind: str, rows: list[dict[str, Any]], fmt: str, mode: str, run: Any = None,
         name: str = "trim", title: str = "") -> typer.Exit:
    """The fleet plan or result: a table and the summary, or one JSON document; the exit the
    command raises (console/exit_codes.py `fleet_exit_code`)."""
    s = summary(rows)
    if fmt == "json":
        body: dict[str, Any] = {"executed": mode != "plan", "checkpoints": [_record(r) for r in rows], "summary": s}
        if run is not None:
            body.update(run_id=run.run_id, run_record=run.location)
        render.emit_json(document(kind, body))
        return exit_for_fleet([int(r["exit_code"]) for r in rows])
    _table(rows, fmt, title, name)
    for line in summary_lines(s, mode, run, name):
        render.emit_text(line + "\n")
    return exit_for_fleet([int(r["exit_code"]) for r in rows])


def check_outputs(output_jsonl: Optional[str], output_parquet: Optional[str]) -> None:
    from streamctl.console.inspect_view import check_output_paths

    check_output_paths(output_jsonl, output_parquet, None)


def write_outputs(rows: list[dict[str, Any]], output_jsonl: Optional[str], output_parquet: Optional[str]) -> None:
    """One JSON line, or one Parquet row, per checkpoint."""
    from streamctl.inspectors.outputs import atomic_write, write_text_atomic

    records = [_record(r) for r in rows]
    if output_jsonl:
        write_text_atomic(output_jsonl, "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n"
                                                for r in records))
    if output_parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([(c, pa.int64() if c in ("exit_code", "kept_from", "kept_to", "files", "bytes")
                             else pa.string()) for c in PARQUET_COLUMNS])
        flat = [{"checkpoint": r["checkpoint"], "sink": r["sink"], "status": r["status"],
                 "reason_code": r["reason_code"], "reason": r["reason"], "exit_code": r["exit_code"],
                 "kept_from": (r["kept"] or [None])[0], "kept_to": (r["kept"] or [None, None])[1],
                 "delivery": r["delivery"], "files": r["files"], "bytes": r["bytes"], "backup": r["backup"]}
                for r in records]
        table = pa.Table.from_pylist(flat, schema=schema)
        atomic_write(output_parquet, lambda tmp: pq.write_table(table, tmp))

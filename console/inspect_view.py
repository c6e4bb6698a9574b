"""How `inspect` shows what it found: finding lines, the epochs table, the watch loop that
redraws it, and the output files (JSON Lines, Parquet, Prometheus metrics) of a fleet scan."""
from __future__ import annotations

import sys
from typing import Any, Optional

import typer

from streamctl.console import context, render
from streamctl.console.exit_codes import ExitCode
from streamctl.inspectors.findings import human_bytes


def finding_line(f: dict[str, Any], where: Optional[str] = None) -> str:
    prefix = f"{f['severity']:<7} {f['code']}"
    return f"{prefix}  {where + ': ' if where else ''}{f['message']}"


def window(w: Optional[list[int]]) -> str:
    return "-" if not w else f"{w[0]}..{w[1]}"


def check_epochs_options(engine: str, workers: Optional[int], interval: float, watch_count: Optional[int],
                         with_kafka: bool) -> None:
    """UsageError for the options of `inspect epochs` out of range or not working together (before
    any inspection); `with_kafka`: a broker is asked (a Kafka flag or STREAMCTL_KAFKA_BOOTSTRAP)."""
    from streamctl.formats.errors import UsageError
    from streamctl.inspectors.fleet import ENGINES

    if engine not in ENGINES:
        raise UsageError(f"invalid value for --engine: {engine!r} (choose from {', '.join(ENGINES)})")
    if workers is not None and workers < 1:
        raise UsageError("--workers must be at least 1")
    if not 0 < interval < float("inf") or (watch_count is not None and watch_count < 1):
        raise UsageError("--interval must be a positive finite number of seconds and --watch-count at least 1")
    if engine == "spark" and with_kafka:
        raise UsageError("--engine spark does not ask Kafka brokers: drop --bootstrap/--kafka-config "
                         "(and STREAMCTL_KAFKA_BOOTSTRAP), or use --engine local")


def check_output_paths(jsonl: Optional[str], parquet: Optional[str], metrics: Optional[str]) -> None:
    """UsageError when the folder of an output file given does not exist (before any inspection)."""
    import os

    from streamctl.formats.errors import UsageError

    for flag, path in (("--output-jsonl", jsonl), ("--output-parquet", parquet), ("--metrics-file", metrics)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(os.path.expanduser(path)))):
            raise UsageError(f"{flag} {path}: its folder does not exist")


def write_outputs(records: list[dict[str, Any]], doc: dict[str, Any], started: float, duration: float,
                   jsonl: Optional[str], parquet: Optional[str], metrics_file: Optional[str]) -> None:
    from streamctl.formats.errors import StreamctlError
    from streamctl.inspectors import fleet

    try:
        if jsonl:
            fleet.write_jsonl(jsonl, records)
        if parquet:
            fleet.write_parquet(parquet, records)
        if metrics_file:
            from streamctl.inspectors.metrics import format_metrics
            from streamctl.inspectors.outputs import write_text_atomic

            write_text_atomic(metrics_file, format_metrics(doc, started, duration))
    except OSError as exc:
        raise StreamctlError(f"cannot write {exc.filename or 'output'}: {exc.strerror or exc}") from None


def epoch_table(doc: dict[str, Any]) -> tuple[list[str], list[list[Any]], list[str]]:
    """(headers, rows, finding lines) of `inspect epochs`."""
    rows = []
    lines = []
    with_sink = any(q["sink"] for q in doc["queries"])
    with_kafka = any(q["kafka"] for q in doc["queries"])
    with_reclaim = any(q.get("reclaimable") for q in doc["queries"])
    for q in doc["queries"]:
        not_a_checkpoint = any(f.get("not_a_checkpoint") for f in q["findings"])  # nothing known, not even "stateless"
        row = [q["query_id"], q["checkpoint"], q["planned"], q["committed"],
               q["state_epoch"] if q["stateful"] else None if not_a_checkpoint else "stateless"]
        if with_sink:
            row += [f"{q['sink']['kind']} {q['sink']['epoch'] if q['sink']['epoch'] is not None else '-'}"
                    if q["sink"] else "-"]
        if with_kafka:
            row += [q["kafka"]["lag"] if q["kafka"] else "-"]
        if with_reclaim:
            r = q.get("reclaimable") or {}
            row += [f"{r['files']} files, {human_bytes(r['bytes'])}" if "files" in r else "refused" if r else "-"]
        row += [window(q["common_window"]), q["verdict"]]
        if context.WIDE:
            row += _wide_epoch_cells(q)
        rows.append(row)
        lines += [finding_line(f, q["checkpoint"] if len(doc["queries"]) > 1 else None) for f in q["findings"]]
    lines += [finding_line(f) for f in doc["findings"]]
    headers = (["query id", "checkpoint", "planned", "committed", "state epoch"]
               + (["sink epoch"] if with_sink else []) + (["kafka lag"] if with_kafka else [])
               + (["reclaimable"] if with_reclaim else []) + ["common window", "verdict"]
               + (WIDE_EPOCH_HEADERS if context.WIDE else []))
    return headers, rows, lines


def time_lines(doc: dict[str, Any]) -> list[str]:
    """Per query, when its planned, committed and oldest kept batches started (batchTimestampMs):
    what `align --to TIME` and `trim --keep-rollback-to TIME` are judged against. Unknown times are
    left out."""
    lines = []
    for q in doc["queries"]:
        parts = [f"{label} {q[epoch]} at {q[key]}" for label, epoch, key in (
            ("planned", "planned", "planned_time"), ("committed", "committed", "committed_time"),
            ("oldest kept", "oldest_kept", "oldest_time")) if q.get(key) and q.get(epoch) is not None]
        if parts:
            lines.append(f"{q['checkpoint']}: " + ", ".join(parts))
    return lines


WIDE_EPOCH_HEADERS = ["offsets kept", "format", "sink", "lease", "findings"]


def _wide_epoch_cells(q: dict[str, Any]) -> list[Any]:
    """`-o wide`: the retained offsets window, the checkpoint format, the sink's location, the
    agent's lease and the findings by severity."""
    kept = (q.get("retained") or {}).get("offsets")
    counts: dict[str, int] = {}
    for f in q["findings"]:
        counts[f["severity"]] = counts.get(f["severity"], 0) + 1
    found = ", ".join(f"{counts[s]} {s}{'s' if counts[s] > 1 and s != 'info' else ''}"
                      for s in ("error", "warning", "info") if s in counts) or "none"
    lease = q.get("lease")
    return [window(kept) if kept else "-", q.get("checkpoint_format"), (q.get("sink") or {}).get("uri") or "-",
            f"{lease['status']} ({lease['state']})" if lease else "-", found]


def emit_epochs(doc: dict[str, Any], output: str) -> None:
    if output == "json":
        render.emit_json(doc)
        return
    headers, rows, lines = epoch_table(doc)
    render.emit_table(headers, rows, output)
    times = time_lines(doc)
    if times:
        render.emit_lines(times, output, title="Batch times (UTC)")
    render.emit_lines(lines or ["none"], output, title="Findings")
    render.emit_lines([f"verdict: {doc['verdict']}"], output)


def watch_epochs(inspect_once: Any, output: str, interval: float, count: Optional[int]) -> dict[str, Any]:
    """Refresh until Ctrl-C (exit 130, no traceback) or `count` refreshes; the last report.
    On a terminal the table is redrawn in place (rich.live); piped, each refresh is printed
    after the previous one (JSON: one document per line)."""
    import time
    from datetime import datetime, timezone

    def status(n: int) -> str:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"refresh {n} at {now}, every {interval:g} s; Ctrl-C to stop"

    n = 0
    doc: dict[str, Any] = {}
    try:
        if output == "table":
            from rich.live import Live

            with Live(None, auto_refresh=False, redirect_stdout=False, redirect_stderr=False) as live:
                while True:
                    doc = inspect_once()
                    n += 1
                    headers, rows, lines = epoch_table(doc)
                    live.update(render.epochs_renderable(headers, rows, lines or ["none"],
                                                         f"verdict: {doc['verdict']}", status(n)), refresh=True)
                    if count is not None and n >= count:
                        break
                    time.sleep(interval)
        else:
            while True:
                doc = inspect_once()
                n += 1
                if output == "json":
                    render.emit_json_line(doc)
                else:
                    emit_epochs(doc, output)
                    render.emit_lines([status(n)], output)
                if count is not None and n >= count:
                    break
                if output != "json":
                    render.emit_text("\n")
                    sys.stdout.flush()
                time.sleep(interval)
    except KeyboardInterrupt:
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    return doc

"""`inspect writers` on a terminal: every writer's restartable window drawn on one epoch axis.

Input is one query record of the `WriterReport` JSON document (inspectors/report.py), so the
picture shows exactly what `--json` says. Parallel state stores (and coordinated-sink writer
tasks) that share a window and a status are drawn as one row (`state/0/* ×200`), so a
200-partition operator stays readable; a store that differs gets its own row.

    epoch      3                    12                   21
               ├─────────────────────┼────────────────────┤
    offsets    ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━  3..21  ok
    state/0/1         ━━━━━━━━━━━━━━━━━━━━━━━━━               7..17  behind
    common            ░░░░░░░░░░░░░░░░░░░░░░░░░               7..17

The grouping and the axis are pure functions (`chart_rows`, `axis`) so tests check them without
a terminal; `writers_chart` wraps them in rich Text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

# status -> (bar character, rich style)
BAR = {
    "ok": ("━", "green"),
    "ahead": ("━", "yellow"),
    "behind": ("━", "red"),
    "broken": ("╌", "bold red"),
    "empty": ("", "dim"),
}
COMMON = ("░", "cyan")
GROUPED_KINDS = ("state_store", "sink_writer")


@dataclass(frozen=True)
class ChartRow:
    label: str
    first: Optional[int]
    last: Optional[int]
    status: str
    count: int = 1


def _group_key(writer: dict[str, Any]) -> Optional[tuple[str, str]]:
    """(prefix, suffix) under which parallel writers of one operator/sink group, else None.
    `state/<op>/<partition>[/<store>]` -> ("state/<op>", "/<store>"); `sink/writer-<p>` -> ("sink", "")."""
    name, kind = str(writer["writer"]), writer["kind"]
    if kind not in GROUPED_KINDS:
        return None
    parts = name.split("/")
    if kind == "state_store" and len(parts) >= 3:
        return "/".join(parts[:2]), "".join("/" + p for p in parts[3:])
    if kind == "sink_writer" and len(parts) == 2:
        return parts[0], ""
    return None


def chart_rows(writers: Sequence[dict[str, Any]]) -> list[ChartRow]:
    """One row per writer, except that parallel writers of one group (same operator and store
    name, or the sink's writer tasks) with the same window and status share a row."""
    rows: list[ChartRow] = []
    groups: dict[tuple[Any, ...], int] = {}
    for w in writers:
        key = _group_key(w)
        if key is None:
            rows.append(ChartRow(str(w["writer"]), w["first"], w["last"], str(w["status"])))
            continue
        full = (*key, w["first"], w["last"], w["status"])
        if full in groups:
            i = groups[full]
            rows[i] = ChartRow(rows[i].label, rows[i].first, rows[i].last, rows[i].status, rows[i].count + 1)
            continue
        groups[full] = len(rows)
        rows.append(ChartRow(str(w["writer"]), w["first"], w["last"], str(w["status"])))
    # a group of several gets its wildcard label once its size is known
    labels = {i: f"{k[0]}/*{k[1]}" for k, i in groups.items()}
    return [ChartRow(labels[i], r.first, r.last, r.status, r.count) if r.count > 1 else r
            for i, r in enumerate(rows)]


def axis(rows: Sequence[ChartRow], common: Optional[Sequence[int]], extra: Sequence[Optional[int]] = ()) -> Optional[tuple[int, int]]:
    """The epoch range the chart spans: every writer's window, the common window, and `extra`
    epochs (the committed epoch). None when no writer has an epoch."""
    points = [e for r in rows for e in (r.first, r.last) if e is not None]
    points += [e for e in (common or ()) if e is not None] + [e for e in extra if e is not None]
    return (min(points), max(points)) if points else None


def column(epoch: int, span: tuple[int, int], width: int) -> int:
    lo, hi = span
    if hi <= lo or width <= 1:
        return 0
    return round((epoch - lo) * (width - 1) / (hi - lo))


def bar(first: Optional[int], last: Optional[int], span: tuple[int, int], width: int, char: str) -> str:
    """A `width`-column string with `char` from first's column to last's (blank when empty)."""
    if first is None or last is None or not char:
        return " " * width
    a, b = column(first, span, width), column(max(first, last), span, width)
    return " " * a + char * (b - a + 1) + " " * (width - b - 1)


def axis_lines(span: tuple[int, int], width: int) -> tuple[str, str]:
    """The epoch labels (first, middle, last) and a ruler with ticks under them."""
    lo, hi = span
    ticks = [lo] if hi == lo else [lo, (lo + hi) // 2, hi] if hi - lo >= 2 else [lo, hi]
    labels = [" "] * width
    ruler = ["─"] * width
    for t in ticks:
        c = column(t, span, width)
        ruler[c] = "┼"
        text = str(t)
        start = min(max(0, c - len(text) // 2), max(0, width - len(text)))
        if all(ch == " " for ch in labels[max(0, start - 1): start + len(text) + 1]):
            labels[start: start + len(text)] = list(text)
    ruler[0], ruler[-1] = "├", "┤"
    return "".join(labels), "".join(ruler)


def _window_text(first: Optional[int], last: Optional[int]) -> str:
    return "-" if first is None or last is None else f"{first}..{last}"


def chart_lines(record: dict[str, Any], width: int) -> list[tuple[str, str, str, str]]:
    """(label, bar, window, status-and-count) per line, plain strings: the whole picture
    without styles. The first two lines are the axis; the last is the common window."""
    rows = chart_rows(record["writers"])
    common = record.get("common_window")
    span = axis(rows, common, [record.get("committed")])
    if span is None:
        return []
    label_w = min(28, max([len("common")] + [len(r.label) for r in rows]))
    bar_w = max(10, width - label_w - 2 - 24)
    top, ruler = axis_lines(span, bar_w)
    lines = [("epoch".ljust(label_w), top, "", ""), ("".ljust(label_w), ruler, "", "")]
    for r in rows:
        label = r.label if len(r.label) <= label_w else "…" + r.label[-(label_w - 1):]
        status = r.status + (f" ×{r.count}" if r.count > 1 else "")
        lines.append((label.ljust(label_w), bar(r.first, r.last, span, bar_w, BAR.get(r.status, BAR["ok"])[0]),
                      _window_text(r.first, r.last), status))
    c_first, c_last = (common[0], common[1]) if common else (None, None)
    lines.append(("common".ljust(label_w), bar(c_first, c_last, span, bar_w, COMMON[0]),
                  _window_text(c_first, c_last), "" if common else "empty: no epoch every writer can restart from"))
    return lines


def writers_chart(record: dict[str, Any], width: int) -> Any:
    """The chart as one rich renderable (a Group of Text lines, styled by status)."""
    from rich.console import Group
    from rich.text import Text

    out = []
    lines = chart_lines(record, width)
    rows = chart_rows(record["writers"])
    for i, (label, bar_text, window, status) in enumerate(lines):
        if i < 2:
            out.append(Text(f"{label}  {bar_text}", style="dim"))
            continue
        if i - 2 < len(rows):
            style = BAR.get(rows[i - 2].status, BAR["ok"])[1]
        else:
            style = COMMON[1] if window != "-" else "bold red"
        text = Text(f"{label}  ")
        text.append(bar_text, style=style)
        text.append(f"  {window}  ")
        text.append(status, style=style)
        out.append(text)
    return Group(*out)

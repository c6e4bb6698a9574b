"""Output: rich tables on a terminal (fitted to its width), plain text when piped, markdown, JSON.

JSON never goes through rich (rich wraps long lines and eats `[bracketed]` text); table cells are
`rich.text.Text` so topic names like `topic[prod]` survive.
"""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Sequence

FORMATS = ("table", "wide", "plain", "markdown", "json")


def effective_format(fmt: str) -> str:
    """`table` means a rich table on a terminal, fitted to its width (NO_COLOR: without colours);
    piped output or a dumb terminal gets plain text. `wide` is `table` with each table's wide
    columns (context.WIDE)."""
    if fmt == "wide":
        from streamctl.console import context

        context.WIDE = True
        fmt = "table"
    if fmt == "table" and (not sys.stdout.isatty() or os.environ.get("TERM") == "dumb"):
        return "plain"
    return fmt


PRETTY_LIMIT = 1 << 20  # larger documents (a 100,000-step plan) are printed compact: json's indenting encoder is pure Python


_documents = [0]  # JSON documents printed by the running command (console/errors.py: one per --json run)


def reset_documents() -> None:
    _documents[0] = 0


def documents_emitted() -> int:
    return _documents[0]


def emit_json(doc: Any) -> None:
    """One JSON document: indented by two spaces up to PRETTY_LIMIT characters, larger ones
    compact on one line (formats/jsontext.py: orjson, a 100,000-step plan in a tenth of json's
    time)."""
    from streamctl.formats.jsontext import dumps, dumps_indented

    _documents[0] += 1
    data = dumps(doc)
    if len(data) <= PRETTY_LIMIT:
        sys.stdout.write(dumps_indented(doc) + "\n")
        sys.stdout.flush()
        return
    # a large document's UTF-8 bytes as they are, after what the text layer holds: not decoded,
    # joined and encoded again (a plan of many steps would be held three times over)
    sys.stdout.flush()
    out = getattr(sys.stdout, "buffer", None)
    if out is None or (getattr(sys.stdout, "encoding", "") or "").lower().replace("-", "") != "utf8":
        sys.stdout.write(data.decode("utf-8") + "\n")
    else:
        out.write(data)
        out.write(b"\n")
        out.flush()
    sys.stdout.flush()


def emit_json_line(doc: Any) -> None:
    """One JSON document on one line (a stream of documents, e.g. `--watch --json`)."""
    _documents[0] += 1
    sys.stdout.write(json.dumps(doc, sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def emit_text(text: str) -> None:
    """Text on stdout as is (a bare value a script captures, a generated script, the demo's
    lines): every write to stdout goes through this module."""
    sys.stdout.write(text)
    sys.stdout.flush()


def note(line: str) -> None:
    """One line on stderr: what a command is doing (never data; --json keeps stdout clean)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def emit_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str, title: Optional[str] = None) -> None:
    from streamctl.console import context

    if context.NO_HEADERS:  # --no-headers: the rows alone
        title = None
    if fmt == "table":
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(title=title, title_justify="left", show_lines=False, show_header=not context.NO_HEADERS)
        for h in headers:
            table.add_column(h, overflow="fold")
        for row in rows:
            table.add_row(*[Text(_cell(v)) for v in row])
        console = Console()
        natural = console.measure(table, options=console.options.update(max_width=1 << 20)).maximum
        if context.NO_HEADERS or len(headers) < 3 or natural <= console.width:
            console.print(table)
            return
        # wider than the terminal: one block per row, a column's name beside its value (as
        # `psql \x auto`), so nothing is folded into unreadable slivers
        if title:
            console.print(Text(title, style="bold"))
        for row in rows:
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold", no_wrap=True)
            grid.add_column(overflow="fold")
            for h, v in zip(headers, row, strict=False):
                grid.add_row(Text(h), Text(_cell(v)))
            console.print(grid)
            console.print()
        return
    from tabulate import tabulate

    if title:
        sys.stdout.write(f"{'## ' if fmt == 'markdown' else ''}{title}\n\n" if fmt == "markdown" else f"{title}\n")
    text = tabulate([[_cell(v) for v in row] for row in rows], headers=[] if context.NO_HEADERS else list(headers),
                    tablefmt="github" if fmt == "markdown" else "plain" if context.NO_HEADERS else "simple",
                    disable_numparse=True)
    sys.stdout.write(text + "\n")


def epochs_renderable(headers: Sequence[str], rows: Sequence[Sequence[Any]], lines: Sequence[str],
                      verdict: str, status: str) -> Any:
    """What `emit_table` + `emit_lines` print, as one rich renderable (for rich.live)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False)
    for h in headers:
        table.add_column(h, overflow="fold")
    for row in rows:
        table.add_row(*[Text(_cell(v)) for v in row])
    findings = [Text(line, style="red" if line.startswith("error") else "yellow" if line.startswith("warning") else "")
                for line in lines]
    return Group(table, Text("Findings", style="bold"), *findings, Text(verdict), Text(status, style="dim"))


def emit_chart(record: Any, title: str) -> None:
    """`inspect writers` on a terminal: each writer's window on one epoch axis (console/writers_chart.py)."""
    from rich.console import Console
    from rich.text import Text

    from streamctl.console.writers_chart import writers_chart

    console = Console()
    console.print(Text(title, style="bold"))
    console.print(writers_chart(record, console.width))
    console.print()


def emit_lines(lines: Sequence[str], fmt: str, title: Optional[str] = None) -> None:
    """A list of findings or notes after a table."""
    if not lines and not title:
        return
    if fmt == "table":
        from rich.console import Console
        from rich.text import Text

        console = Console()
        if title:
            console.print(Text(title, style="bold"))
        for line in lines:
            style = "red" if line.startswith("error") else "yellow" if line.startswith("warning") else ""
            console.print(Text(line, style=style))
        return
    if title:
        sys.stdout.write(f"\n{'### ' if fmt == 'markdown' else ''}{title}\n")
    for line in lines:
        sys.stdout.write(f"{'- ' if fmt == 'markdown' else ''}{line}\n")


@contextmanager
def progress(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner with a status line on stderr, only when stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        yield lambda _msg: None
        return
    from rich.console import Console

    console = Console(stderr=True)
    with console.status("inspecting...") as status:
        yield lambda msg: status.update(msg)

"""The project's own documentation under docs/ stays true to the code and reachable from it:

- every relative link and #anchor in docs/ and README.md resolves;
- every finding code of inspectors/findings.py is in the findings tables of docs/model.md and of
  README.md with its default severity (the code is the source of truth);
- every `docs/<page>.md#<anchor>` cited in a Python file resolves, and no Python file cites the
  reference documents that live outside the repository (DESIGN.md, FORMATS.md, STYLE.md).
"""
from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

import pytest

from helpers.paths import REPO
from streamctl.inspectors.findings import CODES

DOCS = REPO / "docs"
SKIP_DIRS = {"build", "dist", "node_modules", "__pycache__"}
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CITATION = re.compile(r"docs/([\w./-]+\.md)(?:#([\w-]+))?")
_OUTSIDE = re.compile(r"\b(DESIGN|FORMATS|STYLE)\.md\b")  # reference documents outside the repository


def _slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def _anchors(path: Path) -> frozenset[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"#{1,6} (.+)", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return frozenset(found)


def _markdown_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md")) + [REPO / "README.md"]


def _python_files() -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]  # .venv*, .git
        out += [Path(folder, f) for f in files if f.endswith(".py")]
    return sorted(out)


def test_docs_exist_with_an_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if p.name != "README.md" or p.parent != DOCS)
    assert pages, "docs/ holds no pages"
    assert [p for p in pages if p not in index] == [], "pages missing from docs/README.md"
    assert "(docs/README.md)" in (REPO / "README.md").read_text(encoding="utf-8"), "README.md does not link docs/"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_and_anchors_resolve(path: Path) -> None:
    broken = []
    for target in _LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # http:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == [], broken


@pytest.mark.parametrize("doc", ["docs/model.md", "docs/findings.md"])
def test_every_finding_code_is_documented_with_its_severity(doc: str) -> None:
    text = (REPO / doc).read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| ([a-z]+)", text, re.M))
    assert set(rows) == set(CODES), {"undocumented": sorted(set(CODES) - set(rows)), "unknown": sorted(set(rows) - set(CODES))}
    assert {c: rows[c] for c in CODES if rows[c] != CODES[c]} == {}, f"{doc} shows another default severity"


def test_code_cites_docs_that_exist() -> None:
    broken, outside = [], []
    for path in _python_files():
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(REPO).as_posix()
        if rel != "tests/test_docs.py" and _OUTSIDE.search(text):
            outside.append(rel)
        for page, anchor in _CITATION.findall(text):
            dest = DOCS / page
            if not dest.is_file():
                broken.append(f"{rel}: docs/{page}")
            elif anchor and anchor not in _anchors(dest):
                broken.append(f"{rel}: docs/{page}#{anchor}")
    assert broken == [], broken
    assert outside == [], f"cite docs/ instead of documents outside the repository: {outside}"


def test_help_lists_every_command_once_in_runbook_groups(cli) -> None:
    """`streamctl --help` groups the commands (inspect / repair / retire / Kafka / set-up), each
    group in the order of a runbook, and lists every registered command exactly once."""
    from streamctl.cli.app import app
    from streamctl.console.errors import COMMAND_GROUPS

    r = cli("--help")
    assert r.code == 0, r
    headings = [line[:-1] for line in r.stdout.splitlines() if line.endswith(" commands:")]
    assert headings == [f"{title} commands" for title, _ in COMMAND_GROUPS], headings
    import typer.main

    registered = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    listed = [line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ") and line.split()
              and line.split()[0] in registered]
    assert sorted(listed) == sorted(registered), (listed, registered)
    order = [n for _title, names in COMMAND_GROUPS for n in names]
    assert listed == order, listed


def _commands(cmd, path=()):
    """(path, click command) of every command below `cmd`, groups included."""
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, path + (name,))


@pytest.mark.parametrize("columns", [80, 200])
def test_every_help_renders_its_examples_line_by_line(columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's example block keeps its lines at any terminal width: a comment and a
    command never share a line (click re-wraps a paragraph unless it starts with `\\b`)."""
    import typer.main
    from typer.testing import CliRunner

    from streamctl.cli.app import app

    monkeypatch.setenv("COLUMNS", str(columns))
    root = typer.main.get_command(app)
    checked = 0
    for path, cmd in _commands(root):
        doc = cmd.help or ""
        if "Examples:" not in doc:
            continue
        want = [line.strip() for line in doc.split("Examples:", 1)[1].splitlines()
                if line.strip() and line.strip() != "\b"]
        r = CliRunner().invoke(app, [*path, "--help"], terminal_width=columns)
        assert r.exit_code == 0, (path, r.output)
        got = {line.strip() for line in r.output.splitlines()}
        missing = [w for w in want if w not in got]
        assert not missing, (path, columns, missing)
        checked += 1
    assert checked >= 10, checked


def test_the_generated_command_reference_matches_the_app() -> None:
    """docs/reference.md is every command's --help, generated (`./dev reference`): no drift."""
    from streamctl.cli.reference import render

    page = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert page == render(), "docs/reference.md differs from the app: run ./dev reference"


def test_the_readme_exit_code_table_is_the_code_s() -> None:
    """The README's exit-code table lists exactly the codes of console/exit_codes.py."""
    from streamctl.console.exit_codes import ExitCode

    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = [int(c) for c in re.findall(r"^\| (\d+) \|", section, re.M)]
    assert rows == sorted(int(c) for c in ExitCode), rows


def test_the_readme_tour_names_every_command() -> None:
    """The README is the landing page: its tour has one example for every command."""
    import typer.main

    from streamctl.cli.app import app

    root = typer.main.get_command(app)
    names = []
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", None)
        names += [f"streamctl {name} {sub}" for sub in subs] if subs else [f"streamctl {name}"]
    tour = (REPO / "README.md").read_text(encoding="utf-8").split("## A tour", 1)[1].split("\n## ", 1)[0]
    assert [n for n in names if f"| `{n}` |" not in tour] == []

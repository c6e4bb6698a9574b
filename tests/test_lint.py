"""Lint in ./dev test: ruff's pyflakes, bugbear, import-order and pyupgrade rules
([tool.ruff] in pyproject.toml) over every room of the package, bench/ and tests/; a
finding fails the suite with ruff's own report. mypy over the typed rooms."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from helpers.paths import REPO

ROOMS = ["cli", "commands", "console", "formats", "inspectors", "operations", "pipeline", "fixtures", "completions", "bench"]


def _ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "ruff"]


def test_ruff_passes_on_every_room() -> None:
    r = subprocess.run([*_ruff(), "check", "--no-cache", *ROOMS, "tests"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


TYPED_ROOMS = ["formats", "inspectors", "operations", "console", "commands", "cli", "pipeline"]  # the rooms mypy checks


def test_mypy_passes_on_the_core_rooms(tmp_path: Path) -> None:
    """mypy over the core rooms under their installed names (`streamctl.inspectors`, ...): the
    rooms sit at the repository root and install as one namespace, so a folder of links gives
    mypy the package as it is installed. Third-party packages without types are not followed."""
    pkg = tmp_path / "streamctl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for room in ROOMS[:-1]:
        (pkg / room).symlink_to(REPO / room)
    args = [sys.executable, "-m", "mypy", "--explicit-package-bases", "--ignore-missing-imports",
            "--follow-imports=silent", "--cache-dir", str(REPO / ".cache" / "mypy"), "--no-error-summary"]
    for room in TYPED_ROOMS:
        args += ["-p", f"streamctl.{room}"]
    r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr

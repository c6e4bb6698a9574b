"""Lint in ./dev test (issue 30): ruff's pyflakes and bugbear rules ([tool.ruff] in pyproject.toml)
over every room of the package and bench/ (tests/ not yet); a finding fails the suite with ruff's own report."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ["cli", "commands", "inspectors", "operations", "pipeline", "fixtures", "completions", "bench"]


def _ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "ruff"]


def test_ruff_pyflakes_and_bugbear_pass() -> None:
    r = subprocess.run([*_ruff(), "check", "--no-cache", *ROOMS], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr

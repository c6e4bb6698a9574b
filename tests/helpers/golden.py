"""Golden files: an output compared with the expected file under tests/golden/.

The expected files change only when someone asks for it (`STREAMCTL_UPDATE_GOLDEN=1`), reviews the
diff and commits it: a changed file is a changed JSON contract. That mode writes the expected file
from the very output under test, so the comparison can no longer fail; it is refused where the
`CI` environment variable is set, so a CI run always compares.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

UPDATE_ENV = "STREAMCTL_UPDATE_GOLDEN"
UPDATE_COMMAND = f"{UPDATE_ENV}=1 ./dev test -k golden"


def updating() -> bool:
    """Whether this run rewrites the golden files: only with STREAMCTL_UPDATE_GOLDEN=1, and never
    where CI is set (the test fails, saying so)."""
    if os.environ.get(UPDATE_ENV) != "1":
        return False
    if "CI" in os.environ:
        pytest.fail(f"{UPDATE_ENV}=1 writes the golden files from the output under test, so nothing is compared: "
                    "refused where CI is set; unset it (or CI, on a workstation) and compare", pytrace=False)
    return True


def check_golden_text(path: Path, got: str, what: str) -> None:
    """`got` must equal the golden file `path`; with STREAMCTL_UPDATE_GOLDEN=1 (not in CI) it
    becomes the golden file first."""
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"{path} missing: review the output, then create it with {UPDATE_COMMAND}"
    assert got == path.read_text(), f"JSON contract of {what} changed: review the diff, then {UPDATE_COMMAND}"

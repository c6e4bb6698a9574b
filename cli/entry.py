"""The `streamctl` console script (pyproject's `[project.scripts]`): the root app, cli/app.py."""
from __future__ import annotations

from streamctl.cli.app import main

__all__ = ["main"]

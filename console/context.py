"""Process-wide options set by the root callback."""
from __future__ import annotations

SHOW_TRACEBACK = False
CONFIG_PATH: str | None = None
VERBOSE = False  # --verbose: plans list every step on the terminal
NO_HEADERS = False  # --no-headers: tables print rows only (for scripts: awk, cut)
WIDE = False  # -o wide: tables add their wide columns (as kubectl -o wide)

"""The `streamctl` console script: the root app (cli/app.py), with one head start.

For `streamctl inspect epochs` of one local checkpoint, a forked child starts listing and judging
the checkpoint's state folders before the CLI's own imports (typer and the commands: about
55 ms of a 0.2 s inspection, BENCHMARKS.md), while the parent imports; the inspection joins it
when the parsed command asks for the same work (inspectors/split.py `start_early`,
docs/reading.md#the-split-inspection). This module reads argv only to guess that case: it never
decides anything the CLI decides. A wrong guess costs a discarded child, never an answer.
Keep it free of imports beyond the standard library's smallest.
"""
from __future__ import annotations

import sys
from typing import Any, Optional

# The options that take a value, of the root app and of `inspect epochs` (tests/test_entry.py
# checks this against the commands' parameters): their values are not the checkpoint argument.
VALUE_OPTIONS = frozenset({
    "--config",
    "--sink", "--sink-kind", "--app-id", "--bootstrap", "--kafka-config", "--kafka-timeout", "--quiet-period",
    "--format", "-o", "--engine", "--master", "--workers", "--spark-tasks", "--output-jsonl", "--output-parquet",
    "--interval", "--watch-count", "--metrics-file", "--keep-epochs", "--target-spark",
})
# The flags; any other option (--help, --version, a typo) starts nothing.
FLAGS = frozenset({"--traceback", "--verbose", "-v", "--no-headers", "--json", "--watch", "--reclaimable", "--deep"})
GLOB_CHARS = frozenset("*?[")


def early_checkpoint(args: list[str]) -> Optional[str]:
    """The one local checkpoint `streamctl inspect epochs ...` (as `args`) names, as written;
    None for anything else: another command, several checkpoints or a glob, a URI, an option
    this module does not know, or --engine other than local."""
    words: list[str] = []
    engine = "local"
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            words += args[i + 1:]
            break
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.partition("=")
            if name in VALUE_OPTIONS:
                if not eq:
                    i += 1
                    if i >= len(args):
                        return None
                    value = args[i]
                engine = value if name == "--engine" else engine
            elif name not in FLAGS or eq:
                return None
        else:
            words.append(arg)
        i += 1
    if words[:2] != ["inspect", "epochs"] or len(words) != 3 or engine != "local":
        return None
    location = words[2]
    if GLOB_CHARS & set(location) or ("://" in location and not location.startswith("file://")):
        return None
    return location


# gc.set_threshold for the CLI process (and the early child): a 100,000-file plan allocates a dict
# or two per file and step; with the default thresholds (700, 10, 10) the cyclic collector runs
# every 700 allocations and walks the growing heap again and again (~40% of trim's Python time,
# BENCHMARKS.md). Cycles are still collected, every 100,000 allocations.
GC_THRESHOLDS = (100_000, 50, 100)


def main() -> None:
    import gc

    gc.set_threshold(*GC_THRESHOLDS)
    location = early_checkpoint(sys.argv[1:])
    if location is None:
        from streamctl.cli.app import main as app_main

        app_main()
        return
    # the inspection's modules first (the parent needs them too): the child inherits them
    import atexit

    from streamctl.inspectors.chains import early_split
    from streamctl.inspectors.split import start_early

    start_early(lambda: early_split(location))
    handlers = _exit_handlers(atexit)
    from streamctl.cli.app import main as app_main

    try:
        app_main()
    except SystemExit as done:
        _leave(done, handlers, atexit)
        raise


def _exit_handlers(atexit: Any) -> Optional[int]:
    counter = getattr(atexit, "_ncallbacks", None)  # CPython's
    return counter() if callable(counter) else None


def _leave(done: SystemExit, handlers: Optional[int], atexit: Any) -> None:
    """End an inspection's process at once when nothing is left to do at exit: the output
    flushed, no exit handler registered since the start (ours: the early child, reaped by now),
    no other thread. The interpreter's own exit would free every object of the inspection one by
    one and tear its modules down: about 9 ms of a 0.18 s inspection of 132,000 files (issue 23)."""
    import os
    import threading

    code = done.code
    if not isinstance(code, int) or handlers is None or _exit_handlers(atexit) != handlers or threading.active_count() != 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: the interpreter's exit reports it as usual
        return
    from streamctl.inspectors.split import discard_early

    discard_early()
    os._exit(code)

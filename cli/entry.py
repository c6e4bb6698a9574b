"""The `streamctl` console script: the root app (cli/app.py), with one head start.

For `streamctl inspect epochs` of one local checkpoint, and the plan previews of `align` and `trim`
(not --execute), a forked child starts listing and judging the checkpoint's state folders before
the CLI's own imports (typer and the commands: about 55 ms of a 0.2 s inspection, more for a
plan, BENCHMARKS.md), while the parent imports; the inspection joins it when the parsed command
asks for the same work (inspectors/split.py `start_early`, docs/reading.md#the-split-inspection). This
module reads argv only to guess those cases: it never decides anything the CLI decides. A wrong
guess costs a discarded child, never an answer. Keep it free of imports beyond the standard
library's smallest.
"""
from __future__ import annotations

import sys
from typing import Any, Optional

# The root app's options (before the command), then each command's: those that take a value (their
# values are not the checkpoint argument) and the flags; any other option (--help, --version, a
# typo) starts nothing. tests/test_entry.py checks these against the commands' parameters.
ROOT_VALUE_OPTIONS = frozenset({"--config"})
ROOT_FLAGS = frozenset({"--traceback", "--verbose", "-v", "--no-headers"})
_QUERY = ("--sink", "--sink-kind", "--app-id", "--quiet-period")
COMMANDS: dict[tuple[str, ...], tuple[frozenset[str], frozenset[str]]] = {
    ("inspect", "epochs"): (frozenset({
        *_QUERY, "--bootstrap", "--kafka-config", "--kafka-timeout", "--format", "-o", "--engine", "--master",
        "--workers", "--spark-tasks", "--output-jsonl", "--output-parquet", "--interval", "--watch-count",
        "--metrics-file", "--keep-epochs", "--target-spark",
    }), frozenset({"--json", "--watch", "--reclaimable", "--deep"})),
    # the plan previews of the mutations, whose plan inspects the checkpoint as `inspect epochs`
    # does (read_state's key is the same); never with --execute: an executed plan is made from
    # listings taken under the lock (operations/runner.py discards any child from before it)
    ("align",): (frozenset({
        *_QUERY, "--to", "--backup-dir", "--sink-compact-interval", "--source-archive", "--query-id", "--resume",
        "--undo",
    }), frozenset({"--execute", "--allow-duplicates", "--allow-loss", "--discard-in-flight", "--async-progress",
                   "--break-lock", "--json"})),
    ("trim",): (frozenset({*_QUERY, "--keep-epochs", "--keep-rollback-to", "--backup-dir", "--resume", "--undo"}),
                frozenset({"--execute", "--purge", "--async-progress", "--break-lock", "--json"})),
}
EXECUTE = "--execute"  # a mutation's: no early child (above)
INSPECT = ("inspect", "epochs")  # the command whose process `_leave` ends at once (the previews end as usual)
GLOB_CHARS = frozenset("*?[")
OWN_PROCESS = False  # main() runs: the process is streamctl's own (an executed mutation may lower its priority)


def early_checkpoint(args: list[str]) -> Optional[tuple[tuple[str, ...], str]]:
    """(the command, the one local checkpoint it names, as written) of `args` when they are one of
    COMMANDS with one checkpoint argument; None for anything else: another command, several
    checkpoints or a glob, a URI, an option this module does not know, --engine other than local,
    or --execute."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "-":  # the root's options
        name, eq, _ = args[i].partition("=")
        if name in ROOT_VALUE_OPTIONS:
            i += 1 if eq else 2
        elif name in ROOT_FLAGS and not eq:
            i += 1
        else:
            return None
    command = next((c for c in COMMANDS if tuple(args[i:i + len(c)]) == c), None)
    if command is None:
        return None
    values, flags = COMMANDS[command]
    words: list[str] = []
    engine = "local"
    i += len(command)
    while i < len(args):
        arg = args[i]
        if arg == "--":
            words += args[i + 1:]
            break
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.partition("=")
            if name in values:
                if not eq:
                    i += 1
                    if i >= len(args):
                        return None
                    value = args[i]
                engine = value if name == "--engine" else engine
            elif name not in flags or eq or name == EXECUTE:
                return None
        else:
            words.append(arg)
        i += 1
    if len(words) != 1 or engine != "local":
        return None
    location = words[0]
    if GLOB_CHARS & set(location) or ("://" in location and not location.startswith("file://")):
        return None
    return command, location


# gc.set_threshold for the CLI process (and the early child): a 100,000-file plan allocates a dict
# or two per file and step; with the default thresholds (700, 10, 10) the cyclic collector runs
# every 700 allocations and walks the growing heap again and again (~40% of trim's Python time,
# BENCHMARKS.md). Cycles are still collected, every 100,000 allocations.
GC_THRESHOLDS = (100_000, 50, 100)


def main() -> None:
    import gc

    global OWN_PROCESS
    OWN_PROCESS = True  # not when the app runs inside another program (a test's CliRunner)
    gc.set_threshold(*GC_THRESHOLDS)
    import atexit

    guess = early_checkpoint(sys.argv[1:])
    handlers = _handlers(atexit)  # any command that registers no other exit handler ends at once
    if guess is not None:
        # the inspection's modules first (the parent needs them too): the child inherits them
        from streamctl.inspectors.chains import early_split
        from streamctl.inspectors.split import start_early

        command, location = guess
        start_early(lambda: early_split(location))
        handlers = _handlers(atexit) if command == INSPECT else None  # a preview ends as usual
    from streamctl.cli.app import main as app_main

    try:
        app_main()
    except SystemExit as done:
        _leave(done, handlers, atexit)
        raise


def _exit_handlers(atexit: Any) -> Optional[int]:
    counter = getattr(atexit, "_ncallbacks", None)  # CPython's
    return counter() if callable(counter) else None


def _handlers(atexit: Any) -> Optional[tuple[int, int]]:
    """The exit handlers registered so far, and how many of them `_leave` runs itself: the split
    inspection's (`start_early`'s), and `logging.shutdown` (registered by the import of
    `logging`, which `concurrent.futures` imports); None where they cannot be counted."""
    count = _exit_handlers(atexit)
    split = sys.modules.get("streamctl.inspectors.split")
    return None if count is None else (count, getattr(split, "_registered", 0) + ("logging" in sys.modules))


def _leave(done: SystemExit, handlers: Optional[tuple[int, int]], atexit: Any) -> None:
    """End the process at once when nothing is left to do at exit: the output flushed, no exit
    handler registered since the start but those it runs itself (`_handlers`), no other thread
    (a mutation's writes are durable and its lock released by then; its co-processes were
    waited for). The interpreter's own exit would free every object one by one and tear the
    modules down: about 9 ms of a 0.18 s inspection of 132,000 files, 25 ms of a 66,000-step
    roll back (issue 23)."""
    import os
    import threading

    code = done.code
    now = _handlers(atexit)
    if (not isinstance(code, int) or handlers is None or now is None or now[0] - handlers[0] != now[1] - handlers[1]
            or threading.active_count() != 1):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: the interpreter's exit reports it as usual
        return
    split = sys.modules.get("streamctl.inspectors.split")
    if split is not None:
        split.discard_early()  # the early child's exit handler
    if "logging" in sys.modules:  # its own exit handler's work: flush and close any handlers
        sys.modules["logging"].shutdown()
    os._exit(code)

"""Exit codes: the one place their numbers live (documented in README and --help), and the one
function that turns a verdict into the exit of the command that reached it."""
from __future__ import annotations

from enum import IntEnum

import typer


class ExitCode(IntEnum):
    OK = 0  # success; for inspections: aligned or recoverable
    MISALIGNED = 1  # an inspection found an error-level finding
    USAGE = 2  # bad flags or values, invalid config
    UNREADABLE = 3  # checkpoint/sink/broker missing, unreachable or unparsable
    REFUSED = 4  # a mutation refused; nothing changed (reserved for mutating commands)
    NOT_VERIFIED = 5  # a mutation ran but its post-check failed (reserved)
    INTERNAL = 70  # a bug: rerun with --traceback
    INTERRUPTED = 130  # Ctrl-C
    CLOSED_PIPE = 141  # stdout's reader went away (`| head -1`): stopped quietly (128 + SIGPIPE)


EXIT_CODES_HELP = (
    "Exit codes: 0 aligned or recoverable; 1 misaligned (an error finding); "
    "2 usage error; 3 unreadable input or unreachable storage; "
    "4 refused (mutating commands); 5 not verified (mutating commands); "
    "70 internal error; 130 interrupted; 141 output pipe closed."
)


# A verdict (inspectors/findings.py VERDICTS) and the exit code it implies.
VERDICT_CODES = {
    "aligned": ExitCode.OK,
    "recoverable": ExitCode.OK,  # a restart replays the planned batch exactly as Spark does
    "misaligned": ExitCode.MISALIGNED,
    "unreadable": ExitCode.UNREADABLE,
}


def exit_for_verdict(verdict: str) -> typer.Exit:
    """The exit of a command whose run ended in `verdict`: 0 aligned or recoverable, 1
    misaligned, 3 unreadable. Every command that judges something (the inspections, diagnose,
    preflight, the demo's delivery check) raises it; failures and refusals reach their codes
    through console/errors.py's table of exceptions instead. A verdict not in VERDICT_CODES is a
    bug (KeyError: exit 70), never a silent 0."""
    return typer.Exit(int(VERDICT_CODES[verdict]))


# How severe a checkpoint's exit code is within a fleet run (`trim '/data/chk/*'`): the worst wins.
FLEET_SEVERITY = (ExitCode.INTERNAL, ExitCode.NOT_VERIFIED, ExitCode.UNREADABLE, ExitCode.USAGE, ExitCode.REFUSED,
                  ExitCode.OK)


def fleet_exit_code(codes: list[int]) -> int:
    """The exit code of a fleet run, from its checkpoints' own: 70, then 5, 3, 2, 4 when any
    checkpoint ended so; 0 when every one did what was asked (or there was nothing to do). A code
    outside the table is a bug (70), never a silent 0."""
    for code in FLEET_SEVERITY:
        if int(code) in codes:
            return int(code)
    return int(ExitCode.INTERNAL) if codes else int(ExitCode.OK)


def exit_for_fleet(codes: list[int]) -> typer.Exit:
    return typer.Exit(fleet_exit_code(codes))

"""Exit codes: the one place their numbers live (documented in README and --help)."""
from __future__ import annotations

from enum import IntEnum


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

"""One place that turns exceptions into one-line messages and exit codes."""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

import typer

from streamctl.cli.exit_codes import ExitCode
from streamctl.inspectors.errors import StorageError, StreamctlError, UsageError

F = TypeVar("F", bound=Callable[..., Any])


def _table() -> list[tuple[type[BaseException], ExitCode]]:
    """THE table from exception types to exit codes (README "Exit codes"); the first match wins,
    so subclasses come before their bases. Every command reaches its exit code through it."""
    from streamctl.operations.plan import NotVerified, Refused

    return [
        (UsageError, ExitCode.USAGE),
        (Refused, ExitCode.REFUSED),  # also the lock held, an executor Conflict, a teardown refusal
        (NotVerified, ExitCode.NOT_VERIFIED),
        (StorageError, ExitCode.UNREADABLE),
        (StreamctlError, ExitCode.UNREADABLE),
        (KeyboardInterrupt, ExitCode.INTERRUPTED),
    ]


def exit_code_for(exc: BaseException) -> ExitCode:
    for kind, code in _table():
        if isinstance(exc, kind):
            return code
    return ExitCode.INTERNAL


def fail(message: str, code: ExitCode) -> "typer.Exit":
    sys.stderr.write(f"streamctl: {message}\n")
    return typer.Exit(int(code))


def handle_errors(func: F) -> F:
    """Wrap a command: user errors become `streamctl: <message>` on stderr and an exit code.

    Applied per command (not only in main()) so typer's CliRunner sees the same codes.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt as exc:  # a runner's Interrupted says how to resume
            raise fail(str(exc) or "interrupted", ExitCode.INTERRUPTED) from None
        except StreamctlError as exc:
            raise fail(str(exc), exit_code_for(exc)) from None
        except Exception as exc:  # a bug: say so, keep secrets and locals out of the output
            from streamctl.cli import context

            if context.SHOW_TRACEBACK:
                raise
            raise fail(
                f"internal error: {type(exc).__name__}: {exc} (rerun with --traceback)",
                ExitCode.INTERNAL,
            ) from None

    return wrapper  # type: ignore[return-value]

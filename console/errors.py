"""One place that turns exceptions into one-line messages and exit codes.

Every failure of a command, a usage error typer finds in the flags included, ends here: one line
`streamctl: <message>` on stderr (secrets given in --kafka-config / --bootstrap replaced by
`***`), the exit code of `exit_code_for`, and under --json exactly one JSON document on stdout
(the command's own, or an `Error` document with the code and the message).
"""
from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Optional, Sequence, TypeVar

import typer

from streamctl.console.exit_codes import ExitCode
from streamctl.console.lazy_group import LazyGroup
from streamctl.formats.errors import StorageError, StreamctlError, UsageError
from streamctl.inspectors.documents import document

F = TypeVar("F", bound=Callable[..., Any])

try:  # typer vendors click from 0.28 on
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older typer uses click itself
    from click.exceptions import ClickException  # type: ignore[no-redef,assignment]


def _table() -> list[tuple[type[BaseException], ExitCode]]:
    """THE table from exception types to exit codes (README "Exit codes"); the first match wins,
    so subclasses come before their bases. Every command reaches its exit code through it."""
    from streamctl.inspectors.rewind_time import OutsideWindow
    from streamctl.operations.plan import NotVerified, Refused

    return [
        (UsageError, ExitCode.USAGE),
        (Refused, ExitCode.REFUSED),  # also the lock held, an executor Conflict, a teardown refusal
        (OutsideWindow, ExitCode.REFUSED),  # a time or savepoint the checkpoint no longer keeps
        (NotVerified, ExitCode.NOT_VERIFIED),
        (StorageError, ExitCode.UNREADABLE),
        (StreamctlError, ExitCode.UNREADABLE),
        (BrokenPipeError, ExitCode.CLOSED_PIPE),  # before OSError: the reader went away (`| head -1`)
        (OSError, ExitCode.UNREADABLE),  # permission denied, a folder where a file should be, ...
        (KeyboardInterrupt, ExitCode.INTERRUPTED),
    ]


def exit_code_for(exc: BaseException) -> ExitCode:
    for kind, code in _table():
        if isinstance(exc, kind):
            return code
    return ExitCode.INTERNAL


# --- what a failing run prints ----------------------------------------------------------------

_state: dict[str, Any] = {"message": None, "secrets": ()}


def secrets_in(kafka_config: Sequence[str] = (), bootstrap: Optional[str] = None,
               argv: Sequence[str] = ()) -> tuple[str, ...]:
    """The values a message must never show: secret --kafka-config values (also when given
    without `=`, as `KEY VALUE` or `KEY:VALUE`) and the user:password part of bootstrap servers."""
    if not kafka_config and not bootstrap and not any(a.startswith(("--kafka-config", "--bootstrap")) for a in argv):
        return ()
    from streamctl.inspectors.kafka import is_secret_key

    items = list(kafka_config)
    servers = [bootstrap] if bootstrap else []
    for i, arg in enumerate(argv):
        for flag, into in (("--kafka-config", items), ("--bootstrap", servers)):
            if arg == flag and i + 1 < len(argv):
                into.append(argv[i + 1])
                if flag == "--kafka-config" and "=" not in argv[i + 1] and is_secret_key(argv[i + 1]) \
                        and i + 2 < len(argv):
                    items.append(f"{argv[i + 1]}={argv[i + 2]}")  # `KEY VALUE`: VALUE became an argument
            elif arg.startswith(flag + "="):
                into.append(arg[len(flag) + 1:])
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if sep and is_secret_key(key) and value:
            out.append(value)
        elif not sep and is_secret_key(item):
            out.append(item)  # `KEY:VALUE` or a jaas line: the whole item
    for server in ",".join(servers).split(","):
        if "@" in server:
            out.append(server.rsplit("@", 1)[0].split("://")[-1])
    return tuple(sorted({s for s in out if s}, key=len, reverse=True))


def redact(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret replaced by `***`; a short one (under 8 characters) only where it
    stands alone, so that `ssl.key=1` does not turn every digit 1 of a path into `***`."""
    import re

    for secret in secrets:
        if len(secret) >= 8:
            text = text.replace(secret, "***")
        else:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", "***", text)
    return text


def fail(message: str, code: ExitCode) -> typer.Exit:
    message = redact(message, _state["secrets"])
    _state["message"] = message
    sys.stderr.write(f"streamctl: {message}\n")
    return typer.Exit(int(code))


def _wants_json(kwargs: dict[str, Any]) -> bool:
    """--json, or (for a command with --format) the format setting as the command resolves it:
    the flag, STREAMCTL_FORMAT or the config file's `format` (console/config.py format_setting)."""
    if kwargs.get("as_json"):
        return True
    if "fmt" not in kwargs:
        return False
    from streamctl.console import context
    from streamctl.console.config import ENV_FORMAT, format_setting, load_config

    try:
        return format_setting(kwargs["fmt"], load_config(context.CONFIG_PATH)) == "json"
    except StreamctlError:  # the setting itself is what failed: judge by the words given
        return (kwargs["fmt"] or os.environ.get(ENV_FORMAT)) == "json"


def _argv_wants_json(argv: Sequence[str]) -> bool:
    if "--json" in argv or "--format=json" in argv or "-ojson" in argv:
        return True
    return any(a in ("-o", "--format") and b == "json" for a, b in zip(argv, argv[1:], strict=False))


def error_document(code: int, message: str) -> dict[str, Any]:
    """The JSON document of a failed `--json` run that printed none of its own."""
    try:
        name = ExitCode(code).name.lower()
    except ValueError:
        name = "error"
    return document("Error", {"code": int(code), "error": name, "message": message})


def _emit_error_document(code: int) -> None:
    from streamctl.console import render

    if render.documents_emitted() == 0:
        render.emit_json(error_document(code, _state["message"] or ExitCode(code).name.lower()))


def _closed_pipe() -> typer.Exit:
    """The reader of stdout went away (`| head -1`): stop quietly. Later writes, and the flush at
    exit, go to /dev/null instead of raising again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (typer's CliRunner)
        pass
    return typer.Exit(int(ExitCode.CLOSED_PIPE))


def _failure(exc: BaseException) -> typer.Exit:
    code = exit_code_for(exc)
    if code == ExitCode.CLOSED_PIPE:
        return _closed_pipe()
    if code == ExitCode.INTERRUPTED:  # a runner's Interrupted says how to resume
        return fail(str(exc) or "interrupted", code)
    if isinstance(exc, StreamctlError):
        return fail(str(exc), code)
    if isinstance(exc, OSError):
        where = os.fsdecode(exc.filename) if exc.filename is not None else "input"
        return fail(f"{where}: {exc.strerror or type(exc).__name__}", code)
    from streamctl.console import context

    if context.SHOW_TRACEBACK:
        raise exc
    # a bug: say so, keep secrets and locals out of the output
    return fail(f"internal error: {type(exc).__name__}: {exc} (rerun with --traceback)", code)


def handle_errors(func: F) -> F:
    """Wrap a command's callback: user errors become `streamctl: <message>` on stderr and an exit
    code; under --json a failing run without a document of its own prints an `Error` document.

    The root group installs it on every command it dispatches to (`StreamctlGroup.invoke`): the
    one error boundary, so typer's CliRunner and the installed program see the same codes, and no
    command module handles errors itself.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from streamctl.console import render

        render.reset_documents()
        _state["message"] = None
        _state["secrets"] = secrets_in(kwargs.get("kafka_config") or (), kwargs.get("bootstrap"))
        try:
            try:
                return func(*args, **kwargs)
            finally:
                sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        except typer.Exit as exc:
            if exc.exit_code not in (ExitCode.OK, ExitCode.MISALIGNED) and _wants_json(kwargs):
                _emit_error_document(exc.exit_code)
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure goes through the table
            if isinstance(exc, (SystemExit, GeneratorExit)):
                raise
            failure = _failure(exc)
            if failure.exit_code != ExitCode.CLOSED_PIPE and _wants_json(kwargs):
                _emit_error_document(failure.exit_code)
            raise failure from None

    return wrapper  # type: ignore[return-value]


# --- usage errors typer finds before a command runs --------------------------------------------

_ARGV = "streamctl.argv"


def _usage_failure(exc: ClickException, argv: Sequence[str]) -> BaseException:
    if type(exc).__name__ == "NoArgsIsHelpError":  # `streamctl inspect`: the help, as typer prints it
        return exc
    _state["secrets"] = secrets_in(argv=argv)
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    code = ExitCode.USAGE
    failure = fail(exc.format_message() + hint, code)
    if _argv_wants_json(argv):
        from streamctl.console import render

        render.emit_json(error_document(int(code), _state["message"]))
    return failure


# `streamctl --help` lists the commands in groups, each in the order of a runbook (as kubectl and
# the Flink CLI group theirs); a command in no group is listed last, under "Other".
COMMAND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Inspect (read-only)", ("diagnose", "inspect", "preflight")),
    ("Repair", ("align", "trim", "backups", "savepoint")),
    ("Move", ("copy",)),
    ("Retire", ("stop", "drop-sink")),
    ("Kafka", ("kafka",)),
    ("Set-up", ("demo", "completion")),
)


def _install_boundary(cmd: Any) -> None:
    """`cmd` and every command below it (subgroups included, and those a lazy group loads
    later) run through `handle_errors`, once."""
    subs: Optional[dict[str, Any]]
    if isinstance(cmd, LazyGroup):  # its loaded commands only: reading `commands` would load them all
        cmd.on_load = _install_boundary
        subs = cmd._commands
    else:
        subs = getattr(cmd, "commands", None)
    if subs is not None:  # a group: its commands, not its own callback
        for sub in subs.values():
            _install_boundary(sub)
    elif cmd.callback is not None and not getattr(cmd.callback, "_streamctl_boundary", False):
        cmd.callback = handle_errors(cmd.callback)
        cmd.callback._streamctl_boundary = True


class StreamctlGroup(LazyGroup):
    """The root command group: flag errors typer's parser finds (an unknown option, a value
    out of range, a choice not offered) are one line on stderr, exit 2, never echo a secret,
    and print an `Error` document under --json. Its help lists the commands in COMMAND_GROUPS.
    Every command it loads runs through the error boundary (`handle_errors`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for cmd in self._commands.values():  # registered on the app itself; the lazy ones as they load
            _install_boundary(cmd)
        self.on_load = _install_boundary

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        commands = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                commands[name] = cmd
        if not commands:
            return
        grouped = {n for _title, names in COMMAND_GROUPS for n in names}
        groups = COMMAND_GROUPS + (("Other", tuple(n for n in commands if n not in grouped)),)
        limit = formatter.width - 6 - max(len(n) for n in commands)
        for title, names in groups:
            rows = [(n, commands[n].get_short_help_str(limit)) for n in names if n in commands]
            if rows:
                with formatter.section(f"{title} commands"):
                    formatter.write_dl(rows)

    def make_context(self, info_name: Optional[str], args: list[str], parent: Any = None, **extra: Any) -> Any:
        argv = list(args)
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
        except ClickException as exc:
            raise _usage_failure(exc, argv) from None
        ctx.meta[_ARGV] = argv
        return ctx

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ClickException as exc:
            raise _usage_failure(exc, ctx.meta.get(_ARGV, ())) from None

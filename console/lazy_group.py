"""A command group whose commands load when first used (start-up is part of every run, and
most runs use one command). cli/app.py's root group and `inspect` are such groups; console/errors.py's StreamctlGroup
adds the error boundary to the root."""
from __future__ import annotations

from typing import Any, Callable, Optional

from typer.core import TyperGroup


def _click_command(obj: Any, name: str) -> Any:
    """The click command typer builds for `obj`: a Typer app (a group) or a command function,
    built as `Typer.add_typer` / `Typer.command` would have (help text and flags the same)."""
    import typer.main
    from typer.models import CommandInfo

    if isinstance(obj, typer.Typer):
        cmd = typer.main.get_group(obj)
        cmd.name = name
        return cmd
    return typer.main.get_command_from_info(CommandInfo(name=name, callback=obj), pretty_exceptions_short=True,
                                            rich_markup_mode=None)


class LazyGroup(TyperGroup):
    """A command group whose commands load when first used: `LAZY_COMMANDS` maps each name to
    the module and attribute of a Typer app (a group) or a command function. `streamctl inspect
    epochs` imports and builds the inspect group and its epochs command only, not the other
    commands' modules and click objects (start-up is part of every run). Reading
    `commands` loads them all (help, completion scripts, the docs' reference)."""

    LAZY_COMMANDS: dict[str, tuple[str, str]] = {}
    on_load: Optional[Callable[[Any], None]] = None  # called with each command it loads

    @property  # type: ignore[override]
    def commands(self) -> dict[str, Any]:
        for name in self.LAZY_COMMANDS:
            self._load(name)
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, Any]) -> None:
        self._commands = value

    def _load(self, name: str) -> Any:
        cmd = self._commands.get(name)
        if cmd is None:
            import importlib

            module, attribute = self.LAZY_COMMANDS[name]
            cmd = _click_command(getattr(importlib.import_module(module), attribute), name)
            if self.on_load is not None:
                self.on_load(cmd)
            self._commands[name] = cmd
        return cmd

    def list_commands(self, ctx: Any) -> list[str]:
        return list(dict.fromkeys([*self.LAZY_COMMANDS, *self._commands]))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.LAZY_COMMANDS:
            return self._load(cmd_name)
        return self._commands.get(cmd_name)

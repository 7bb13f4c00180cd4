"""The ``replay`` group that imports a command's module only when that command runs.

Importing every command module up front cost each ``replay`` call 0.6–0.75 s (pandas through
``pyarrow.dataset``, the Spark taps, …), ``replay --version`` included. ``LazyGroup`` registers commands by
name as ``"module:attribute"`` with their short help, so that ``replay --help`` lists them all without importing
any, and ``replay ls`` imports ``replay.cli.ls`` alone.

When it runs as the ``replay`` command line (``main()`` with the arguments of the process, not a test's
``CliRunner``), the group also turns ``open_log``'s preloading off for the process (``EVENTLOG_PRELOAD=0``
unless set): the preload imports pandas up front so that a long capture or replay does not pay for it on its
first event; a command pays for what it uses, when it uses it.
"""

from __future__ import annotations

import importlib
import os
from gettext import gettext as _
from typing import Any, Mapping, Sequence

import click

from ._common import ReplayGroup

PRELOAD_ENV = "EVENTLOG_PRELOAD"
"""``eventlog.log.PRELOAD_ENV`` (not imported from there: that module imports pyarrow)."""


class LazyGroup(ReplayGroup):
    """A ``ReplayGroup`` whose commands (``lazy_commands``: name -> ``("module:attribute", short help)``, in the
    order ``replay --help`` lists them) are imported on first use. The short help must be the command's own
    (``tests/replay/cli/test_cli_startup.py`` checks it)."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, tuple[str, str]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, tuple[str, str]] = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The lazy commands in their order, loaded or not, then any added with ``add_command`` alone."""
        return [*self.lazy_commands, *(name for name in self.commands if name not in self.lazy_commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in self.lazy_commands:
            command = self.load(cmd_name)
        return command

    def load(self, name: str) -> click.Command:
        """Import the command ``name`` and register it (once)."""
        module, _, attribute = self.lazy_commands[name][0].partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module}:{attribute} is not a click command")
        self.add_command(command, name)
        return command

    def _listed(self, name: str) -> click.Command | None:
        """The command as a listing shows it: the loaded one, else a stand-in with its short help."""
        command = self.commands.get(name)
        if command is None and name in self.lazy_commands:
            command = click.Command(name, short_help=self.lazy_commands[name][1])
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """``click.Group.format_commands``, without importing the commands."""
        commands = [(name, cmd) for name in self.list_commands(ctx)
                    if (cmd := self._listed(name)) is not None and not cmd.hidden]
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            with formatter.section(_("Commands")):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in commands])

    def main(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        if args is None:  # the process's own command line (the console script, python -m replay.cli)
            os.environ.setdefault(PRELOAD_ENV, "0")
        return super().main(args, *rest, **kwargs)

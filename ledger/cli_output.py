"""How the ``caucus`` command prints: consoles that fit, errors a program can parse, values a person can read.

Why one module: every package prints tables and errors, and the contract must be the same
everywhere (README, "Output"):

- **Widths.** A table fits the terminal, or ``COLUMNS``, or 100 columns when the output is not a
  terminal; cells wrap, they are never cut with an ellipsis. ``--wide`` (anywhere on the line)
  lifts the limit: nothing wraps, lines are as long as their content.
- **Errors.** A human gets ``error: MESSAGE`` on stderr. Under ``--json`` a program gets one JSON
  document on stderr instead, ``{"error": {"message": ..., "exit_code": ..., "type": ...}}``: stdout
  carries results only (empty after an error), stderr the error, the exit code says which happened.
- **Values.** Printed as they are: no rich markup or emoji codes are read from them. Human output never shows Python's spelling of a value (``None``, ``['a', 'b']``,
  ``{'field': ...}``): ``text()`` spells them for people.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

import typer
from rich.console import Console
from typer._click.core import (
    Context,  # typer carries its own copy of click: its contexts
)
from typer._click.globals import get_current_context

from ledger.config import Settings

__all__ = [
    "set_args", "set_wide", "is_wide", "console", "wants_json", "print_error", "text", "NONE", "DEFAULT_WIDTH",
    "JsonOption", "LOADED_KEY", "COMMAND_NAMES_KEY", "settings_of", "loaded_settings", "emit", "fail", "runnable_here",
]

DEFAULT_WIDTH = 100
NONE = "-"
_wide = False
_args: list[str] | None = None


def set_args(args: list[str] | None) -> None:
    """The command line being run (``ledger.cli.main``), for errors raised before a command parsed it;
    None once it has ended."""
    global _args
    _args = None if args is None else list(args)


def set_wide(wide: bool) -> None:
    global _wide
    _wide = wide


def is_wide() -> bool:
    return _wide


def _width(stderr: bool) -> int | None:
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stderr if stderr else sys.stdout
    try:
        if stream.isatty():
            return None  # rich asks the terminal
    except (AttributeError, ValueError):
        pass
    return DEFAULT_WIDTH


def console(*, stderr: bool = False) -> Console:
    """A console for people (see module docstring: fits, wraps, ``--wide`` for unlimited). It reads no
    markup and no emoji codes: what it prints is data (a rule set ``idp-2020[leftover=lots]``, a status
    ``[tie pending]``, a name), and rich would take ``[...]`` for a style and drop it; styled parts are
    ``rich.text.Text``."""
    if _wide:
        return Console(width=100_000, stderr=stderr, soft_wrap=True, markup=False, emoji=False)
    return Console(width=_width(stderr), stderr=stderr, markup=False, emoji=False)


def wants_json(ctx: Context | None = None) -> bool:
    """True when the command being run was given ``--json``."""
    ctx = ctx or get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return True
        ctx = ctx.parent
    return "--json" in (_args if _args is not None else sys.argv[1:])


def print_error(message: str, code: int, *, as_json: bool, kind: str = "") -> None:
    """The one way an error is printed (module docstring): one line, also when the cause's own words
    run over several (a database driver's hint on a line of its own)."""
    message = " ".join(message.split()) if "\n" in message else message
    message = runnable_here(message)
    if as_json:
        doc = {"error": {"message": message, "exit_code": code, "type": kind or _kind(code)}}
        typer.echo(json.dumps(doc, sort_keys=True), err=True)
    else:
        typer.echo(f"error: {message}", err=True)


def runnable_here(message: str) -> str:
    """A message's "`caucus CMD`" hints with the options this run was given on its command line (an
    environment variable or caucus.toml holds for the next command too): "run `caucus project` first",
    said of --data-dir iowa2020 and followed as given, read ./caucus-data. Only a hint naming one of the
    ledger's commands is rewritten (a value the user typed and the message quotes back is left as it
    was), and a database URL is never repeated: it may carry a password, in its user part or its query."""
    ctx = get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    loaded = root.meta.get(LOADED_KEY) if root is not None else None
    if loaded is None or "`caucus " not in message:
        return message
    flags = []
    if loaded.config_file is not None and root is not None and root.params.get("config") is not None:
        flags.append(f"--config {shlex.quote(str(loaded.config_file))}")  # the option (CAUCUS_CONFIG holds anyway)
    for name, flag in (("data_dir", "--data-dir"), ("kafka", "--kafka"), ("topic", "--topic")):
        value = getattr(loaded.settings, name, None)
        if str(loaded.sources.get(name, "")).startswith("flag") and value is not None:
            flags.append(f"{flag} {shlex.quote(str(value))}")
    commands = sorted(root.meta.get(COMMAND_NAMES_KEY) or (), key=len, reverse=True) if root is not None else []
    if not flags or not commands:
        return message
    given = " ".join(flags)
    named = "|".join(re.escape(c) for c in commands)
    return re.sub(rf"`caucus (?=(?:{named})(?:[ `]))", lambda _: f"`caucus {given} ", message)


def _kind(code: int) -> str:
    return {1: "refused", 2: "operational"}.get(code, "error")


def text(value: Any) -> str:
    """A value as a person reads it: no ``None``, brackets or quotes."""
    if value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}" if value.denominator != 1 else str(value.numerator)
    if isinstance(value, Decimal):
        return f"{value:,}"
    if isinstance(value, Mapping):
        if {"field", "code", "message"} <= set(value):
            return f"{value['field']}: {value['code']}: {value['message']}"
        return "; ".join(f"{k}: {text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return ", ".join(text(v) for v in items) if items else NONE
    return str(value)


# -- what every command module shares: its --json option, its settings, printing and failing -----------

JsonOption = typer.Option(False, "--json", help="Print JSON (an error too: {\"error\": {...}} on stderr).")

LOADED_KEY = "caucus.loaded_settings"
COMMAND_NAMES_KEY = "caucus.command_names"
"""Every top-level command's name (``ledger.commands``), put in the root context by ``ledger.cli``: a
command line registers only the command it runs, so the click group does not know the others."""
"""Where the root command keeps the ``LoadedSettings`` it read (``ctx.meta``)."""


def settings_of(ctx: typer.Context) -> Settings:
    root = ctx.find_root()
    obj = root.obj
    if not isinstance(obj, Settings):
        from ledger.settings import SettingsError

        try:
            obj = Settings.from_env()
        except SettingsError as exc:
            raise fail(str(exc), kind="configuration") from None
        root.obj = obj
    return obj


def loaded_settings(ctx: typer.Context) -> Any:
    """The ``LoadedSettings`` behind ``settings_of`` (for ``caucus config show``)."""
    from ledger.settings import load_settings

    found = ctx.meta.get(LOADED_KEY)
    return found if found is not None else load_settings()


def emit(data: Any, as_json: bool, human: Callable[[], None] | None = None) -> None:
    """Print for a program (one JSON document) or for a person."""
    if as_json or human is None:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        human()


def fail(message: str, code: int = 2, *, kind: str = "") -> typer.Exit:
    """Print the error (as JSON under --json, see ``ledger.cli_output``) and return the Exit to raise.
    Called while a lost log is being handled, an operational error is exit 3, as the README says of a
    lost log, whatever words the command wraps it in (each command catches ``LogError`` its own way)."""
    from ledger.log.port import LogLostError, LogReplacedError

    handling = sys.exc_info()[1]
    if code == 2 and isinstance(handling, (LogLostError, LogReplacedError)):
        lost = "LogLostError" if isinstance(handling, LogLostError) else "LogReplacedError"
        code, kind = 3, kind if kind not in ("", "operational") else lost
    print_error(message, code, as_json=wants_json(), kind=kind)
    return typer.Exit(code)

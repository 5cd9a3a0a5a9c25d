"""``caucus config show``: the effective settings, where each came from, secrets masked.

Why a command for it: with a file, variables and options all able to set a value, "which broker is
this runner really using, and why" must be answerable without reading code (``ledger.settings``).
"""

from __future__ import annotations

import json
import os

import typer
from rich.table import Table

from ledger.cli_output import JsonOption, emit, loaded_settings
from ledger.cli_output import console, text

__all__ = ["register"]

config_app = typer.Typer(help="The configuration: the effective settings and where each came from.", no_args_is_help=True)


@config_app.command("show")
def show(ctx: typer.Context, as_json: bool = JsonOption) -> None:
    """Every setting with its value (secrets masked) and its source: default, the configuration file,
    a CAUCUS_* variable or a command-line option (highest wins, in that order)."""
    loaded = loaded_settings(ctx)
    rows = loaded.show()
    from ledger.integrity.keys import ENV_KEY_HOME, key_home

    home = {"value": str(key_home()), "source": f"env {ENV_KEY_HOME}" if os.environ.get(ENV_KEY_HOME) else "default"}
    data = {"config_file": None if loaded.config_file is None else str(loaded.config_file), "settings": rows,
            "key_home": home, "unknown_variables": list(loaded.unknown_variables)}

    def human() -> None:
        out = console()
        out.print(f"configuration file: {data['config_file'] or '(none: no --config, CAUCUS_CONFIG or ./caucus.toml)'}",
                  highlight=False)
        table = Table(title_justify="left")
        table.add_column("setting", overflow="fold")
        table.add_column("value", overflow="fold", ratio=2)
        table.add_column("source", overflow="fold", ratio=1)
        for name, row in rows.items():
            value = row["value"]
            shown = json.dumps(value, sort_keys=True) if isinstance(value, dict) and value else text(value)
            table.add_row(name, shown, row["source"])
        out.print(table)
        out.print(f"key home (where the signing key is made on first use, unless checkpoint_key names one): "
                  f"{home['value']} ({home['source']}; {ENV_KEY_HOME} to move it)", highlight=False)
        for name in loaded.unknown_variables:
            out.print(f"warning: {name} names no setting and is ignored", highlight=False)
        out.print("each setting NAME is also CAUCUS_NAME in the environment and NAME in caucus.toml; "
                  "`caucus --help` lists the options", highlight=False)

    emit(data, as_json, human)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")

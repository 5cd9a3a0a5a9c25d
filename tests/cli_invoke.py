"""The ``caucus`` command line, run in-process on a data directory, as the CLI tests drive it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import ledger.cli

Caucus = Callable[..., tuple[int, Any]]
"""Runs ``caucus ARGS...``: the exit code, and the output as JSON where it is JSON, else as text."""


def caucus_cli(data_dir: Path, monkeypatch: pytest.MonkeyPatch, *backend: str) -> Caucus:
    """``caucus --data-dir DATA_DIR BACKEND... ARGS``, with none of the caller's CAUCUS_* settings."""
    ledger.cli._register_commands()
    runner = CliRunner()
    for name in ("CAUCUS_TOKEN", "CAUCUS_KAFKA", "CAUCUS_DATABASE", "CAUCUS_TOPIC", "CAUCUS_RESULTS_TOPIC"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> tuple[int, Any]:
        result = runner.invoke(ledger.cli.app, ["--data-dir", str(data_dir), *backend, *args])
        assert "Traceback" not in result.output, result.output
        try:
            return result.exit_code, json.loads(result.stdout)
        except ValueError:
            return result.exit_code, result.output

    return run

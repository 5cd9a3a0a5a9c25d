"""A hint names the command to run as this run would have to run it: "run `caucus project` first", said of
`--data-dir iowa2020` and followed as given, read ./caucus-data (and, without --until-caught-up, never
returned), so the next try failed the same way."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

import ledger.cli
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from tests.cli_invoke import caucus_cli


def test_a_hint_carries_the_data_directory_it_was_given_for(support: ModuleType, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "iowa2020"
    events = support.election_log(6)
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(events[:-3])
    caucus = caucus_cli(data, monkeypatch)
    code, said = caucus("tally")
    assert code == 2 and f"run `caucus --data-dir {data} project --until-caught-up` first" in said, said
    code, said = caucus("tally", "--json")  # the JSON error says the same
    assert code == 2, said
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(events[-3:])
    code, said = caucus("tally")
    assert code == 0 and f"`caucus --data-dir {data} project --until-caught-up` reads them" in said, said
    code, doc = caucus("tally", "--json")  # a program is told too, not only a person on stderr
    assert code == 0 and doc["unread_records"] == 3, doc
    code, said = caucus("audit")
    assert f"`caucus --data-dir {data} project --until-caught-up` reads them" in said, said


@pytest.mark.parametrize("where", ["default", "environment"])
def test_a_hint_repeats_no_option_the_next_command_reads_anyway(support: ModuleType, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The default data directory, or one CAUCUS_DATA_DIR names, holds for the next command as well."""
    monkeypatch.chdir(tmp_path)
    for name in ("CAUCUS_DATA_DIR", "CAUCUS_KAFKA", "CAUCUS_DATABASE", "CAUCUS_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    data = tmp_path / "caucus-data"
    if where == "environment":
        data = tmp_path / "elsewhere"
        monkeypatch.setenv("CAUCUS_DATA_DIR", str(data))
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(support.election_log(2))
    ledger.cli._register_commands()
    result = CliRunner().invoke(ledger.cli.app, ["tally", "--json"])
    error = json.loads(result.stderr)["error"]
    assert result.exit_code == 2 and "run `caucus project --until-caught-up` first" in error["message"], error


def test_a_hint_leaves_out_a_database_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hint is printed, and logged: a database URL given on the command line, which may carry a password
    (user:pw@host, or ?password= in its query), is not repeated in it."""
    from ledger.cli_output import runnable_here

    ledger.cli._register_commands()
    said: list[str] = []

    @ledger.cli.app.command("hint-probe", hidden=True)
    def probe() -> None:
        said.append(runnable_here("run `caucus project` first"))

    try:
        CliRunner().invoke(ledger.cli.app, ["--data-dir", "d", "--database", "postgresql://u:secret@h/db", "hint-probe"])
        CliRunner().invoke(ledger.cli.app, ["--data-dir", "d", "--database", "postgresql://u@h/db?password=pw", "hint-probe"])
    finally:
        ledger.cli.app.registered_commands.pop()
    assert said == ["run `caucus --data-dir d project` first"] * 2, said  # a URL may hold a password in its query too


def test_a_hint_repeats_the_configuration_file_and_leaves_the_users_own_text_alone(tmp_path: Path) -> None:
    """--config names the file the data directory was read from; a value the user typed and the error
    quotes back ("no unit '`caucus x`'") is theirs, not a hint to rewrite."""
    from ledger.cli_output import runnable_here

    ledger.cli._register_commands()
    config = tmp_path / "other.toml"
    config.write_text(f'data_dir = "{tmp_path / "d"}"\n')
    said: list[str] = []

    @ledger.cli.app.command("hint-probe", hidden=True)
    def probe() -> None:
        said.append(runnable_here("no unit '`caucus x`'; run `caucus project --until-caught-up` first"))

    try:
        CliRunner().invoke(ledger.cli.app, ["--config", str(config), "hint-probe"])
        CliRunner().invoke(ledger.cli.app, ["--config", str(config), "--data-dir", "e", "hint-probe"])
    finally:
        ledger.cli.app.registered_commands.pop()
    assert said == [f"no unit '`caucus x`'; run `caucus --config {config} project --until-caught-up` first",
                    f"no unit '`caucus x`'; run `caucus --config {config} --data-dir e project --until-caught-up` first"], said

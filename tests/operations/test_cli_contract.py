"""The command line's contract (README, "Exit codes and errors"), held for every command there is.

Commands are enumerated from the ``caucus`` command tree, so a command added later is walked too: an
unknown option, a malformed number for every numeric option, and ``--help`` each get the documented
answer (exit 2 or 0, a one-line ``error:``, never a traceback, a JSON error under ``--json``).
Then the semantic cases: a unit, county, election, credential or directory that is not there is a
bad argument (exit 2), on the real 2020 history imported once for this module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ledger.cli import command
from typer.core import TyperArgument, TyperOption


def _leaves(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in sorted(subs.items()):
            yield from _leaves(sub, (*path, name))
    else:
        yield path, cmd


LEAVES = dict(_leaves(command()))
IDS = [" ".join(p) for p in LEAVES]


def _filled(cmd: Any) -> list[str]:
    """Placeholder values for the required arguments and options of a command."""
    out: list[str] = []
    for param in cmd.params:
        if isinstance(param, TyperArgument) and param.required:
            out.append("x")
        elif isinstance(param, TyperOption) and param.required and not param.is_flag:
            out += [param.opts[0], "x"]
    return out


def _numeric_options(cmd: Any) -> list[str]:
    return [p.opts[0] for p in cmd.params
            if isinstance(p, TyperOption) and not p.is_flag and p.type_descriptor.annotation in (int, float)]


@pytest.fixture
def env(ops: ModuleType, tmp_path: Path) -> dict[str, str]:
    return ops.clean_env(CAUCUS_DATA_DIR=str(tmp_path / "data"), COLUMNS="100")


def _no_traceback(code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err and "internal error" not in err, err


def test_the_tree_is_walked() -> None:
    """The walk below covers the commands of every package (a sanity check on the enumeration)."""
    assert {"tally", "trail", "project", "replay", "verify", "diff", "audit", "report", "log append", "config show",
            "serve intake", "import idp2020", "simulate write", "credentials revoke"} <= set(IDS)


@pytest.mark.parametrize("path", LEAVES, ids=IDS)
def test_a_bad_argument_exits_2_with_one_line_and_no_traceback(ops: ModuleType, env: dict[str, str], path: tuple[str, ...],
                                                                tmp_path: Path) -> None:  # fmt: skip
    cmd = LEAVES[path]
    code, out, err = ops.in_process([*path, "--no-such-option"], env)
    assert code == 2, (code, out, err)
    _no_traceback(code, out, err)
    assert "No such option: --no-such-option" in err and out == ""
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    code, out, err = ops.in_process([*path, "--no-such-option", "--json"], env)
    assert code == 2 and out == ""
    doc = json.loads(err)
    assert doc["error"]["exit_code"] == 2 and "--no-such-option" in doc["error"]["message"]
    for option in _numeric_options(cmd):
        code, out, err = ops.in_process([*path, *_filled(cmd), option, "not-a-number"], env)
        assert code == 2, (path, option, out, err)
        _no_traceback(code, out, err)
        assert option in err, (path, option, err)
    assert not (tmp_path / "data").exists(), f"`caucus {' '.join(path)}` with a bad argument created files"


@pytest.mark.parametrize("path", LEAVES, ids=IDS)
def test_help_explains_without_type_noise(ops: ModuleType, env: dict[str, str], path: tuple[str, ...]) -> None:
    code, out, err = ops.in_process([*path, "--help"], env)
    assert code == 0, err
    assert "<bool>" not in out
    text = " ".join(out.split())
    receipts = path in {("define",), ("open",), ("report",), ("correct",), ("toss",)}
    if "--json" in out and not receipts:
        assert "receipt" not in text.split("--json", 1)[1][:200], f"{' '.join(path)}: --json help speaks of a receipt"
    for line in out.splitlines():
        assert len(line) <= 100, f"help of {' '.join(path)} wider than COLUMNS: {line!r}"


def test_version(ops: ModuleType, env: dict[str, str]) -> None:
    code, out, _ = ops.in_process(["--version"], env)
    assert code == 0 and re.fullmatch(r"caucus \d+\.\d+\.\d+\n", out)


def test_a_global_option_after_the_command_is_told_where_it_goes(ops: ModuleType, env: dict[str, str]) -> None:
    """``caucus tally --data-dir D`` said only "No such option" (and, after ``import idp2020``, offered
    the command's own ``--data``): the answer names where the option goes."""
    for args in (["tally", "--data-dir", "elsewhere"], ["import", "idp2020", "--data", "x", "--data-dir", "elsewhere", "--json"],
                 ["audit", "--kafka", "h:9092"]):
        code, out, err = ops.in_process(args, env)
        assert code == 2 and out == "", (args, err)
        _no_traceback(code, out, err)
        message = json.loads(err)["error"]["message"] if "--json" in args else " ".join(err.replace("│", " ").split())
        option = args[-2] if "--json" not in args else "--data-dir"
        assert f"{option} is an option of caucus itself: give it before the command" in message, message
        assert "Possible options" not in message, message
    code, _, err = ops.in_process(["tally", "--bogus"], env)
    assert code == 2 and "option of caucus itself" not in err


def test_a_setting_that_breaks_its_rule_names_it(ops: ModuleType, env: dict[str, str]) -> None:
    for name, value, words in (("CAUCUS_PARTITIONS", "abc", "integer"), ("CAUCUS_KAFKA", "nohost", "HOST:PORT"),
                               ("CAUCUS_KAFKA_SECURITY_PROTOCOL", "TLS", "SASL_SSL"), ("CAUCUS_FILE_MODE", "0666", "others"),
                               ("CAUCUS_KAFKA_CLIENT", '{"acks": 1}', "acks=all"), ("CAUCUS_LOG_LEVEL", "LOUD", "DEBUG")):
        for args in (["tally"], ["tally", "--json"]):
            code, out, err = ops.in_process(args, {**env, name: value})
            assert code == 2 and out == "", (name, err)
            _no_traceback(code, out, err)
            message = json.loads(err)["error"]["message"] if "--json" in args else err
            setting = name.removeprefix("CAUCUS_").lower()
            assert f"setting {setting}" in message and name in message and words in message, message


def test_a_data_dir_that_is_a_file_is_named_as_one(ops: ModuleType, env: dict[str, str], tmp_path: Path) -> None:
    """``--data-dir README.md`` said "no projection store at README.md/store.sqlite3"."""
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    code, out, err = ops.in_process(["--data-dir", str(afile), "tally"], env)
    assert code == 2 and out == "" and "is a file, not a directory" in err and "PosixPath" not in err, err
    _no_traceback(code, out, err)


def test_an_empty_data_dir_is_refused_not_taken_for_here(ops: ModuleType, env: dict[str, str], tmp_path: Path) -> None:
    """``--data-dir "$UNSET"`` meant the current directory: the ledger looked for its files there."""
    for value in ("", "  "):
        code, out, err = ops.in_process(["--data-dir", value, "tally"], env)
        assert code == 2 and out == "" and "--data-dir is empty" in err, err
        _no_traceback(code, out, err)


def test_an_empty_data_dir_in_the_configuration_file_is_refused(ops: ModuleType, env: dict[str, str], tmp_path: Path) -> None:
    """``data_dir = ""`` in the file meant the current directory, as the option did: the ledger then
    looked for (and ``project`` wrote) its files wherever it was run."""
    config = tmp_path / "caucus.toml"
    env = {k: v for k, v in env.items() if k != "CAUCUS_DATA_DIR"}  # the variable would win over the file
    for value in ('""', '" "'):
        config.write_text(f"data_dir = {value}\n")
        code, out, err = ops.in_process(["--config", str(config), "tally"], env)
        assert code == 2 and out == "" and "data_dir" in err and "is empty" in err, err
        _no_traceback(code, out, err)


def test_a_configuration_file_that_is_not_utf8_is_named(ops: ModuleType, env: dict[str, str], tmp_path: Path) -> None:
    # TOML is UTF-8; a file in another encoding is the user's error (exit 2, the file named), not a bug.
    config = tmp_path / "caucus.toml"
    config.write_bytes(b'backend = "sqlite"\n# caf\xe9\n')
    for args in (["--config", str(config), "tally"], ["--config", str(config), "tally", "--json"]):
        code, out, err = ops.in_process(args, env)
        assert code == 2 and out == "", err
        _no_traceback(code, out, err)
        message = json.loads(err)["error"]["message"] if "--json" in args else err
        assert str(config) in message and "UTF-8" in message and "internal" not in message, message


def test_config_show_masks_a_database_password_wherever_the_url_holds_it(ops: ModuleType, env: dict[str, str]) -> None:
    """A password in the URL's query (?password=, which libpq reads as well) was shown as given."""
    for url, hidden in (("postgresql://u:s3cret@db/caucus", "postgresql://u:********@db/caucus"),
                        ("postgresql://u@db/caucus?sslmode=require&password=s3cret",
                         "postgresql://u@db/caucus?sslmode=require&password=********")):
        code, out, err = ops.in_process(["config", "show", "--json"], {**env, "CAUCUS_DATABASE": url})
        assert code == 0 and "s3cret" not in out + err, out
        assert json.loads(out)["settings"]["database"]["value"] == hidden, out


def test_config_show_names_the_key_home(ops: ModuleType, env: dict[str, str], tmp_path: Path) -> None:
    """The signing key is made in the key home, which is no setting: `config show` did not say where it was."""
    home = tmp_path / "keys"
    code, out, err = ops.in_process(["config", "show", "--json"], {**env, "CAUCUS_KEY_HOME": str(home)})
    assert code == 0, err
    assert json.loads(out)["key_home"] == {"value": str(home), "source": "env CAUCUS_KEY_HOME"}
    code, out, err = ops.in_process(["config", "show"], {**env, "CAUCUS_KEY_HOME": str(home)})
    assert code == 0 and "key home (where the signing key is made" in out and str(home) in out, out


# -- on the real 2020 history -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(ops: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    ops.need_data()
    return ops.build_2020_workspace(tmp_path_factory.mktemp("iowa2020"))


@pytest.fixture
def at(ops: ModuleType, workspace: Any) -> dict[str, str]:
    return ops.clean_env(CAUCUS_DATA_DIR=str(workspace.data), COLUMNS="100")


BAD_ARGUMENTS = [
    ["trail", "999999"],
    ["tally", "--unit", "12345"],
    ["tally", "--county", "Nowhere"],
    ["tally", "--election", "nope"],
    ["tally", "--as-of", "2020-02-08"],
    ["tally", "--as-of", "9:1"],
    ["subscribe", "--county", "9999", "--max", "1"],
    ["subscribe", "--unit", "no-such-unit", "--max", "1"],
    ["credentials", "revoke", "nope"],
    ["prove", "no-such-event"],
    ["recount-package", "999999", "--out", "/tmp/caucus-never-written"],
    ["diff", "bogus", "live"],
    ["audit", "--as-of", "yesterday"],
    ["replay", "--as-of", "yesterday"],
    ["define", "/no/such/file.json"],
    ["report", "--unit", "x"],
    ["import", "idp2020", "--data", "/no/such/dir"],
    ["project", "--metrics-port", "70000"],
    ["--config", "/no/such/caucus.toml", "tally"],
]


@pytest.mark.slow
@pytest.mark.parametrize("args", BAD_ARGUMENTS, ids=[" ".join(a) for a in BAD_ARGUMENTS])
def test_a_thing_that_is_not_there_is_a_bad_argument(ops: ModuleType, at: dict[str, str], args: list[str]) -> None:
    code, out, err = ops.in_process(args, at)
    assert code == 2, (code, out, err)
    _no_traceback(code, out, err)
    assert err.startswith(("error: ", "Usage: ")) and out == "", err
    code, out, err = ops.in_process([*args, "--json"], at)
    assert code == 2 and out == "" and json.loads(err)["error"]["exit_code"] == 2, err


@pytest.mark.slow
def test_the_suggested_as_of_spelling_is_accepted(ops: ModuleType, at: dict[str, str]) -> None:
    code, _, err = ops.in_process(["tally", "--as-of", "2020-02-08"], at)
    suggested = re.search(r"e\.g\. (\S+)", err)
    assert code == 2 and suggested, err
    code, out, err = ops.in_process(["tally", "--as-of", suggested.group(1), "--json"], at)
    assert code == 0, err
    assert json.loads(out)["state"]


@pytest.mark.slow
def test_log_writes_without_an_official_are_refused(ops: ModuleType, workspace: Any, at: dict[str, str], tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(ops.run(["log", "tail", "-n", "1", "--json"], cwd=workspace.root).stdout)
    before = ops.in_process(["log", "info", "--json"], at)[1]
    code, _, err = ops.in_process(["log", "append", str(events)], at)
    assert code == 1 and "official's credential" in err
    chair_token = json.loads(ops.in_process(["credentials", "issue", "--unit", "1", "--json"], at)[1])["token"]
    code, _, err = ops.in_process(["log", "append", str(events), "--token", chair_token], at)
    assert code == 1 and "is a chair" in err
    code, _, err = ops.in_process(["simulate", "write", "--units", "2"], at)
    assert code == 1 and "official's credential" in err
    assert ops.in_process(["log", "info", "--json"], at)[1] == before  # nothing was written
    code, out, err = ops.in_process(["log", "append", str(events), "--token", workspace.official_token, "--json"], at)
    assert code == 0, err  # the event is already there: appending it again writes nothing, and says where it is
    assert ops.in_process(["log", "info", "--json"], at)[1] == before
    restored = json.loads(events.read_text())
    restored.update(event_id="00000000-0000-4000-8000-000000000001", idempotency_key="restored-copy")
    events.write_text(json.dumps(restored) + "\n")
    code, out, err = ops.in_process(["log", "append", str(events), "--token", workspace.official_token, "--json"], at)
    assert code == 0, err
    newest = json.loads(ops.in_process(["log", "tail", "-n", "1", "--json"], at)[1])
    assert newest["event_id"] == restored["event_id"]
    assert newest["record_headers"]["caucus-writer"].startswith("official:Auditor#")
    assert "written directly by official:Auditor#" in ops.in_process(["log", "tail", "-n", "1"], at)[1]


@pytest.mark.slow
def test_human_output_fits_and_never_shows_python(ops: ModuleType, workspace: Any, at: dict[str, str]) -> None:
    code, out, err = ops.in_process(["tally", "--county", "Polk"], at)
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "…" not in out
    units = json.loads(ops.in_process(["tally", "--county", "Polk", "--json"], at)[1])["units"]
    joined = re.sub(r"[│┃|\s]", "", out)
    assert all(u["unit_id"] in joined for u in units)  # every unit is listed, its id whole
    for args in (["diff", "as-of:2020-02-08T06:28:00Z", "live"], ["tally", "--unit", workspace.corrected_unit]):
        code, table, err = ops.in_process(args, at)
        assert code in (0, 1), err
        assert max(len(line) for line in table.splitlines()) <= 100 and "…" not in table, args
    code, wide, _ = ops.in_process(["tally", "--county", "Polk", "--wide"], at)
    assert code == 0 and "final/CDs/SDE" in wide and max(len(line) for line in wide.splitlines()) > 100 and "…" not in wide
    for args in (["trail", workspace.corrected_unit], ["intake", "status"], ["tally", "--unit", workspace.corrected_unit],
                 ["audit"], ["config", "show"], ["projections"]):
        code, out, err = ops.in_process(args, at)
        assert code in (0, 1), (args, err)
        assert not re.search(r"\bNone\b|\['|\{'|\[\{", out), (args, out)
        assert not out.lstrip().startswith("{"), args  # people get text, not JSON, without --json


@pytest.mark.slow
def test_listing_nothing_says_so(ops: ModuleType, env: dict[str, str]) -> None:
    code, out, _ = ops.in_process(["credentials", "list"], env)
    assert code == 0 and "no credentials" in out and "credentials issue" in out


@pytest.mark.parametrize("args", [["--help"], ["log", "tail", "--help"], ["tally", "--json"]])
def test_a_reader_that_goes_away_is_exit_141_not_refused(ops: ModuleType, env: dict[str, str], args: list[str],
                                                         tmp_path: Path) -> None:
    """``caucus log tail | head``: click, typer and rich answer the closed pipe with exit 1, the README's
    "refused", so a script under pipefail read a refusal. It is 141, as a shell reports any program a closed
    pipe ends, with nothing on stderr; an error met before any output keeps its own code."""
    import subprocess

    def run(*argv: str) -> tuple[int, bytes]:
        proc = subprocess.Popen([ops.CAUCUS, "--data-dir", str(tmp_path), *argv], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the first line
        err = proc.stderr.read()
        return proc.wait(timeout=60), err

    if args[0] == "tally":  # nothing projected here: an operational error, whoever reads stdout
        code, err = run(*args)
        assert code == 2 and b"no projection" in err, err
        return
    code, err = run(*args)
    assert code == 141 and err == b"", err
    done = subprocess.run([ops.CAUCUS, "--data-dir", str(tmp_path), *args], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout

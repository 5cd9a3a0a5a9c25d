"""``ledger.commands.COMMANDS`` says which module adds which command, so a command line imports only the
module of the command it names. The table must say what each module really registers: a command missing
from it would still run (an unknown word registers every module) but pay the whole start-up, and one
listed under the wrong module would vanish."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import import_module

import pytest
import typer
import typer.main

from ledger.cli import _command_word, command
from ledger.commands import COMMANDS


@pytest.mark.parametrize("module, names", COMMANDS, ids=[m for m, _ in COMMANDS])
def test_each_module_registers_the_commands_the_table_names(module: str, names: tuple[str, ...]) -> None:
    app = typer.Typer()

    @app.callback()
    def _root() -> None: ...

    import_module(module).register(app)
    assert sorted(typer.main.get_command(app).commands) == sorted(names)  # type: ignore[attr-defined]


def test_the_whole_tree_is_the_table_and_log() -> None:
    listed = {name for _, names in COMMANDS for name in names}
    assert set(command().commands) == listed | {"log"}  # type: ignore[attr-defined]


@pytest.mark.parametrize("args, word", [
    (["tally", "--json"], "tally"),
    (["--data-dir", "log", "tally"], "tally"),  # an option's value is not the command
    (["--wide", "--kafka", "h:9092", "audit"], "audit"),
    (["--data-dir=x", "report", "--unit", "tally"], "report"),
    (["--version"], None),
    (["--", "tally"], None),
])
def test_the_command_word_skips_global_options_and_their_values(args: list[str], word: str | None) -> None:
    assert _command_word(args) == word


def test_a_command_line_imports_only_the_module_of_its_command(tmp_path) -> None:
    """``caucus tally`` does not load the intake, the importer or the audit (each is start-up time paid
    by every call), and ``caucus --help`` still lists every command."""
    probe = ("import sys; from ledger.cli import main\n"
             "try:\n    main(['--data-dir', sys.argv[1], 'tally', '--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('producers.cli', 'producers.importers.cli', 'projections.audit.audit_cli', "
             "'projections.cli', 'kafka') if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip().splitlines()[-1] == "['projections.cli']", done.stderr
    shown = subprocess.run([sys.executable, "-c", "from ledger.cli import main; main(['--help'])"],
                           capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": ""})
    for name in ("define", "report", "tally", "audit", "import", "demo", "log"):
        assert f" {name} " in shown.stdout, name


def test_the_demo_runs_the_other_commands_from_a_fresh_process(tmp_path) -> None:
    """``caucus demo`` invokes the commands a user would type, in-process: started on its own, it must
    have them all (it once stopped at its second step, exit 2, with ``project`` not registered)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}
    done = subprocess.run([sys.executable, "-c", "from ledger.cli import main; main(['demo'])"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "every checkpointed record matches its signed checkpoint" in done.stdout


def test_the_demo_walks_through_a_log_that_holds_another_election(tmp_path) -> None:
    """A log may hold several elections, and a command that names none then exits 2; the demo names its
    own, so run again beside another election (here a second seed's) it still walks through every step."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}

    def demo(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", f"from ledger.cli import main; main({['demo', '--units', '8', *args]!r})"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    assert demo("--seed", "7").returncode == 0
    again = demo()
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "sim-2020" in again.stdout and "every checkpointed record matches its signed checkpoint" in again.stdout
    bare = subprocess.run([sys.executable, "-c", "from ledger.cli import main; main(['tally'])"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and "--election" in bare.stderr


def test_the_demo_run_again_appends_no_result_twice_and_says_so(tmp_path) -> None:
    """Its --seed help promised "nothing new appended"; each refused attempt is recorded again (a fact
    of its own), so what it does promise is checked: no result twice, and a rerun named as one."""
    import os

    from ledger.journal import Journal
    from ledger.log.sqlite import SqliteLog

    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}

    def demo() -> dict:
        done = subprocess.run([sys.executable, "-c", "from ledger.cli import main; main(['demo', '--json'])"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    def kinds() -> list[str]:
        with SqliteLog(tmp_path / "caucus-data" / "log.sqlite3", read_only=True) as log:
            return [le.event.type for le in Journal(log).read()]

    first = demo()
    assert first["already_in_log"] is False and first["intake"]["accepted"] > 0 and first["intake"]["unexpected_count"] == 0
    before = kinds()
    again = demo()
    assert again["already_in_log"] is True and again["intake"]["accepted"] == 0
    after = kinds()
    assert [k for k in after if k != "SubmissionRejected"] == [k for k in before if k != "SubmissionRejected"]
    assert after.count("SubmissionRejected") == 2 * before.count("SubmissionRejected") > 0


def test_a_follower_stopped_by_sigterm_ends_as_one_stopped_by_ctrl_c(tmp_path) -> None:
    """``timeout 3 caucus subscribe`` (SIGTERM) left the feed's ``-wal``/``-shm`` beside a file it only
    read; stopped by Ctrl-C it left nothing. SIGTERM now unwinds the command the same way (a command that
    does not catch it exits 143, "terminated")."""
    import os
    import signal

    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}
    made = subprocess.run([sys.executable, "-c", "from ledger.cli import main; main(['demo', '--units', '8', '--json'])"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    data = tmp_path / "caucus-data"
    before = sorted(p.name for p in data.iterdir())
    follower = subprocess.Popen([sys.executable, "-c", "from ledger.cli import main; main(['subscribe', '--latest', '--follow'])"], cwd=tmp_path,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert json.loads(follower.stdout.readline())  # it is following: the feed's first record is out
        follower.send_signal(signal.SIGTERM)
        _, err = follower.communicate(timeout=60)
    finally:
        follower.kill()
    assert follower.returncode == 0, err  # subscribe ends on Ctrl-C as a stop asked for, and so on SIGTERM
    assert sorted(p.name for p in data.iterdir()) == before

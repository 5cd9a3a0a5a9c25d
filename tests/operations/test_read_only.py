"""Read commands on a copy nobody may write: they work, and they leave every file as it was.

An auditor's archive of a data directory is read-only. Every command that only reads (tally, trail,
audit, diff, log, verify, prove, projections, subscribe, credentials list, spool status, config show,
recount-package into a directory elsewhere) must work there, and must not create or change any file,
not even SQLite's ``-wal``/``-shm``. The tests run as root, where ``chmod`` stops nothing: so each
command runs twice, as root (the ``mode=ro`` path: nothing may change although it could) and as user
``nobody`` on a copy it owns but may not write (the ``immutable`` path, with real permissions).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.slow
NOBODY = 65534
Workspace = Any


@pytest.fixture(scope="module")
def workspace(ops: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ops.need_data()
    return ops.build_2020_workspace(tmp_path_factory.mktemp("iowa2020"))


def _read_only_copy(ws: Workspace, owner: int | None) -> Path:
    """A copy of the workspace's data directory, owned by ``owner`` (if given), with no write permission."""
    parent = Path(tempfile.mkdtemp(prefix="caucus-ro-"))
    parent.chmod(0o755)  # another user must reach it
    copy = parent / "caucus-data"
    shutil.copytree(ws.data, copy)
    for path in [copy, *copy.rglob("*")]:
        if owner is not None:
            os.chown(path, owner, owner)
        mode = path.stat().st_mode
        path.chmod(stat.S_IMODE(mode) & ~0o222)
    return copy


@pytest.fixture(scope="module")
def copies(ops: ModuleType, workspace: Workspace) -> Iterator[dict[str, Path]]:
    made = {"self": _read_only_copy(workspace, None)}
    if ops.can_switch_user():
        made["nobody"] = _read_only_copy(workspace, NOBODY)
    yield made
    for copy in made.values():
        for path in [copy, *copy.rglob("*")]:
            path.chmod(0o700 if path.is_dir() else 0o600)
        shutil.rmtree(copy.parent)


def _commands(ws: Workspace, out: Path) -> list[tuple[list[str], tuple[int, ...]]]:
    """Every read command, with the exit codes it may give on this history (audit and diff find things)."""
    return [
        (["tally"], (0,)),
        (["tally", "--county", "Polk"], (0,)),
        (["tally", "--unit", ws.corrected_unit, "--json"], (0,)),
        (["tally", "--as-of", "2020-02-08T06:28:00Z"], (0,)),
        (["trail", ws.corrected_unit], (0,)),
        (["audit"], (0, 1)),
        (["audit", "--log", "--json"], (0, 1)),
        (["diff", "as-of:2020-02-08T06:28:00Z", "live", "--json"], (1,)),
        (["diff", "live", "log"], (0, 1)),
        (["log", "info"], (0,)),
        (["log", "tail", "-n", "3", "--json"], (0,)),
        (["verify", "--require-checkpoint"], (0,)),
        (["prove", ws.event_id, "--json"], (0,)),
        (["projections"], (0,)),
        (["subscribe", "--from-beginning", "--max", "2"], (0,)),
        (["credentials", "list"], (0,)),
        (["spool", "status"], (0,)),
        (["config", "show"], (0,)),
        (["recount-package", ws.corrected_unit, "--out", str(out)], (0,)),
    ]


@pytest.mark.parametrize("who", ["self", "nobody"])
def test_every_read_command_works_on_a_read_only_copy_and_changes_nothing(
    ops: ModuleType, workspace: Workspace, copies: dict[str, Path], who: str, tmp_path: Path
) -> None:
    if who not in copies:
        pytest.skip("another user can only be tried as root, with setpriv")
    copy = copies[who]
    user = NOBODY if who == "nobody" else None
    out_root = Path(tempfile.mkdtemp(prefix="caucus-out-"))
    out_root.chmod(0o777)
    try:
        before = ops.file_state(copy)
        for args, codes in _commands(workspace, out_root / "package"):
            done = ops.run(["--data-dir", str(copy), *args], cwd=copy.parent, as_user=user, env=ops.clean_env(COLUMNS="100"))
            ops.ok(done, *codes)
            assert "unable to open database file" not in done.stderr, args
            assert ops.file_state(copy) == before, f"`caucus {' '.join(args)}` changed files in the read-only copy"
        assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in workspace.data.iterdir())
    finally:
        shutil.rmtree(out_root)


def test_the_copy_is_really_read_only_for_the_other_user(ops: ModuleType, copies: dict[str, Path]) -> None:
    """The premise of the test above: ``nobody`` cannot write there (a write command fails, exit 2)."""
    if "nobody" not in copies:
        pytest.skip("another user can only be tried as root, with setpriv")
    copy = copies["nobody"]
    done = ops.run(["--data-dir", str(copy), "credentials", "issue", "--official", "X"], cwd=copy.parent, as_user=NOBODY)
    ops.ok(done, 2)


def test_read_commands_in_an_empty_directory_create_nothing_and_exit_2(ops: ModuleType, tmp_path: Path) -> None:
    for args in (["verify"], ["tally"], ["trail", "1"], ["log", "info"], ["audit"], ["audit", "--log"], ["diff", "live", "log"],
                 ["projections"], ["subscribe", "--max", "1"], ["prove", "x"], ["log", "tail"], ["intake", "status"],
                 ["intake", "rebuild"]):
        done = ops.ok(ops.run(args, cwd=tmp_path), 2)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, (args, done.stderr)
        assert list(tmp_path.iterdir()) == [], f"`caucus {' '.join(args)}` created {list(tmp_path.iterdir())}"
    for args in (["project", "--until-caught-up"], ["replay"]):  # they write, but need a log to write from
        ops.ok(ops.run(args, cwd=tmp_path), 2)
        assert list(tmp_path.iterdir()) == [], f"`caucus {' '.join(args)}` created {list(tmp_path.iterdir())}"
    assert "no event log at caucus-data/log.sqlite3" in ops.run(["verify"], cwd=tmp_path).stderr
    # Nothing recorded: not "run `caucus project` first", which would only say "no event log" next.
    told = ops.run(["tally"], cwd=tmp_path).stderr
    assert "nothing has been recorded in caucus-data yet" in told and "caucus import" in told, told


def test_a_truncated_log_is_reported_not_a_traceback(ops: ModuleType, workspace: Workspace, tmp_path: Path) -> None:
    data = tmp_path / "caucus-data"
    data.mkdir()
    shutil.copy(workspace.data / "log.sqlite3", data / "log.sqlite3")
    with open(data / "log.sqlite3", "r+b") as fh:
        fh.truncate((data / "log.sqlite3").stat().st_size // 2)
    for args in (["verify"], ["log", "info"], ["log", "tail"], ["audit", "--log"]):
        done = ops.ok(ops.run(args, cwd=tmp_path), 2)
        assert "log.sqlite3" in done.stderr and "damaged" in done.stderr, (args, done.stderr)


def test_data_files_are_private(ops: ModuleType, workspace: Workspace) -> None:
    """The log, the stores, the feed, the intake's state: 0600 (credentials and keys were already)."""
    ops.ok(ops.run(["open", "1", "--json", "--attendance", "3", "--token", workspace.official_token], cwd=workspace.root), 0, 1)
    for name in ("log.sqlite3", "store.sqlite3", "results.sqlite3", "checkpoints.sqlite3", "credentials.json",
                 "intake/embedded/state.json", "credentials.json.lock", "intake/embedded/intake.lock"):
        path = workspace.data / name
        assert path.exists(), name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{name}: {oct(path.stat().st_mode)}"


def test_a_group_readable_mode_can_be_configured(ops: ModuleType, tmp_path: Path) -> None:
    env = ops.clean_env(CAUCUS_FILE_MODE="0640")
    token = ops.ok(ops.run(["credentials", "issue", "--official", "Lee", "--json"], cwd=tmp_path, env=env)).stdout
    ops.ok(ops.run(["simulate", "write", "--units", "3", "--token", ops.as_json(token)["token"]], cwd=tmp_path, env=env))
    assert stat.S_IMODE((tmp_path / "caucus-data" / "log.sqlite3").stat().st_mode) == 0o640
    bad = ops.ok(ops.run(["log", "info"], cwd=tmp_path, env=ops.clean_env(CAUCUS_FILE_MODE="0644")), 2)
    assert "file_mode" in bad.stderr and "others" in bad.stderr


def test_sqlite_read_only_connection_leaves_no_wal_files(tmp_path: Path) -> None:
    """The mechanism under the commands: a WAL database read with mode=ro leaves its directory as it was,
    and a writer working meanwhile keeps its own -wal/-shm files."""
    from ledger.sqlite_setup import connect_read_only

    path = tmp_path / "db.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.sqlite3"]
    reader = connect_read_only(path)
    assert reader.conn.execute("SELECT x FROM t").fetchall() == [(1,)]
    with pytest.raises(sqlite3.OperationalError):
        reader.conn.execute("INSERT INTO t VALUES (2)")
    reader.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db.sqlite3"]
    writer = sqlite3.connect(path)
    writer.execute("INSERT INTO t VALUES (3)")
    writer.commit()
    reader = connect_read_only(path)
    assert reader.conn.execute("SELECT count(*) FROM t").fetchone() == (2,)
    reader.close()
    assert (tmp_path / "db.sqlite3-wal").exists()  # the writer's, still open
    writer.close()

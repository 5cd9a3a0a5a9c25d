"""``caucus project`` as a process: SIGKILL mid-run then restart, SIGTERM stops cleanly, a lost log
exits non-zero. Waits on what the store shows, never on sleeps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore

CAUCUS = str(Path(sys.executable).parent / "caucus")
Open = Callable[[], ProjectionStore]


def _cli(data_dir: Path, database: str | None, *args: str) -> list[str]:
    cmd = [CAUCUS, "--data-dir", str(data_dir)]
    if database:
        cmd += ["--database", database]
    return [*cmd, *args]


def _cli_store(data_dir: Path, database: str | None) -> ProjectionStore:
    if database:
        from projections.stores.postgres import PostgresStore

        return PostgresStore(database)
    from projections.stores.sqlite import SqliteStore

    return SqliteStore(data_dir / "store.sqlite3")


def _applied(store: ProjectionStore) -> int:
    info = store.serving("tally")
    if info is None:
        return 0
    with store.reader(info.set_id) as r:
        return r.event_count()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}
    return env


def test_sigkill_mid_run_then_restart_equals_a_clean_replay(
    support: ModuleType, tmp_path: Path, open_store: Open, database_url: str | None
) -> None:
    data = tmp_path / "data"
    events = support.election_log(1500, corrections=2, rejections=1)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(events)
    store = _cli_store(data, database_url)
    proc = subprocess.Popen(_cli(data, database_url, "project", "--batch-size", "20", "-q"), env=_env())
    try:
        support.wait_for(lambda: _applied(store) >= 300, 60, "the runner to apply 300 events")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    killed_at = _applied(store)
    assert 0 < killed_at < len(events), "killed mid-run"
    done = subprocess.run(_cli(data, database_url, "project", "--until-caught-up", "--json", "-q"), env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _applied(store) == len(events)

    clean_store = open_store()
    clean = clean_store.create_set("clean", source="t").set_id
    ProjectionRunner(clean_store, clean, EmbeddedSource(SqliteLog(log.path)), batch_size=1000).run(until_caught_up=True)
    sid = store.serving("tally").set_id  # type: ignore[union-attr]
    assert support.snapshot(store, sid) == support.snapshot(clean_store, clean)
    store.close()


def test_sigterm_stops_cleanly_between_batches(support: ModuleType, tmp_path: Path, database_url: str | None) -> None:
    data = tmp_path / "data"
    events = support.election_log(1500, corrections=2)
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(events)
    store = _cli_store(data, database_url)
    proc = subprocess.Popen(_cli(data, database_url, "project", "--batch-size", "10", "--json", "-q"),
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    support.wait_for(lambda: _applied(store) >= 100, 60, "the runner to apply 100 events")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    import json

    summary = json.loads(out)
    assert summary["stopped"] == "signal"
    sid = store.serving("tally").set_id  # type: ignore[union-attr]
    with store.reader(sid) as r:
        # Positions and the event index were committed together: they agree exactly.
        assert sum(row.next_offset for row in r.positions().values()) == r.event_count() == summary["applied"]
    assert summary["applied"] < len(events)
    store.close()


def test_an_interrupted_until_caught_up_exits_130(support: ModuleType, tmp_path: Path, database_url: str | None) -> None:
    """``project --until-caught-up`` stopped by Ctrl-C before it caught up exited 0, as if it had: a script
    waiting on it went on with a tally hundreds of events short. It exits 130 (SIGTERM: 143), as
    ``caucus replay`` does; what it committed stands."""
    import json

    data = tmp_path / "data"
    events = support.election_log(1500, corrections=2)
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(events)
    store = _cli_store(data, database_url)
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        proc = subprocess.Popen(_cli(data, database_url, "project", "--until-caught-up", "--batch-size", "5",
                                     "--catch-up-batch", "0", "--json", "-q"),
                                env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        before = _applied(store)
        support.wait_for(lambda: _applied(store) >= before + 50, 60, "50 more events")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        summary = json.loads(out)
        assert summary["stopped"] == "signal" and not summary["caught_up"] and proc.returncode == code, (sig, err)
        assert _applied(store) < len(events)
    done = subprocess.run(_cli(data, database_url, "project", "--until-caught-up", "--json", "-q"), env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and json.loads(done.stdout)["caught_up"], done.stderr
    assert _applied(store) == len(events)
    store.close()


def _projected_then_restored_from_an_older_copy(support: ModuleType, tmp_path: Path) -> Path:
    """A data directory whose log (same id) was projected whole, then replaced by a copy taken after its
    first three records."""
    import shutil

    data = tmp_path / "data"
    events = support.election_log(20)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(events[:3])
    log.close()
    shutil.copy(data / "log.sqlite3", tmp_path / "older-copy.sqlite3")
    Journal(SqliteLog(data / "log.sqlite3")).append_batch(events[3:])
    first = subprocess.run(_cli(data, None, "project", "--until-caught-up", "-q"), env=_env(), capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    for name in ("log.sqlite3", "log.sqlite3-wal", "log.sqlite3-shm"):
        (data / name).unlink(missing_ok=True)
    shutil.copy(tmp_path / "older-copy.sqlite3", data / "log.sqlite3")
    return data


def test_a_rewound_log_exits_non_zero_with_a_clear_message(support: ModuleType, tmp_path: Path) -> None:
    """The same log (same id) restored from an older copy holds fewer records than the projection applied."""
    data = _projected_then_restored_from_an_older_copy(support, tmp_path)
    lost = subprocess.run(_cli(data, None, "project", "--until-caught-up", "-q"), env=_env(), capture_output=True, text=True, timeout=60)
    assert lost.returncode == 3
    assert "log lost or rewound" in lost.stderr and "projection tally v1" in lost.stderr


def test_an_older_copy_restored_and_written_past_the_projection_exits_3(support: ModuleType, tmp_path: Path) -> None:
    """The same log (same id) restored from an older copy, then written again past every position the
    projection applied: the new events sit where the projection already passed, and are not skipped."""
    data = _projected_then_restored_from_an_older_copy(support, tmp_path)
    Journal(SqliteLog(data / "log.sqlite3")).append_batch(support.election_log(60, election_id="e2"))
    again = subprocess.run(_cli(data, None, "project", "--until-caught-up", "-q"), env=_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 3, again.stderr
    assert "not the event this projection applied there" in again.stderr and f"`caucus --data-dir {data} replay --new-log`" in again.stderr


def test_a_new_log_in_place_of_the_old_one_is_refused_with_the_way_out(support: ModuleType, tmp_path: Path) -> None:
    """A log deleted and made again is another log (another id): the projection says so, and the
    instruction it gives works."""
    data = tmp_path / "data"
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(support.election_log(20))
    first = subprocess.run(_cli(data, None, "project", "--until-caught-up", "-q"), env=_env(), capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    for name in ("log.sqlite3", "log.sqlite3-wal", "log.sqlite3-shm"):
        (data / name).unlink(missing_ok=True)
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(support.election_log(1))
    other = subprocess.run(_cli(data, None, "project", "--until-caught-up", "-q"), env=_env(), capture_output=True, text=True, timeout=60)
    assert other.returncode == 3 and other.stderr.count("error:") == 1
    assert "another log" in other.stderr and f"`caucus --data-dir {data} replay --new-log`" in other.stderr
    fixed = subprocess.run(_cli(data, None, "replay", "--new-log", "-q"), env=_env(), capture_output=True, text=True, timeout=120)
    assert fixed.returncode == 0, fixed.stderr
    again = subprocess.run(_cli(data, None, "project", "--until-caught-up", "-q"), env=_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr

def test_a_running_runner_whose_log_file_is_replaced_stops_and_a_restart_checks_the_copy(
    support: ModuleType, tmp_path: Path
) -> None:
    """A copy of the log put in place of the file a follower has open (a restore): it reads no more through
    the old file (exit 3, saying to start again), and a new start finds the copy holds what was applied."""
    from tests.log_files import backup, put_in_place

    data = tmp_path / "data"
    events = support.election_log(40)
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(events)
    store = _cli_store(data, None)
    proc = subprocess.Popen(_cli(data, None, "project", "-q"), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        support.wait_for(lambda: _applied(store) >= len(events), 60, "the runner to apply the log")
        backup(data / "log.sqlite3", tmp_path / "copy.sqlite3")
        put_in_place(tmp_path / "copy.sqlite3", data / "log.sqlite3")
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    assert "was replaced by another file" in err and f"Start `caucus --data-dir {data} project` again" in err
    again = subprocess.run(_cli(data, None, "project", "--until-caught-up", "-q"), env=_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    store.close()

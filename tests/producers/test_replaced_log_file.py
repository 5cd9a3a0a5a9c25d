"""A running intake whose embedded log file is removed or replaced under it (a restore from a copy, a
data directory made again): SQLite would keep writing the old file's pages, which no reader sees, and
the intake would confirm receipts for reports no log holds. It opens the file now at the path and
checks it against what it saw, as at a start: a copy that holds everything goes on, any other file is a
lost log (nothing accepted, ``caucus intake rebuild`` to accept it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger.events import Channel
from ledger.journal import Journal
from ledger.log.port import LogFileReplacedError, LogLostError
from ledger.log.sqlite import SqliteLog
from ledger.settings import load_settings
from producers.commands import CommandKind
from producers.credentials import Credential, CredentialStore
from producers.intake import Intake, Outcome, Receipt, Submission
from tests.log_files import backup, put_in_place, remove_log
from tests.producers.conftest import ELECTION, FM5_REPORT

CAUCUS = str(Path(sys.executable).parent / "caucus")
E10 = {"first_alignment": {"Biden": 30, "Sanders": 30}, "final_alignment": {"Biden": 30, "Sanders": 30}, "attendance": 60}


def _event_ids(log: Path) -> set[str]:
    reader = SqliteLog(log, read_only=True)
    try:
        return {logged.event.event_id for logged in Journal(reader).read()}
    finally:
        reader.close()


@pytest.fixture
def official(tmp_path: Path) -> Credential:
    return CredentialStore(tmp_path / "data" / "credentials.json").issue("official", name="Pat Official")[0]


@pytest.fixture
def running(tmp_path: Path, official: Credential) -> Any:
    settings = load_settings({"data_dir": tmp_path / "data"}, env={}).settings
    log = tmp_path / "data" / "log.sqlite3"
    intake = Intake.for_settings(settings).start()  # as the service makes it (``intake_connect``)

    def send(kind: CommandKind, body: dict[str, Any], unit: str | None, key: str) -> Outcome:
        return intake.submit(Submission(kind, json.dumps(body), official, Channel.APP, unit_id=unit, idempotency_key=key))

    assert send(CommandKind.DEFINE, ELECTION, None, ELECTION["idempotency_key"]).accepted
    yield intake, send, log
    intake.close()


def test_a_report_after_the_file_was_replaced_by_an_older_copy_is_not_confirmed(running: Any, tmp_path: Path) -> None:
    intake, send, log = running
    backup(log, tmp_path / "before.sqlite3")
    first = send(CommandKind.REPORT, FM5_REPORT, "FM5", "fm5")
    assert isinstance(first, Receipt)
    put_in_place(tmp_path / "before.sqlite3", log)
    with pytest.raises(LogLostError) as lost:
        send(CommandKind.REPORT, E10, "E10", "e10")
    assert not isinstance(lost.value, LogFileReplacedError)  # the file now there was checked, and found wanting
    assert first.event_id in str(lost.value)
    assert intake.log_lost is not None and intake.status()["log_lost"]
    ids = _event_ids(log)
    assert first.event_id not in ids and len(ids) == 1  # the copy's definition, and nothing written since


def test_a_copy_that_holds_everything_takes_the_next_report(running: Any, tmp_path: Path) -> None:
    intake, send, log = running
    first = send(CommandKind.REPORT, FM5_REPORT, "FM5", "fm5")
    backup(log, tmp_path / "now.sqlite3")
    put_in_place(tmp_path / "now.sqlite3", log)
    second = send(CommandKind.REPORT, E10, "E10", "e10")
    assert isinstance(second, Receipt), second
    assert {first.event_id, second.event_id} <= _event_ids(log)  # written to the file at the path
    assert intake.log_lost is None


def test_a_log_file_removed_under_the_intake_takes_nothing(running: Any) -> None:
    """Nor does it make an empty log in its place (``intake_connect``): that would turn lost into new."""
    intake, send, log = running
    remove_log(log)
    with pytest.raises(LogLostError):
        send(CommandKind.REPORT, E10, "E10", "e10")
    assert not log.exists() and intake.log_lost is not None


def test_a_restored_copy_short_of_several_records_names_the_last_one_seen(running: Any, tmp_path: Path) -> None:
    """The copy lacks two records of one partition (the unit's opening and its report): the next intake
    names the report it saw, not a count of records against a high watermark."""
    intake, send, log = running
    backup(log, tmp_path / "before.sqlite3")
    assert send(CommandKind.OPEN, {"attendance": 91}, "FM5", "fm5-open").accepted
    report = send(CommandKind.REPORT, FM5_REPORT, "FM5", "fm5")
    assert isinstance(report, Receipt)
    intake.close()
    put_in_place(tmp_path / "before.sqlite3", log)
    again = Intake.for_settings(load_settings({"data_dir": log.parent}, env={}).settings)
    with pytest.raises(LogLostError) as lost:
        again.start()
    again.close()
    assert report.event_id in str(lost.value) and "ends before it" in str(lost.value), lost.value


def test_a_copy_moved_in_beside_the_old_files_write_ahead_log_is_not_opened(running: Any, tmp_path: Path) -> None:
    """SQLite would apply the old file's WAL pages to the copy: the intake says to remove them first."""
    intake, send, log = running
    assert isinstance(send(CommandKind.REPORT, FM5_REPORT, "FM5", "fm5"), Receipt)
    backup(log, tmp_path / "now.sqlite3")
    assert log.with_name(log.name + "-wal").exists()
    (tmp_path / "now.sqlite3").replace(log)  # the -wal and -shm of the old file stay
    with pytest.raises(LogLostError) as lost:
        send(CommandKind.REPORT, E10, "E10", "e10")
    assert "write-ahead log" in str(lost.value) and "-wal" in str(intake.log_lost)


def test_a_copy_written_over_the_file_in_place_with_its_wal_removed_is_opened_again(running: Any, tmp_path: Path) -> None:
    """``cp`` over the live file keeps its inode; the -wal and -shm removed with it (as a restore must) would
    leave the intake writing into a write-ahead log nobody else sees. It opens the log again instead."""
    intake, send, log = running
    first = send(CommandKind.REPORT, FM5_REPORT, "FM5", "fm5")
    backup(log, tmp_path / "now.sqlite3")
    for suffix in ("-wal", "-shm"):
        log.with_name(log.name + suffix).unlink()
    log.write_bytes((tmp_path / "now.sqlite3").read_bytes())  # in place: the same inode
    second = send(CommandKind.REPORT, E10, "E10", "e10")
    assert isinstance(second, Receipt), second
    tail = subprocess.run([CAUCUS, "--data-dir", str(log.parent), "log", "tail", "-n", "0", "--json"],
                          capture_output=True, text=True, check=True)  # another process: the log every reader sees
    assert {first.event_id, second.event_id} <= {json.loads(line)["event_id"] for line in tail.stdout.splitlines()}


def test_a_loss_the_running_intake_found_survives_a_restart_until_rebuild(running: Any, tmp_path: Path) -> None:
    """An older copy restored into the live file in place (SQLite's backup API, as the sqlite3 shell's
    ``.restore``): the running intake finds the log shorter and answers 503. Restarted, it must not forget
    that and take the log as it now is, with the receipt it confirmed gone; ``intake rebuild`` accepts it."""
    intake, send, log = running
    backup(log, tmp_path / "before.sqlite3")
    first = send(CommandKind.REPORT, FM5_REPORT, "FM5", "fm5")
    assert isinstance(first, Receipt)
    backup(tmp_path / "before.sqlite3", log)  # into the live file: same inode, same WAL
    with pytest.raises(LogLostError):
        send(CommandKind.REPORT, E10, "E10", "e10")
    intake.close()
    settings = load_settings({"data_dir": log.parent}, env={}).settings
    again = Intake.for_settings(settings)
    with pytest.raises(LogLostError):
        again.start()
    again.close()
    rebuilt = Intake.for_settings(settings)
    rebuilt.rebuild()
    rebuilt.close()
    after = Intake.for_settings(settings).start()
    assert after.log_lost is None
    after.close()

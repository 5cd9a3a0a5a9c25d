"""An embedded log restored from an older copy, through the command line: every command that meets it
says the log was lost (exit 3), and no accepted report disappears without a trace.

The copy is taken after the intake's last snapshot and before a report the chair was told was accepted,
so the snapshot alone vouches for nothing the restore removed."""

from __future__ import annotations

import time
from pathlib import Path

from tests.log_files import backup, put_in_place, remove_log
from tests.projections.test_tally_cli_cases import Run, _define, caucus  # noqa: F401  (fixture)

REPORT = ("--attendance", "100", "--first", "A=60,B=40", "--final", "A=60,B=40")


def _report(caucus: Run, unit: str, token: str) -> tuple[int, object]:
    return caucus("report", "--unit", unit, *REPORT, "--token", token, "--json")


def test_a_report_after_a_restore_that_lost_an_accepted_one_is_refused_until_rebuild(caucus: Run, tmp_path: Path) -> None:
    token = _define(caucus, tmp_path)
    log = tmp_path / "data" / "log.sqlite3"
    assert _report(caucus, "P2", token)[0] == 0
    backup(log, tmp_path / "backup.sqlite3")
    code, receipt = _report(caucus, "P4", token)
    assert code == 0, receipt
    put_in_place(tmp_path / "backup.sqlite3", log)
    code, text = _report(caucus, "P5", token)
    assert code == 3, text
    assert "intake rebuild" in str(text)
    # It names the accepted event that is gone, not a high watermark the restored log may well exceed.
    assert isinstance(receipt, dict) and receipt["event_id"] in str(text), (receipt, text)
    assert "ends before it" in str(text) and "high watermark" not in str(text)
    code, done = caucus("intake", "rebuild", "--json")
    assert code == 0, done
    code, receipt = _report(caucus, "P5", token)
    assert code == 0, receipt


def _projected_past_a_copy(caucus: Run, tmp_path: Path) -> Path:
    """A data directory whose log was copied, then written to (P4) and projected: the log's path."""
    token = _define(caucus, tmp_path)
    log = tmp_path / "data" / "log.sqlite3"
    backup(log, tmp_path / "backup.sqlite3")
    assert _report(caucus, "P4", token)[0] == 0
    assert caucus("project", "--until-caught-up")[0] == 0
    return log


def test_tally_audit_and_trail_of_a_projection_longer_than_its_log_are_a_lost_log(caucus: Run, tmp_path: Path) -> None:
    log = _projected_past_a_copy(caucus, tmp_path)
    put_in_place(tmp_path / "backup.sqlite3", log)
    for command in (("tally",), ("tally", "--json"), ("audit",), ("trail", "P4")):
        code, text = caucus(*command)
        assert code == 3, (command, text)


def test_a_report_to_a_log_that_is_gone_makes_no_empty_log_in_its_place(caucus: Run, tmp_path: Path) -> None:
    """An empty log made by the refused report would turn a lost log into "another log" for every
    reader; the report is refused (exit 3) and the place stays empty, until the log is restored."""
    token = _define(caucus, tmp_path)
    log = tmp_path / "data" / "log.sqlite3"
    assert _report(caucus, "P2", token)[0] == 0
    backup(log, tmp_path / "backup.sqlite3")
    remove_log(log)
    code, text = _report(caucus, "P4", token)
    assert code == 3, text
    assert "no empty log was made" in str(text)
    assert not log.exists()
    put_in_place(tmp_path / "backup.sqlite3", log)
    code, receipt = _report(caucus, "P4", token)
    assert code == 0, receipt


def test_project_and_replay_of_a_log_that_is_gone_are_a_lost_log(caucus: Run, tmp_path: Path) -> None:
    """The store names the log its projection was built from; with that log gone, projecting is not
    "nothing recorded yet" (exit 2) but a lost log (exit 3), and nothing is created."""
    token = _define(caucus, tmp_path)
    assert _report(caucus, "P2", token)[0] == 0
    assert caucus("project", "--until-caught-up")[0] == 0
    log = tmp_path / "data" / "log.sqlite3"
    remove_log(log)
    for command in (("project", "--until-caught-up"), ("replay",), ("replay", "--new-log")):
        code, text = caucus(*command)
        assert code == 3, (command, text)
        assert "was built from log" in str(text)
    assert not log.exists()
    empty = tmp_path / "elsewhere"
    code, text = caucus("--data-dir", str(empty), "project", "--until-caught-up")
    assert code == 2, text  # no projection names a log there: nothing has been recorded yet


def test_an_intake_that_stops_after_another_saw_more_does_not_hide_a_later_loss(caucus: Run, tmp_path: Path) -> None:
    """A long-lived intake (the service) stops after a command-line report it never read: what it
    last saw is older, and must not replace what the command saw, or a restore from before that report
    would pass unnoticed."""
    from ledger.config import Settings
    from producers.intake import Intake

    token = _define(caucus, tmp_path)
    log = tmp_path / "data" / "log.sqlite3"
    service = Intake.for_settings(Settings(data_dir=tmp_path / "data")).start()
    backup(log, tmp_path / "backup.sqlite3")
    assert _report(caucus, "P2", token)[0] == 0
    service.close()
    put_in_place(tmp_path / "backup.sqlite3", log)
    code, text = _report(caucus, "P4", token)
    assert code == 3, text


def test_rebuild_accepts_the_log_as_it_is_whatever_was_seen_before(caucus: Run, tmp_path: Path) -> None:
    """`caucus intake rebuild` is the way out of a lost log: neither a snapshot gone missing nor a log
    that is gone with no copy may keep it refusing."""
    token = _define(caucus, tmp_path)
    data = tmp_path / "data"
    log = data / "log.sqlite3"
    backup(log, tmp_path / "backup.sqlite3")
    assert caucus("intake", "rebuild")[0] == 0
    assert _report(caucus, "P2", token)[0] == 0
    (data / "intake" / "embedded" / "state.json").unlink()  # what was seen now names a later generation
    put_in_place(tmp_path / "backup.sqlite3", log)
    code, text = caucus("intake", "rebuild")
    assert code == 0, text
    assert _report(caucus, "P4", token)[0] == 0
    remove_log(log)
    assert _report(caucus, "P5", token)[0] == 3 and not log.exists()
    code, text = caucus("intake", "rebuild")  # no copy to restore: start again from an empty log
    assert code == 0, text
    assert log.exists()


def test_projecting_another_set_of_a_log_not_there_is_nothing_recorded_yet(caucus: Run, tmp_path: Path) -> None:
    """Only the set a command projects into speaks for its log: another set in the store (another log's,
    in a shared store) does not make a log that is not there a lost one."""
    token = _define(caucus, tmp_path)
    assert _report(caucus, "P2", token)[0] == 0
    assert caucus("project", "--until-caught-up")[0] == 0
    log = tmp_path / "data" / "log.sqlite3"
    remove_log(log)
    code, text = caucus("project", "--until-caught-up", "--projection", "other")
    assert code == 2, text
    assert caucus("project", "--until-caught-up")[0] == 3


def test_the_read_api_over_a_projection_longer_than_its_log_answers_503(caucus: Run, tmp_path: Path) -> None:
    """As `caucus tally` exits 3, the results service does not serve results the log no longer holds."""
    from fastapi.testclient import TestClient

    from ledger.config import Settings
    from projections.read_api.cli import results_app

    log = _projected_past_a_copy(caucus, tmp_path)
    with TestClient(results_app(Settings(data_dir=tmp_path / "data"))) as client:
        election = client.get("/api/elections").json()["elections"][0]["election_id"]
        assert client.get(f"/api/elections/{election}/state").status_code == 200
        put_in_place(tmp_path / "backup.sqlite3", log)
        deadline = time.monotonic() + 10  # the log is asked at most once a second
        while (answer := client.get(f"/api/elections/{election}/state")).status_code == 200:
            assert time.monotonic() < deadline, "the service went on serving what the log no longer holds"
            time.sleep(0.05)
        assert answer.status_code == 503 and "more records than the log holds" in answer.json()["error"]["message"], answer.text

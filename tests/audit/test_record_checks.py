"""The audit lists records written without the intake (``DIRECT_WRITE``) and records dated before what
the log already held (``RECORDED_OUT_OF_ORDER``): a forged, backdated second result once left the
audit clean while it replaced a unit's result and showed in reads as of before it was appended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from ledger.render import event_from_json
from producers.credentials import CredentialStore

ELECTION = {
    "election_id": "e", "name": "E", "rule_set": "idp-2020", "idempotency_key": "def-e", "candidates": ["A", "B"],
    "counties": [{"county_id": "lee", "name": "Lee", "sde_ratio": "21/150"}],
    "units": [{"unit_id": "P3", "name": "P3", "county_id": "lee", "delegates": 6},
              {"unit_id": "P4", "name": "P4", "county_id": "lee", "delegates": 3}],
}  # fmt: skip


def _caucus(data_dir: Path, *args: str, token: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CAUCUS_DATA_DIR": str(data_dir), "CAUCUS_TOKEN": token}
    env.pop("CAUCUS_KAFKA", None)
    return subprocess.run([sys.executable, "-c", "from ledger.cli import main; main()", *args], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def _report(unit: str, key: str, at: datetime) -> dict[str, Any]:
    return {
        "actor": f"chair:{unit}#deadbeef", "channel": "app", "election_id": "e", "event_id": str(uuid.uuid4()),
        "idempotency_key": key, "occurred_at": at.isoformat(), "recorded_at": at.isoformat(),
        "payload": {"reporter": "chair", "warnings": [], "result": {
            "attendance": 60, "delegates_reported": None, "final_alignment": {"B": 60}, "first_alignment": {"B": 60},
            "worksheet_digest": None}},
        "schema_version": 1, "type": "ResultReported", "unit_id": unit,
    }  # fmt: skip


def _record_findings(data: Path, *args: str) -> list[tuple[str, str, str]]:
    done = _caucus(data, "audit", "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    return sorted((f["code"], f["severity"], f["unit_id"]) for f in json.loads(done.stdout)["findings"]
                  if f["code"] in ("DIRECT_WRITE", "RECORDED_OUT_OF_ORDER"))


def _appended_then_found(data: Path, token: str, tmp_path: Path, events: list[dict[str, Any]], code: str) -> list[Any]:
    """Append ``events`` with ``log append`` (which must take them) and return the audit's ``code`` findings."""
    lines = tmp_path / f"{code}.jsonl"
    lines.write_text("".join(json.dumps(e) + "\n" for e in events))
    done = _caucus(data, "log", "append", str(lines), token=token)
    assert done.returncode == 0, done.stderr
    found: list[Any] = json.loads(_caucus(data, "audit", "--log", "--json", "--code", code).stdout)["findings"]
    return found


def test_direct_and_backdated_records_are_flagged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _, token = CredentialStore(data / "credentials.json").issue("official", name="Bob")
    (tmp_path / "el.json").write_text(json.dumps(ELECTION))
    for args in (["define", str(tmp_path / "el.json")],
                 ["report", "--unit", "P3", "--attendance", "60", "--first", "A=60", "--final", "A=60", "--key", "p3"]):
        assert _caucus(data, *args, token=token).returncode == 0
    assert _record_findings(data, "--log") == []  # the intake's own records: nothing to say
    # an official's direct write under a chair's name, accepted by `log append` (it is not backdated)
    direct = tmp_path / "direct.jsonl"
    direct.write_text(json.dumps(_report("P4", "direct-p4", datetime.now(UTC))) + "\n")
    done = _caucus(data, "log", "append", str(direct), token=token)
    assert done.returncode == 0, done.stderr
    assert _record_findings(data, "--log") == [("DIRECT_WRITE", "warn", "P4")]
    # a record written past `log append`'s checks (a hand-made log): a second P3 result, six hours back
    forged = event_from_json(_report("P3", "forged-p3", datetime.now(UTC) - timedelta(hours=6)))
    Journal(SqliteLog(data / "log.sqlite3"), writer="official:Mallory#0badc0de").append(forged)
    expected = [("DIRECT_WRITE", "warn", "P3"), ("DIRECT_WRITE", "warn", "P4"), ("RECORDED_OUT_OF_ORDER", "warn", "P3")]
    assert _record_findings(data, "--log") == expected
    assert _caucus(data, "project", "--until-caught-up").returncode == 0
    assert _record_findings(data) == expected  # the projection's audit reads the log for these too
    assert _record_findings(data, "--code", "RECORDED_OUT_OF_ORDER") == [("RECORDED_OUT_OF_ORDER", "warn", "P3")]
    # an import of files that are not the published ones: a direct write, but its times are its history's
    from ledger.record_headers import UNPUBLISHED_IMPORT

    history = event_from_json(_report("P4", "import-p4", datetime.now(UTC) - timedelta(days=2000)))
    Journal(SqliteLog(data / "log.sqlite3"), writer=f"{UNPUBLISHED_IMPORT}idp2020 (e; not as published: x.csv)").append(history)
    assert _record_findings(data, "--log") == sorted([*expected, ("DIRECT_WRITE", "warn", "P4")])


def test_an_event_that_says_it_occurred_after_it_was_recorded_is_flagged(tmp_path: Path) -> None:
    """The intake refuses an ``occurred_at`` in the future (IN_THE_FUTURE); a log that holds one anyway (a
    direct write, a log from before that rule) must not leave the audit clean: the trail orders by it."""
    data = tmp_path / "data"
    _, token = CredentialStore(data / "credentials.json").issue("official", name="Bob")
    (tmp_path / "el.json").write_text(json.dumps(ELECTION))
    assert _caucus(data, "define", str(tmp_path / "el.json"), token=token).returncode == 0
    now = datetime.now(UTC)
    late = {**_report("P3", "from-2099", now), "occurred_at": datetime(2099, 1, 1, tzinfo=UTC).isoformat()}
    skewed = {**_report("P4", "fast-clock", now), "occurred_at": (now + timedelta(minutes=9)).isoformat()}
    found = _appended_then_found(data, token, tmp_path, [late, skewed], "OCCURRED_AFTER_RECORDED")
    assert [(f["unit_id"], f["severity"], f["result_event_id"]) for f in found] == [("P3", "warn", late["event_id"])]
    assert "2099-01-01" in found[0]["message"] and found[0]["reported"].startswith("2099-01-01")


def test_the_audit_of_a_projection_refuses_a_log_it_was_not_built_from(tmp_path: Path) -> None:
    """The record checks read the configured log: over a log lost and made again they found nothing, and
    the audit said "no findings" about a projection that log no longer holds."""
    data = tmp_path / "data"
    _, token = CredentialStore(data / "credentials.json").issue("official", name="Bob")
    (tmp_path / "el.json").write_text(json.dumps(ELECTION))
    assert _caucus(data, "define", str(tmp_path / "el.json"), token=token).returncode == 0
    assert _caucus(data, "project", "--until-caught-up").returncode == 0
    assert _caucus(data, "audit", "--json").returncode == 0
    for suffix in ("", "-wal", "-shm"):
        (data / f"log.sqlite3{suffix}").unlink(missing_ok=True)
    SqliteLog(data / "log.sqlite3").close()  # made again: empty, with an id of its own
    done = _caucus(data, "audit", "--json")
    assert done.returncode == 3 and "another log" in json.loads(done.stderr)["error"]["message"], done.stderr
    assert done.stdout == ""


def test_a_correction_recorded_before_the_result_it_replaces_is_flagged(tmp_path: Path) -> None:
    """``log append`` lets a direct write be dated up to a minute before the newest record (clocks differ),
    and keeps such a log restorable; a correction so dated before the very result it supersedes would show
    in a read as of a time in between, as a correction of a result the ledger did not hold yet."""
    data = tmp_path / "data"
    _, token = CredentialStore(data / "credentials.json").issue("official", name="Bob")
    (tmp_path / "el.json").write_text(json.dumps(ELECTION))
    for args in (["define", str(tmp_path / "el.json")],
                 ["report", "--unit", "P3", "--attendance", "60", "--first", "A=60", "--final", "A=60", "--key", "p3"],
                 ["report", "--unit", "P4", "--attendance", "60", "--first", "A=60", "--final", "A=60", "--key", "p4"]):
        assert _caucus(data, *args, token=token).returncode == 0
    lines = [json.loads(line) for line in _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()]
    results = {line["unit_id"]: line for line in lines if line["type"] == "ResultReported"}

    def correction(unit: str, at: datetime) -> dict[str, Any]:
        base = _report(unit, f"fix-{unit}", at)
        return {**base, "actor": "official:bob#0001", "type": "ResultCorrected",
                "payload": {"authority": "IDP", "reason": "typo", "stage": "recanvass", "supersedes": results[unit]["event_id"],
                            "warnings": [], "result": base["payload"]["result"]}}  # fmt: skip

    early = correction("P3", datetime.fromisoformat(results["P3"]["recorded_at"]) - timedelta(seconds=20))
    fine = correction("P4", datetime.now(UTC))
    found = _appended_then_found(data, token, tmp_path, [early, fine], "RECORDED_BEFORE_SUPERSEDED")
    assert [(f["unit_id"], f["severity"], f["result_event_id"]) for f in found] == [("P3", "warn", early["event_id"])]
    assert results["P3"]["event_id"] in found[0]["message"]

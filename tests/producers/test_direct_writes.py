"""``caucus log append`` writes what an official hands it, but not what the intake would refuse of the
log as it stands, and not an event backdated before the log's newest record: a forged second result,
dated before the genuine one, once replaced the result and looked genuine to the trail and the audit.

What each event says is held to the intake's parse and checks too: a negative or fractional count, an
unknown unit or candidate, a toss for no tie, a malformed event id or schema version, and an event id the
log holds for other content are refused, naming the field and the rule; so is a result that breaks a
caucus rule, unless it is a published record (the import channel: the 2020 history holds such results),
which is kept as recorded and reported by the audit."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from producers.credentials import CredentialStore
from tests.shared_data import IOWA2020

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


def _forged(unit: str, key: str, recorded_at: datetime, **payload: Any) -> dict[str, Any]:
    return {
        "actor": f"chair:{unit}#deadbeef", "channel": "app", "election_id": "e", "event_id": str(uuid.uuid4()),
        "idempotency_key": key, "occurred_at": recorded_at.isoformat(), "recorded_at": recorded_at.isoformat(),
        "payload": payload or {"reporter": "chair", "warnings": [], "result": {
            "attendance": 60, "delegates_reported": None, "final_alignment": {"B": 60}, "first_alignment": {"B": 60},
            "worksheet_digest": None}},
        "schema_version": 1, "type": "ResultReported", "unit_id": unit,
    }  # fmt: skip


@pytest.fixture
def reported(tmp_path: Path) -> tuple[Path, str]:
    """A data directory with the election defined and P3 reported through the intake; an official's token."""
    data = tmp_path / "data"
    _, token = CredentialStore(data / "credentials.json").issue("official", name="Bob")
    (tmp_path / "el.json").write_text(json.dumps(ELECTION))
    for args in (["define", str(tmp_path / "el.json")],
                 ["report", "--unit", "P3", "--attendance", "60", "--first", "A=60", "--final", "A=60", "--key", "p3"]):
        done = _caucus(data, *args, token=token)
        assert done.returncode == 0, done.stderr
    return data, token


def _append(data: Path, token: str, tmp_path: Path, *events: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    source = tmp_path / f"{uuid.uuid4()}.jsonl"
    source.write_text("".join(json.dumps(e) + "\n" for e in events))
    return _caucus(data, "log", "append", str(source), "--json", token=token)


def _correction(key: str, at: datetime, supersedes: str, reason: str, authority: str) -> dict[str, Any]:
    """An official's correction of P3's result to B 60, as a line of ``log tail --json``."""
    return {**_forged("P3", key, at), "actor": "official:bob#0001", "type": "ResultCorrected",
            "payload": {"authority": authority, "reason": reason, "stage": "recanvass", "supersedes": supersedes,
                        "warnings": [], "result": {"attendance": 60, "delegates_reported": None, "final_alignment": {"B": 60},
                                                   "first_alignment": {"B": 60}, "worksheet_digest": None}}}  # fmt: skip


def _restore(data: Path, tmp_path: Path) -> list[str]:
    """Restore the log of ``data`` into an empty data directory (``log tail`` into ``log append``, by another
    official); asserts it restores whole, and returns the event ids in the order restored."""
    history = tmp_path / f"history-{uuid.uuid4()}.jsonl"
    history.write_text(_caucus(data, "log", "tail", "-n", "0", "--json").stdout)
    restored = tmp_path / f"restored-{uuid.uuid4()}"
    _, other = CredentialStore(restored / "credentials.json").issue("official", name="Restorer")
    done = _caucus(restored, "log", "append", str(history), "--json", token=other)
    assert done.returncode == 0, done.stderr
    assert _log_size(restored) == _log_size(data)
    return [json.loads(line)["event_id"] for line in history.read_text().splitlines()]


def _log_size(data: Path) -> int:
    return int(json.loads(_caucus(data, "log", "info", "--json").stdout)["records"])


def test_a_forged_second_result_is_refused(reported: tuple[Path, str], tmp_path: Path) -> None:
    data, token = reported
    before = _log_size(data)
    now = datetime.now(UTC)
    done = _append(data, token, tmp_path, _forged("P3", "forged-1", now))
    assert done.returncode == 1 and "unit_id" in done.stderr and "ALREADY_REPORTED" in done.stderr, done.stderr
    backdated = _append(data, token, tmp_path, _forged("P4", "forged-2", now - timedelta(hours=6)))
    assert backdated.returncode == 1 and "recorded_at" in backdated.stderr and "RECORDED_OUT_OF_ORDER" in backdated.stderr
    ahead = _append(data, token, tmp_path, _forged("P4", "forged-3", now + timedelta(hours=6)))
    assert ahead.returncode == 1 and "RECORDED_IN_FUTURE" in ahead.stderr, ahead.stderr
    # Not even by seconds: a report the intake took after it would be dated before it, and a restore, which reads
    # the log in time order, would judge that report first (refused, were it for a unit a postdated redefinition adds).
    slightly = _append(data, token, tmp_path, _forged("P4", "forged-4", datetime.now(UTC) + timedelta(seconds=50)))
    assert slightly.returncode == 1 and "RECORDED_IN_FUTURE" in slightly.stderr, slightly.stderr
    # one refused line refuses the file: the good line before it is not appended either
    mixed = _append(data, token, tmp_path, _forged("P4", "fine", now), _forged("P4", "second", now))
    assert mixed.returncode == 1 and "line 2" in mixed.stderr and "ALREADY_REPORTED" in mixed.stderr, mixed.stderr
    assert _log_size(data) == before
    fine = _append(data, token, tmp_path, _forged("P4", "fine", now))
    assert fine.returncode == 0, fine.stderr
    assert _log_size(data) == before + 1


def test_a_whole_log_restores_into_an_empty_one(reported: tuple[Path, str], tmp_path: Path) -> None:
    data, token = reported
    history = tmp_path / "history.jsonl"
    history.write_text(_caucus(data, "log", "tail", "--json").stdout)
    restored = tmp_path / "restored"
    _, other = CredentialStore(restored / "credentials.json").issue("official", name="Restorer")
    for first in (True, False):  # the second time everything is there already: nothing new, nothing refused
        done = _caucus(restored, "log", "append", str(history), "--json", token=other)
        assert done.returncode == 0, done.stderr
        assert {line["appended"] for line in json.loads(done.stdout)} == {first}, "each line says whether it was written"
    assert _log_size(restored) == _log_size(data)
    shown = _caucus(restored, "log", "append", str(history), token=other)
    assert shown.stdout.rstrip().endswith(f"0 appended, {_log_size(data)} already in the log"), shown.stdout


def test_the_trail_names_who_wrote_a_direct_write(reported: tuple[Path, str], tmp_path: Path) -> None:
    """An official may append a report under a chair's actor; the trail shows the official beside it."""
    data, token = reported
    done = _append(data, token, tmp_path, _forged("P4", "direct-p4", datetime.now(UTC)))
    assert done.returncode == 0, done.stderr
    assert _caucus(data, "project", "--until-caught-up").returncode == 0
    trail = json.loads(_caucus(data, "trail", "P4", "--json").stdout)
    (entry,) = trail["events"]
    assert entry["actor"] == "chair:P4#deadbeef" and entry["writer"].startswith("official:Bob#"), entry
    text = " ".join(_caucus(data, "trail", "P4").stdout.split())  # the line may wrap to the terminal's width
    assert "by chair:P4#deadbeef via app (written directly by official:Bob#" in text, text
    genuine = json.loads(_caucus(data, "trail", "P3", "--json").stdout)["events"]
    assert [e["writer"] for e in genuine] == ["system:intake"]
    assert "written directly" not in _caucus(data, "trail", "P3").stdout


def test_the_2020_history_restores_and_restores_again(tmp_path: Path) -> None:
    """The importer's log holds what the intake would refuse (a second definition of the election, from
    a later release) and times years before today: restored whole into an empty log it is accepted, and
    appending it again writes nothing and refuses nothing."""
    data = IOWA2020
    if not (data / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {data}")
    source = tmp_path / "imported"
    imported = _caucus(source, "import", "idp2020", "--data", str(data))
    assert imported.returncode == 0, imported.stderr
    history = tmp_path / "history.jsonl"
    history.write_text(_caucus(source, "log", "tail", "-n", "0", "--json").stdout)
    restored = tmp_path / "restored"
    _, token = CredentialStore(restored / "credentials.json").issue("official", name="Restorer")
    for _ in range(2):
        done = _caucus(restored, "log", "append", str(history), "--json", token=token)
        assert done.returncode == 0, done.stderr[:2000]
    assert _log_size(restored) == _log_size(source) == len(history.read_text().splitlines())


def test_the_importer_may_not_redefine_an_election_the_log_holds_otherwise(reported: tuple[Path, str], tmp_path: Path) -> None:
    """An election of the importer's id already in the log, with a unit reported: the 2020 definition
    would drop that unit and its candidates, so its result would leave every tally. The importer is
    judged as a direct write is (its times aside) and appends nothing; under an id of its own it imports."""
    data_dir = IOWA2020
    if not (data_dir / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {data_dir}")
    data, _ = reported
    before = _log_size(data)
    clash = _caucus(data, "import", "idp2020", "--data", str(data_dir), "--election-id", ELECTION["election_id"], "--json")
    assert clash.returncode == 1, clash.stderr
    summary = json.loads(clash.stdout)
    errors = [i["message"] for i in summary["issues"] if i["severity"] == "error"]
    assert any("UNIT_REMOVED" in m and "'P3'" in m for m in errors), errors
    assert summary["appended"] == 0 and _log_size(data) == before
    beside = _caucus(data, "import", "idp2020", "--data", str(data_dir), "--election-id", "iowa-2020", "--json")
    assert beside.returncode == 0, beside.stderr
    assert json.loads(beside.stdout)["appended"] == 1868
    lines = _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()
    corrected = next(doc["unit_id"] for doc in map(json.loads, lines) if doc["type"] == "ResultCorrected")
    again = _caucus(data, "import", "idp2020", "--data", str(data_dir), "--election-id", "iowa-2020", "--recount-unit", corrected,
                    "--json")  # the correction's stage changes: other content under an id the log holds
    assert again.returncode == 1
    assert any("EVENT_ID_CONFLICT" in i["message"] for i in json.loads(again.stdout)["issues"])
    assert _log_size(data) == before + 1868


def test_a_direct_write_is_read_by_an_intake_whose_queued_command_shares_a_catch_up(
    reported: tuple[Path, str], tmp_path: Path
) -> None:
    """A command queued on a running intake may share the catch-up that began after it arrived, unless a
    write landed since: ``caucus log append`` must take the intake's turn and mark its write like an intake
    does, or the intake decides against a log that moved on and records a second result for the unit."""
    import time

    from ledger.config import Settings
    from producers.commands import CommandKind
    from producers.intake import Intake, Refusal, Submission

    data, token = reported
    official, _ = CredentialStore(data / "credentials.json").issue("official", name="Ann")
    intake = Intake.for_settings(Settings.from_env({"CAUCUS_DATA_DIR": str(data)})).start()
    try:
        arrived = time.monotonic()  # a report for P4 queues on the lock here...
        opened = intake.submit(Submission(CommandKind.OPEN, json.dumps({"attendance": 60}), official,
                                          unit_id="P4", idempotency_key="open-p4"))  # ...while this catches up
        assert opened.accepted
        done = _append(data, token, tmp_path, _forged("P4", "direct-p4", datetime.now(UTC)))
        assert done.returncode == 0, done.stderr
        report = {"attendance": 60, "first_alignment": {"A": 60}, "final_alignment": {"A": 60}}
        with intake._locked():  # the queued report's turn
            intake._refresh(arrived)
            outcome = intake._submit(Submission(CommandKind.REPORT, json.dumps(report), official, unit_id="P4",
                                                idempotency_key="p4-late"))
        assert isinstance(outcome, Refusal) and outcome.errors[0].code == "ALREADY_REPORTED", outcome
    finally:
        intake.close()


def _result(**result: Any) -> dict[str, Any]:
    base = {"attendance": 60, "delegates_reported": None, "final_alignment": {"A": 30, "B": 30},
            "first_alignment": {"A": 30, "B": 30}, "worksheet_digest": None}
    return {"reporter": "chair", "warnings": [], "result": {**base, **result}}


def _toss(**fields: Any) -> dict[str, Any]:
    return {"contenders": ["A", "B"], "seats": 1, "winners": ["A"], "method": "coin", "caller": "chair",
            "witnesses": [], "reason": "", "supersedes": "", **fields}


def _with(event: dict[str, Any], **envelope: Any) -> dict[str, Any]:
    return {**event, **envelope}


CASES: list[tuple[str, Any, str, str]] = [
    ("negative count", lambda now: _forged("P4", "neg", now, **_result(first_alignment={"A": -5, "B": 30})),
     "first_alignment.A", "NEGATIVE"),
    ("fractional count", lambda now: _forged("P4", "frac", now, **_result(first_alignment={"A": 1.5, "B": 30})),
     "first_alignment.A", ""),
    ("negative attendance", lambda now: _forged("P4", "att", now, **_result(attendance=-1)), "attendance", ""),
    ("unknown candidate", lambda now: _forged("P4", "zorro", now, **_result(first_alignment={"Zorro": 5}, final_alignment={"Zorro": 5})),
     "first_alignment.Zorro", "UNKNOWN_CANDIDATE"),
    ("unknown unit", lambda now: _with(_forged("ZZZ", "zzz", now), unit_id="ZZZ"), "unit_id", "UNKNOWN_UNIT"),
    ("toss for no tie", lambda now: _with(_forged("P3", "toss", now, **_toss()), type="TieBroken", schema_version=2),
     "", "NO_SUCH_TIE"),
    ("toss won by a stranger", lambda now: _with(_forged("P3", "toss2", now, **_toss(winners=["Zorro"])), type="TieBroken",
                                                schema_version=2), "winners.0", "WINNER_NOT_CONTENDER"),
    ("event id not a UUID", lambda now: _with(_forged("P4", "id", now), event_id="not-a-uuid"), "event_id", "NOT_A_UUID"),
    ("unknown schema version", lambda now: _with(_forged("P4", "ver", now), schema_version=99), "schema_version", "UNKNOWN_VERSION"),
    # too large for the schema's int (or any long) is, first, too large for the intake: a refusal like 5,000,000
    ("count beyond a long", lambda now: _forged("P4", "huge", now, **_result(first_alignment={"A": 10**30, "B": 30})),
     "first_alignment.A", "TOO_LARGE"),
    ("attendance beyond an int", lambda now: _forged("P4", "int", now, **_result(attendance=2**31)), "attendance", "TOO_LARGE"),
]


@pytest.mark.parametrize("line,says", [
    ('{"a": 1}', "it has no field 'type'"),
    ("not json", "not JSON"),
    ("[1]", "a line is one JSON object"),
    ("PAYLOAD_X", "field 'payload' is not an object"),
    ("RECORDED_GARBAGE", "field 'recorded_at' is not an ISO 8601 time"),
])
def test_a_line_that_is_not_an_event_names_what_is_wrong(reported: tuple[Path, str], tmp_path: Path, line: str, says: str) -> None:
    data, token = reported
    now = datetime.now(UTC)
    line = {"PAYLOAD_X": json.dumps({**_forged("P4", "x", now), "payload": "x"}),
            "RECORDED_GARBAGE": json.dumps({**_forged("P4", "g", now), "recorded_at": "garbage"})}.get(line, line)
    source = tmp_path / "lines.jsonl"
    source.write_text(json.dumps(_forged("P4", "fine", now)) + "\n" + line + "\n")
    done = _caucus(data, "log", "append", str(source), token=token)
    assert done.returncode == 2 and f"line 2: not an event: {says}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name,make,field,code", CASES, ids=[c[0] for c in CASES])
def test_what_the_intake_would_refuse_is_refused(reported: tuple[Path, str], tmp_path: Path, name: str, make: Any,
                                                 field: str, code: str) -> None:
    data, token = reported
    before = _log_size(data)
    done = _append(data, token, tmp_path, make(datetime.now(UTC)))
    assert done.returncode == 1, (name, done.stdout, done.stderr)
    assert "refused, nothing appended" in done.stderr and field in done.stderr and code.upper() in done.stderr.upper(), done.stderr
    assert "Traceback" not in done.stderr
    assert _log_size(data) == before


def test_a_result_that_breaks_a_caucus_rule_is_refused_unless_it_is_a_published_record(
    reported: tuple[Path, str], tmp_path: Path
) -> None:
    """1,000 delegates for a unit that elects 3: refused as the intake refuses it. The same on the import
    channel (a published record, as the certified 2020 release holds such results) is kept as recorded,
    and the audit names it."""
    data, token = reported
    before = _log_size(data)
    huge = _forged("P4", "huge", datetime.now(UTC), **_result(delegates_reported={"A": 1000, "B": 0}))
    done = _append(data, token, tmp_path, huge)
    assert done.returncode == 1 and "DELEGATE_TOTAL" in done.stderr and "delegates_reported" in done.stderr, done.stderr
    assert _log_size(data) == before
    published = {**_forged("P4", "published", datetime.now(UTC), **_result(delegates_reported={"A": 9, "B": 9})),
                 "channel": "import", "actor": "idp-results-site"}
    kept = _append(data, token, tmp_path, published)
    assert kept.returncode == 0, kept.stderr
    assert _caucus(data, "project", "--until-caught-up", "-q").returncode == 0
    audit = json.loads(_caucus(data, "audit", "--json").stdout)
    assert any(f["code"] == "DELEGATE_TOTAL" and f["unit_id"] == "P4" for f in audit["findings"]), audit["findings"]


def test_an_event_id_the_log_holds_for_other_content_is_refused(reported: tuple[Path, str], tmp_path: Path) -> None:
    data, token = reported
    tail = [json.loads(line) for line in _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()]
    genuine = next(e for e in tail if e["type"] == "ResultReported")
    again = _append(data, token, tmp_path, {k: v for k, v in genuine.items() if k not in ("position", "record_headers")})
    assert again.returncode == 0, again.stderr  # the same event again: nothing new, nothing refused
    altered = copy.deepcopy(genuine)
    altered.pop("position"), altered.pop("record_headers", None)
    altered["payload"]["result"]["first_alignment"] = {"B": 60}
    altered["payload"]["result"]["final_alignment"] = {"B": 60}
    before = _log_size(data)
    done = _append(data, token, tmp_path, altered)
    assert done.returncode == 1 and "EVENT_ID_CONFLICT" in done.stderr and "event_id" in done.stderr, done.stderr
    assert _log_size(data) == before
    twice = _forged("P4", "twice", datetime.now(UTC))
    other = {**copy.deepcopy(twice), "idempotency_key": "twice-2", "payload": _result(first_alignment={"A": 60}, final_alignment={"A": 60})}
    within = _append(data, token, tmp_path, twice, other)  # one file, one id, two contents
    assert within.returncode == 1 and "line 2" in within.stderr and "EVENT_ID_CONFLICT" in within.stderr, within.stderr


def test_a_restored_log_still_restores(reported: tuple[Path, str], tmp_path: Path) -> None:
    """Every event the intake wrote passes the content checks: the whole log restores into an empty one."""
    data, token = reported
    _append(data, token, tmp_path, _forged("P4", "p4", datetime.now(UTC)))
    _restore(data, tmp_path)


def test_a_log_whose_times_disagree_with_its_order_restores(reported: tuple[Path, str], tmp_path: Path) -> None:
    """A direct write may be dated up to ``TOLERANCE`` before the newest record: here a correction of
    P3's result, dated 30 s before the result it corrects. ``log tail`` keeps each partition in its own
    order (a unit's events all sit in one), so the restore judges the correction after its result; sorted
    by time alone, the correction came first and was refused as a correction of an unknown event."""
    data, token = reported
    lines = [json.loads(line) for line in _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()]
    result = next(e for e in lines if e["type"] == "ResultReported" and e["unit_id"] == "P3")
    earlier = datetime.fromisoformat(result["recorded_at"]) - timedelta(seconds=30)
    correction = _correction("p3-recanvass", earlier, result["event_id"], "worksheet", "county recanvass board")
    done = _append(data, token, tmp_path, correction)
    assert done.returncode == 0, done.stderr
    order = _restore(data, tmp_path)
    assert order.index(result["event_id"]) < order.index(correction["event_id"])


def test_text_the_intake_once_took_blank_still_restores(reported: tuple[Path, str], tmp_path: Path) -> None:
    """The intake now refuses a correction whose reason is blank on screen (BLANK); a log it accepted such a
    correction into before must still restore: nothing the ledger accepted may be lost."""
    data, token = reported
    lines = [json.loads(line) for line in _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()]
    result = next(e for e in lines if e["type"] == "ResultReported" and e["unit_id"] == "P3")
    correction = _correction("p3-blank", datetime.now(UTC), result["event_id"], "\u200b", "\u3164")
    done = _append(data, token, tmp_path, correction)
    assert done.returncode == 0, done.stderr
    _restore(data, tmp_path)
    refused = _caucus(data, "correct", "--unit", "P3", "--supersedes", correction["event_id"], "--reason", "\u3164",
                      "--authority", "board", "--stage", "review", "--first", "B=59", "--final", "B=59", token=token)
    assert refused.returncode == 1 and "BLANK" in refused.stdout + refused.stderr, refused.stdout + refused.stderr


def test_a_line_given_twice_in_one_file_is_appended_once_and_said_so(reported: tuple[Path, str], tmp_path: Path) -> None:
    data, token = reported
    before = _log_size(data)
    line = _forged("P4", "twice", datetime.now(UTC))
    done = _append(data, token, tmp_path, line, line)
    assert done.returncode == 0, done.stderr
    assert [entry["appended"] for entry in json.loads(done.stdout)] == [True, False]
    assert _log_size(data) == before + 1


def test_a_definition_the_intake_once_took_with_a_precincts_sde_weight_still_restores(reported: tuple[Path, str],
                                                                                    tmp_path: Path) -> None:
    """The intake now refuses a precinct's sde_weight (NOT_A_SATELLITE) and a county ratio of 0 (ZERO_RATIO); a
    log holding a definition it accepted with them must still restore, and be written by a restore (nothing accepted may be lost)."""
    data, token = reported
    lines = [json.loads(line) for line in _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()]
    definition = next(e for e in lines if e["type"] == "ElectionDefined")
    older = json.loads(json.dumps(definition))
    older.update(event_id=str(uuid.uuid4()), election_id="e-older", idempotency_key="def-e-older",
                 recorded_at=datetime.now(UTC).isoformat(), occurred_at=datetime.now(UTC).isoformat())
    older["payload"]["units"][0]["sde_weight"] = {"numerator": 1, "denominator": 2}
    older["payload"]["counties"][0]["sde_ratio"] = {"numerator": 0, "denominator": 1}  # ZERO_RATIO, refused since too
    done = _append(data, token, tmp_path, older)
    assert done.returncode == 0, done.stderr
    _restore(data, tmp_path)


@pytest.mark.parametrize("where", ["result", "payload", "envelope"])
def test_a_field_the_event_does_not_have_is_refused_not_dropped(reported: tuple[Path, str], tmp_path: Path, where: str) -> None:
    """A misspelt ``delegates_reportd`` was read past and the result appended without the delegates, exit 0;
    a copy of a logged event with a field added passed as "already in the log". Both name the field now."""
    data, token = reported
    before = _log_size(data)
    line = _forged("P4", "typo", datetime.now(UTC))
    target = {"result": line["payload"]["result"], "payload": line["payload"], "envelope": line}[where]
    target["delegates_reportd"] = {"A": 3}
    done = _append(data, token, tmp_path, line)
    named = {"result": "payload.result.delegates_reportd", "payload": "payload.delegates_reportd",
             "envelope": "delegates_reportd"}[where]
    assert done.returncode == 2 and f"unknown field {named}" in done.stderr, done.stdout + done.stderr
    assert _log_size(data) == before
    logged = json.loads(_caucus(data, "log", "tail", "-n", "1", "--json").stdout)
    logged["payload"]["extra"] = 1
    again = _append(data, token, tmp_path, logged)
    assert again.returncode == 2 and "unknown field payload.extra" in again.stderr, again.stdout + again.stderr


def test_a_certification_and_a_result_may_not_be_dated_across_each_other(reported: tuple[Path, str], tmp_path: Path) -> None:
    """A certification covers the results recorded before it, by their times (they sit in other partitions).
    Dated 30 s back, inside the minute a direct write may be off, it was accepted after P3's report and
    made that report "after certification": the audit warned CHANGED_AFTER_CERTIFICATION and the tally said
    so, of a result that was in the log before the certification."""
    data, token = reported
    before = _log_size(data)

    def certification(key: str, at: datetime) -> dict[str, Any]:
        return {**_forged("", key, at), "actor": "official:bob#0001", "channel": "paper", "type": "ResultsCertified",
                "payload": {"authority": "IDP", "statement": "certified"}}

    tail = _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()
    reported_at = datetime.fromisoformat(next(json.loads(line) for line in tail if json.loads(line)["type"] == "ResultReported")["recorded_at"])
    early = _append(data, token, tmp_path, certification("cert-early", reported_at - timedelta(seconds=30)))
    assert early.returncode == 1 and "recorded_at" in early.stderr and "CERTIFIED_BEFORE_RESULTS" in early.stderr, early.stderr
    assert _log_size(data) == before
    # A result earlier in the same file counts as the log's: the certification before it in time is refused too.
    now = datetime.now(UTC)
    both = _append(data, token, tmp_path, _forged("P4", "p4", now), certification("cert-mid", now - timedelta(seconds=20)))
    assert both.returncode == 1 and "line 2" in both.stderr and "CERTIFIED_BEFORE_RESULTS" in both.stderr, both.stderr
    assert _log_size(data) == before
    certified_at = datetime.now(UTC)
    fine = _append(data, token, tmp_path, certification("cert", certified_at))
    assert fine.returncode == 0, fine.stderr
    # The mirror: a result dated before the certification the log holds would read as covered by it.
    under = _append(data, token, tmp_path, _forged("P4", "p4-under", certified_at - timedelta(seconds=20)))
    assert under.returncode == 1 and "RECORDED_BEFORE_CERTIFICATION" in under.stderr, under.stderr
    assert _log_size(data) == before + 1
    assert _caucus(data, "project", "--until-caught-up", "--quiet").returncode == 0
    audit = json.loads(_caucus(data, "audit", "--json").stdout)
    assert not [f for f in audit["findings"] if f["code"] == "CHANGED_AFTER_CERTIFICATION"], audit["findings"]
    assert _restore(data, tmp_path)  # a log written this way restores whole


def _logged_definition(data: Path, election_id: str, of: str = "e") -> dict[str, Any]:
    """The log's definition of ``of`` as ``log tail --json`` prints it, made another election's, dated now."""
    lines = [json.loads(line) for line in _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()]
    (definition,) = [e for e in lines if e["type"] == "ElectionDefined" and e["election_id"] == of]
    now = datetime.now(UTC).isoformat()
    definition.update(event_id=str(uuid.uuid4()), election_id=election_id, idempotency_key=f"def-{election_id}",
                      recorded_at=now, occurred_at=now)
    for name in ("position", "record_headers"):
        definition.pop(name, None)
    return definition


def test_an_appended_definition_is_refused_with_every_error_at_once(reported: tuple[Path, str], tmp_path: Path) -> None:
    """`caucus define` says every problem of a definition at once; `log append` said the first the parse
    found (a negative D) and none of the checks of the whole (a candidate twice, an unknown county)."""
    data, token = reported
    bad = _logged_definition(data, "e-bad")
    bad["payload"]["units"][0]["delegates"] = -3
    bad["payload"]["candidates"].append("A")
    bad["payload"]["units"][1]["county_id"] = "nowhere"
    bad["payload"]["counties"][0]["sde_ratio"] = {"numerator": -1, "denominator": 3}
    before = _log_size(data)
    done = _append(data, token, tmp_path, bad)
    assert done.returncode == 1 and "refused, nothing appended" in done.stderr, done.stderr
    for said in ("units.0.delegates: NEGATIVE", "candidates.2: DUPLICATE", "units.1.county_id: UNKNOWN_COUNTY",
                 "counties.0.sde_ratio: BAD_RATIO"):
        assert said in done.stderr, (said, done.stderr)
    assert _log_size(data) == before


def test_a_ratio_with_a_zero_denominator_is_named_by_its_field(reported: tuple[Path, str], tmp_path: Path) -> None:
    data, token = reported
    bad = _logged_definition(data, "e-zero")
    bad["payload"]["counties"][0]["sde_ratio"] = {"numerator": 1, "denominator": 0}
    done = _append(data, token, tmp_path, bad)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert ("line 1: not an event: ValueError: field 'payload.counties[0].sde_ratio' must be a ratio of whole numbers "
            "with a denominator other than 0") in done.stderr, done.stderr


def test_a_definition_in_the_logs_own_form_defines_and_a_bad_ratio_is_one_error(reported: tuple[Path, str],
                                                                               tmp_path: Path) -> None:
    """A definition copied from `log tail --json` gives its ratios as {"numerator", "denominator"}: `caucus
    define` refused each of them twice (".int" and ".str", one error per member of the type), as for any
    value neither a number nor text; it now reads that form, and anything else is one BAD_RATIO."""
    data, token = reported
    payload = _logged_definition(data, "e-copy")["payload"]
    body = {k: payload[k] for k in ("name", "rule_set", "candidates")}
    body.update(election_id="e-copy", idempotency_key="def-e-copy",
                counties=[{k: v for k, v in c.items() if v is not None} for c in payload["counties"]],
                units=[{k: v for k, v in u.items() if v is not None} for u in payload["units"]])
    assert body["counties"][0]["sde_ratio"] == {"numerator": 7, "denominator": 50}  # 21/150 in lowest terms
    (tmp_path / "copy.json").write_text(json.dumps(body))
    done = _caucus(data, "define", str(tmp_path / "copy.json"), token=token)
    assert done.returncode == 0, done.stderr
    copied = _logged_definition(data, "e-again", of="e-copy")  # e-copy's definition holds the same ratios
    assert copied["payload"]["counties"] == payload["counties"] and copied["payload"]["units"] == payload["units"]
    body.update(election_id="e-list", idempotency_key="def-e-list")
    body["counties"][0]["sde_ratio"] = [7, 50]
    (tmp_path / "list.json").write_text(json.dumps(body))
    done = _caucus(data, "define", str(tmp_path / "list.json"), "--json", token=token)
    assert done.returncode == 1, done.stderr
    errors = json.loads(done.stdout)["errors"]
    assert [(e["field"], e["code"]) for e in errors] == [("counties.0.sde_ratio", "BAD_RATIO")], errors
    body.update(election_id="e-neg", idempotency_key="def-e-neg")
    body["counties"][0]["sde_ratio"] = {"numerator": -7, "denominator": 50}  # said as sent, not as "-7/50"
    (tmp_path / "neg.json").write_text(json.dumps(body))
    done = _caucus(data, "define", str(tmp_path / "neg.json"), "--json", token=token)
    errors = json.loads(done.stdout)["errors"]
    assert [(e["field"], e["code"]) for e in errors] == [("counties.0.sde_ratio", "BAD_RATIO")], errors
    assert '"numerator": -7' in errors[0]["message"] and '"-7/50"' not in errors[0]["message"], errors


def test_only_a_definitions_ratio_fields_are_read_as_ratios() -> None:
    """Counts keyed by candidates named "numerator" and "denominator" are counts, whatever their values."""
    from ledger.render import bad_ratio

    assert bad_ratio({"result": {"first_alignment": {"numerator": 3, "denominator": 0}}}, "payload") is None
    said = bad_ratio({"satellite_groups": [{"sde_pool": {"numerator": 1, "denominator": 0}}]}, "payload")
    assert said is not None and "'payload.satellite_groups[0].sde_pool'" in said, said
    assert bad_ratio({"units": [{"sde_weight": {"numerator": "1", "denominator": 2}}]}, "payload") is not None

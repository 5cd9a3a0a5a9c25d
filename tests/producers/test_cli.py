"""The intake's command line: define, open, report, correct, toss, credentials, spool, intake."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import ledger.cli
import producers.cli


def _records(data: Path) -> int:
    from ledger.log.sqlite import SqliteLog

    log = SqliteLog(data / "log.sqlite3", read_only=True)
    try:
        return sum(log.high_watermarks().values())
    finally:
        log.close()


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli(*args, input=None, token=None) -> (exit code, parsed JSON or text)`` over a data dir in tmp."""
    app = typer.Typer()
    app.callback()(ledger.cli._global)  # the real global options (--data-dir, --kafka, ...)
    producers.cli.register(app)
    runner = CliRunner()
    monkeypatch.delenv("CAUCUS_TOKEN", raising=False)
    monkeypatch.delenv("CAUCUS_KAFKA", raising=False)

    def run(*args: str, input: str | None = None, token: str | None = None) -> tuple[int, Any]:
        env = {"CAUCUS_TOKEN": token} if token else {}
        result = runner.invoke(app, ["--data-dir", str(tmp_path / "data"), *args], input=input, env=env)
        out = result.stdout
        try:
            return result.exit_code, json.loads(out)
        except ValueError:
            return result.exit_code, out + result.stderr

    return run


@pytest.fixture
def tokens(cli: Any) -> dict[str, str]:
    code, official = cli("credentials", "issue", "--official", "Pat Official", "--json")
    assert code == 0 and official["role"] == "official" and official["token"].startswith("ckl_")
    code, chair = cli("credentials", "issue", "--unit", "FM5", "--json")
    assert code == 0 and chair["actor"].startswith("chair:FM5#")
    return {"official": official["token"], "chair": chair["token"]}


@pytest.fixture
def defined(cli: Any, tokens: dict[str, str], tmp_path: Path, election: dict[str, Any]) -> Path:
    path = tmp_path / "election.json"
    path.write_text(json.dumps({k: v for k, v in election.items() if k != "idempotency_key"}))
    code, receipt = cli("define", str(path), "--json", token=tokens["official"])
    assert code == 0 and receipt["status"] == "accepted", receipt
    return path


def test_define_twice_is_one_event(cli: Any, tokens: dict[str, str], defined: Path) -> None:
    code, again = cli("define", str(defined), "--json", token=tokens["official"])
    assert code == 0 and again["status"] == "duplicate"
    code, chair_try = cli("define", str(defined), "--json", "--key", "other", token=tokens["chair"])
    assert code == 1 and chair_try["category"] == "forbidden"


def test_report_from_stdin_options_and_errors(cli: Any, tokens: dict[str, str], defined: Path, fm5: dict[str, Any],
                                              tmp_path: Path) -> None:
    code, opened = cli("open", "FM5", "--attendance", "91", "--json", token=tokens["chair"])
    assert code == 0 and opened["type"] == "UnitOpened"
    code, receipt = cli("report", "-", "--unit", "FM5", "--json", input=json.dumps(fm5), token=tokens["chair"])
    assert code == 0 and receipt["status"] == "accepted" and receipt["position"]
    code, again = cli("report", "-", "--unit", "FM5", "--json", input=json.dumps(fm5), token=tokens["chair"])
    assert code == 0 and again["status"] == "duplicate" and again["event_id"] == receipt["event_id"]
    code, refused = cli("report", "--unit", "E01", "--first", "Biden=-2,Bloomberg=3", "--first", "Sanders=x",
                        "--final", "Biden=1", "--json", token=tokens["official"])  # fmt: skip
    assert code == 1 and refused["status"] == "rejected"
    assert {(e["field"], e["code"]) for e in refused["errors"]} == {
        ("first_alignment.Biden", "NEGATIVE"),
        ("first_alignment.Sanders", "NOT_AN_INTEGER"),
        ("first_alignment.Bloomberg", "UNKNOWN_CANDIDATE"),
    }
    code, wrong_unit = cli("report", "--unit", "E01", "--first", "Biden=1", "--final", "Biden=1", "--json", token=tokens["chair"])
    assert code == 1 and wrong_unit["category"] == "forbidden"
    code, nobody = cli("report", "--unit", "E01", "--first", "Biden=1", "--final", "Biden=1", "--json")
    assert code == 1 and nobody["category"] == "unauthenticated"
    code, human = cli("report", "-", "--unit", "FM5", input="{ not json", token=tokens["chair"])
    assert code == 1 and "body: MALFORMED_JSON" in human
    # a correction and a toss, by an official
    code, fixed = cli("correct", "--unit", "FM5", "--supersedes", receipt["event_id"], "--reason", "recanvass",
                      "--authority", "IDP", "--stage", "recanvass", "--first", "Biden=25,Buttigieg=35,Sanders=31",
                      "--final", "Biden=25,Buttigieg=35,Sanders=31", "--delegates", "Biden=3,Buttigieg=5,Sanders=4",
                      "--json", token=tokens["official"])  # fmt: skip
    assert code == 0 and fixed["type"] == "ResultCorrected", fixed
    # A correction given with options but missing some is a usage slip: exit 2, nothing recorded (it was
    # judged and its refusal kept in the log for good).
    before = _records(tmp_path / "data")
    code, slip = cli("correct", "--unit", "FM5", "--supersedes", fixed["event_id"], "--first", "Biden=25",
                     "--final", "Biden=25", token=tokens["official"])  # fmt: skip
    assert code == 2 and "missing --reason, --authority, --stage" in str(slip), slip
    assert _records(tmp_path / "data") == before
    code, tossed = cli("toss", "E10", "--contender", "Biden,Sanders", "--winner", "Sanders", "--caller", "captain",
                       "--witness", "secretary", "--json", token=tokens["official"])  # fmt: skip
    assert code == 0 and tossed["type"] == "TieBroken"
    code, bad_toss = cli("toss", "E10", "--contender", "Biden,Sanders", "--winner", "Warren", "--caller", "captain",
                         "--json", token=tokens["official"])  # fmt: skip
    assert code == 1 and bad_toss["errors"][0]["code"] == "WINNER_NOT_CONTENDER"


def test_spool_when_the_log_cannot_be_opened(cli: Any, tokens: dict[str, str], defined: Path, tmp_path: Path) -> None:
    log = tmp_path / "data" / "log.sqlite3"
    log.rename(tmp_path / "log.away")
    log.mkdir()  # the log's path cannot be opened as a database: unreachable
    try:
        code, receipt = cli("open", "E01", "--attendance", "100", "--json", token=tokens["official"])
        assert code == 0 and receipt["status"] == "spooled" and receipt["position"] is None
        code, unknown = cli("open", "NOPE", "--json", token=tokens["official"])
        assert code == 1 and unknown["errors"][0]["code"] == "UNKNOWN_UNIT"  # validated from the snapshot
        code, status = cli("spool", "status", "--json")
        assert code == 0 and status["pending"] == 2
        code, still = cli("spool", "flush", "--json")
        assert code == 2 and still["remaining"] == 2
    finally:
        log.rmdir()
        (tmp_path / "log.away").rename(log)
    code, flushed = cli("spool", "flush", "--json")
    assert code == 0 and (flushed["forwarded"], flushed["remaining"]) == (2, 0)
    code, status = cli("intake", "status", "--json")
    assert code == 0 and status["reachable"] and status["spool"]["pending"] == 0
    code, rebuilt = cli("intake", "rebuild", "--json")
    assert code == 0 and rebuilt["events_applied"] == 3


def test_credentials_list_and_revoke(cli: Any, tokens: dict[str, str], defined: Path) -> None:
    code, listed = cli("credentials", "list", "--json")
    assert code == 0 and len(listed) == 2 and all("token" not in c and "digest" not in c for c in listed)
    chair_id = next(c["id"] for c in listed if c["role"] == "chair")
    code, revoked = cli("credentials", "revoke", chair_id, "--json")
    assert code == 0 and revoked["revoked_at"]
    code, again = cli("credentials", "revoke", chair_id)  # it said "revoked ... at" as if revoked just now
    assert code == 0 and str(again).startswith(f"already revoked {chair_id}") and revoked["revoked_at"] in again, again
    code, refused = cli("open", "FM5", "--json", token=tokens["chair"])
    assert code == 1 and refused["errors"][0]["code"] == "REVOKED"
    code, _ = cli("credentials", "issue", "--unit", "FM5", "--official", "x")
    assert code == 2


def test_the_installed_command(tmp_path: Path) -> None:
    """The real entry point wires these commands in, with the documented exit codes."""
    env = {**os.environ, "CAUCUS_DATA_DIR": str(tmp_path / "data")}
    env.pop("CAUCUS_KAFKA", None)
    run = [sys.executable, "-c", "from ledger.cli import main; main()"]
    refused = subprocess.run([*run, "open", "FM5", "--token", "ckl_x_y", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1, refused.stderr
    assert json.loads(refused.stdout)["errors"][0]["code"] == "UNAUTHENTICATED"
    usage = subprocess.run([*run, "report", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "--first and --final" in usage.stderr


def test_a_candidate_given_twice_in_the_options_is_refused(cli: Any, tokens: dict[str, str], defined: Path) -> None:
    # The JSON form refuses a repeated key; the options must not keep the last count silently.
    for first in (["--first", "Biden=5,Biden=60"], ["--first", "Biden=50", "--first", "Biden=7"], ["--first", "Biden =60"]):
        code, out = cli("report", "--unit", "E01", "--attendance", "60", *first, "--final", "Biden=60", token=tokens["official"])
        assert code == 2 and "--first" in out and "Biden" in out, (first, out)
    code, fine = cli("report", "--unit", "E01", "--attendance", "60", "--first", "Biden=55, Sanders=5",
                     "--final", "Biden=60, Sanders=0", "--json", token=tokens["official"])  # fmt: skip
    assert code == 0 and fine["status"] == "accepted", fine


def test_counts_in_the_options_are_read_as_the_json_form_reads_them(cli: Any, tokens: dict[str, str], defined: Path) -> None:
    """Arabic-Indic digits were read as numbers by the options (``int`` accepts them) and refused by the
    JSON form (NOT_AN_INTEGER); an empty item between commas was skipped, a count silently left out."""
    code, refused = cli("report", "--unit", "E01", "--attendance", "15", "--first", "Biden=\u0661\u0660,Sanders=\u0665",
                        "--final", "Biden=\u0661\u0660,Sanders=\u0665", "--json", token=tokens["official"])  # fmt: skip
    assert code == 1 and refused["status"] == "rejected", refused
    assert {(e["field"], e["code"]) for e in refused["errors"]} >= {("first_alignment.Biden", "NOT_AN_INTEGER")}
    code, out = cli("report", "--unit", "E01", "--attendance", "60", "--first", "Biden=55,,Sanders=5",
                    "--final", "Biden=60", token=tokens["official"])  # fmt: skip
    assert code == 2 and "--first" in out and "empty item" in out, out


def test_a_ratio_the_schema_cannot_hold_is_refused_and_recorded(cli: Any, tokens: dict[str, str], tmp_path: Path, election: dict[str, Any]) -> None:
    # Ratios are Avro records of two 64-bit longs: a larger term crashed the encoder and the input was lost.
    big = {**election, "election_id": "big", "idempotency_key": "kb",
           "counties": [{"county_id": "lee", "name": "Lee", "sde_ratio": "99999999999999999999/1"},
                        {"county_id": "sat2", "name": "CD2 Satellite", "sde_ratio": 10**30}],
           "satellite_groups": [{"group_id": "cd2", "name": "CD2 Satellite", "sde_pool": "1/99999999999999999999"}],
           "units": [{"unit_id": "FM5", "name": "FM5", "county_id": "lee", "delegates": 12, "sde_weight": "²/3"}]}  # fmt: skip
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    code, refused = cli("define", str(path), "--json", token=tokens["official"])
    assert code == 1 and refused["status"] == "rejected" and refused["rejection"]["recorded"] == "log", refused
    assert {(e["field"], e["code"]) for e in refused["errors"]} == {
        ("counties.0.sde_ratio", "TOO_LARGE"),
        ("counties.1.sde_ratio", "TOO_LARGE"),
        ("satellite_groups.0.sde_pool", "TOO_LARGE"),
        ("units.0.sde_weight", "BAD_RATIO"),
    }
    # the largest term the schema holds is accepted
    big["counties"] = [{"county_id": "lee", "name": "Lee", "sde_ratio": f"{2**63 - 1}/2"}, election["counties"][1]]
    big["satellite_groups"], big["units"] = election["satellite_groups"], election["units"]
    path.write_text(json.dumps(big))
    code, accepted = cli("define", str(path), "--json", token=tokens["official"])
    assert code == 0 and accepted["status"] == "accepted", accepted


def test_a_candidate_name_holding_an_equals_sign_can_be_given_in_the_options() -> None:
    """The JSON form takes a candidate "A=1"; the options split at the first "=" and sent candidate "A" with
    the count "1=3", refused as UNKNOWN_CANDIDATE. The count is what follows the last "="."""
    import typer

    from producers.cli import _counts

    assert _counts(["A=1=3,B=2"], "--first") == {"A=1": 3, "B": 2}
    assert _counts(["A=x"], "--first") == {"A": "x"}  # not a count: passed on for the intake to refuse and record
    with pytest.raises(typer.BadParameter):
        _counts(["=5"], "--first")


def test_a_candidate_name_holding_a_comma_can_be_given_in_the_options(cli: Any, tokens: dict[str, str], tmp_path: Path,
                                                                      election: dict[str, Any]) -> None:
    """The JSON form takes a candidate "Smith, J"; the options split every value at its commas, so that
    candidate could not be reported with --first/--final, nor named in a toss. Such a name is given in
    double quotes, as in a CSV line; a quote left open is refused, not read to the end of the value."""
    election["candidates"] = ["Smith, J", "Biden"]
    path = tmp_path / "comma.json"
    path.write_text(json.dumps({k: v for k, v in election.items() if k != "idempotency_key"}))
    code, receipt = cli("define", str(path), "--json", token=tokens["official"])
    assert code == 0 and receipt["status"] == "accepted", receipt
    code, accepted = cli("report", "--unit", "E01", "--attendance", "20", "--first", '"Smith, J"=10, Biden=10',
                         "--final", '"Smith, J"=10,Biden=10', "--json", token=tokens["official"])  # fmt: skip
    assert code == 0 and accepted["status"] == "accepted", accepted
    code, tossed = cli("toss", "E01", "--contender", '"Smith, J",Biden', "--seats", "1", "--winner", '"Smith, J"',
                       "--method", "coin", "--caller", "Pat", "--json", token=tokens["official"])  # fmt: skip
    assert code == 0 and tossed["status"] == "accepted", tossed
    code, out = cli("report", "--unit", "FM5", "--first", '"Smith, J=3', "--final", "Biden=3", token=tokens["official"])
    assert code == 2 and "--first" in out and "not closed" in out, out

    from producers.cli import _counts, _names

    assert _counts(['"Smith, J"=3, Biden=4'], "--first") == {"Smith, J": 3, "Biden": 4}
    assert _counts(['"Say ""hi"", J"=1'], "--first") == {'Say "hi", J': 1}
    assert _names(['"Smith, J", Biden', "Warren"], "--contender") == ["Smith, J", "Biden", "Warren"]


@pytest.mark.parametrize("extra", [["--election", "other"], ["--occurred-at", "2020-02-03T19:30:00-06:00"]],
                         ids=["election", "occurred-at"])
def test_an_option_beside_a_json_command_is_refused_not_left_out(cli: Any, tokens: dict[str, str], defined: Path,
                                                                 fm5: dict[str, Any], tmp_path: Path,
                                                                 extra: list[str]) -> None:
    """``caucus report FILE --election E`` sent the report to the JSON's election (or refused it as naming
    none) and ``--occurred-at`` beside a file was dropped: the event said "now". Both are a usage error
    now, naming the option; nothing is recorded."""
    report = tmp_path / "fm5.json"
    report.write_text(json.dumps({**fm5, "unit_id": "FM5"}))
    before = _records(tmp_path / "data")
    for command in ("report", "correct"):
        code, out = cli(command, str(report), *extra, token=tokens["official"])
        assert code == 2 and extra[0] in out and "not both" in out, out
    assert _records(tmp_path / "data") == before, "nothing recorded"
    code, receipt = cli("report", str(report), "--json", token=tokens["official"])
    assert code == 0 and receipt["status"] == "accepted", receipt

"""A unit's identity is (election id, unit id) (DESIGN.md, correctness rules).

Two regressions, both driven through the ``caucus`` commands a chair, an operator and an auditor use:

* a submission refused before it named an election (no credential) used to become the unit's first
  event, so its election id ("") decided where the unit's later, accepted report counted: nowhere;
* two elections in one log that share unit ids used to fold into one state per unit id.

Each election's tally in a shared log must equal its tally in a log that holds it alone, on the embedded
backends and on Kafka + PostgreSQL, for the live projection and ``--as-of`` alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.cli_invoke import Caucus, caucus_cli

ELECTION = {
    "election_id": "e2020", "name": "Identity test", "rule_set": "idp-2020", "candidates": ["Adams", "Baker"],
    "counties": [{"county_id": "c", "name": "C", "sde_ratio": "1/10"}],
    "units": [{"unit_id": f"20000{i}", "name": f"Unit {i}", "county_id": "c", "delegates": 2} for i in range(1, 5)],
}  # fmt: skip
FAR_FUTURE = "2999-01-01T00:00:00Z"


_cli = caucus_cli


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Caucus]:
    """A fresh embedded data directory per name."""
    return lambda name: _cli(tmp_path / name, monkeypatch)


def _official(caucus: Caucus) -> str:
    code, cred = caucus("credentials", "issue", "--official", "Pat", "--json")
    assert code == 0
    return str(cred["token"])


def _define(caucus: Caucus, tmp_path: Path, token: str) -> None:
    path = tmp_path / "election.json"
    path.write_text(json.dumps(ELECTION))
    assert caucus("define", str(path), "--token", token)[0] == 0


def _report(caucus: Caucus, *token: str, first: str = "Adams=20,Baker=10", final: str = "Adams=20,Baker=10") -> tuple[int, Any]:
    return caucus("report", "--unit", "200002", "--attendance", "30", "--first", first, "--final", final, *token, "--json")


def _tally(caucus: Caucus, *args: str) -> dict[str, Any]:
    code, shown = caucus("tally", "--json", *args)
    assert code == 0, shown
    return dict(shown)


def _numbers(area: dict[str, Any]) -> dict[str, Any]:
    """What a tally says, without where it was read from."""
    return {k: area[k] for k in ("first", "final", "cds", "sde_display_sum", "sde", "units_reporting", "units_defined") if k in area}


def test_a_refusal_before_attribution_keeps_no_report_out_of_the_count(workspace: Callable[[str], Caucus], tmp_path: Path) -> None:
    caucus = workspace("refused-first")
    official = _official(caucus)
    _define(caucus, tmp_path, official)
    code, chair = caucus("credentials", "issue", "--unit", "200002", "--name", "Chair", "--json")
    assert code == 0
    # Refused before it could be attributed: no credential at all.
    code, refused = _report(caucus)
    assert code == 1 and refused["errors"]
    code, accepted = _report(caucus, "--token", chair["token"])
    assert code == 0 and accepted["status"] == "accepted", accepted
    assert caucus("checkpoint")[0] == 0  # names no election either, but is no refused submission
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    state = _tally(caucus)["state"]
    assert state["units_reporting"] == 1 and state["cds"] == {"Adams": 1, "Baker": 1}
    unit = _tally(caucus, "--unit", "200002")["unit"]
    assert unit["status"] == "reported" and unit["cds"] == {"Adams": 1, "Baker": 1}
    # The refusal is kept and shown: in the trail (apart) and in the audit.
    code, trail = caucus("trail", "200002", "--json")
    assert code == 0 and [e["type"] for e in trail["events"]] == ["ResultReported"]
    assert [e["type"] for e in trail["unattributed"]] == ["SubmissionRejected"]
    code, audit = caucus("audit", "--json")
    assert [(u["unit_id"], u["type"]) for u in audit["unattributed"]] == [("200002", "SubmissionRejected")]
    # Filtered to a unit or a county, the audit lists only the refusals that name that unit, or one in it.
    assert [u["unit_id"] for u in caucus("audit", "--json", "--unit", "200002")[1]["unattributed"]] == ["200002"]
    assert caucus("audit", "--json", "--unit", "200003")[1]["unattributed"] == []
    assert [u["unit_id"] for u in caucus("audit", "--json", "--county", "c")[1]["unattributed"]] == ["200002"]


def test_refusals_before_any_election_is_defined_are_listed_by_the_trail_and_the_audit(
        workspace: Callable[[str], Caucus], tmp_path: Path) -> None:
    """Reports sent before the election was defined are refused and recorded. `caucus trail` and `caucus
    audit` answered "no election is defined" (exit 2) and hid them, although README says both list them;
    once the election is defined they stay unattributed beside its units."""
    caucus = workspace("refused-before-definition")
    official = _official(caucus)
    for _ in range(2):
        code, refused = _report(caucus, "--token", official)
        assert code == 1 and [e["code"] for e in refused["errors"]] == ["UNKNOWN_ELECTION"], refused
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    code, trail = caucus("trail", "200002", "--json")
    assert code == 0, trail
    assert trail["election_id"] is None and trail["defined"] is False and trail["events"] == []
    assert [e["type"] for e in trail["unattributed"]] == ["SubmissionRejected"] * 2
    code, shown = caucus("trail", "200002")
    assert code == 0 and "no election is defined" in shown and "2 submission(s) for unit 200002 refused" in shown, shown
    code, none = caucus("trail", "200009")
    assert code == 2 and "no refused submission names the unit" in none, none
    for mode in ((), ("--log",), ("--as-of", FAR_FUTURE)):
        code, audit = caucus("audit", "--json", *mode)
        assert code == 0, (mode, audit)
        assert audit["election_id"] is None and audit["rule_set"] is None and audit["findings"] == [], (mode, audit)
        assert [(u["unit_id"], u["type"]) for u in audit["unattributed"]] == [("200002", "SubmissionRejected")] * 2, mode
    code, text = caucus("audit")
    assert code == 0 and "no election is defined" in text and "UNATTRIBUTED (2)" in text and "unit 200002: 2" in text, text
    # Filters and a rule set as with an election: the unit as the refusals name it; no counties; a bad name refused.
    assert len(caucus("audit", "--json", "--unit", "200002")[1]["unattributed"]) == 2
    assert caucus("audit", "--json", "--unit", "200003")[1]["unattributed"] == []
    code, county = caucus("audit", "--county", "c")
    assert code == 2 and "no election is defined, so there are no counties" in county, county
    for command in (("audit",), ("trail", "200002")):
        code, bad = caucus(*command, "--rule-set", "idp-1999")
        assert code == 2 and "idp-1999" in bad, (command, bad)
    _define(caucus, tmp_path, official)
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    code, trail = caucus("trail", "200002", "--json")
    assert code == 0 and trail["election_id"] == "e2020" and len(trail["unattributed"]) == 2, trail
    code, audit = caucus("audit", "--json")
    assert code == 0 and audit["election_id"] == "e2020" and len(audit["unattributed"]) == 2, audit


def test_the_audit_summary_keeps_a_long_check_name_apart_from_its_severity() -> None:
    """CHANGED_AFTER_CERTIFICATION is 27 characters: in a 24-wide column it ran into its severity."""
    from projections.audit.audit_cli import print_report
    from projections.audit.checks import AuditFinding, AuditReport

    finding = AuditFinding("200002", "Unit 2", "c", "C", False, "reported", "r1", "CHANGED_AFTER_CERTIFICATION", "warn",
                           "recorded after the certification", None, None, None, None)
    runner = CliRunner()
    import typer

    app = typer.Typer()
    app.command()(lambda: print_report(AuditReport("e2020", "idp-2020", "test", 4, 1, [finding])))
    out = runner.invoke(app, []).output
    assert "  CHANGED_AFTER_CERTIFICATION  warn" in out, out


def test_a_command_refused_unparsed_is_filed_under_its_units_election(workspace: Callable[[str], Caucus], tmp_path: Path) -> None:
    """A toss of 0 seats names its unit: its refusal is that unit's (its trail, its count of refusals), not
    one "refused before it named an election"; only a sender with no valid credential stays unattributed."""
    caucus = workspace("refused-unparsed")
    official = _official(caucus)
    _define(caucus, tmp_path, official)
    code, refused = caucus("toss", "200002", "--contender", "Adams,Baker", "--seats", "0", "--winner", "Adams",
                           "--caller", "Pat", "--token", official, "--json")
    assert code == 1 and [e["code"] for e in refused["errors"]] == ["TOO_SMALL"], refused
    code, anonymous = _report(caucus)  # no credential: whose election it is cannot be trusted
    assert code == 1 and anonymous["errors"]
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    code, trail = caucus("trail", "200002", "--json")
    assert code == 0 and [e["type"] for e in trail["events"]] == ["SubmissionRejected"], trail
    assert trail["election_id"] == ELECTION["election_id"]
    assert [e["type"] for e in trail["unattributed"]] == ["SubmissionRejected"]
    assert _tally(caucus, "--unit", "200002")["unit"]["rejected"] == 1


def test_refusals_around_a_report_and_a_correction_change_no_tally(workspace: Callable[[str], Caucus], tmp_path: Path) -> None:
    """The same accepted history with and without refusals before, between and after: the same tallies."""
    tallies = []
    for name, refuse in (("plain", False), ("hostile", True)):
        caucus = workspace(name)
        official = _official(caucus)
        _define(caucus, tmp_path, official)
        if refuse:
            assert _report(caucus)[0] == 1  # no credential: names no election
            assert _report(caucus, "--token", "not-a-token")[0] == 1
        code, report = _report(caucus, "--token", official)
        assert code == 0
        if refuse:
            assert _report(caucus, "--token", official, first="Adams=-1")[0] == 1
        code, corrected = caucus("correct", "--unit", "200002", "--supersedes", report["event_id"], "--first", "Adams=25,Baker=5",
                                 "--final", "Adams=25,Baker=5", "--attendance", "30", "--reason", "recount", "--stage", "recount", "--authority", "county chair",
                                 "--token", official, "--json")
        assert code == 0, corrected
        if refuse:
            assert _report(caucus)[0] == 1
        assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
        state, unit = _tally(caucus)["state"], _tally(caucus, "--unit", "200002")["unit"]
        assert unit["status"] == "corrected"
        as_of = _tally(caucus, "--as-of", FAR_FUTURE)["state"]
        assert _numbers(as_of) == _numbers(state)
        tallies.append((_numbers(state), {k: unit[k] for k in ("first", "final", "cds", "status", "stage")}))
    assert tallies[0] == tallies[1]


def _simulated(caucus: Caucus, token: str, seed: int, units: int) -> None:
    code, out = caucus("simulate", "write", "--seed", str(seed), "--units", str(units), "--token", token, "--json")
    assert code == 0, out


def _election_tallies(caucus: Caucus, election: str) -> tuple[dict[str, Any], dict[str, Any]]:
    live = _tally(caucus, "--election", election)
    as_of = _tally(caucus, "--election", election, "--as-of", FAR_FUTURE)
    return _numbers(live["state"]), _numbers(as_of["state"])


def _check_elections_apart(shared: Caucus, alone: Callable[[int], Caucus]) -> None:
    token = _official(shared)
    for seed in (1, 2):
        _simulated(shared, token, seed, 50)
    assert shared("project", "--until-caught-up", "--quiet")[0] == 0
    for seed in (1, 2):
        solo = alone(seed)
        _simulated(solo, _official(solo), seed, 50)
        assert solo("project", "--until-caught-up", "--quiet")[0] == 0
        expected, expected_as_of = _election_tallies(solo, f"sim-{seed}")
        assert expected == expected_as_of
        assert expected["units_reporting"] > 40, "the simulated election reports most of its units"
        live, as_of = _election_tallies(shared, f"sim-{seed}")
        assert live == expected, f"sim-{seed} in a shared log"
        assert as_of == expected, f"sim-{seed} as of now in a shared log"
        unit = _tally(shared, "--election", f"sim-{seed}", "--unit", "100001")["unit"]
        assert unit == _tally(solo, "--election", f"sim-{seed}", "--unit", "100001")["unit"]
    code, ambiguous = shared("tally", "--unit", "100001")
    assert code == 2 and "sim-1" in str(ambiguous) and "sim-2" in str(ambiguous)
    code, unknown = shared("tally", "--election", "nope")
    assert code == 2 and "unknown" in str(unknown)


def test_a_simulated_write_the_log_refuses_in_part_appends_nothing(workspace: Callable[[str], Caucus]) -> None:
    """Written again with more ties, a seed's simulation has other content under the same event ids: it
    skipped those silently, said "appended 43", and wrote coin tosses for ties the log's results do not
    have. Judged as `caucus log append` judges a file, it is refused whole (exit 1) and the log keeps
    what it had; the same simulation again appends nothing, and another seed goes beside it."""
    caucus = workspace("sim")
    token = _official(caucus)
    _simulated(caucus, token, 7, 50)
    log_size = caucus("log", "info", "--json")[1]["records"]
    code, refused = caucus("simulate", "write", "--seed", "7", "--units", "50", "--ties", "0.9", "--token", token)
    assert code == 1 and "refused, nothing appended" in str(refused) and "EVENT_ID_CONFLICT" in str(refused), refused
    assert caucus("log", "info", "--json")[1]["records"] == log_size
    code, again = caucus("simulate", "write", "--seed", "7", "--units", "50", "--token", token, "--json")
    assert code == 0 and again["appended"] == 0, again
    code, other = caucus("simulate", "write", "--seed", "8", "--units", "50", "--token", token, "--json")
    assert code == 0 and other["appended"] == sum(other["events"].values()), other
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    findings = caucus("audit", "--election", "sim-7", "--json")[1]["findings"]
    assert not [f for f in findings if f["code"] in ("TOSS_UNUSED", "RECORDED_OUT_OF_ORDER")], findings


def test_a_question_the_projection_cannot_answer_yet_says_what_it_has_not_read(workspace: Callable[[str], Caucus]) -> None:
    """A runner on its first catch-up has not read the election's definition: `caucus tally` answered
    only "no election is defined in the projection" (or "unknown"), as if the log had none."""
    caucus = workspace("behind")
    token = _official(caucus)
    _simulated(caucus, token, 1, 20)
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    _simulated(caucus, token, 2, 20)  # a second election the projection has not read
    code, out = caucus("tally", "--election", "sim-2")
    assert code == 2 and "unknown" in str(out) and "has not read" in str(out) and " project --until-caught-up` reads them" in str(out), out
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    code, out = caucus("tally", "--election", "nope")
    assert code == 2 and "has not read" not in str(out), out


def test_two_elections_sharing_unit_ids_keep_their_own_tallies(workspace: Callable[[str], Caucus]) -> None:
    _check_elections_apart(workspace("shared"), lambda seed: workspace(f"alone-{seed}"))


@pytest.mark.kafka
@pytest.mark.postgres
def test_two_elections_sharing_unit_ids_on_kafka_and_postgres(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kafka_bootstrap: str, pg_dsn: str
) -> None:
    import uuid

    import psycopg

    made: list[str] = []

    def backend(name: str) -> Caucus:
        db = f"ident_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {db}")
        made.append(db)
        url = pg_dsn.rsplit("/", 1)[0] + f"/{db}"
        topic = f"ident-{uuid.uuid4().hex[:8]}"
        return _cli(tmp_path / name, monkeypatch, "--kafka", kafka_bootstrap, "--topic", topic, "--database", url)

    try:
        _check_elections_apart(backend("shared"), lambda seed: backend(f"alone-{seed}"))
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for db in made:
                conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


@pytest.mark.slow
def test_the_demo_and_a_simulated_election_in_one_log(workspace: Callable[[str], Caucus]) -> None:
    """The issue's repro: ``caucus demo`` then ``simulate write --units 100`` in the same data directory."""
    shared, alone = workspace("demo-shared"), workspace("demo-alone")
    for caucus in (shared, alone):
        code, out = caucus("demo", "--json")
        assert code == 0, out
    _simulated(shared, _official(shared), 1, 100)
    assert shared("project", "--until-caught-up", "--quiet")[0] == 0
    assert alone("project", "--until-caught-up", "--quiet")[0] == 0
    demo = _tally(alone)["election_id"]
    assert _election_tallies(shared, demo) == _election_tallies(alone, demo)
    solo = workspace("sim-alone")
    _simulated(solo, _official(solo), 1, 100)
    assert solo("project", "--until-caught-up", "--quiet")[0] == 0
    assert _election_tallies(shared, "sim-1") == _election_tallies(solo, "sim-1")


@pytest.fixture(autouse=True)
def _no_leftover_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("CAUCUS_CONFIG", raising=False)
    yield


def test_a_refused_definition_names_an_election_that_no_command_tallies(workspace: Callable[[str], Caucus], tmp_path: Path) -> None:
    """A definition the intake refused is kept (its refusal names the election id) but defines nothing:
    tally, audit and diff of that id say it is not defined and exit 2 (the tally printed an empty
    table under "rule set None" and exited 0, the read API's audit answered 500); the defined election's
    tally is unchanged and still needs no --election."""
    caucus = workspace("ghost")
    official = _official(caucus)
    _define(caucus, tmp_path, official)
    ghost = tmp_path / "ghost.json"
    ghost.write_text(json.dumps({**ELECTION, "election_id": "ghost", "candidates": ["Adams", "Adams"]}))
    code, refused = caucus("define", str(ghost), "--token", official, "--json")
    assert code == 1 and [e["code"] for e in refused["errors"]] == ["DUPLICATE"]
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    for command in (("tally",), ("audit",), ("diff", "live", "rules:idp-2016")):
        code, said = caucus(*command, "--election", "ghost")
        assert code == 2 and "'ghost' is not defined" in str(said), (command, said)
    assert _tally(caucus)["state"]["units_defined"] == len(ELECTION["units"])


def test_a_sender_without_the_right_to_a_unit_cannot_file_refusals_under_it(workspace: Callable[[str], Caucus],
                                                                            tmp_path: Path) -> None:
    """No credential, or another unit's chair, naming the election in the body: the refusal is kept, but
    it is no part of the unit's state (its count of refusals, the events of its trail); anyone could
    otherwise write into any unit's public trail."""
    caucus = workspace("refused-foreign")
    official = _official(caucus)
    _define(caucus, tmp_path, official)
    code, other = caucus("credentials", "issue", "--unit", "200003", "--name", "Other", "--election", "e2020", "--json")
    assert code == 0
    for token in ((), ("--token", other["token"])):
        code, refused = caucus("report", "--unit", "200002", "--election", "e2020", "--attendance", "30",
                               "--first", "Adams=20,Baker=10", "--final", "Adams=20,Baker=10", *token, "--json")  # fmt: skip
        assert code == 1 and refused["errors"], refused
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    assert _tally(caucus, "--unit", "200002")["unit"]["rejected"] == 0
    code, trail = caucus("trail", "200002", "--json")
    assert code == 0 and trail["events"] == [] and len(trail["unattributed"]) == 2, trail
    assert trail["defined"] is True
    # A unit the election does not define, named by a refused report: its trail shows the refusal and says
    # the unit is not the election's (the heading alone read as one of its units).
    code, refused = caucus("report", "--unit", "NOPE", "--election", "e2020", "--attendance", "30",
                           "--first", "Adams=20,Baker=10", "--final", "Adams=20,Baker=10", "--token", official, "--json")
    assert code == 1 and refused["errors"], refused
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    code, trail = caucus("trail", "NOPE", "--json")
    assert code == 0 and trail["defined"] is False and len(trail["events"]) + len(trail["unattributed"]) == 1, trail


def test_an_unknown_election_lists_the_defined_ones_not_ids_only_refusals_named() -> None:
    """Refused definitions and submissions name ids that were never elections, some of them garbage (spaces,
    line breaks): the answer to a mistyped --election lists the defined ones, and only counts the others."""
    from typing import Any, cast

    from projections.asof import AsOfError, select_election
    from projections.reducers import ElectionState

    defined = cast(Any, object())  # only "defined or not" matters here
    elections = {"e1": ElectionState("e1", definition=defined), "e3": ElectionState("e3", definition=defined),
                 " e3 ": ElectionState(" e3 "), "e7\n": ElectionState("e7\n"), "": ElectionState("")}
    with pytest.raises(AsOfError) as caught:
        select_election(elections, "nope", where="in the projection")
    message = str(caught.value)
    assert "(defined: 'e1', 'e3'; 2 other id(s) are named only by refused submissions)" in message, message
    assert "\n" not in message and "e7" not in message


def test_the_unattributed_list_follows_both_filters_and_names_no_unit_as_none() -> None:
    from types import SimpleNamespace

    from projections.audit.audit_cli import unattributed_in, unattributed_json
    from projections.stores.port import EventRow

    rows = [EventRow("e1", "200002", "", 0, 4, "SubmissionRejected", "2020-02-03T20:00:00+00:00"),
            EventRow("e2", "election:", "", 0, 5, "SubmissionRejected", "2020-02-03T20:01:00+00:00")]
    units = {"200002": SimpleNamespace(county_id="c"), "300001": SimpleNamespace(county_id="d")}
    assert unattributed_in(rows, units, None, None) == rows
    assert unattributed_in(rows, units, "200002", "c") == rows[:1]
    assert unattributed_in(rows, units, "200002", "d") == []  # that unit is not in that county
    assert unattributed_in(rows, units, None, "d") == []
    assert unattributed_in(rows, units, "300001", None) == []
    # The text reads "(no unit)" for a refusal that named none; the JSON says so with null, not a key.
    assert [r["unit_id"] for r in unattributed_json(rows)] == ["200002", None]


def _check_refusals_naming_an_undefined_election(caucus: Caucus, tmp_path: Path) -> None:
    official = _official(caucus)
    _define(caucus, tmp_path, official)
    code, refused = caucus("report", "--unit", "200002", "--election", "e2021", "--attendance", "30",
                           "--first", "Adams=20,Baker=10", "--final", "Adams=20,Baker=10", "--token", official, "--json")
    assert code == 1 and [e["code"] for e in refused["errors"]] == ["UNKNOWN_ELECTION"], refused
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    for mode in ((), ("--log",), ("--as-of", FAR_FUTURE)):
        code, audit = caucus("audit", "--json", *mode)
        assert code == 0 and audit["election_id"] == "e2020", (mode, audit)
        assert [(u["election_id"], u["unit_id"], u["type"]) for u in audit["unattributed"]] == [
            ("e2021", "200002", "SubmissionRejected")], (mode, audit["unattributed"])
    refused_at = audit["unattributed"][0]["recorded_at"]
    code, text = caucus("audit")
    assert "UNATTRIBUTED (1)" in text and "unit 200002 of election 'e2021', which the log does not define: 1" in text, text
    # The county filter keeps it out: the unit id is e2020's, the refusal is not.
    assert caucus("audit", "--json", "--county", "c")[1]["unattributed"] == []
    assert len(caucus("audit", "--json", "--unit", "200002")[1]["unattributed"]) == 1
    code, trail = caucus("trail", "200002", "--election", "e2021", "--json")
    assert code == 0 and trail["election_id"] == "e2021", trail
    assert [e["type"] for e in trail["events"]] == ["SubmissionRejected"], trail
    code, said = caucus("tally", "--election", "e2021")
    assert code == 2 and "'e2021' is not defined" in said and "only refused submissions name it" in said, said
    # e2020's own unit 200002 has no refusal, and e2020's tally needs no --election.
    assert _tally(caucus, "--unit", "200002")["unit"]["rejected"] == 0
    # Once e2021 is defined, the refusal is one of its unit's events, no longer apart.
    path = tmp_path / "e2021.json"
    path.write_text(json.dumps({**ELECTION, "election_id": "e2021"}))
    assert caucus("define", str(path), "--token", official)[0] == 0
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    for mode in ((), ("--log",)):
        assert caucus("audit", "--json", "--election", "e2021", *mode)[1]["unattributed"] == [], mode
    # A cut before the definition still lists the refusal, said of the cut: the log does define e2021.
    code, text = caucus("audit", "--as-of", refused_at)
    assert code == 0 and "unit 200002 of election 'e2021', which the log up to the cut does not define: 1" in text, text
    assert _tally(caucus, "--election", "e2021", "--unit", "200002")["unit"]["rejected"] == 1


def test_refusals_naming_an_election_nobody_defined_are_listed_apart(workspace: Callable[[str], Caucus],
                                                                     tmp_path: Path) -> None:
    """A report naming a mistyped election id is refused and recorded under that id. It was in no audit
    (which looked only at the elections defined) and no trail (`--election` of that id answered that no
    event names it): only `caucus log tail` showed it."""
    _check_refusals_naming_an_undefined_election(workspace("undefined-election"), tmp_path)


@pytest.mark.kafka
@pytest.mark.postgres
def test_refusals_naming_an_election_nobody_defined_on_kafka_and_postgres(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kafka_bootstrap: str, pg_dsn: str
) -> None:
    import uuid

    import psycopg

    db = f"ident_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    try:
        url = pg_dsn.rsplit("/", 1)[0] + f"/{db}"
        caucus = _cli(tmp_path / "kafka", monkeypatch, "--kafka", kafka_bootstrap, "--topic", f"ident-{uuid.uuid4().hex[:8]}",
                      "--database", url)
        _check_refusals_naming_an_undefined_election(caucus, tmp_path)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def test_a_past_view_of_a_unit_or_a_county_says_it_is_one(workspace: Callable[[str], Caucus], tmp_path: Path) -> None:
    """`caucus tally --as-of` said "as of" statewide only: a unit's or a county's past tally read as the current one."""
    caucus = workspace("past-views")
    official = _official(caucus)
    _define(caucus, tmp_path, official)
    assert _report(caucus, "--token", official)[0] == 0
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    for where in (("--unit", "200002"), ("--county", "c"), ()):
        code, past = caucus("tally", *where, "--as-of", FAR_FUTURE)
        assert code == 0 and past.splitlines()[0].startswith("as of: "), (where, past)
        code, now = caucus("tally", *where)
        assert code == 0 and "as of: " not in now, (where, now)


def test_a_defined_unit_with_no_events_is_not_called_a_wrong_id(workspace: Callable[[str], Caucus], tmp_path: Path) -> None:
    caucus = workspace("quiet-unit")
    official = _official(caucus)
    _define(caucus, tmp_path, official)
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    code, said = caucus("trail", "200003")
    assert code == 2 and "defined, but nothing was recorded for it yet" in said and "give a unit id" not in said, said
    code, said = caucus("trail", "NOPE")
    assert code == 2 and "defines no such unit" in said and "give a unit id" in said, said
    code, said = caucus("report", "--unit", "200003", "--first", "Adams=3", "--token", official)
    assert code != 0 and "missing --final" in said, said


def test_a_bad_rule_set_is_not_blamed_on_records_the_projection_has_not_read(workspace: Callable[[str], Caucus],
                                                                              tmp_path: Path) -> None:
    caucus = workspace("bad-rule-set")
    official = _official(caucus)
    _define(caucus, tmp_path, official)
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    assert _report(caucus, "--token", official)[0] == 0  # one record the projection has not read
    code, said = caucus("tally", "--rule-set", "idp-2020[one_delegate_no_majority=bogus]")
    assert code == 2 and "bogus" in said and "has not read" not in said, said
    code, said = caucus("tally", "--unit", "NOPE")  # a question the unread record could answer keeps its hint
    assert code == 2 and "has not read" in said, said

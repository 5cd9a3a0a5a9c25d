"""Validation against the intake state, as pure functions: errors refuse, warnings only inform."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ledger.events import Channel, Event, ResultReported, TieBroken, TieMethod, UnitOpened, new_event
from producers.commands import CommandKind, parse_command
from producers.intake_state import IntakeState
from producers.validation import Verdict, check, conflicts, resolve_election, to_payload


def _command(kind: CommandKind, data: dict[str, Any], unit: str | None = None) -> Any:
    parsed = parse_command(kind, json.dumps({"idempotency_key": "k", **data}), unit_id=unit)
    assert parsed.command is not None, parsed.errors
    return parsed.command


def _verdict(state: IntakeState, kind: CommandKind, data: dict[str, Any], unit: str | None = None) -> Verdict:
    command = _command(kind, data, unit)
    election_id, problems = resolve_election(command, state)
    assert election_id is not None, problems
    payload, problems = to_payload(command, "tester")
    assert payload is not None, problems
    return check(command, payload, election_id, state)


def _codes(problems: tuple[Any, ...]) -> set[tuple[str, str]]:
    return {(p.field, p.code) for p in problems}


def _event(payload: Any, unit: str = "", election: str = "ia-test") -> Event[Any]:
    return new_event(payload, election_id=election, unit_id=unit, actor="t", channel=Channel.APP)


@pytest.fixture
def state(election: dict[str, Any]) -> IntakeState:
    command = _command(CommandKind.DEFINE, election)
    payload, _ = to_payload(command, "t")
    st = IntakeState()
    st.apply(_event(payload))
    return st


def test_definition_problems(state: IntakeState, election: dict[str, Any]) -> None:
    bad = {
        **election,
        "election_id": "other",
        "rule_set": "idp-2024",
        "candidates": ["A", "B", "A"],
        "units": [
            {"unit_id": "u1", "name": "U1", "county_id": "nowhere", "delegates": 3},
            {"unit_id": "u1", "name": "U1 again", "county_id": "lee"},
            {"unit_id": "s1", "name": "S1", "county_id": "lee", "satellite_group": "cd9"},
        ],
    }
    verdict = _verdict(state, CommandKind.DEFINE, bad)
    assert _codes(verdict.errors) == {
        ("rule_set", "UNKNOWN_RULE_SET"),
        ("candidates.2", "DUPLICATE"),
        ("units.1", "DUPLICATE"),
        ("units.0.county_id", "UNKNOWN_COUNTY"),
        ("units.1.delegates", "REQUIRED"),
        ("units.2.satellite_group", "UNKNOWN_SATELLITE_GROUP"),
    }
    assert _codes(_verdict(state, CommandKind.DEFINE, election).errors) == {("election_id", "ALREADY_DEFINED")}
    ratios = _command(CommandKind.DEFINE, {**election, "counties": [{"county_id": "lee", "name": "Lee", "sde_ratio": "0.14"}]})
    payload, problems = to_payload(ratios, "t")
    assert payload is None and _codes(problems) == {("counties.0.sde_ratio", "BAD_RATIO")}
    # RULES §9: a county's ratio is state delegates over county delegates; zero would weigh its precincts at nothing.
    zero = {**election, "election_id": "ia-zero", "counties": [{**election["counties"][0], "sde_ratio": "0/1"}, *election["counties"][1:]]}
    payload, problems = to_payload(_command(CommandKind.DEFINE, zero), "t")
    assert payload is not None and problems == ()  # a well-formed ratio: refused by the check, not the parser
    assert _codes(_verdict(state, CommandKind.DEFINE, zero).errors) == {("counties.0.sde_ratio", "ZERO_RATIO")}
    satellites_only = {**election, "election_id": "ia-zero", "counties": [*election["counties"][:1], {**election["counties"][1], "sde_ratio": "0"}]}
    assert _verdict(state, CommandKind.DEFINE, satellites_only).errors == ()  # their SDEs come from the pool (§8)


def test_which_election(state: IntakeState, election: dict[str, Any]) -> None:
    assert resolve_election(_command(CommandKind.OPEN, {}, "E01"), state) == ("ia-test", ())
    _, problems = resolve_election(_command(CommandKind.OPEN, {"election_id": "nope"}, "E01"), state)
    assert _codes(problems) == {("election_id", "UNKNOWN_ELECTION")}
    _, problems = resolve_election(_command(CommandKind.OPEN, {}, "ZZ9"), state)
    assert _codes(problems) == {("unit_id", "UNKNOWN_UNIT")}
    _, problems = resolve_election(_command(CommandKind.OPEN, {}, "E01"), IntakeState())
    assert _codes(problems) == {("election_id", "UNKNOWN_ELECTION")}
    second, _ = to_payload(_command(CommandKind.DEFINE, {**election, "election_id": "ia-rerun"}), "t")
    state.apply(_event(second, election="ia-rerun"))
    _, problems = resolve_election(_command(CommandKind.OPEN, {}, "E01"), state)
    assert _codes(problems) == {("election_id", "AMBIGUOUS_ELECTION")}
    assert resolve_election(_command(CommandKind.OPEN, {"election_id": "ia-rerun"}, "E01"), state) == ("ia-rerun", ())


def test_satellite_delegates_follow_attendance(state: IntakeState) -> None:
    # RULES.md E07: UIHC satellite, 65 attendees -> 7 delegates, Sanders 5 Warren 2
    e07 = {"first_alignment": {"Sanders": 48, "Warren": 15, "Uncommitted": 2},
           "final_alignment": {"Sanders": 48, "Warren": 15, "Uncommitted": 2}, "attendance": 65}  # fmt: skip
    fine = _verdict(state, CommandKind.REPORT, {**e07, "delegates_reported": {"Sanders": 5, "Warren": 2}}, "UIHC")
    assert fine.errors == ()
    wrong = _verdict(state, CommandKind.REPORT, {**e07, "delegates_reported": {"Sanders": 5, "Warren": 3}}, "UIHC")
    assert ("delegates_reported", "DELEGATE_TOTAL") in _codes(wrong.errors)


def test_a_report_of_nobody_is_accepted_with_a_warning(state: IntakeState) -> None:
    """Empty alignments and no attendance: a caucus nobody attended (it happens), or a chair who sent the
    form blank; accepted, and said."""
    empty = {"first_alignment": {}, "final_alignment": {}}
    verdict = _verdict(state, CommandKind.REPORT, empty, "E01")
    assert verdict.errors == () and _codes(verdict.warnings) == {("first_alignment", "NOBODY_COUNTED")}
    assert _codes(_verdict(state, CommandKind.REPORT, {**empty, "attendance": 0}, "E01").warnings) == set()
    zeros = {"first_alignment": {"Biden": 0}, "final_alignment": {"Biden": 0}}
    assert _codes(_verdict(state, CommandKind.REPORT, zeros, "E01").warnings) == {("first_alignment", "NOBODY_COUNTED")}


def test_odd_but_possible_reports_carry_warnings(state: IntakeState) -> None:
    state.apply(_event(UnitOpened(100), unit="E01"))
    e01 = {"first_alignment": {"Biden": 40, "Sanders": 35, "Warren": 24}, "final_alignment": {"Biden": 40, "Sanders": 35, "Warren": 24}}
    verdict = _verdict(state, CommandKind.REPORT, {**e01, "attendance": 101}, "E01")
    assert verdict.errors == ()
    assert _codes(verdict.warnings) == {("attendance", "ATTENDANCE_CHANGED"), ("first_alignment", "UNDERCOUNT")}
    # the attendance given at opening is used when the report has none
    assert _codes(_verdict(state, CommandKind.REPORT, e01, "E01").warnings) == {("first_alignment", "UNDERCOUNT")}
    # a larger group with fewer delegates: an info finding, marked as such
    odd = {"first_alignment": {"Biden": 50, "Sanders": 50}, "final_alignment": {"Biden": 51, "Sanders": 49},
           "attendance": 101, "delegates_reported": {"Biden": 2, "Sanders": 3}}  # fmt: skip
    verdict = _verdict(state, CommandKind.REPORT, odd, "E01")
    assert ("delegates_reported", "ALLOCATION") in _codes(verdict.errors)
    assert any(w.code == "MORE_VOTES_FEWER_DELS" and w.message.startswith("[info]") for w in verdict.warnings)


def test_impossible_reports_are_errors(state: IntakeState) -> None:
    e10 = {"first_alignment": {"Warren": 100, "Sanders": 50, "Biden": 50},
           "final_alignment": {"Warren": 100, "Sanders": 50, "Biden": 50}, "attendance": 200}  # fmt: skip
    # E10: Sanders/Biden toss for the sixth seat; either outcome is accepted, anything else is not
    for ok in ({"Warren": 3, "Sanders": 2, "Biden": 1}, {"Warren": 3, "Sanders": 1, "Biden": 2}):
        assert _verdict(state, CommandKind.REPORT, {**e10, "delegates_reported": ok}, "E10").errors == ()
    wrong = _verdict(state, CommandKind.REPORT, {**e10, "delegates_reported": {"Warren": 2, "Sanders": 2, "Biden": 2}}, "E10")
    assert ("delegates_reported", "ALLOCATION") in _codes(wrong.errors)
    nonviable = {"first_alignment": {"Warren": 100, "Sanders": 50, "Biden": 20}, "final_alignment": {"Warren": 100, "Sanders": 50, "Biden": 20},
                 "attendance": 170, "delegates_reported": {"Warren": 3, "Sanders": 2, "Biden": 1}}  # fmt: skip
    assert ("delegates_reported.Biden", "NONVIABLE_AWARDED") in _codes(_verdict(state, CommandKind.REPORT, nonviable, "E10").errors)
    unknown = {"first_alignment": {"Bloomberg": 3}, "final_alignment": {"Biden": 3}, "delegates_reported": {"Yang": 1}}
    assert _codes(_verdict(state, CommandKind.REPORT, unknown, "E10").errors) == {
        ("first_alignment.Bloomberg", "UNKNOWN_CANDIDATE"),
        ("delegates_reported.Yang", "UNKNOWN_CANDIDATE"),
    }


def test_ties(state: IntakeState) -> None:
    base = {"contenders": ["Biden", "Sanders"], "seats": 1, "winners": ["Sanders"], "method": "coin", "caller": "x"}
    assert _verdict(state, CommandKind.TOSS, base, "E10") == Verdict()
    lots = {**base, "contenders": ["Biden", "Sanders", "Warren"], "method": "coin", "witnesses": ["x"]}
    assert _codes(_verdict(state, CommandKind.TOSS, lots, "E10").warnings) == {("method", "COIN_FOR_MANY"), ("witnesses", "CALLER_AS_WITNESS")}
    bad = {**base, "contenders": ["Biden", "Biden", "Yang"], "seats": 3, "winners": ["Sanders"]}
    assert _codes(_verdict(state, CommandKind.TOSS, bad, "E10").errors) == {
        ("contenders.2", "UNKNOWN_CANDIDATE"),
        ("contenders.1", "DUPLICATE"),
        ("winners.0", "WINNER_NOT_CONTENDER"),
        ("seats", "NOTHING_CONTESTED"),
        ("winners", "WINNER_COUNT"),
    }


def test_corrections_and_conflicts(state: IntakeState) -> None:
    counts = {"first_alignment": {"Biden": 3}, "final_alignment": {"Biden": 3}}
    payload, _ = to_payload(_command(CommandKind.REPORT, counts, "E01"), "t")
    assert isinstance(payload, ResultReported)
    report = _event(payload, unit="E01")
    state.apply(report)
    fix = {**counts, "supersedes": report.event_id, "reason": "r", "authority": "a", "stage": "review"}
    same = _verdict(state, CommandKind.CORRECT, fix, "E01")
    assert same.errors == () and _codes(same.warnings) == {("supersedes", "CORRECTION_UNCHANGED")}
    assert _codes(_verdict(state, CommandKind.REPORT, counts, "E01").errors) == {("unit_id", "ALREADY_REPORTED")}
    # a spooled report that meets a log where the unit already reported
    assert _codes(conflicts(_event(report.payload, unit="E01"), state)) == {("unit_id", "ALREADY_REPORTED")}
    assert conflicts(_event(report.payload, unit="E10"), state) == ()
    assert _codes(conflicts(_event(UnitOpened(3), unit="E01", election="gone"), state)) == {("election_id", "UNKNOWN_ELECTION")}


def test_an_opening_after_the_result_is_refused(state: IntakeState) -> None:
    # RULES §2: a unit opens before it reports; a later opening would silently change the result's T.
    counts = {"first_alignment": {"Biden": 60, "Sanders": 40}, "final_alignment": {"Biden": 60, "Sanders": 40}}
    payload, _ = to_payload(_command(CommandKind.REPORT, counts, "E01"), "t")
    assert isinstance(payload, ResultReported)
    state.apply(_event(payload, unit="E01"))
    verdict = _verdict(state, CommandKind.OPEN, {"attendance": 1000}, "E01")
    assert _codes(verdict.errors) == {("attendance", "ALREADY_REPORTED")}
    assert "correction" in verdict.errors[0].message
    # a spooled opening that meets a log where the unit reported meanwhile
    assert _codes(conflicts(_event(UnitOpened(1000), unit="E01"), state)) == {("attendance", "ALREADY_REPORTED")}
    assert _verdict(state, CommandKind.OPEN, {"attendance": 1000}, "E10").errors == ()


def test_the_final_total_may_reach_a_known_attendance(state: IntakeState) -> None:
    # RULES §4.4: Σ final ≤ T when T is known (from the report or the opening), else Σ final ≤ Σ first.
    counts = {"first_alignment": {"Biden": 50, "Sanders": 40}, "final_alignment": {"Biden": 50, "Sanders": 50}}
    assert _verdict(state, CommandKind.REPORT, {**counts, "attendance": 100}, "E10").errors == ()
    assert ("final_alignment", "FINAL_GT_FIRST") in _codes(_verdict(state, CommandKind.REPORT, counts, "E10").errors)
    state.apply(_event(UnitOpened(100), unit="E10"))
    assert _verdict(state, CommandKind.REPORT, counts, "E10").errors == ()


def test_a_toss_for_a_tie_the_result_does_not_have_is_refused(state: IntakeState) -> None:
    # RULES §6: a toss decides a tie of the unit's result. Before a result it is accepted (§2: the precinct
    # tosses, then reports); after it, a toss for a tie the result does not call for is refused.
    toss = {"contenders": ["Sanders", "Warren"], "seats": 1, "winners": ["Warren"], "method": "coin", "caller": "x"}
    assert _verdict(state, CommandKind.TOSS, toss, "E01").errors == ()
    plain = {"first_alignment": {"Biden": 50, "Sanders": 35, "Warren": 15}, "final_alignment": {"Biden": 50, "Sanders": 35, "Warren": 15},
             "attendance": 100}  # fmt: skip
    payload, _ = to_payload(_command(CommandKind.REPORT, plain, "E01"), "t")
    state.apply(_event(payload, unit="E01"))
    refused = _verdict(state, CommandKind.TOSS, toss, "E01")
    assert _codes(refused.errors) == {("contenders", "NO_SUCH_TIE")}
    # E10 (RULES.md): Sanders and Biden tie for the sixth seat; that toss is accepted, no other
    e10 = {"first_alignment": {"Warren": 100, "Sanders": 50, "Biden": 50},
           "final_alignment": {"Warren": 100, "Sanders": 50, "Biden": 50}, "attendance": 200}  # fmt: skip
    payload, _ = to_payload(_command(CommandKind.REPORT, e10, "E10"), "t")
    state.apply(_event(payload, unit="E10"))
    real = {**toss, "contenders": ["Biden", "Sanders"], "winners": ["Sanders"]}
    assert _verdict(state, CommandKind.TOSS, real, "E10").errors == ()
    assert _codes(_verdict(state, CommandKind.TOSS, {**real, "seats": 2, "contenders": ["Biden", "Sanders", "Warren"],
                                                     "winners": ["Biden", "Sanders"], "method": "lots"}, "E10").errors) == {
        ("contenders", "NO_SUCH_TIE")}  # fmt: skip
    # A tie settled against an earlier result that a correction removed: what is wrong with a second
    # toss for it is that the result has no such tie, not that it was settled.
    state.apply(_event(TieBroken(("Sanders", "Warren"), 1, ("Warren",), TieMethod.COIN, caller="x"), unit="E01"))
    assert _codes(_verdict(state, CommandKind.TOSS, toss, "E01").errors) == {("contenders", "NO_SUCH_TIE")}


def test_lots_for_two_groups_is_a_warning(state: IntakeState) -> None:
    # RULES §6: two groups toss a coin; three or more draw lots.
    base = {"contenders": ["Biden", "Sanders"], "seats": 1, "winners": ["Sanders"], "method": "lots", "caller": "x"}
    assert _codes(_verdict(state, CommandKind.TOSS, base, "E10").warnings) == {("method", "LOTS_FOR_TWO")}


@pytest.mark.parametrize(
    "unit, why",
    [("E\x0001", "U+0000"), ("E\t01", "U+0009"), ("E\u202e01", "U+202E"), ("E\u200b01", "U+200B"), ("Cafe\u0301", "NFC")],
    ids=["nul", "tab", "bidi-override", "zero-width", "nfd"],
)
def test_ids_with_hidden_characters_or_another_unicode_form_are_refused(unit: str, why: str) -> None:
    parsed = parse_command(CommandKind.OPEN, json.dumps({"idempotency_key": "k", "unit_id": unit, "attendance": 3}))
    assert [(p.field, p.code) for p in parsed.errors] == [("unit_id", "BAD_CHARACTERS")] and why in parsed.errors[0].message


def test_an_id_with_a_slash_is_refused_as_no_http_path_could_name_it(election: dict[str, Any]) -> None:
    """A unit, county or election id with '/' was defined, then 404 on every HTTP route that names it."""
    unit = {**election["units"][0], "unit_id": "a/b"}
    parsed = parse_command(CommandKind.DEFINE, json.dumps({**election, "units": [unit, *election["units"][1:]]}))
    assert [(p.field, p.code) for p in parsed.errors] == [("units.0.unit_id", "SLASH_IN_ID")], parsed.errors
    parsed = parse_command(CommandKind.DEFINE, json.dumps({**election, "election_id": "../e"}))
    assert [(p.field, p.code) for p in parsed.errors] == [("election_id", "SLASH_IN_ID")], parsed.errors
    parsed = parse_command(CommandKind.OPEN, json.dumps({"idempotency_key": "k", "unit_id": "x/../y", "attendance": 3}))
    assert [(p.field, p.code) for p in parsed.errors] == [("unit_id", "SLASH_IN_ID")], parsed.errors


@pytest.mark.parametrize("name, char", [("Ward\x001", "U+0000"), ("Ward\u20281", "U+2028"), ("\u202eWard 1", "U+202E")],
                         ids=["nul", "line-separator", "bidi-override"])
def test_a_name_people_read_has_no_hidden_characters(election: dict[str, Any], name: str, char: str) -> None:
    """A unit's name is printed on the results site and in tables: a NUL or a line separator breaks them,
    a bidi override shows one name as another. Spaces inside a name stay allowed."""
    unit = {**election["units"][0], "name": name}
    parsed = parse_command(CommandKind.DEFINE, json.dumps({**election, "units": [unit, *election["units"][1:]]}))
    assert [(p.field, p.code) for p in parsed.errors] == [("units.0.name", "HIDDEN_CHARACTER")], parsed.errors
    assert char in parsed.errors[0].message
    county = {**election["counties"][0], "name": "Des  Moines County"}
    assert parse_command(CommandKind.DEFINE, json.dumps({**election, "counties": [county, *election["counties"][1:]]})).command


def test_candidate_names_are_plain_and_told_apart(election: dict[str, Any]) -> None:
    for name, field in (("Biden ", "candidates.1"), ("Bi\u202eden", "candidates.1")):
        parsed = parse_command(CommandKind.DEFINE, json.dumps({**election, "candidates": ["Sanders", name]}))
        assert [(p.field, p.code) for p in parsed.errors] == [(field, "BAD_CHARACTERS")], parsed.errors
    report = {"idempotency_key": "k", "unit_id": "E01", "first_alignment": {"Biden ": 3}, "final_alignment": {"Biden": 3}}
    parsed = parse_command(CommandKind.REPORT, json.dumps(report))
    assert [(p.field, p.code) for p in parsed.errors] == [("first_alignment.Biden ", "BAD_CHARACTERS")]
    # names that differ only by case or Unicode form are one candidate: a definition naming both is refused
    st = IntakeState()
    collide = {**election, "election_id": "other", "candidates": ["Warren", "warren", "Andr\u00e9", "Andre\u0301", "WARREN"]}
    verdict = _verdict(st, CommandKind.DEFINE, collide)
    assert _codes(verdict.errors) == {("candidates.1", "CANDIDATE_COLLISION"), ("candidates.3", "CANDIDATE_COLLISION"),
                                      ("candidates.4", "CANDIDATE_COLLISION")}  # fmt: skip


def test_look_alike_candidates_and_ids_are_refused(election: dict[str, Any]) -> None:
    """The fullwidth "Ｓａｎｄｅｒｓ" passed the case check (NFC, case-folded): a definition naming it beside
    "Sanders" split one candidate's counts over two rows, and the leader shown was the wrong one. Unit and
    county ids told apart only by case ("P1", "p1") were not checked at all."""
    st = IntakeState()
    look = {**election, "election_id": "other", "candidates": ["Sanders", "\uff33\uff41\uff4e\uff44\uff45\uff52\uff53", "Biden",
                                                               "\ufb01nn", "Finn"]}
    counties = election["counties"]
    look["counties"] = [*counties, {**counties[0], "county_id": counties[0]["county_id"].swapcase()}]
    units = election["units"]
    look["units"] = [*units, {**units[0], "unit_id": units[0]["unit_id"].swapcase(), "name": "another"}]
    verdict = _verdict(st, CommandKind.DEFINE, look)
    found = _codes(verdict.errors)
    assert found == {("candidates.1", "CANDIDATE_LOOKALIKE"), ("candidates.4", "CANDIDATE_COLLISION"),
                     (f"counties.{len(counties)}", "ID_LOOKALIKE"), (f"units.{len(units)}", "ID_LOOKALIKE")}, verdict.errors


@pytest.mark.parametrize("blank", [" ", "\u200b", "\u3164", " \u3164 ", "\u115f\u1160", "--"],
                         ids=["space", "zero-width", "hangul-filler", "padded-filler", "choseong-jungseong-fillers", "punctuation"])
def test_free_text_of_the_paper_trail_must_show_a_word(blank: str) -> None:
    """A correction's reason and authority, a toss's caller and witnesses: blank on screen, the trail would
    record a decision by nobody for no reason. Each is refused, naming its field."""
    correction = {"idempotency_key": "k", "unit_id": "E01", "supersedes": "r1", "reason": blank, "authority": blank,
                  "stage": "recanvass", "first_alignment": {"A": 3}, "final_alignment": {"A": 3}}
    parsed = parse_command(CommandKind.CORRECT, json.dumps(correction))
    assert sorted((p.field, p.code) for p in parsed.errors) == [("authority", "BLANK"), ("reason", "BLANK")], parsed.errors
    toss = {"idempotency_key": "k", "unit_id": "E01", "contenders": ["A", "B"], "seats": 1, "winners": ["A"],
            "method": "coin", "caller": blank, "witnesses": ["Ann", blank]}
    parsed = parse_command(CommandKind.TOSS, json.dumps(toss))
    assert sorted((p.field, p.code) for p in parsed.errors) == [("caller", "BLANK"), ("witnesses.1", "BLANK")], parsed.errors
    fine = parse_command(CommandKind.CORRECT, json.dumps({**correction, "reason": "recount", "authority": "Polk board"}))
    assert fine.errors == ()


def test_a_satellite_may_not_weigh_more_than_its_groups_pool(state: IntakeState, election: dict[str, Any]) -> None:
    """RULES §8: a satellite's SDEs are its share of its group's pool. One weighing more than the whole pool
    (666.67 SDEs of a pool of 6) is refused; the 2020 release's refitted weights, each below its pool, pass."""
    groups = [{"group_id": "cd1", "name": "CD1", "sde_pool": "6", "attendance_base": 448}]
    units = [{"unit_id": "s1", "name": "S1", "county_id": "lee", "satellite_group": "cd1", "sde_weight": "2000/3"},
             {"unit_id": "s2", "name": "S2", "county_id": "lee", "satellite_group": "cd1", "sde_weight": "6"},
             {"unit_id": "s3", "name": "S3", "county_id": "lee", "satellite_group": "cd1", "sde_weight": "1/2"}]
    verdict = _verdict(state, CommandKind.DEFINE, {**election, "election_id": "sat", "satellite_groups": groups, "units": units})
    assert _codes(verdict.errors) == {("units.0.sde_weight", "SDE_WEIGHT_OVER_POOL")}, verdict.errors
    assert "2000/3" in verdict.errors[0].message and "cd1" in verdict.errors[0].message


def test_a_correction_that_leaves_out_a_changed_attendance_says_t_reverts(state: IntakeState) -> None:
    """Opened with T 20, corrected to T 21: a later correction without T falls back to the 20 counted at the
    door (the tally does the same). The chair is told so by name, whether or not the counts then pass."""
    state.apply(_event(UnitOpened(20), unit="E01"))
    counts = {"first_alignment": {"Biden": 20}, "final_alignment": {"Biden": 20}}
    payload, _ = to_payload(_command(CommandKind.REPORT, counts, "E01"), "t")
    report = _event(payload, unit="E01")
    state.apply(report)
    fix = {"first_alignment": {"Biden": 21}, "final_alignment": {"Biden": 21}, "attendance": 21, "reason": "r",
           "authority": "a", "stage": "review", "supersedes": report.event_id}
    payload, _ = to_payload(_command(CommandKind.CORRECT, fix, "E01"), "t")
    corrected = _event(payload, unit="E01")
    state.apply(corrected)
    again = {**fix, "supersedes": corrected.event_id}
    del again["attendance"]
    verdict = _verdict(state, CommandKind.CORRECT, again, "E01")
    assert {("first_alignment", "OVERCOUNT"), ("attendance", "ATTENDANCE_REVERTS")} <= _codes(verdict.errors), \
        "a refusal shows its errors only: why T is the door count goes with them"
    (note,) = [w for w in verdict.warnings if w.code == "ATTENDANCE_REVERTS"]
    assert "gave T 21" in note.message and "the 20 counted when the unit opened" in note.message
    kept = _verdict(state, CommandKind.CORRECT, {**again, "attendance": 21}, "E01")
    assert kept.errors == () and "ATTENDANCE_REVERTS" not in {w.code for w in kept.warnings}


def test_a_precinct_may_not_carry_a_satellites_sde_weight(state: IntakeState, election: dict[str, Any]) -> None:
    """RULES §9: a precinct's SDEs are its delegates x its county's ratio. An sde_weight on a precinct
    silently replaced that (D=4 at 1/3 gave 1/2 SDE instead of 4/3); only a satellite may carry one."""
    units = [{"unit_id": "p1", "name": "P1", "county_id": "lee", "delegates": 4, "sde_weight": "1/2"}]
    verdict = _verdict(state, CommandKind.DEFINE, {**election, "election_id": "weighed", "units": units})
    assert _codes(verdict.errors) == {("units.0.sde_weight", "NOT_A_SATELLITE")}, verdict.errors


def test_a_one_delegate_unit_with_nobody_in_its_final_alignment_names_the_final_alignment(election: dict[str, Any]) -> None:
    """RULES §7: its delegate must be awarded. Refused, by the field to fix, unless the report names the
    delegate's winner (as the published 2020 results did for Johnson, Graham Township)."""
    one = {**election, "units": [*election["units"], {"unit_id": "GR", "name": "Graham", "county_id": "lee", "delegates": 1}]}
    payload, _ = to_payload(_command(CommandKind.DEFINE, one), "t")
    st = IntakeState()
    st.apply(_event(payload))
    body = {"first_alignment": {"Biden": 10, "Sanders": 9}, "final_alignment": {}, "attendance": 19}
    assert _codes(_verdict(st, CommandKind.REPORT, body, "GR").errors) == {("final_alignment", "DELEGATE_TOTAL")}
    named = _verdict(st, CommandKind.REPORT, {**body, "delegates_reported": {"Biden": 1}}, "GR")
    assert "DELEGATE_TOTAL" not in {p.code for p in (*named.errors, *named.warnings)}


@pytest.mark.parametrize("bad, field, code", [
    ({"delegates": -3}, "units.0.delegates", "NEGATIVE"),
    ({"delegates": 4.0}, "units.0.delegates", "NOT_AN_INTEGER"),
    ({"unit_id": "x" * 200}, "units.0.unit_id", "TOO_LONG"),
])  # fmt: skip
def test_one_bad_unit_is_named_once_not_also_as_no_units_at_all(bad: dict[str, Any], field: str, code: str) -> None:
    """A definition's only unit with a bad field is that field's error; it used to come with "units needs at
    least 1 item, got 0" too (the list's length counted only the units that validated). No units at all
    is still TOO_FEW."""
    election = {"idempotency_key": "k", "election_id": "e1", "name": "E", "rule_set": "idp-2020", "candidates": ["A"],
                "counties": [{"county_id": "c", "name": "C", "sde_ratio": "1/3"}],
                "units": [{"unit_id": "p", "name": "P", "county_id": "c", "delegates": 4, **bad}]}
    assert _codes(parse_command(CommandKind.DEFINE, json.dumps(election)).errors) == {(field, code)}
    empty = parse_command(CommandKind.DEFINE, json.dumps({**election, "units": []}))
    assert _codes(empty.errors) == {("units", "TOO_FEW")}
    # a list that really is too short keeps its length error, counting what was given (not what validated)
    toss = {"idempotency_key": "k", "unit_id": "E01", "contenders": ["  "], "seats": 1, "winners": ["A"],
            "method": "coin", "caller": "c", "witnesses": ["w"]}
    short = parse_command(CommandKind.TOSS, json.dumps(toss)).errors
    assert ("contenders", "TOO_FEW") in _codes(short) and any("got 1" in p.message for p in short), short
    assert ("contenders", "TOO_FEW") not in _codes(parse_command(CommandKind.TOSS, json.dumps({**toss, "contenders": ["  ", "B"]})).errors)


def test_a_name_differing_only_in_its_unicode_form_is_refused_saying_which_candidate_it_resembles(
        election: dict[str, Any]) -> None:
    """Names are compared code point for code point, as they are tallied. "Zoë" typed as "e" plus a
    combining diaeresis was refused with a list of candidates holding a "Zoë" that looks the same."""
    defined = {**election, "candidates": [*election["candidates"], "Zo\u00eb"]}
    st = IntakeState()
    st.apply(_event(to_payload(_command(CommandKind.DEFINE, defined), "t")[0]))
    typed = "Zoe\u0308"
    report = {"first_alignment": {typed: 30, "Biden": 30}, "final_alignment": {typed: 30, "Biden": 30}, "attendance": 60}
    errors = _verdict(st, CommandKind.REPORT, report, "E10").errors
    assert _codes(errors) == {(f"first_alignment.{typed}", "UNKNOWN_CANDIDATE"), (f"final_alignment.{typed}", "UNKNOWN_CANDIDATE")}
    message = errors[0].message
    assert "looks like 'Zo\u00eb'" in message and "U+0065 U+0308" in message and "U+00EB" in message, message
    other = _verdict(st, CommandKind.REPORT, {**report, "first_alignment": {"Yang": 30, "Biden": 30}}, "E10").errors
    assert [p.message for p in other if p.field == "first_alignment.Yang"][0].endswith(f"candidates: {', '.join(defined['candidates'])})")

"""The simulated election: deterministic by seed, and as messy as promised, checked with the caucus math."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from producers.commands import CommandKind, parse_command
from producers.simulator import SimConfig, command_stream, generate, simulate_election
from ledger.caucus_math import Severity, TieResolution, get_rule_set, satellite_delegates, viability_threshold

RULES = get_rule_set("idp-2020")
CONFIG = SimConfig(units=400)


@pytest.fixture(scope="module")
def election():
    return generate(11, CONFIG)


def _d(story) -> int:
    return story.unit.delegates if story.unit.delegates is not None else satellite_delegates(story.caucus.attendance)


def test_same_seed_same_election_other_seed_other_election() -> None:
    a = [json.dumps(c.to_json(), sort_keys=True) for c in command_stream(generate(5, SimConfig(units=120)))]
    b = [json.dumps(c.to_json(), sort_keys=True) for c in command_stream(generate(5, SimConfig(units=120)))]
    c = [json.dumps(c.to_json(), sort_keys=True) for c in command_stream(generate(6, SimConfig(units=120)))]
    assert a == b and a != c
    assert simulate_election(5, units=60) == simulate_election(5, units=60)


def test_every_report_follows_the_caucus_math(election) -> None:
    for story in election.stories:
        c = story.caucus
        ties = tuple(TieResolution(t.contenders, t.seats, t.winners, t.method) for t in c.tosses)
        alloc = RULES.allocate(delegates=_d(story), attendance=c.attendance, first=c.first, final=c.final, ties=ties)
        assert alloc.settled and dict(alloc.delegates) == c.delegates, story.unit.unit_id
        for numbers in (c, story.correction.caucus if story.correction else c):  # nothing the intake must refuse
            findings = RULES.check(delegates=_d(story), attendance=numbers.attendance, first=numbers.first,
                                   final=numbers.final, reported=numbers.delegates)  # fmt: skip
            assert not [f for f in findings if f.severity == Severity.ERROR], (story.unit.unit_id, findings)
        assert sum(c.first.values()) <= c.attendance and sum(c.final.values()) <= c.attendance
        threshold = viability_threshold(c.attendance, _d(story))
        if not story.tie_planned:  # §4.2 lock rule: a first-viable group never shrinks
            assert all(c.final[g] >= n for g, n in c.first.items() if n >= threshold and n > 0)


def test_ties_need_a_toss_and_the_toss_settles_them(election) -> None:
    planned = round(CONFIG.units * CONFIG.tie_share)
    tossed = [s for s in election.stories if s.caucus.tosses]
    planned_and_tossed = [s for s in tossed if s.tie_planned]
    print(f"\nties: {planned} planned, {len(planned_and_tossed)} built, {len(tossed)} units tossed in all")
    assert sum(s.tie_planned for s in election.stories) >= 0.8 * planned
    assert len(planned_and_tossed) == sum(s.tie_planned for s in election.stories)
    for story in tossed:
        c = story.caucus
        untossed = RULES.allocate(delegates=_d(story), attendance=c.attendance, first=c.first, final=c.final)
        assert untossed.pending, story.unit.unit_id
        first = untossed.pending[0]
        assert (first.contenders, first.seats) == (c.tosses[0].contenders, c.tosses[0].seats)
    assert {t.method for s in tossed for t in s.caucus.tosses} == {"coin", "lots"}


def test_corrections_malformed_and_retries_in_proportion(election) -> None:
    commands = command_stream(election)
    counts = Counter((c.kind, c.expect) for c in commands)
    n = CONFIG.units
    print(f"\ncommands: {dict(counts)}")
    assert counts[("report", "accepted")] == counts[("open", "accepted")] == n
    assert 0.8 * round(n * CONFIG.correction_share) <= counts[("correct", "accepted")] <= round(n * CONFIG.correction_share)
    assert counts[("report", "refused")] == round(n * CONFIG.malformed_share)
    assert counts[("report", "duplicate")] == round(n * CONFIG.duplicate_share)
    assert counts[("toss", "accepted")] == sum(len(s.caucus.tosses) for s in election.stories)
    by_key = {c.idempotency_key: c for c in commands if c.expect == "accepted"}
    units = {u.unit_id for u in election.units}
    for command in commands:
        if command.expect == "refused":  # refused by the parser, or names a unit the election does not have
            parsed = parse_command(CommandKind(command.kind), command.payload())
            assert parsed.errors or parsed.unit_id not in units, command.defect
            resend = [c for c in commands if c.unit_id == command.unit_id and c.kind == "report" and c.expect == "accepted"]
            assert resend and resend[0].seq > command.seq
        elif command.expect == "duplicate":
            assert by_key[command.idempotency_key].body == command.body
        elif command.kind == "correct":
            report = by_key[command.supersedes_key]
            assert report.seq < command.seq and report.body["final_alignment"] != command.body["final_alignment"]
        else:
            assert not parse_command(CommandKind(command.kind), command.payload("x")).errors
    assert {c.defect for c in commands if c.defect} <= {"negative_count", "count_as_string", "missing_field",
                                                        "broken_json", "unknown_unit", "unknown_field"}  # fmt: skip


def test_events_write_once(tmp_path) -> None:
    events = simulate_election(8, units=80)
    types = Counter(e.type for e in events)
    print(f"\nevents: {dict(types)}")
    assert types["ElectionDefined"] == 1 and types["UnitOpened"] == types["ResultReported"] == 80
    assert [e.recorded_at for e in events] == sorted(e.recorded_at for e in events)
    with SqliteLog(tmp_path / "log.sqlite3") as log:
        journal = Journal(log)
        journal.append_batch(events)
        marks = log.high_watermarks()
        journal.append_batch(simulate_election(8, units=80))
        assert log.high_watermarks() == marks and sum(marks.values()) == len(events)
        assert [le.event for le in journal.read() if le.event.type == "ElectionDefined"] == events[:1]

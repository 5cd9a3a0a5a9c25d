"""The 2020 import into the embedded log (the session's ``imported``): what lands there, when, and that a
second run adds nothing."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from ledger.events import CorrectionStage, ElectionDefined, ResultCorrected
from producers.importers.idp2020 import ACTOR, ELECTION_ID, event_id, import_idp2020

RELEASE_TIMES = {
    "2020-02-07T0113Z": datetime(2020, 2, 7, 1, 13, tzinfo=UTC),
    "2020-02-08T0628Z": datetime(2020, 2, 8, 6, 28, tzinfo=UTC),
    "2020-04-06T2345Z": datetime(2020, 4, 6, 23, 45, tzinfo=UTC),
}
A, B, C = RELEASE_TIMES


def expected_counts(published) -> dict[str, int]:
    reported = sum(len(published.first_seen(label)) for label in RELEASE_TIMES)
    corrected = len(published.changed(A, B)) + len(published.changed(B, C))
    defined = 1 + len(published.redefined())  # the first release, and each later one with new satellite weights
    counts = {"ElectionDefined": defined, "ResultReported": reported, "ResultCorrected": corrected}
    print(f"\nderived from the CSVs: {counts}; review {len(published.changed(A, B))}, "
          f"recanvass {len(published.changed(B, C))}, first seen at 02-08: {len(published.first_seen(B))}; "
          f"satellite weights changed at {published.redefined()} "
          f"({len(published.satellite_weight_changes(B, C))} satellites between 02-08 and certified)")
    return counts


def test_event_counts_per_type_match_the_csvs(imported, published) -> None:
    _, events, summary = imported
    counts = Counter(le.event.type for le in events)
    print(f"in the log: {dict(counts)}")
    assert counts == expected_counts(published)
    assert counts["ElectionDefined"] == 2  # 2020-02-07, and the certified release (CD1 pool re-shared)
    assert dict(summary.events) == dict(counts)
    assert summary.ok and summary.appended == len(events) and summary.already_present == 0
    # every unit of every release mapped (renamed Council Bluff units, &amp;amp; names, satellites)
    assert [str(i) for i in summary.issues if i.severity != "info"] == []


def test_every_unit_is_defined_once(imported, directory_rows) -> None:
    _, events, _ = imported
    definitions = [le.event.payload for le in events if le.event.type == "ElectionDefined"]
    first = definitions[0]
    assert isinstance(first, ElectionDefined)
    ids = [u.unit_id for u in first.units]
    assert len(ids) == len(set(ids)) == 1765
    assert set(ids) == {row["precinct_id"] for row in directory_rows}
    assert sum(u.is_satellite for u in first.units) == 87
    assert len(first.candidates) == 14 and "Uncommitted" in first.candidates
    reported_units = {le.event.unit_id for le in events if le.event.type == "ResultReported"}
    assert reported_units == set(ids)
    # a later definition changes satellite weights only: same units, counties, candidates, precinct D
    for later in definitions[1:]:
        assert later != first
        assert (later.name, later.rule_set, later.candidates, later.counties) == \
            (first.name, first.rule_set, first.candidates, first.counties)
        shape = [(u.unit_id, u.name, u.county_id, u.delegates, u.satellite_group) for u in first.units]
        assert [(u.unit_id, u.name, u.county_id, u.delegates, u.satellite_group) for u in later.units] == shape
        assert all(a.sde_weight == b.sde_weight for a, b in zip(first.units, later.units) if not a.is_satellite)


def test_recorded_at_places_each_event_at_its_release(imported, published) -> None:
    _, events, _ = imported
    by_time = Counter((le.event.type, le.event.recorded_at) for le in events)
    assert by_time[("ElectionDefined", RELEASE_TIMES[A])] == 1
    for label, at in RELEASE_TIMES.items():
        if label != A:
            assert by_time[("ElectionDefined", at)] == (label in published.redefined()), label
    definitions = [le.event for le in events if le.event.type == "ElectionDefined"]
    assert [e.event_id for e in definitions] == [event_id(ELECTION_ID, label, "") for label in (A, *published.redefined())]
    assert all(e.unit_id == "" and e.envelope.election_id == ELECTION_ID for e in definitions)
    assert by_time[("ResultReported", RELEASE_TIMES[A])] == len(published.units(A)) == 1711
    assert by_time[("ResultReported", RELEASE_TIMES[B])] == len(published.first_seen(B)) == 54
    assert by_time[("ResultCorrected", RELEASE_TIMES[B])] == len(published.changed(A, B))
    assert by_time[("ResultCorrected", RELEASE_TIMES[C])] == len(published.changed(B, C))
    assert all(le.event.envelope.occurred_at == le.event.recorded_at for le in events)
    # as of each release, the number of units with a result is that release's unit count
    for label, at in RELEASE_TIMES.items():
        seen = {le.event.unit_id for le in events if le.event.type == "ResultReported" and le.event.recorded_at <= at}
        assert len(seen) == len(published.units(label))


def test_corrections_supersede_the_units_previous_event(imported) -> None:
    _, events, _ = imported
    ordered = sorted((le.event for le in events), key=lambda e: (e.recorded_at, e.type != "ResultReported"))
    latest: dict[str, str] = {}
    stages = Counter()
    for event in ordered:
        if event.type == "ResultCorrected":
            payload = event.payload
            assert isinstance(payload, ResultCorrected)
            assert payload.supersedes == latest[event.unit_id]
            assert payload.authority and payload.reason
            stages[(payload.stage, event.recorded_at)] += 1
        latest[event.unit_id] = event.event_id
    assert all(stage is CorrectionStage.RECANVASS for stage, at in stages if at == RELEASE_TIMES[C])
    assert all(stage is CorrectionStage.REVIEW for stage, at in stages if at == RELEASE_TIMES[B])


def test_envelopes_name_the_importer(imported) -> None:
    _, events, _ = imported
    assert {le.event.envelope.actor for le in events} == {ACTOR}
    assert {le.event.envelope.channel.value for le in events} == {"import"}
    assert all(le.event.payload.result.attendance is None for le in events if le.event.type != "ElectionDefined")


def test_rerun_appends_nothing(imported, iowa_dir: Path) -> None:
    journal, events, _ = imported
    marks = journal.log.high_watermarks()
    again = import_idp2020(iowa_dir, journal)
    assert again.appended == 0 and again.already_present == len(events)
    assert journal.log.high_watermarks() == marks
    assert [le.event.event_id for le in journal.read()] == [le.event.event_id for le in events]

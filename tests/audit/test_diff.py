"""``caucus diff A B`` on the synthetic election: exit 0 when equal, 1 when different (naming the right
units), 2 when a side cannot be loaded; every kind of side; JSON, CSV and the table."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from datetime import timedelta
from types import ModuleType
from typing import Any

import pytest

from projections.asof import Cut, replay
from ledger.caucus_math import CaucusMathError, get_rule_set, satellite_delegates

Run = Callable[..., Any]


def _iso(at: Any) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _json(result: Any, code: int) -> dict[str, Any]:
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def _units(doc: dict[str, Any]) -> set[str]:
    return {u["unit_id"] for u in doc["units"]}


def test_equal_sides_exit_0(caucus: Run, aud: ModuleType) -> None:
    doc = _json(caucus("diff", "log", f"as-of:{_iso(aud.T_DAY3)}", "--json"), 0)
    assert doc["summary"]["equal"] and doc["units"] == [] and doc["counties"] == []
    assert doc["summary"]["units_compared"] == len(aud.UNITS)
    shown = caucus("diff", "log", f"as-of:{_iso(aud.T_DAY3)}")
    assert shown.exit_code == 0 and "EQUAL" in shown.stdout


def test_different_sides_exit_1_with_the_right_units(caucus: Run, aud: ModuleType) -> None:
    doc = _json(caucus("diff", f"as-of:{_iso(aud.T_NIGHT)}", "log", "--json"), 1)
    assert _units(doc) == {"corrected", "late", "tie"}
    by_unit = {u["unit_id"]: u for u in doc["units"]}
    corrected = {c["candidate"]: c for c in by_unit["corrected"]["candidates"]}
    assert set(corrected) == {"A"}  # the recanvass took A's third delegate away
    assert corrected["A"]["cds"] == {"a": 3, "b": 2, "delta": -1}
    assert corrected["A"]["sde"]["a"] == "0.9000" and corrected["A"]["sde"]["b"] == "0.6000"
    assert by_unit["corrected"]["status"] == {"a": "reported", "b": "corrected (recanvass)"}
    assert by_unit["late"]["status"] == {"a": "not reporting", "b": "reported"}
    assert any("ties pending" in n for n in by_unit["tie"]["notes"])
    tie = {c["candidate"]: c["cds"] for c in by_unit["tie"]["candidates"]}
    assert tie == {"B": {"a": 1, "b": 2, "delta": 1}}  # the toss gave B the contested seat
    # Effect on totals: Birch holds the corrected and the late unit, Ash the tie.
    counties = {c["area"]: c for c in doc["counties"]}
    assert set(counties) == {"ash", "birch"}
    assert counties["birch"]["units_changed"] == 2 and counties["birch"]["units_reporting"] == {"a": 5, "b": 6}
    state = {c["candidate"]: c for c in doc["state"]["candidates"]}
    assert state["A"]["first"]["delta"] == 60 and state["B"]["first"]["delta"] == 40
    assert state["A"]["cds"]["delta"] == 3 - 1  # +3 from the late unit, -1 from the correction
    assert doc["a"]["units_reporting"] == len(aud.UNITS) - 1 and doc["b"]["units_reporting"] == len(aud.UNITS)


def test_a_time_side_includes_events_recorded_at_that_time(caucus: Run, aud: ModuleType) -> None:
    just_before = aud.T_DAY2 - timedelta(microseconds=1)
    doc = _json(caucus("diff", f"as-of:{just_before.isoformat()}", f"as-of:{_iso(aud.T_DAY2)}", "--json"), 1)
    assert _units(doc) == {"corrected", "late"}


def test_position_sides(caucus: Run, ledger: Any, aud: ModuleType) -> None:
    log = ledger.log()
    try:
        night = replay(log, Cut(at=aud.T_NIGHT)).positions
    finally:
        log.close()
    exclusive = ",".join(f"{p}:{n}" for p, n in sorted(night.items()))
    inclusive = ",".join(f"{p}:..={n - 1}" for p, n in sorted(night.items()))
    _json(caucus("diff", f"as-of:{_iso(aud.T_NIGHT)}", f"position:{exclusive}", "--json"), 0)
    _json(caucus("diff", f"position:{inclusive}", f"as-of:{_iso(aud.T_NIGHT)}", "--json"), 0)
    everything = _json(caucus("diff", "position:*:end", "log", "--json"), 0)
    assert everything["a"]["as_of"]["records_outside_cut"] == 0


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_live_and_rebuilt_sets(store: str, caucus: Run, ledger: Any, aud: ModuleType, request: pytest.FixtureRequest) -> None:
    env = {"CAUCUS_DATABASE": request.getfixturevalue("pg_dsn")} if store == "postgres" else {}
    projected = caucus("project", "--until-caught-up", "--quiet", env=env)
    assert projected.exit_code == 0, projected.output
    doc = _json(caucus("diff", "live", "log", "--json", env=env), 0)
    assert doc["a"]["projection_set"]["name"] == "tally" and doc["a"]["projection_set"]["state"] == "serving"
    # It says what it compares: the log through the projection's own fold (not an independent recount).
    assert "projection's own fold" in doc["b"]["description"] and "not bugs of the fold" in doc["b"]["compared"]
    set_id = doc["a"]["projection_set"]["id"]
    for side in ("set:tally", "set:tally@1", f"set:#{set_id}"):
        _json(caucus("diff", side, "live", "--json", env=env), 0)
    # A report the projection has not consumed yet: live and the log now differ in exactly that unit.
    from ledger.events import Result, ResultReported

    late = aud.make_event(ResultReported(Result({"A": 9, "B": 3}, {"A": 9, "B": 3}, delegates_reported={"A": 3}), reporter="chair"),
                          "silent", aud.T_DAY3)  # fmt: skip
    ledger.append([late])
    doc = _json(caucus("diff", "live", "log", "--json", env=env), 1)
    assert _units(doc) == {"silent"}
    # ... and it says why: the projection has not read that record (it said "DIFFERENT" and nothing else).
    assert len(doc["notes"]) == 1 and "has not read 1 record(s)" in doc["notes"][0], doc["notes"]
    assert "a difference from the log" in doc["notes"][0]
    itself = _json(caucus("diff", "live", "live", "--json", env=env), 0)  # behind the log, whatever it is compared with
    assert len(itself["notes"]) == 1 and "has not read 1 record(s)" in itself["notes"][0], itself["notes"]
    assert "neither side holds what they change" in itself["notes"][0]  # no side of the log: nothing shows as a difference
    # The recomputed-from-states path (a delegate basis) reads the same store.
    doc = _json(caucus("diff", "live/official", "live/reported", "--json", env=env), 1)
    assert {"left", "cut", "tie"} <= _units(doc)  # no delegates reported there: unknown under "reported"
    missing = caucus("diff", "set:nope", "live", env=env)
    assert missing.exit_code == 2 and "no projection set named 'nope'" in missing.output


def _expected_rule_differences(aud: ModuleType, other: str = "idp-2016") -> set[str]:
    """Units whose computed delegates or pending tosses differ between idp-2020 and ``other``, straight
    from the caucus math (with the one recorded toss applied where it matches)."""
    from ledger.caucus_math import TieResolution

    toss = (TieResolution(("B", "C"), 1, ("B",), "coin"),)
    out = set()
    for s in aud.UNITS:
        final = s.final if s.final is not None else s.first
        d = s.d if s.d is not None else satellite_delegates(s.attendance or sum(s.first.values()))
        got = []
        for name in ("idp-2020", other):
            try:
                a = get_rule_set(name).allocate(delegates=d, attendance=s.attendance, first=s.first, final=final,
                                                ties=toss if s.unit_id == "tie" else ())  # fmt: skip
            except CaucusMathError:
                got.append(None)
                continue
            got.append(({k: v for k, v in a.delegates.items() if v}, {(p.contenders, p.seats) for p in a.pending}))
        if got[0] != got[1]:
            out.add(s.unit_id)
    return out


def test_rule_set_diff_finds_the_units_where_the_readings_differ(caucus: Run, aud: ModuleType) -> None:
    doc = _json(caucus("diff", "log", "rules:idp-2016", "--json"), 1)
    assert doc["a"]["delegates"] == doc["b"]["delegates"] == "computed"
    assert doc["a"]["rule_set"] == "idp-2020" and doc["b"]["rule_set"] == "idp-2016"
    found = _units(doc)
    # By hand: E09's 8th delegate (round-robin vs a lot) and a threshold recomputed after people left (C 13
    # of 73 is viable only in 2016). E05's equal groups at the cut are a lot under both.
    assert {"lot", "left"} <= found
    assert "ok-1" not in found and "tie" not in found and "cut" not in found
    assert found == _expected_rule_differences(aud)
    left = next(u for u in doc["units"] if u["unit_id"] == "left")
    assert {c["candidate"] for c in left["candidates"]} >= {"C"}
    # The same comparison the other way round, and naming both rule sets.
    _json(caucus("diff", "rules:idp-2016", "log/rules:idp-2020", "--json"), 1)
    _json(caucus("diff", "log/rules:idp-2020", "rules:idp-2020", "--json"), 0)


def test_rule_set_diff_against_the_app_reading_of_the_cut(caucus: Run, aud: ModuleType) -> None:
    """The reporting app's reading of §4.5 (every equal smallest group realigns) is one variant away,
    and E05 is where it differs: A2 under it, A1 and a pending lot under idp-2020."""
    doc = _json(caucus("diff", "log", "rules:idp-2020[realign_ties=all]", "--json"), 1)
    found = _units(doc)
    assert "cut" in found
    assert found == _expected_rule_differences(aud, "idp-2020[realign_ties=all]")


def test_reported_vs_computed(caucus: Run) -> None:
    doc = _json(caucus("diff", "log/reported", "computed", "--json"), 1)
    found = _units(doc)
    assert {"total", "nonviable", "alloc", "soft", "lot", "more-votes", "sat"} <= found
    assert not found & {"ok-1", "ok-2", "locked", "too-many", "corrected", "late"}
    notes = {u["unit_id"]: u["notes"] for u in doc["units"]}
    assert any("not known in A" in n for n in notes["cut"])  # nobody reported delegates there


def test_csv_and_table(caucus: Run, aud: ModuleType) -> None:
    out = caucus("diff", f"as-of:{_iso(aud.T_NIGHT)}", "log", "--csv")
    assert out.exit_code == 1, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    cds = [r for r in rows if r["level"] == "unit" and r["unit_id"] == "corrected" and r["measure"] == "cds"]
    assert cds == [{**cds[0], "candidate": "A", "a": "3", "b": "2", "delta": "-1"}]
    sde = next(r for r in rows if r["unit_id"] == "corrected" and r["measure"] == "sde")
    assert (sde["a"], sde["b"], sde["delta"], sde["a_exact"], sde["b_exact"]) == ("0.9000", "0.6000", "-0.3000", "9/10", "3/5")
    assert {r["level"] for r in rows} == {"unit", "county", "state"}
    assert any(r["unit_id"] == "late" and r["measure"] == "status" and r["b"] == "reported" for r in rows)
    table = caucus("diff", f"as-of:{_iso(aud.T_NIGHT)}", "log", env={"COLUMNS": "200"})  # wide: cells on one line
    assert table.exit_code == 1
    for text in ("DIFFERENT: 3 of 18", "Precinct corrected", "Precinct late", "effect on state totals", "Birch"):
        assert text in table.stdout


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ("live", "log", "no projection store at"),  # nothing was projected: the store was never created
        ("as-of:2020-02-05T12:00:00", "log", "no time zone"),
        ("bogus", "log", "unknown part 'bogus'"),
        ("log/live", "log", "names two sources"),
        ("rules:idp-1999", "log", "unknown rule set"),
        ("position:0:999", "log", "beyond partition 0"),
        ("log", "as-of:2019-01-01T00:00:00Z", "no election is defined"),
    ],
)
def test_operational_errors_exit_2(caucus: Run, a: str, b: str, message: str) -> None:
    out = caucus("diff", a, b)
    assert out.exit_code == 2, out.output
    assert message in out.output


def test_json_and_csv_together_is_refused(caucus: Run) -> None:
    out = caucus("diff", "log", "log", "--json", "--csv")
    assert out.exit_code == 2 and "choose one" in out.output

"""``caucus audit`` on the synthetic election: every §12 check kind is found on the unit built for it,
and nowhere on the clean units; filters, as-of, formats, exit status."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

Run = Callable[..., Any]


def _doc(result: Any, code: int) -> dict[str, Any]:
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def _by_unit(doc: dict[str, Any]) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for f in doc["findings"]:
        out.setdefault(f["unit_id"], set()).add((f["code"], f["severity"]))
    return out


def test_each_check_kind_is_found_where_it_was_built(caucus: Run, aud: ModuleType) -> None:
    doc = _doc(caucus("audit", "--log", "--json"), 1)
    found = _by_unit(doc)
    for unit, expected in aud.DESIGNED.items():
        assert expected in found.get(unit, set()), (unit, found.get(unit))
    assert "ok-1" not in found and "ok-2" not in found and "corrected" not in found
    assert doc["units_checked"] == len(aud.UNITS) and doc["units_defined"] == len(aud.UNITS) + 1
    codes = {f["code"] for f in doc["findings"]}
    assert codes == {"OVERCOUNT", "FINAL_GT_FIRST", "SATELLITE_DELEGATES", "LOCKED_GROUP_SHRANK", "TOO_MANY_VIABLE",
                     "DELEGATE_TOTAL", "NONVIABLE_AWARDED", "ALLOCATION", "MORE_VOTES_FEWER_DELS"}  # fmt: skip
    counts = {(c["code"], c["severity"]): (c["findings"], c["units"]) for c in doc["counts"]}
    assert sum(n for n, _ in counts.values()) == len(doc["findings"])


def test_findings_say_where_what_and_why(caucus: Run) -> None:
    doc = _doc(caucus("audit", "--log", "--json"), 1)
    sat = next(f for f in doc["findings"] if f["code"] == "SATELLITE_DELEGATES")
    # 67 attendees (from the SDE weight 67/100 of a pool of 1 over 100) elect 7, not the 6 of 50.
    assert (sat["unit_id"], sat["unit_name"], sat["county"], sat["satellite"]) == ("sat", "Site sat", "Satellites", True)
    assert (sat["expected"], sat["reported"]) == (7, 6)
    total = next(f for f in doc["findings"] if f["code"] == "DELEGATE_TOTAL" and f["unit_id"] == "total")
    assert (total["expected"], total["reported"]) == (5, 6) and total["likely_cause"]
    assert total["county"] == "Ash" and total["status"] == "reported" and total["result_event_id"]
    nonviable = next(f for f in doc["findings"] if f["code"] == "NONVIABLE_AWARDED")
    assert (nonviable["unit_id"], nonviable["candidate"], nonviable["reported"]) == ("nonviable", "C", 1)
    alloc = next(f for f in doc["findings"] if f["code"] == "ALLOCATION" and f["unit_id"] == "alloc")
    assert alloc["expected"] == {"A": 2, "B": 2, "C": 1} and alloc["reported"] == {"A": 3, "B": 1, "C": 1}
    assert "moved from B to A" in alloc["likely_cause"]
    lot = next(f for f in doc["findings"] if f["unit_id"] == "lot" and f["code"] == "ALLOCATION")
    assert lot["severity"] == "ambiguous" and "lot" in lot["likely_cause"]
    # Grouped by severity, worst first.
    order = ["error", "warn", "ambiguous", "soft", "info"]
    ranks = [order.index(f["severity"]) for f in doc["findings"]]
    assert ranks == sorted(ranks)


def test_filters(caucus: Run) -> None:
    warn = _doc(caucus("audit", "--log", "--json", "--severity", "warn"), 0)
    assert warn["findings"] and {f["severity"] for f in warn["findings"]} == {"warn"}
    only = _doc(caucus("audit", "--log", "--json", "--code", "allocation", "--severity", "ambiguous,soft"), 0)
    assert {(f["unit_id"], f["severity"]) for f in only["findings"]} == {("lot", "ambiguous"), ("soft", "soft")}
    birch = _doc(caucus("audit", "--log", "--json", "--county", "Birch"), 1)
    assert {f["county_id"] for f in birch["findings"]} == {"birch"}
    assert {f["unit_id"] for f in birch["findings"]} == {"locked", "too-many", "alloc", "lot"}
    locked = _doc(caucus("audit", "--log", "--json", "--unit", "locked"), 1)  # as the API's ?unit= narrows it
    assert {f["unit_id"] for f in locked["findings"]} == {"locked"} and locked["filters"]["unit"] == "locked"
    assert _doc(caucus("audit", "--log", "--json", "--unit", "lot", "--severity", "error"), 0)["findings"] == []
    info = _doc(caucus("audit", "--log", "--json", "--severity", "info"), 0)
    assert {f["code"] for f in info["findings"]} == {"MORE_VOTES_FEWER_DELS"}


def test_as_of_audits_the_result_that_stood_then(caucus: Run, aud: ModuleType) -> None:
    night = _doc(caucus("audit", "--as-of", aud.T_NIGHT.isoformat(), "--json", "--code", "DELEGATE_TOTAL"), 1)
    assert {f["unit_id"] for f in night["findings"]} == {"total", "sat", "corrected"}
    assert night["units_checked"] == len(aud.UNITS) - 1  # "late" had not reported
    now = _doc(caucus("audit", "--log", "--json", "--code", "DELEGATE_TOTAL"), 1)
    assert {f["unit_id"] for f in now["findings"]} == {"total", "sat"}


def test_an_audit_of_a_cut_before_anything_is_an_error_not_a_clean_audit(caucus: Run) -> None:
    """A mistyped year (2019 for 2020) audited nothing and said "no findings", exit 0: a clean audit to
    whoever reads the exit code. `tally` of the same cut is exit 2; so is the audit now."""
    before = caucus("audit", "--as-of", "2019-02-04T02:00:00Z")
    assert before.exit_code == 2 and "nothing to audit" in before.output and "no election is defined" in before.output, \
        before.output
    assert "no findings" not in before.output


def test_another_rule_set(caucus: Run) -> None:
    doc = _doc(caucus("audit", "--log", "--json", "--rule-set", "idp-2016"), 1)
    assert doc["rule_set"] == "idp-2016"
    assert not any(f["code"] == "LOCKED_GROUP_SHRANK" for f in doc["findings"])  # 2016 had no lock rule


def test_csv_and_table(caucus: Run) -> None:
    out = caucus("audit", "--log", "--csv", "--code", "SATELLITE_DELEGATES,DELEGATE_TOTAL")
    assert out.exit_code == 1, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    found = {(r["unit_id"], r["code"]) for r in rows}
    assert found == {("sat", "SATELLITE_DELEGATES"), ("sat", "DELEGATE_TOTAL"), ("total", "DELEGATE_TOTAL")}
    sat = next(r for r in rows if r["code"] == "SATELLITE_DELEGATES")
    assert (sat["severity"], sat["expected"], sat["reported"], sat["county"]) == ("warn", "7", "6", "Satellites")
    table = caucus("audit", "--log")
    assert table.exit_code == 1
    for text in ("ERROR (", "WARN (", "AMBIGUOUS (", "SOFT (", "INFO (", "LOCKED_GROUP_SHRANK", "Precinct locked (Birch)", "likely cause:"):
        assert text in table.stdout, text


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_the_live_projection_gives_the_same_audit(store: str, caucus: Run, request: pytest.FixtureRequest) -> None:
    env = {"CAUCUS_DATABASE": request.getfixturevalue("pg_dsn")} if store == "postgres" else {}
    assert caucus("project", "--until-caught-up", "--quiet", env=env).exit_code == 0
    live = _doc(caucus("audit", "--json", env=env), 1)
    log = _doc(caucus("audit", "--log", "--json", env=env), 1)
    assert live["findings"] == log["findings"] and live["counts"] == log["counts"]
    assert live["projection"]["projection_set"]["name"] == "tally"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--severity", "fatal"), "--severity 'fatal': not one of"),
        (("--code", "NOPE"), "--code 'NOPE': not one of"),
        (("--as-of", "2020-02-05"), "no time zone"),
        (("--log", "--rule-set", "idp-1999"), "unknown rule set"),
        ((), "no projection store at"),  # nothing was projected: the store was never created
        (("--log", "--county", "Nowhere"), "no county 'Nowhere'"),
        (("--log", "--unit", "Nowhere"), "no unit 'Nowhere'"),
    ],
)
def test_operational_errors_exit_2(caucus: Run, args: tuple[str, ...], message: str) -> None:
    out = caucus("audit", *args)
    assert out.exit_code == 2, out.output
    assert message in out.output

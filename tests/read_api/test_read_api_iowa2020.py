"""The read API on the real 2020 history, on both backends: the same numbers as the command line
(``caucus tally/trail/audit/diff --json``), the certified and the "100 %" figures, conditional GET."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

ELECTION = "iowa-2020-dem-caucus"
API = f"/api/elections/{ELECTION}"
RELEASE_100 = "2020-02-08T06:28:00Z"


def _get(iowa: Any, path: str, **params: str) -> dict[str, Any]:
    response = httpx.get(iowa.url + path, params=params, timeout=120)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_the_api_answers_what_caucus_tally_prints(iowa: Any) -> None:
    state = _get(iowa, f"{API}/state")
    cli = iowa.json("tally")
    assert state["state"] == cli["state"] and state["log_positions"] == cli["log_positions"]
    assert state["state"]["sde_display_sum"]["Buttigieg"] == "562.9538"
    assert state["state"]["sde_display_sum"]["Sanders"] == "562.0214"
    assert state["state"]["sde_exact"]["Buttigieg"] == cli["state"]["sde_exact"]["Buttigieg"]
    assert "/" in state["state"]["sde_exact"]["Buttigieg"], "exact SDEs are given as n/d"
    assert state["reporting"] == {"units_reporting": 1765, "units_defined": 1765, "share": "1765/1765", "percent": "100.00"}
    assert state["last_updated"].startswith("2020-04-06"), "the certified release is the newest result"

    county = _get(iowa, f"{API}/counties/Polk")
    cli_county = iowa.json("tally", "--county", "Polk")
    assert county["county"] == cli_county["county"] and county["units"] == cli_county["units"]
    counties = _get(iowa, f"{API}/counties")["counties"]
    polk = next(c for c in counties if c["name"] == "Polk")
    assert {k: polk[k] for k in cli_county["county"]} == cli_county["county"]
    assert len(counties) == 99 + len([c for c in counties if "Satellite" in c["name"]])

    unit = _get(iowa, f"{API}/units/947310")["unit"]  # Lee FM5 (RULES §13 E06)
    assert unit == iowa.json("tally", "--unit", "947310")["unit"]
    assert {c: n for c, n in unit["cds"].items() if n} == {"Biden": 3, "Buttigieg": 5, "Sanders": 4}


def test_as_of_gives_the_release_as_it_stood(iowa: Any) -> None:
    then = _get(iowa, f"{API}/state", as_of=RELEASE_100)
    assert (then["state"]["sde_display_sum"]["Buttigieg"], then["state"]["sde_display_sum"]["Sanders"]) == ("564.0124", "562.4973")
    assert then["state"] == iowa.json("tally", "--as-of", RELEASE_100)["state"]
    polk = _get(iowa, f"{API}/counties/Polk", as_of=RELEASE_100)
    assert polk["county"] == iowa.json("tally", "--county", "Polk", "--as-of", RELEASE_100)["county"]
    positions = ",".join(f"{p}:{o}" for p, o in then["log_positions"].items())
    by_position = httpx.get(iowa.url + f"{API}/state", params={"as_of": positions}, timeout=120)
    assert by_position.json()["state"] == then["state"]
    assert "immutable" in by_position.headers["cache-control"], "records before given offsets never change"
    bad = httpx.get(iowa.url + f"{API}/state", params={"as_of": "yesterday"}, timeout=30)
    assert bad.status_code == 400 and "as_of" in bad.json()["error"]["message"]


def test_trail_audit_and_diff_are_the_commands_answers(iowa: Any) -> None:
    trail = _get(iowa, f"{API}/units/947310/trail")
    assert trail == iowa.json("trail", "947310")
    audit = _get(iowa, f"{API}/audit")
    cli_audit = iowa.json("audit", ok=(0, 1))
    corrected = cli_audit["findings"][-1]  # some unit with a finding
    assert audit["findings"] == cli_audit["findings"] and audit["counts"] == cli_audit["counts"]
    one = _get(iowa, f"{API}/audit", unit=corrected["unit_id"])
    assert one["findings"] == [f for f in cli_audit["findings"] if f["unit_id"] == corrected["unit_id"]]
    diff = _get(iowa, f"{API}/diff", a=f"as-of:{RELEASE_100}", b="live")
    cli_diff = iowa.json("diff", f"as-of:{RELEASE_100}", "live", ok=(1,))
    assert diff["summary"] == cli_diff["summary"] and diff["state"] == cli_diff["state"]
    assert diff["summary"]["units_changed"] == 101


def test_etag_and_cache_control_let_a_cdn_revalidate(iowa: Any) -> None:
    first = httpx.get(iowa.url + f"{API}/state", timeout=60)
    etag = first.headers["etag"]
    assert "max-age" in first.headers["cache-control"]
    again = httpx.get(iowa.url + f"{API}/state", headers={"If-None-Match": etag}, timeout=60)
    assert again.status_code == 304 and again.headers["etag"] == etag and not again.content
    other = httpx.get(iowa.url + f"{API}/counties/Polk", headers={"If-None-Match": etag}, timeout=60)
    assert other.status_code == 200, "an ETag validates one answer only"
    page = httpx.get(iowa.url + f"/elections/{ELECTION}", timeout=60)
    assert page.status_code == 200 and "562.9538" in page.text
    assert httpx.get(iowa.url + f"/elections/{ELECTION}", headers={"If-None-Match": page.headers["etag"]}, timeout=60).status_code == 304
    missing = httpx.get(iowa.url + "/api/elections/nope/state", timeout=60)
    assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
    docs = httpx.get(iowa.url + "/openapi.json", timeout=60).json()
    assert f"/api/elections/{{election}}/state" in docs["paths"] and all("post" not in p for p in docs["paths"].values())

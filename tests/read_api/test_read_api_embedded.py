"""The read API over a simulated election on the embedded backend (no real data needed): the numbers
``caucus tally --json`` prints, conditional GET, as_of, errors, and the feed resuming by Last-Event-ID."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ledger.config import Settings
from projections.read_api.cli import results_app
from projections.read_api.reader import percent_text


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, support_module: Any) -> Iterator[Any]:
    """`caucus demo` (a simulated night, projected and published) in a data directory of its own; any
    service a test starts over it is stopped with the module."""
    workdir = tmp_path_factory.mktemp("read-api-demo")
    backend = support_module.Backend("embedded", ["--data-dir", str(workdir / "data")], support_module.caucus_env(), workdir)
    backend.run("demo", "--units", "16", "--json")
    try:
        yield backend
    finally:
        backend.stop()


@pytest.fixture
def client(demo: Any) -> Iterator[TestClient]:
    with TestClient(results_app(Settings(data_dir=Path(demo.base[1])))) as c:
        yield c


def _election(client: TestClient) -> str:
    elections = client.get("/api/elections").json()["elections"]
    assert len(elections) == 1 and elections[0]["units"] == 16
    return str(elections[0]["election_id"])


def test_state_county_and_unit_are_the_tally_commands_numbers(client: TestClient, demo: Any) -> None:
    e = _election(client)
    state = client.get(f"/api/elections/{e}/state").json()
    assert state["state"] == demo.json("tally")["state"]
    assert state["reporting"]["units_defined"] == 16 and state["reporting"]["share"] == f"{state['reporting']['units_reporting']}/16"
    first = client.get(f"/api/elections/{e}/counties").json()["counties"][0]
    cli = demo.json("tally", "--county", first["area"])
    assert client.get(f"/api/elections/{e}/counties/{first['area']}").json()["county"] == cli["county"]
    unit = cli["units"][0]["unit_id"]
    assert client.get(f"/api/elections/{e}/units/{unit}").json()["unit"] == demo.json("tally", "--unit", unit)["unit"]
    assert client.get(f"/api/elections/{e}/units/{unit}/trail").json() == demo.json("trail", unit)


def test_conditional_get_as_of_and_errors(client: TestClient) -> None:
    e = _election(client)
    full = client.get(f"/api/elections/{e}/state")
    assert full.headers["cache-control"] == "public, max-age=5, must-revalidate"
    hit = client.get(f"/api/elections/{e}/state", headers={"If-None-Match": full.headers["etag"]})
    assert hit.status_code == 304 and hit.headers["etag"] == full.headers["etag"]
    assert client.get(f"/api/elections/{e}/counties", headers={"If-None-Match": full.headers["etag"]}).status_code == 200
    tag = full.headers["etag"]
    for held in ("*", tag.removeprefix("W/"), f'"other", {tag}'):  # RFC 9110: any, the weak comparison, a list
        assert client.get(f"/api/elections/{e}/state", headers={"If-None-Match": held}).status_code == 304, held
    assert client.get(f"/api/elections/{e}/state", headers={"If-None-Match": '"other"'}).status_code == 200
    nothing = client.get(f"/api/elections/{e}/state", params={"as_of": "*:0"})
    assert nothing.status_code == 404 and "no events inside the cut" in nothing.json()["error"]["message"]
    whole = client.get(f"/api/elections/{e}/state", params={"as_of": "*:end"})
    assert whole.json()["state"] == full.json()["state"] and "immutable" in whole.headers["cache-control"]
    assert client.get(f"/api/elections/{e}/state", params={"as_of": "noon"}).status_code == 400
    assert client.get("/api/elections/nope/state").status_code == 404
    assert client.get(f"/api/elections/{e}/units/nope").json()["error"]["status"] == 404
    page = client.get(f"/elections/{e}/units/nope")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html") and "nope" in page.text
    assert client.get("/static/live.js").status_code == 200
    # Every error in one shape, the framework's own too (a route that is not there, a missing parameter),
    # and a feed of an election the projection does not hold is refused, as `caucus subscribe` refuses it.
    for path, params, status, said in (("/api/nonexistent", {}, 404, "Not Found"), (f"/api/elections/{e}/diff", {}, 422, "query a"),
                                       ("/api/feed", {"election": "nope"}, 404, "nope")):  # fmt: skip
        answer = client.get(path, params=params)
        assert answer.status_code == status and answer.json()["error"]["status"] == status, (path, answer.text)
        assert said in answer.json()["error"]["message"], (path, answer.text)


def test_percent_reporting_rounds_half_up_from_the_exact_share() -> None:
    assert [percent_text(1, 3), percent_text(2, 3), percent_text(1, 8), percent_text(0, 0)] == ["33.33", "66.67", "12.50", "0.00"]
    assert (percent_text(1, 20_000), percent_text(1, 20_001), percent_text(1765, 1765)) == ("0.01", "0.00", "100.00")


def _frames(url: str, count: int, headers: dict[str, str], **params: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with httpx.stream("GET", url + "/api/feed", params=params, headers=headers, timeout=30) as response:
        frame: dict[str, Any] = {}
        for line in response.iter_lines():
            if not line:
                if "event" in frame:
                    out.append(frame)
                if len(out) >= count:
                    break
                frame = {}
            elif ": " in line and not line.startswith(":"):
                key, value = line.split(": ", 1)
                frame[key] = json.loads(value) if key == "data" else value
    return out


def test_the_feed_resumes_from_last_event_id(demo: Any) -> None:
    url = demo.serve_results()
    ready = _frames(url, 1, {})[0]
    start = ",".join(f"{p.split(':')[0]}:0" for p in ready["id"].split(","))
    first = _frames(url, 7, {}, **{"from": start})
    tallies = [f for f in first if f["event"] == "tally"]
    assert len(tallies) == 6
    again = _frames(url, 3, {"Last-Event-ID": tallies[2]["id"]})
    assert [f["data"] for f in again[1:]] == [t["data"] for t in tallies[3:5]]
    # a position the feed cannot have given is refused before the stream starts (it was 200, then an
    # error event, and an EventSource reconnected with it every second)
    beyond = ",".join(f"{p.split(':')[0]}:999999" for p in ready["id"].split(","))
    for bad in (beyond, "99:0", "0:0,0:1", "zz"):
        answer = httpx.get(f"{url}/api/feed", headers={"Last-Event-ID": bad}, timeout=10)
        assert answer.status_code == 400, (bad, answer.text)
        assert answer.json()["error"]["message"]


SECOND = {
    "election_id": "second-test", "name": "A second caucus", "rule_set": "idp-2020", "candidates": ["Biden", "Sanders"],
    "counties": [{"county_id": "lee", "name": "Lee", "sde_ratio": "21/150"}],
    "units": [{"unit_id": "FM5", "name": "Fort Madison 5", "county_id": "lee", "delegates": 12}],
}


def test_a_log_with_two_elections_lists_both(tmp_path: Path, support_module: Any) -> None:
    backend = support_module.Backend("embedded", ["--data-dir", str(tmp_path / "data")], support_module.caucus_env(), tmp_path)
    backend.run("demo", "--units", "4", "--json")
    token = backend.json("credentials", "issue", "--official", "Pat Official")["token"]
    (tmp_path / "second.json").write_text(json.dumps(SECOND))
    backend.run("define", str(tmp_path / "second.json"), "--token", token)
    # refused definitions name elections too, one of them sent with no token at all: none is listed
    (tmp_path / "phantom.json").write_text(json.dumps({**SECOND, "election_id": "phantom", "candidates": ["A", "A"]}))
    backend.run("define", str(tmp_path / "phantom.json"), "--token", token, ok=(1,))
    (tmp_path / "anonymous.json").write_text(json.dumps({"election_id": "zz-anonymous", "idempotency_key": "x"}))
    backend.run("define", str(tmp_path / "anonymous.json"), ok=(1,))
    backend.run("project", "--until-caught-up", "-q")
    with TestClient(results_app(Settings(data_dir=tmp_path / "data"))) as client:
        listed = client.get("/api/elections").json()["elections"]
        assert len(listed) == 2 and "second-test" in {e["election_id"] for e in listed}
        assert all(e["defined"] for e in listed)
        page = client.get("/").text
        assert "A second caucus" in page and "phantom" not in page and "zz-anonymous" not in page
        for refused in ("phantom", "zz-anonymous"):
            assert client.get(f"/api/elections/{refused}/state").status_code == 404
        for e in listed:
            state = client.get(f"/api/elections/{e['election_id']}/state").json()
            assert state["election_id"] == e["election_id"] and state["reporting"]["units_defined"] == e["units"]


def test_the_feed_records_decode_with_the_exported_schemas_alone(client: TestClient, demo: Any) -> None:
    """What a consumer in another language does: the schemas from /api/feed/schemas and fastavro, nothing of
    the ledger's codec, decode every record of the results log (docs/feed.md)."""
    import io

    from fastavro import parse_schema, schemaless_reader
    from fastavro.schema import fingerprint, to_parsing_canonical_form

    from ledger.log.sqlite import SqliteLog
    from projections.feed_events import feed_codec, feed_json

    exported = client.get("/api/feed/schemas").json()
    assert {t["name"] for t in exported["types"]} == {"UnitTallyPublished", "AreaTallyPublished", "CheckpointPublished"}
    by_fingerprint = {}
    for t in exported["types"]:
        parsed = parse_schema(t["schema"])
        by_fingerprint[bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))] = parsed
    log = SqliteLog(Path(demo.base[1]) / "results.sqlite3", read_only=True)
    try:
        records = list(log.read())
    finally:
        log.close()
    assert records
    for rec in records:
        assert rec.value[:2] == b"\xc3\x01"
        body = schemaless_reader(io.BytesIO(rec.value[10:]), by_fingerprint[rec.value[2:10]])
        expected = feed_json(feed_codec().decode(rec.value))
        if expected["kind"] == "checkpoint":  # the event log's signed checkpoints, published by `caucus checkpoint`
            assert body["envelope"]["event_id"] == expected["event_id"] and rec.key == "election:"
            continue
        assert body["version"] == expected["version"] and body["envelope"]["event_id"] == expected["event_id"]
        assert body.get("area", body["envelope"]["unit_id"]) == expected["key"]
        kind, election = expected["kind"], expected["election_id"]
        assert rec.key == {"unit": expected["key"], "county": f"county:{election}:{expected['key']}",
                           "state": f"state:{election}"}[kind], "one record key per unit, county and state"


def test_a_precinct_page_shows_its_coin_tosses_corrections_and_findings(client: TestClient) -> None:
    e = _election(client)
    trails = {}
    for county in client.get(f"/api/elections/{e}/counties").json()["counties"]:
        for u in client.get(f"/api/elections/{e}/counties/{county['area']}").json()["units"]:
            trails[u["unit_id"]] = client.get(f"/api/elections/{e}/units/{u['unit_id']}/trail").json()["events"]
    tossed = next(uid for uid, events in trails.items() if any(ev["type"] == "TieBroken" for ev in events))
    corrected = next(uid for uid, events in trails.items() if any(ev["type"] == "ResultCorrected" for ev in events))
    toss = next(ev["details"] for ev in trails[tossed] if ev["type"] == "TieBroken")
    page = client.get(f"/elections/{e}/units/{tossed}").text
    tosses = page.split('<table class="tosses">')[1].split("</table>")[0]
    assert toss["method"] in tosses and toss["caller"] in tosses and all(w in tosses for w in toss["witnesses"])
    fix = next(ev["details"] for ev in trails[corrected] if ev["type"] == "ResultCorrected")
    page = client.get(f"/elections/{e}/units/{corrected}").text
    corrections = page.split('<table class="corrections">')[1].split("</table>")[0]
    assert fix["reason"] in corrections and fix["authority"] in corrections and fix["stage"] in corrections
    findings = client.get(f"/api/elections/{e}/audit", params={"unit": corrected}).json()["findings"]
    shown = page.split('<table class="findings">')[1].split("</table>")[0]
    assert all(f["code"] in shown for f in findings) and (findings or "No finding." in shown)
    # a filter that names no severity or code a finding can have is refused, not answered "no findings"
    for params in ({"severity": "bogus"}, {"code": "BOGUS"}, {"code": ["ALLOCATION", "NOPE"]}):
        refused = client.get(f"/api/elections/{e}/audit", params=params)
        assert refused.status_code == 400 and "not one of" in refused.json()["error"]["message"], params
    every = client.get(f"/api/elections/{e}/audit").json()["findings"]
    assert any(f["severity"] == "warn" for f in every)  # the demo has warnings: the filters below have something to keep
    for spelled in ({"severity": "WARN"}, {"severity": "warn"}, {"severity": "error,WARN"}):  # as caucus audit takes them
        kept = client.get(f"/api/elections/{e}/audit", params=spelled).json()["findings"]
        wanted = spelled["severity"].lower().split(",")
        assert kept == [f for f in every if f["severity"] in wanted], spelled


def test_public_answers_do_not_show_where_the_server_keeps_its_files(client: TestClient, demo: Any) -> None:
    """The diff's sources and some errors named the store's file path (``caucus`` shows it to its
    operator; a public API must not)."""
    e = _election(client)
    where = str(Path(demo.base[1]).resolve())
    diff = client.get(f"/api/elections/{e}/diff", params={"a": "live", "b": "rules:idp-2016"})
    assert diff.status_code == 200 and where not in diff.text and "<data dir>" in diff.text
    refused = client.get(f"/api/elections/{e}/diff", params={"a": "live", "b": "set:nope"})
    assert refused.status_code == 400 and where not in refused.text and "'nope'" in refused.text


def test_a_log_file_replaced_under_the_service_is_opened_again(client: TestClient, demo: Any) -> None:
    """A restore puts a copy in place of the log file the service holds open: the first answer built after
    it is a 503 (nothing read through the old file), and the next opens the file now there."""
    from tests.log_files import backup, put_in_place

    e = _election(client)
    county = client.get(f"/api/elections/{e}/counties").json()["counties"][0]["area"]
    first, second = (u["unit_id"] for u in demo.json("tally", "--county", county)["units"][:2])
    assert client.get(f"/api/elections/{e}/units/{first}/trail").status_code == 200  # the service holds the log open
    log = Path(demo.base[1]) / "log.sqlite3"
    backup(log, log.with_name("copy.sqlite3"))
    put_in_place(log.with_name("copy.sqlite3"), log)
    met = client.get(f"/api/elections/{e}/units/{second}/trail")  # not built before: it reads the log
    assert met.status_code == 503 and "replaced" in met.json()["error"]["message"], met.text
    again = client.get(f"/api/elections/{e}/units/{second}/trail")
    assert again.status_code == 200 and again.json() == demo.json("trail", second), again.text

"""The HTTP intake: status codes, bearer tokens, receipts, health, the published schema, and the
background retry that forwards the spool."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from producers.credentials import CredentialStore
from producers.http import create_app
from producers.intake import Intake


@pytest.fixture
def client(intake: Intake, store: CredentialStore) -> Iterator[TestClient]:
    intake.retry_after = 0.05
    with TestClient(create_app(intake, store, retry_seconds=0.05)) as c:
        yield c


@pytest.fixture
def tokens(store: CredentialStore) -> dict[str, dict[str, str]]:
    """Authorization headers for an official and the chair of FM5."""
    _, official = store.issue("official", name="Pat")
    _, chair = store.issue("chair", unit_id="FM5")
    return {"official": {"Authorization": f"Bearer {official}"}, "chair": {"Authorization": f"Bearer {chair}"}}


@pytest.fixture
def defined(client: TestClient, tokens: dict[str, dict[str, str]], election: dict[str, Any]) -> None:
    response = client.post("/elections", json=election, headers=tokens["official"])
    assert response.status_code == 201, response.json()


def _post(client: TestClient, path: str, body: Any, headers: dict[str, str], key: str | None = None) -> httpx.Response:
    extra = {"Idempotency-Key": key} if key else {}
    content = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(path, content=content, headers={**headers, **extra, "Content-Type": "application/json"})


def test_status_codes(defined: None, client: TestClient, tokens: dict[str, dict[str, str]], fm5: dict[str, Any]) -> None:
    chair, official = tokens["chair"], tokens["official"]
    accepted = _post(client, "/units/FM5/results", fm5, chair, "r1")
    assert accepted.status_code == 201 and accepted.json()["status"] == "accepted"
    duplicate = _post(client, "/units/FM5/results", fm5, chair, "r1")
    assert duplicate.status_code == 200 and duplicate.json()["event_id"] == accepted.json()["event_id"]
    second = _post(client, "/units/FM5/results", fm5, chair, "r2")
    assert second.status_code == 409 and second.json()["errors"][0]["code"] == "ALREADY_REPORTED"
    invalid = _post(client, "/units/E01/results", {"first_alignment": {"Biden": -1}, "final_alignment": {}}, official, "r3")
    assert invalid.status_code == 422 and invalid.json()["errors"][0]["field"] == "first_alignment.Biden"
    malformed = _post(client, "/units/E01/results", "{", official, "r4")
    assert malformed.status_code == 422 and malformed.json()["errors"][0]["code"] == "MALFORMED_JSON"
    huge = _post(client, "/units/E01/open", b" " * (1024 * 1024 + 1), official, "big")
    assert huge.status_code == 413 and huge.json()["errors"][0]["code"] == "TOO_LARGE"
    no_key = _post(client, "/units/E01/open", {"attendance": 3}, official)
    assert no_key.status_code == 422 and no_key.json()["errors"][0]["field"] == "idempotency_key"
    nobody = client.post("/units/FM5/open", json={"attendance": 3, "idempotency_key": "o"})
    assert nobody.status_code == 401 and nobody.headers["www-authenticate"].startswith("Bearer")
    forged = _post(client, "/units/FM5/open", {"attendance": 3}, {"Authorization": "Bearer ckl_abc_def"}, "o")
    assert forged.status_code == 401 and "not valid" in forged.json()["errors"][0]["message"]
    other_unit = _post(client, "/units/E01/open", {"attendance": 3}, chair, "o")
    assert other_unit.status_code == 403 and other_unit.json()["errors"][0]["code"] == "WRONG_UNIT"
    chair_toss = _post(client, "/units/FM5/ties", {"contenders": ["Biden", "Sanders"], "seats": 1, "winners": ["Biden"],
                                                   "method": "coin", "caller": "x"}, chair, "t")  # fmt: skip
    assert chair_toss.status_code == 403
    no_tie = _post(client, "/units/FM5/ties", {"contenders": ["Biden", "Sanders"], "seats": 1, "winners": ["Biden"],
                                               "method": "coin", "caller": "x"}, official, "t")  # fmt: skip
    assert no_tie.status_code == 422 and no_tie.json()["errors"][0]["code"] == "NO_SUCH_TIE"  # FM5's result has no tie
    toss = _post(client, "/units/E10/ties", {"contenders": ["Biden", "Sanders"], "seats": 1, "winners": ["Biden"],
                                             "method": "coin", "caller": "x"}, official, "t2")  # fmt: skip
    assert toss.status_code == 201
    fix = {**fm5, "supersedes": accepted.json()["event_id"], "reason": "r", "authority": "IDP", "stage": "review"}
    assert _post(client, "/units/FM5/corrections", fix, official, "c").status_code == 201
    # every refusal above was recorded, with the sender as claimed
    assert client.get("/receipts/r2", headers=official).json()["errors"][0]["code"] == "ALREADY_REPORTED"


@pytest.mark.parametrize("log_kind", ["embedded"])
def test_refusals_are_recorded_with_the_claimed_sender(defined: None, client: TestClient, intake: Intake,
                                                       tokens: dict[str, dict[str, str]], tmp_path: Path) -> None:  # fmt: skip
    _post(client, "/units/FM5/open", {"attendance": 3}, {"Authorization": "Bearer nonsense"}, "x1")
    _post(client, "/units/E01/open", {"attendance": 3}, tokens["chair"], "x2")
    journal = Journal(SqliteLog(tmp_path / "log.sqlite3"))
    try:
        refusals = [le.event.payload for le in journal.read() if le.event.type == "SubmissionRejected"]
    finally:
        journal.close()
    assert [(r.sender.split("#")[0], r.errors[0].code) for r in refusals] == [
        ("anonymous", "UNAUTHENTICATED"),
        ("chair:FM5", "WRONG_UNIT"),
    ]
    assert refusals[0].raw_input == '{"attendance": 3}' and refusals[0].command == "open (POST /units/FM5/open)"


def test_receipts_health_and_docs(defined: None, client: TestClient, tokens: dict[str, dict[str, str]]) -> None:
    opened = _post(client, "/units/E01/open", {"attendance": 30}, tokens["official"], "a/b:c")
    assert opened.status_code == 201
    found = client.get("/receipts/a/b:c", headers=tokens["official"])
    assert found.status_code == 200 and found.json()["event_id"] == opened.json()["event_id"]
    # a receipt is its sender's and officials': another chair learns nothing, not even that the key was used
    not_theirs = client.get("/receipts/a/b:c", headers=tokens["chair"])
    assert not_theirs.status_code == 404 and not_theirs.json() == {"status": "unknown", "idempotency_key": "a/b:c"}
    assert client.get("/receipts/unknown-key", headers=tokens["chair"]).status_code == 404
    assert client.get("/receipts/a/b:c").status_code == 401
    # refusals that carried no key are filed under none: the empty key asks for none of them
    assert client.post("/units/E01/open", content=b"{", headers=tokens["official"]).status_code == 422
    assert client.get("/receipts/", headers=tokens["official"]).status_code == 404
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok" and health.json()["spool"]["pending"] == 0
    assert "path" not in health.json()["spool"]  # no credential needed: no file paths of the machine
    doc = client.get("/openapi.json").json()
    assert {"/elections", "/units/{unit}/open", "/units/{unit}/results", "/units/{unit}/corrections",
            "/units/{unit}/ties", "/receipts/{idempotency_key}", "/health"} <= set(doc["paths"])  # fmt: skip
    results = doc["paths"]["/units/{unit}/results"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "first_alignment" in results["properties"]
    define = doc["paths"]["/elections"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    refs = json.dumps(define)
    assert "#/components/schemas/UnitSpec" in refs and "UnitSpec" in doc["components"]["schemas"]
    assert client.get("/docs").status_code == 200


@pytest.mark.parametrize("log_kind", ["embedded"])
def test_background_retry_forwards_the_spool(defined: None, client: TestClient, intake: Intake,
                                             tokens: dict[str, dict[str, str]], tmp_path: Path) -> None:  # fmt: skip
    holder = sqlite3.connect(str(tmp_path / "log.sqlite3"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the embedded log
    try:
        spooled = _post(client, "/units/E01/open", {"attendance": 30}, tokens["official"], "late")
        assert spooled.status_code == 202 and spooled.json()["status"] == "spooled"
        assert client.get("/health").json()["status"] == "degraded"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = client.get("/receipts/late", headers=tokens["official"]).json()
        if found["position"]:
            break
        time.sleep(0.05)
    assert found["status"] == "accepted" and found["event_id"] == spooled.json()["event_id"] and found["position"]
    assert len(intake.spool) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_caucus_serve_intake(tmp_path: Path, election: dict[str, Any]) -> None:
    """``caucus serve intake`` runs the service on a real socket."""
    env = {**os.environ, "CAUCUS_DATA_DIR": str(tmp_path / "data")}
    env.pop("CAUCUS_KAFKA", None)
    _, token = CredentialStore(tmp_path / "data" / "credentials.json").issue("official", name="Pat")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", "from ledger.cli import main; main()", "serve", "intake", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "the service did not come up"
            time.sleep(0.1)
        response = httpx.post(f"{base}/elections", json=election, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert response.status_code == 201, response.text
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert (tmp_path / "data" / "intake" / "embedded" / "state.json").exists()  # saved on shutdown


def test_a_receipt_is_shown_to_its_sender_and_officials_only(defined: None, client: TestClient, store: CredentialStore,
                                                             tokens: dict[str, dict[str, str]], fm5: dict[str, Any]) -> None:  # fmt: skip
    _, other_token = store.issue("chair", unit_id="E01")
    other = {"Authorization": f"Bearer {other_token}"}
    assert _post(client, "/units/FM5/results", fm5, tokens["chair"], "mine").status_code == 201
    assert _post(client, "/units/E01/open", {"attendance": 3}, tokens["chair"], "refused").status_code == 403
    for key in ("mine", "refused"):  # an accepted command and a refused one
        assert client.get(f"/receipts/{key}", headers=tokens["chair"]).status_code == 200, key
        assert client.get(f"/receipts/{key}", headers=tokens["official"]).status_code == 200, key
        assert client.get(f"/receipts/{key}", headers=other).status_code == 404, key


def test_an_unknown_channel_is_refused_not_taken_as_the_app(defined: None, client: TestClient,
                                                            tokens: dict[str, dict[str, str]], fm5: dict[str, Any]) -> None:
    """``?channel=import`` (the importer's own) or any other name was recorded as ``app``, silently."""
    for bogus in ("import", "fax"):
        refused = client.post(f"/units/FM5/results?channel={bogus}", content=json.dumps(fm5),
                              headers={**tokens["official"], "Idempotency-Key": f"c-{bogus}"})
        assert refused.status_code == 422
        assert [(e["field"], e["code"]) for e in refused.json()["errors"]] == [("channel", "UNKNOWN_CHANNEL")]
    nobody = client.post("/units/FM5/results?channel=fax", content=json.dumps(fm5), headers={"Idempotency-Key": "c-anon"})
    assert nobody.status_code == 401  # who may not send anything hears that first
    phoned = client.post("/units/FM5/results?channel=phone", content=json.dumps(fm5),
                         headers={**tokens["official"], "Idempotency-Key": "c-phone"})
    assert phoned.status_code == 201, phoned.text


def test_the_service_notes_what_it_saw_while_running(defined: None, client: TestClient, intake: Intake,
                                                     tokens: dict[str, dict[str, str]], fm5: dict[str, Any]) -> None:
    """What the service last saw of the log is written while it runs (at each retry), not only at a clean
    stop: one killed after accepting a report still leaves the report's position for the next intake to
    find missing in a log restored from an older copy."""
    accepted = _post(client, "/units/FM5/results", fm5, tokens["chair"], "r1")
    assert accepted.status_code == 201
    partition, offset = map(int, accepted.json()["position"].split(":"))  # "5:0"
    seen_file = intake.snapshot_path.with_name(intake.snapshot_path.name + ".seen")

    def noted() -> bool:
        try:
            seen = json.loads(seen_file.read_text())["seen"]
        except (OSError, ValueError, KeyError):
            return False
        return seen.get(str(partition)) == [offset + 1, accepted.json()["event_id"]]

    deadline = time.monotonic() + 10
    while not noted():  # the retry loop runs every 0.05 s here
        assert time.monotonic() < deadline, "the service never noted what it saw"
        time.sleep(0.02)


def test_a_unit_id_whose_bytes_are_not_utf8_is_refused_as_the_cli_refuses_it(
        defined: None, client: TestClient, tokens: dict[str, dict[str, str]], fm5: dict[str, Any]) -> None:
    """The server decoded %ff in the path to U+FFFD: the report was judged for a unit named '\ufffd' (UNKNOWN_UNIT)."""
    refused = _post(client, "/units/%ff/results", fm5, tokens["official"], "bad-bytes")
    assert refused.status_code == 422, refused.json()
    assert [(e["field"], e["code"]) for e in refused.json()["errors"]] == [("unit_id", "NOT_UTF8")], refused.json()
    named = _post(client, "/units/%E2%82%AC/results", fm5, tokens["official"], "euro")  # good UTF-8: judged by name
    assert named.status_code == 422 and named.json()["errors"][0]["code"] == "UNKNOWN_UNIT", named.json()


def test_a_definition_hears_every_error_at_once(client: TestClient, tokens: dict[str, dict[str, str]]) -> None:
    """A bad unit stopped the ratios' check, a bad ratio stopped the checks of the whole: one file with
    errors of each kind took four refused, recorded submissions to hear them all."""
    body = {"election_id": "x", "name": "X", "rule_set": "idp-2021", "candidates": ["A", "A"],
            "counties": [7, {"county_id": "c", "name": "C", "sde_ratio": "1/0"}],
            "units": [{"unit_id": "U", "name": "U", "county_id": "z", "delegates": -3},
                      {"unit_id": "U", "name": "U2", "county_id": "c", "delegates": 2.5},
                      {"unit_id": "V", "name": "V", "county_id": "c", "delegates": 2, "sde_weight": "1/2"}]}  # fmt: skip
    refused = _post(client, "/elections", body, tokens["official"], "all-at-once")
    assert refused.status_code == 422, refused.json()
    said = {(e["field"], e["code"]) for e in refused.json()["errors"]}
    assert said == {
        ("counties.0", "WRONG_TYPE"), ("units.0.delegates", "NEGATIVE"), ("units.1.delegates", "NOT_AN_INTEGER"),
        ("counties.1.sde_ratio", "BAD_RATIO"),  # the second county as sent, though the first was left out to judge it
        ("rule_set", "UNKNOWN_RULE_SET"), ("candidates.1", "DUPLICATE"), ("units.1", "DUPLICATE"),
        ("units.0.county_id", "UNKNOWN_COUNTY"), ("units.2.sde_weight", "NOT_A_SATELLITE"),
    }, said
    # Well typed, with a bad ratio: the checks of the whole are heard with it.
    typed = {**body, "candidates": ["A"], "counties": [body["counties"][1]],
             "units": [{**u, "delegates": 2} for u in body["units"][:2]]}
    refused = _post(client, "/elections", typed, tokens["official"], "typed")
    said = {(e["field"], e["code"]) for e in refused.json()["errors"]}
    assert said == {("counties.0.sde_ratio", "BAD_RATIO"), ("rule_set", "UNKNOWN_RULE_SET"), ("units.1", "DUPLICATE"),
                    ("units.0.county_id", "UNKNOWN_COUNTY")}, said
    # Once mended, the same election is accepted: none of the above was a stand-in's.
    fine = {**typed, "rule_set": "idp-2020", "counties": [{"county_id": "c", "name": "C", "sde_ratio": "1/3"}],
            "units": [{"unit_id": "U", "name": "U", "county_id": "c", "delegates": 2}]}
    assert _post(client, "/elections", fine, tokens["official"], "fine").status_code == 201

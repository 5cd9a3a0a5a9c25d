"""Hostile input through the real intake (HTTP in-process and on a socket, and the CLI): every body,
however malformed, gets a 4xx naming the field and the rule, and a SubmissionRejected that can be
encoded and gives back the exact bytes that were sent. Regressions of the fuzzing report: deep
nesting (a RecursionError, a 500 and a reset keep-alive connection), a lone surrogate in an id (a
refusal that could not be encoded, so nothing was recorded), a traceback from the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ledger.codec import default_codec
from ledger.events import Event, SubmissionRejected
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from producers.credentials import CredentialStore
from producers.http import create_app
from producers.intake import MAX_RAW_INPUT, Intake
from producers.strict_json import MAX_DEPTH, MAX_PROBLEMS, nesting_exceeds


DEEP_ARRAY = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
REPORT = '{"first_alignment": %s, "final_alignment": {"Biden": 1}}'

# (route, body, (field, code) the refusal must name)
CASES: dict[str, tuple[str, bytes, tuple[str, str]]] = {
    "deep-array": ("/elections", DEEP_ARRAY, ("body", "TOO_DEEP")),
    "deep-object": ("/units/FM5/results", DEEP_OBJECT, ("body", "TOO_DEEP")),
    "deep-unterminated": ("/units/FM5/results", b"[" * 200_000, ("body", "TOO_DEEP")),
    "surrogate-id": ("/elections", b'{"election_id": "\\ud800", "name": "x"}', ("election_id", "NOT_UTF8")),
    "surrogate-unit": ("/units/FM5/open", b'{"unit_id": "\\udfff", "attendance": 3}', ("unit_id", "NOT_UTF8")),
    "surrogate-key": ("/units/FM5/results", (REPORT % '{"\\udc00": 1}').encode(), ("first_alignment.\\udc00", "NOT_UTF8")),
    "bad-byte-in-key": ("/units/FM5/results", (REPORT % '{"Bid\xffen": 1}').encode("latin-1"), ("first_alignment.Bid\\udcffen", "NOT_UTF8")),
    "bad-byte-in-value": ("/units/FM5/results", b'{"reporter": "J\xc3", "first_alignment": {}, "final_alignment": {}}', ("reporter", "NOT_UTF8")),
    "bad-bytes-outside": ("/units/FM5/open", b"\xff\xfe{}", ("body", "NOT_UTF8")),
    "huge-int": ("/units/FM5/open", b'{"attendance": 1' + b"0" * 5000 + b"}", ("attendance", "TOO_LARGE")),
    "huge-float": ("/units/FM5/open", b'{"attendance": 1e400}', ("attendance", "TOO_LARGE")),
    "nan": ("/units/FM5/open", b'{"attendance": NaN}', ("attendance", "NOT_A_NUMBER")),
    "infinity": ("/units/FM5/results", (REPORT % '{"Biden": -Infinity}').encode(), ("first_alignment.Biden", "NOT_A_NUMBER")),
    "duplicate-nested": ("/units/FM5/results", (REPORT % '{"Biden": 1, "Biden": 9}').encode(), ("first_alignment.Biden", "DUPLICATE_KEY")),
    "wrong-types": ("/units/FM5/ties", b'{"contenders": "Biden", "seats": "1", "winners": [1], "method": 2, "caller": null}', ("seats", "NOT_AN_INTEGER")),
    "not-an-object": ("/units/FM5/open", b'"just a string"', ("body", "NOT_AN_OBJECT")),
    "truncated": ("/elections", b'{"election_id": "x", "units": [{"unit_id": ', ("body", "MALFORMED_JSON")),
}


@pytest.fixture
def log_kind() -> str:
    """The embedded log: these tests are about the input, the log adapters have their own."""
    return "embedded"


@pytest.fixture
def client(intake: Intake, store: CredentialStore) -> Iterator[TestClient]:
    with TestClient(create_app(intake, store)) as c:
        yield c


@pytest.fixture
def official(store: CredentialStore) -> dict[str, str]:
    return {"Authorization": f"Bearer {store.issue('official', name='Pat')[1]}", "Content-Type": "application/json"}


@pytest.fixture
def defined(client: TestClient, official: dict[str, str], election: dict[str, Any]) -> None:
    assert client.post("/elections", content=json.dumps(election), headers=official).status_code == 201


def _recorded_event(path: Path, event_id: str) -> Event[SubmissionRejected]:
    journal = Journal(SqliteLog(path))
    try:
        found = [le.event for le in journal.read() if le.event.event_id == event_id]
    finally:
        journal.close()
    assert len(found) == 1 and isinstance(found[0].payload, SubmissionRejected)
    return found[0]


def _recorded(path: Path, event_id: str) -> SubmissionRejected:
    return _recorded_event(path, event_id).payload


@pytest.mark.parametrize("case", list(CASES))
def test_every_malformed_body_is_refused_by_field_and_recorded_verbatim(
    case: str, defined: None, client: TestClient, official: dict[str, str], tmp_path: Path
) -> None:
    route, body, (field, code) = CASES[case]
    response = client.post(route, content=body, headers={**official, "Idempotency-Key": f"k-{case}"})
    assert 400 <= response.status_code < 500, response.text
    doc = response.json()
    assert (field, code) in {(e["field"], e["code"]) for e in doc["errors"]}, doc["errors"]
    refusal = _recorded(tmp_path / "log.sqlite3", doc["rejection"]["event_id"])
    _assert_kept(refusal, body)
    assert [e.to_avro() for e in refusal.errors] == doc["errors"], "the sender hears what was recorded"


def _assert_kept(refusal: SubmissionRejected, body: bytes) -> None:
    """The raw input gives back the exact bytes that were sent; beyond MAX_RAW_INPUT, the start of
    them exactly, with the size and SHA-256 of the whole."""
    if len(body) <= MAX_RAW_INPUT:
        assert refusal.input_bytes() == body
        assert refusal.raw_bytes == (b"" if _is_utf8(body) else body)
    else:
        kept = refusal.input_bytes()
        assert kept.startswith(body[:MAX_RAW_INPUT])
        assert kept.endswith(f"[truncated: {len(body)} bytes in all, sha256 {hashlib.sha256(body).hexdigest()}]".encode())


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_a_flood_of_errors_is_capped_and_still_recorded(defined: None, client: TestClient, official: dict[str, str], tmp_path: Path) -> None:
    """50,000 negative counts: the answer and the record name the first MAX_PROBLEMS, and say so,
    instead of a refusal record too large for the log."""
    counts = {f"C{i}": -1 for i in range(50_000)}
    body = json.dumps({"first_alignment": counts, "final_alignment": {}}).encode()
    response = client.post("/units/FM5/results", content=body, headers={**official, "Idempotency-Key": "flood"})
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert len(errors) == MAX_PROBLEMS + 1 and errors[-1]["code"] == "TOO_MANY_ERRORS"
    event = _recorded_event(tmp_path / "log.sqlite3", response.json()["rejection"]["event_id"])
    _assert_kept(event.payload, body)
    assert len(default_codec().encode(event)) < 1_000_000, "small enough for a Kafka record"


def test_ids_from_the_request_that_cannot_be_recorded(defined: None, client: TestClient, official: dict[str, str], tmp_path: Path) -> None:
    """An undecodable unit in the URL and a non-ASCII idempotency key header are refused and recorded."""
    bad_unit = client.post("/units/F%FFM5/open", content=b'{"attendance": 3}', headers={**official, "Idempotency-Key": "u"})
    assert bad_unit.status_code == 422 and bad_unit.json()["errors"][0]["field"] == "unit_id"
    bad_key = client.post("/units/FM5/open", content=b'{"attendance": 3}', headers={**official, "Idempotency-Key": b"kl\xe9"})
    error = bad_key.json()["errors"][0]
    assert bad_key.status_code == 422 and (error["field"], error["code"]) == ("idempotency_key", "BAD_FORMAT")
    for response in (bad_unit, bad_key):
        _recorded(tmp_path / "log.sqlite3", response.json()["rejection"]["event_id"])


def test_the_depth_check_counts_without_recursion() -> None:
    assert not nesting_exceeds("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert nesting_exceeds("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert not nesting_exceeds('["' + "[" * 10_000 + '"]'), "brackets inside strings do not nest"
    assert not nesting_exceeds('["\\"' + "[" * 10_000 + '"]'), "an escaped quote does not end the string"
    assert not nesting_exceeds("[]" * 500_000), "wide is not deep"
    assert nesting_exceeds("[" * 1_000_000)


def test_the_keep_alive_connection_survives_a_hostile_request(serve_intake: Any, election: dict[str, Any]) -> None:
    """On a real socket: after the deep body and the lone surrogate, the same connection (same local
    port, never reset) answers the next request."""
    served = serve_intake()
    del election["idempotency_key"]  # the header gives it
    with httpx.Client(base_url=served.base, headers=served.official, timeout=30) as http:
        ports = set()
        for body, expected in ((DEEP_ARRAY, 422), (CASES["surrogate-id"][1], 422), (json.dumps(election).encode(), 201)):
            response = http.post("/elections", content=body, headers={"Idempotency-Key": "define"})
            assert response.status_code == expected, response.text
            ports.add(response.extensions["network_stream"].get_extra_info("client_addr"))
        assert len(ports) == 1, f"a new connection was needed: {ports}"


def _caucus(data_dir: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "CAUCUS_DATA_DIR": str(data_dir)}
    env.pop("CAUCUS_KAFKA", None)
    return subprocess.run([sys.executable, "-c", "from ledger.cli import main; main()", *args], env=env, input=stdin,
                          capture_output=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize("case", ["deep-array", "surrogate-id", "bad-bytes-outside", "huge-int"])
def test_the_cli_prints_the_refusal_never_a_traceback(case: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _, token = CredentialStore(data_dir / "credentials.json").issue("official", name="Pat")
    source = tmp_path / "input.json"
    source.write_bytes(CASES[case][1])
    done = _caucus(data_dir, "define", str(source), "--token", token, "--json")
    assert done.returncode == 1, done.stderr.decode(errors="replace")
    assert b"Traceback" not in done.stderr + done.stdout
    refusal = json.loads(done.stdout)
    assert refusal["status"] == "rejected" and refusal["rejection"]["recorded"] == "log"
    recorded = _recorded(data_dir / "log.sqlite3", refusal["rejection"]["event_id"])
    assert recorded.input_bytes() == CASES[case][1]
    piped = _caucus(data_dir, "define", "-", "--token", token, stdin=CASES[case][1])
    assert piped.returncode == 1 and b"refused (invalid)" in piped.stdout and b"Traceback" not in piped.stderr


def test_log_append_refuses_hostile_lines_without_a_traceback(tmp_path: Path) -> None:
    """``caucus log append`` writes unvalidated events (restoring a log), but a line it cannot read or
    encode is an error message and nothing appended, not a traceback."""
    line = {"type": "UnitOpened", "event_id": "x", "election_id": "\ud800", "unit_id": "u", "actor": "a", "channel": "app",
            "occurred_at": "2020-01-01T00:00:00+00:00", "recorded_at": "2020-01-01T00:00:00+00:00",
            "idempotency_key": "k", "payload": {"attendance": 3}}  # fmt: skip
    _, token = CredentialStore(tmp_path / "data" / "credentials.json").issue("official", name="Restorer")  # direct writes need one
    # a line that reads as an event is judged first: the surrogate names an election no one defined (a
    # refusal naming the field, exit 1); the others are no event at all (exit 2)
    for name, content, code in (("deep", DEEP_ARRAY, 2), ("surrogate", json.dumps(line).encode(), 1), ("bytes", b"\xff\n", 2)):
        source = tmp_path / f"{name}.jsonl"
        source.write_bytes(content)
        done = _caucus(tmp_path / "data", "log", "append", str(source), "--token", token)
        assert done.returncode == code and done.stderr.startswith(b"error: "), (name, done.stderr[-400:])
        assert b"Traceback" not in done.stderr and (code == 2 or b"election_id: UNKNOWN_ELECTION" in done.stderr)


def test_a_body_of_any_size_holds_about_a_mebibyte_of_the_service(client: TestClient, tmp_path: Path) -> None:
    """The service reads a body past MAX_BODY without keeping it (it kept all 300 MB of one, no token
    needed): it keeps the start and hashes the rest, and the refusal records the whole size and digest."""
    import asyncio

    from starlette.requests import Request

    from producers.http import _bounded_body
    from producers.intake import MAX_BODY

    chunks = [bytes([65 + i]) * (1 << 20) for i in range(20)]  # 20 MiB in 1 MiB pieces

    async def receive() -> dict[str, Any]:
        piece = chunks.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(chunks)}

    whole = b"".join(chunks)
    body, kept_whole = asyncio.run(_bounded_body(Request({"type": "http", "method": "POST", "headers": []}, receive)))
    assert len(body) == MAX_BODY + 1 and body == whole[: MAX_BODY + 1]
    assert kept_whole == (len(whole), hashlib.sha256(whole).hexdigest())
    small, none = asyncio.run(_bounded_body(Request({"type": "http", "method": "POST", "headers": []},
                                                    _once(b'{"attendance": 3}'))))
    assert (small, none) == (b'{"attendance": 3}', None)
    big = b"x" * (3 * MAX_BODY)
    response = client.post("/units/FM5/open", content=big, headers={"Idempotency-Key": "huge"})
    assert response.status_code == 413
    kept = _recorded(tmp_path / "log.sqlite3", response.json()["rejection"]["event_id"]).input_bytes()
    assert kept.endswith(f"[truncated: {len(big)} bytes in all, sha256 {hashlib.sha256(big).hexdigest()}]".encode())


def _once(data: bytes) -> Any:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": data, "more_body": False}

    return receive


def test_a_refusal_without_a_credential_keeps_only_the_start_of_its_input(client: TestClient, defined: None,
                                                                          tmp_path: Path) -> None:
    """Anyone can send a request without a token, and each refusal stays in the append-only log: it
    keeps the first MAX_ANONYMOUS_INPUT bytes and the size and SHA-256 of the whole (it kept 256 KiB)."""
    from producers.rejections import MAX_ANONYMOUS_INPUT

    body = b'{"attendance": 3, "note": "' + b"y" * 200_000 + b'"}'
    response = client.post("/units/FM5/open", content=body, headers={"Idempotency-Key": "anon"})
    assert response.status_code == 401
    kept = _recorded(tmp_path / "log.sqlite3", response.json()["rejection"]["event_id"]).input_bytes()
    assert kept.startswith(body[:MAX_ANONYMOUS_INPUT]) and not kept.startswith(body[: MAX_ANONYMOUS_INPUT + 1])
    assert kept.endswith(f"[truncated: {len(body)} bytes in all, sha256 {hashlib.sha256(body).hexdigest()}]".encode())

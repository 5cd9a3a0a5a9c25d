"""When the log cannot be written, an accepted command is spooled (202); when the spool cannot be written
either, the answer is 503 with Retry-After and nothing is recorded half-way; never a 500.

The failures are real: the running HTTP service gets a file size limit (``RLIMIT_FSIZE``, set on its
process from outside with ``prlimit``), so SQLite's appends fail with an I/O error and, lower still, so
does the spool; the CLI meets a log path that is a directory; the Kafka broker is stopped mid-run."""

from __future__ import annotations

import json
import resource
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import ledger.cli
import producers.cli
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from producers.credentials import CredentialStore
from producers.http import create_app
from producers.intake import Intake

UNLIMITED = resource.RLIM_INFINITY


@contextmanager
def _file_size_limit(pid: int, limit: int) -> Iterator[None]:
    """No file of process ``pid`` may grow beyond ``limit`` bytes (writes past it fail with EFBIG)."""
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, UNLIMITED))
    try:
        yield
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (UNLIMITED, UNLIMITED))


def _log_events(path: Path) -> list[Any]:
    journal = Journal(SqliteLog(path))
    try:
        return [le.event for le in journal.read()]
    finally:
        journal.close()


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def test_a_log_that_cannot_be_written_spools_and_a_spool_that_cannot_answers_503(serve_intake: Any, election: dict[str, Any],
                                                                                  fm5: dict[str, Any]) -> None:  # fmt: skip
    served = serve_intake(retry_seconds=0.2)
    spool = served.data_dir / "intake" / "embedded" / "spool.jsonl"
    statuses: list[int] = []
    with httpx.Client(base_url=served.base, headers=served.official, timeout=30) as http:

        def post(path: str, body: dict[str, Any], key: str) -> httpx.Response:
            response = http.post(path, content=json.dumps(body), headers={"Idempotency-Key": key})
            statuses.append(response.status_code)
            return response

        assert post("/elections", {k: v for k, v in election.items() if k != "idempotency_key"}, "define").status_code == 201
        assert post("/units/E01/open", {"attendance": 30}, "open-e01").status_code == 201
        before = len(_log_events(served.log_path))
        wal = Path(f"{served.log_path}-wal")
        with _file_size_limit(served.process.pid, max(_size(wal), _size(served.log_path))):
            report = post("/units/FM5/results", fm5, "fm5")
            assert report.status_code == 202 and report.json()["status"] == "spooled", report.text
            refused = post("/units/NOPE/open", {"attendance": 3}, "nope")
            assert refused.status_code == 422 and refused.json()["rejection"]["recorded"] == "spool"
            health = http.get("/health").json()
            assert health["status"] == "degraded" and health["spool"]["pending"] == 2
            kept = _size(spool)
            assert kept > 0
        with _file_size_limit(served.process.pid, kept + 10):  # the next spool record would be cut after 10 bytes
            for key in ("e10", "e10-retry"):
                full = post("/units/E10/open", {"attendance": 12}, key)
                assert full.status_code == 503 and int(full.headers["retry-after"]) >= 1, full.text
            assert _size(spool) == kept, "nothing half-written: the cut record was taken back"
            assert len(_log_events(served.log_path)) == before
        # the limit is gone: the background retry forwards the spool, in order, once
        deadline = time.monotonic() + 20
        while http.get("/health").json()["spool"]["pending"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert http.get("/receipts/fm5").json()["position"] is not None
        assert post("/units/E10/open", {"attendance": 12}, "e10").status_code == 201, "the refused command was not kept"
    events = _log_events(served.log_path)
    ids = [e.event_id for e in events]
    assert len(ids) == len(set(ids)) == before + 3  # the report, the refusal, the last open
    assert report.json()["event_id"] in ids and refused.json()["rejection"]["event_id"] in ids
    assert all(code < 500 or code == 503 for code in statuses) and statuses.count(503) == 2


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, Any]]:
    import typer

    app = typer.Typer()
    app.callback()(ledger.cli._global)
    producers.cli.register(app)
    runner = CliRunner()
    for name in ("CAUCUS_TOKEN", "CAUCUS_KAFKA"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> tuple[int, Any]:
        result = runner.invoke(app, ["--data-dir", str(tmp_path / "data"), *args, "--json"])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        return result.exit_code, json.loads(result.stdout or result.stderr)  # an error: {"error": ...} on stderr

    return run


def test_the_cli_spools_when_the_log_file_cannot_be_opened(cli: Callable[..., tuple[int, Any]], tmp_path: Path,
                                                           election: dict[str, Any]) -> None:  # fmt: skip
    data = tmp_path / "data"
    _, token = CredentialStore(data / "credentials.json").issue("official", name="Pat")
    (tmp_path / "election.json").write_text(json.dumps(election))
    assert cli("define", str(tmp_path / "election.json"), "--token", token)[0] == 0
    log = data / "log.sqlite3"
    shutil.move(log, tmp_path / "log.away")
    log.mkdir()  # the log path is now a directory: SQLite cannot open it
    try:
        code, receipt = cli("open", "E01", "--attendance", "30", "--token", token)
        assert code == 0 and receipt["status"] == "spooled" and receipt["position"] is None
        code, refusal = cli("open", "NOPE", "--attendance", "30", "--token", token)
        assert code == 1 and refusal["rejection"]["recorded"] == "spool"
        code, status = cli("spool", "status")
        assert code == 0 and status["pending"] == 2
    finally:
        log.rmdir()
        shutil.move(tmp_path / "log.away", log)
    code, flushed = cli("spool", "flush")
    assert code == 0 and (flushed["forwarded"], flushed["remaining"]) == (2, 0)
    assert sorted(e.type for e in _log_events(log)) == ["ElectionDefined", "SubmissionRejected", "UnitOpened"]


def test_an_intake_that_never_read_the_log_judges_nothing_while_it_is_out_of_reach(
    cli: Callable[..., tuple[int, Any]], tmp_path: Path, election: dict[str, Any]
) -> None:  # fmt: skip
    """The log was written by other means (the importer, `log append`, another machine's intake) and this
    intake holds no snapshot of it: judged against nothing, a valid open would be refused (no election
    is defined) and that refusal told to the chair. It answers an operational error and records nothing."""
    data = tmp_path / "data"
    _, token = CredentialStore(data / "credentials.json").issue("official", name="Pat")
    (tmp_path / "election.json").write_text(json.dumps(election))
    assert cli("define", str(tmp_path / "election.json"), "--token", token)[0] == 0
    shutil.rmtree(data / "intake")  # as if the election had come in through another intake
    log = data / "log.sqlite3"
    shutil.move(log, tmp_path / "log.away")
    log.mkdir()
    try:
        code, answer = cli("open", "E01", "--attendance", "30", "--token", token)
        assert code == 2 and "has not read that log yet" in answer["error"]["message"], answer
        assert "nothing was recorded" in answer["error"]["message"]
        code, status = cli("spool", "status")
        assert code == 0 and status["pending"] == 0
    finally:
        log.rmdir()
        shutil.move(tmp_path / "log.away", log)
    code, receipt = cli("open", "E01", "--attendance", "30", "--token", token)
    assert code == 0 and receipt["status"] == "accepted"
    assert sorted(e.type for e in _log_events(log)) == ["ElectionDefined", "UnitOpened"]


@pytest.mark.parametrize("log_kind", ["kafka"])
def test_a_stopped_broker_is_spooled_never_a_500(intake: Intake, store: CredentialStore, broker: Any, unique_topic: str,
                                                  election: dict[str, Any]) -> None:  # fmt: skip
    from ledger.log.kafka import provision_topic

    _, token = store.issue("official", name="Pat")
    headers = {"Authorization": f"Bearer {token}"}
    intake.retry_after = 0.0
    with TestClient(create_app(intake, store, retry_seconds=3600)) as client:
        assert client.post("/elections", json=election, headers=headers).status_code == 201
        broker.stop()
        spooled = client.post("/units/E01/open", json={"attendance": 30, "idempotency_key": "o"}, headers=headers)
        assert spooled.status_code == 202 and spooled.json()["status"] == "spooled", spooled.text
        refused = client.post("/units/NOPE/open", json={"attendance": 3, "idempotency_key": "n"}, headers=headers)
        assert refused.status_code == 422 and refused.json()["rejection"]["recorded"] == "spool"
        assert client.get("/health").json()["status"] == "degraded"
        assert len(intake.spool.pending()) == 2
        broker.start()  # Tansu comes back empty: the intake must say the log was lost, not pretend
        provision_topic(broker.bootstrap, unique_topic, partitions=4)  # as an operator would
        deadline = time.monotonic() + 60
        for attempt in range(1000):
            # Until the clients have reconnected, refusals are still spooled; then the intake either
            # notices that the log was lost (503), or, if its read timed out but an append went
            # through, forwards the spool first and records in the log (the next read reports the
            # loss). Never a 500.
            probe = client.post("/units/NOPE/open", json={"attendance": 3, "idempotency_key": f"p-{attempt}"}, headers=headers)
            assert probe.status_code in (422, 503), probe.text
            if probe.status_code == 503 or probe.json()["rejection"]["recorded"] == "log" or time.monotonic() > deadline:
                break
        if probe.status_code == 503:
            assert "lost" in probe.json()["message"] and int(probe.headers["retry-after"]) >= 1
        else:
            assert probe.json()["rejection"]["recorded"] == "log" and not intake.spool.pending(), "the spool went first"

"""What an operator watches: a live runner's and a live intake's /metrics, /health and /ready, the
progress line's lag figures, diagnostics as JSON lines, and an intake that recovers from a lost log
without a restart."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from projections.observe import progress_line
from projections.runner import Progress

ELECTION: dict[str, Any] = {
    "election_id": "ops-test",
    "name": "Operations test caucus",
    "rule_set": "idp-2020",
    "candidates": ["Biden", "Buttigieg", "Sanders"],
    "counties": [{"county_id": "lee", "name": "Lee", "sde_ratio": "21/150"}],
    "units": [
        {"unit_id": "FM5", "name": "Fort Madison 5", "county_id": "lee", "delegates": 12},
        {"unit_id": "E01", "name": "Example 1", "county_id": "lee", "delegates": 5},
    ],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
            if found:
                return found
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _metric(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name) + (r"\{" + labels + r"\}" if labels else r"(\{[^}]*\})?") + r" (\S+)"
    found = re.search(r"^" + pattern + "$", text, re.M)
    assert found, f"{name}{{{labels}}} not in /metrics"
    return float(found.groups()[-1])


def test_progress_line_lag_for_history_and_for_a_live_log() -> None:
    """Seconds behind are wall-clock time since the newest applied event was recorded by the ledger;
    for history that is years, so the line shows the recorded time and the events still to go."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    history = Progress(applied=1000, assigned={0, 1}, positions={0: 400, 1: 600}, high_watermarks={0: 900, 1: 968},
                       newest_recorded_at=datetime(2020, 2, 7, 1, 13, tzinfo=UTC))
    line = progress_line(history, now=now)
    assert "868 events behind the log" in line and "replaying history" in line and "2020-02-07 01:13:00 UTC" in line
    assert "s ago" not in line
    caught_up = Progress(applied=1868, assigned={0, 1}, positions={0: 900, 1: 968}, high_watermarks={0: 900, 1: 968},
                         newest_recorded_at=datetime(2020, 4, 6, 23, 45, tzinfo=UTC))
    line = progress_line(caught_up, now=now)
    assert "caught up with the log; newest applied event recorded 2020-04-06 23:45:00 UTC" in line, line
    # what the runner knows is its own partitions at their last fetch: never "the log holds nothing newer"
    unknown = Progress(applied=5, assigned={0}, positions={0: 5}, high_watermarks={},
                       newest_recorded_at=datetime(2020, 4, 6, 23, 45, tzinfo=UTC))
    assert "nothing newer" not in progress_line(unknown, now=now) and "nothing newer" not in line
    live = Progress(applied=10, assigned={0}, positions={0: 10}, high_watermarks={0: 12},
                    newest_recorded_at=now - timedelta(seconds=2.5))
    assert "2 events behind the log; newest applied event recorded by the ledger 2.5 s ago" in progress_line(live, now=now)


@pytest.mark.slow
def test_a_live_runner_serves_metrics_health_and_ready(ops: ModuleType, tmp_path: Path) -> None:
    env = ops.clean_env(CAUCUS_DATA_DIR=str(tmp_path / "data"))
    token = json.loads(ops.ok(ops.run(["credentials", "issue", "--official", "Op", "--json"], cwd=tmp_path, env=env)).stdout)["token"]
    written = json.loads(ops.ok(ops.run(["simulate", "write", "--units", "20", "--json", "--token", token], cwd=tmp_path, env=env)).stdout)
    runner = subprocess.Popen([ops.CAUCUS, "--log-format", "json", "--log-level", "INFO", "project", "--metrics-port", "0"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = runner.stderr.readline() if runner.stderr else ""
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/metrics", first).group(1))  # type: ignore[union-attr]
        base = f"http://127.0.0.1:{port}"
        ready = _wait(lambda: httpx.get(f"{base}/ready", timeout=2).status_code == 200 and httpx.get(f"{base}/ready"), "/ready")
        assert ready.json()["status"] == "ok" and ready.json()["lag_events"] == 0
        health = httpx.get(f"{base}/health", timeout=2)
        assert health.status_code == 200 and health.json()["applied"] == written["appended"]
        metrics = httpx.get(f"{base}/metrics", timeout=2).text
        assert _metric(metrics, "caucus_runner_events_applied_total") == written["appended"]
        assert _metric(metrics, "caucus_runner_lag_events") == 0
        assert _metric(metrics, "caucus_runner_caught_up") == 1
        assert _metric(metrics, "caucus_runner_partitions_assigned") == 8
        assert _metric(metrics, "caucus_runner_lag_seconds") > 0  # the simulated events were recorded in the past
        assert _metric(metrics, "caucus_runner_newest_recorded_timestamp_seconds") < time.time()
        assert _metric(metrics, "caucus_runner_batch_seconds_count") >= 1
        # a new event: applied, and the lag in seconds is now measured from it
        ops.ok(ops.run(["open", "100001", "--attendance", "40", "--election", "sim-1", "--token", token, "--json"],
                       cwd=tmp_path, env=env), 0, 1)
        _wait(lambda: _metric(httpx.get(f"{base}/metrics", timeout=2).text, "caucus_runner_events_applied_total") > written["appended"],
              "the new event to be applied")
        assert _metric(httpx.get(f"{base}/metrics", timeout=2).text, "caucus_runner_lag_seconds") < 60
    finally:
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=30)
    assert runner.returncode == 0, err
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(doc["logger"] == "projections.observe" and doc["level"] == "INFO" and "caught up" in doc["message"] for doc in logged)
    assert all({"time", "level", "logger", "message"} <= set(doc) for doc in logged)


def _serve(ops: ModuleType, tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    server = subprocess.Popen([ops.CAUCUS, "serve", "intake", "--port", str(port), "--retry-seconds", "0.2"], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    _wait(lambda: server.poll() is None and httpx.get(f"{base}/health", timeout=1).status_code in (200, 503), "the intake to start")
    return server, base


def _stop(server: subprocess.Popen[str]) -> str:
    server.terminate()
    _, err = server.communicate(timeout=30)
    return err


@pytest.mark.slow
def test_a_live_intake_serves_metrics_and_ready(ops: ModuleType, tmp_path: Path) -> None:
    env = ops.clean_env(CAUCUS_DATA_DIR=str(tmp_path / "data"))
    official = json.loads(ops.ok(ops.run(["credentials", "issue", "--official", "Op", "--json"], cwd=tmp_path, env=env)).stdout)["token"]
    chair = json.loads(ops.ok(ops.run(["credentials", "issue", "--unit", "FM5", "--json"], cwd=tmp_path, env=env)).stdout)["token"]
    server, base = _serve(ops, tmp_path, env)
    try:
        auth = {"Authorization": f"Bearer {official}"}
        assert httpx.post(f"{base}/elections", json={**ELECTION, "idempotency_key": "d"}, headers=auth).status_code == 201
        assert httpx.post(f"{base}/units/FM5/open", json={"attendance": 91, "idempotency_key": "o"}, headers=auth).status_code == 201
        wrong = httpx.post(f"{base}/units/E01/open", json={"attendance": 9, "idempotency_key": "w"},
                           headers={"Authorization": f"Bearer {chair}"})
        assert wrong.status_code == 403
        assert httpx.post(f"{base}/units/FM5/open", json={"attendance": 9, "idempotency_key": "n"}).status_code == 401
        assert httpx.get(f"{base}/ready").status_code == 200
        metrics = httpx.get(f"{base}/metrics").text
        assert _metric(metrics, "caucus_intake_requests_total", 'method="POST",route="/units/{unit}/open",status="201"') == 1
        assert _metric(metrics, "caucus_intake_requests_total", 'method="POST",route="/units/{unit}/open",status="403"') == 1
        assert _metric(metrics, "caucus_intake_rejections_total", 'code="WRONG_UNIT"') == 1
        assert _metric(metrics, "caucus_intake_rejections_total", 'code="UNAUTHENTICATED"') == 1
        assert _metric(metrics, "caucus_intake_request_seconds_count", 'route="/elections"') == 1
        assert _metric(metrics, "caucus_intake_spool_depth") == 0
        assert _metric(metrics, "caucus_intake_log_reachable") == 1 and _metric(metrics, "caucus_intake_log_lost") == 0
        assert "/units/FM5" not in metrics  # a path template, never a unit id, is a label
    finally:
        _stop(server)


@pytest.mark.slow
@pytest.mark.kafka
def test_a_running_intake_recovers_from_a_lost_log_when_it_is_rebuilt(ops: ModuleType, broker: Any, unique_topic: str,
                                                                      tmp_path: Path) -> None:  # fmt: skip
    """The broker loses everything (memory only): the intake answers 503 "the log was lost" until
    `caucus intake rebuild`, run from another process, accepts the log as it now is; then it takes
    reports again, without a restart."""
    env = ops.clean_env(CAUCUS_DATA_DIR=str(tmp_path / "data"), CAUCUS_KAFKA=broker.bootstrap, CAUCUS_TOPIC=unique_topic)
    official = json.loads(ops.ok(ops.run(["credentials", "issue", "--official", "Op", "--json"], cwd=tmp_path, env=env)).stdout)["token"]
    auth = {"Authorization": f"Bearer {official}"}
    server, base = _serve(ops, tmp_path, env)
    try:
        assert httpx.post(f"{base}/elections", json={**ELECTION, "idempotency_key": "d"}, headers=auth, timeout=30).status_code == 201
        broker.restart()
        lost = httpx.post(f"{base}/units/FM5/open", json={"attendance": 91, "idempotency_key": "o"}, headers=auth, timeout=60)
        assert lost.status_code == 503 and "lost" in lost.json()["message"]
        assert httpx.get(f"{base}/ready", timeout=30).status_code == 503
        assert _metric(httpx.get(f"{base}/metrics").text, "caucus_intake_log_lost") == 1
        # a command run beside it (which may fold the refilled log as a new one and save a snapshot) does not
        # end the service's "log lost", and a receipt of the lost log is not confirmed
        beside = ops.run(["intake", "status", "--json"], cwd=tmp_path, env=env, timeout=120)
        assert beside.returncode in (0, 3), beside.stderr
        receipt = httpx.get(f"{base}/receipts/d", headers=auth, timeout=30)
        assert receipt.status_code == 503 and "lost" in receipt.json()["message"], receipt.text
        assert httpx.get(f"{base}/ready", timeout=30).status_code == 503
        ops.ok(ops.run(["intake", "rebuild"], cwd=tmp_path, env=env, timeout=120))
        again = httpx.post(f"{base}/elections", json={**ELECTION, "idempotency_key": "d2"}, headers=auth, timeout=60)
        assert again.status_code == 201, again.text
        assert httpx.post(f"{base}/units/FM5/open", json={"attendance": 91, "idempotency_key": "o2"}, headers=auth,
                          timeout=30).status_code == 201
        assert httpx.get(f"{base}/ready", timeout=30).status_code == 200
        assert server.poll() is None  # the same process throughout
    finally:
        err = _stop(server)
    assert "rebuilt by another process" in err


def test_an_unknown_variable_is_warned_in_the_configured_log_format(ops: ModuleType, tmp_path: Path) -> None:
    """The warning about a mistyped ``CAUCUS_*`` variable comes after logging is set up, so a JSON log
    stays JSON (a plain-text line first would break a collector parsing stderr)."""
    env = ops.clean_env(CAUCUS_DATA_DIR=str(tmp_path / "data"), CAUCUS_DATABSE="postgresql://typo")
    done = ops.ok(ops.run(["--log-format", "json", "config", "show"], cwd=tmp_path, env=env))
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    warned = [line for line in lines if "CAUCUS_DATABSE" in line["message"]]
    assert len(warned) == 1 and warned[0]["level"] == "WARNING", done.stderr

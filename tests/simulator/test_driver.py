"""The driver against the project's intake, in-process and over HTTP: receipts counted against what the
simulator expected, and the log left holding what ``simulate_election`` says the intake records."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from producers.simulator import SimConfig, command_stream, election_events, generate
from producers.simulator.driver import HttpTarget, IntakeTarget, drive, percentile


def _logged(log_path: Path) -> list:
    with SqliteLog(log_path) as log:
        return [le.event for le in Journal(log).read()]


def test_in_process_receipts_and_log_match_the_simulation(intake, official, log_path: Path) -> None:
    election = generate(21, SimConfig(units=120))
    commands = command_stream(election)
    seen: list[int] = []
    report = drive(commands, IntakeTarget(intake, official[0]), concurrency=4, progress=lambda d, t: seen.append(d))
    data = report.to_json()
    print(f"\nin-process: {data['sent']} sent, {data['throughput_per_s']}/s, latency ms {data['latency_ms']}")
    assert data["unexpected"] == [], json.dumps(data["unexpected"][:3])
    expected = Counter(c.expect for c in commands)
    assert (data["accepted"], data["refused"], data["duplicate"]) == (expected["accepted"], expected["refused"], expected["duplicate"])
    assert sorted(seen) == list(range(1, len(commands) + 1))
    assert data["latency_ms"]["p50"] is not None and data["latency_ms"]["p50"] <= data["latency_ms"]["p99"]
    logged = _logged(log_path)
    assert Counter(e.type for e in logged) == Counter(e.type for e in election_events(election))
    reports = {e.event_id for e in logged if e.type == "ResultReported"}
    corrections = [e for e in logged if e.type == "ResultCorrected"]
    assert corrections and all(e.payload.supersedes in reports for e in corrections)


def test_over_http_at_a_target_rate(intake_url: str, official, log_path: Path) -> None:
    commands = command_stream(generate(22, SimConfig(units=40)))
    target = HttpTarget(intake_url, official[1])
    try:
        report = drive(commands, target, rate=200, concurrency=4)
    finally:
        target.close()
    data = report.to_json()
    print(f"\nhttp: {data['sent']} sent in {data['elapsed_s']} s, latency ms {data['latency_ms']}")
    assert data["unexpected"] == [] and data["error"] == 0, json.dumps(data["unexpected"][:3])
    assert report.elapsed_s >= (len(commands) - 1) / 200
    logged = _logged(log_path)
    assert sum(e.type != "SubmissionRejected" for e in logged) == data["accepted"]
    assert sum(e.type == "SubmissionRejected" for e in logged) == data["refused"]


def test_wrong_token_is_refused_and_counted(intake_url: str) -> None:
    commands = command_stream(generate(23, SimConfig(units=3)))[:1]
    target = HttpTarget(intake_url, "not-a-token")
    try:
        report = drive(commands, target)
    finally:
        target.close()
    assert report.by_status["refused"] == 1 and report.unexpected[0]["expected"] == "accepted"


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile(list(map(float, range(1, 101))), 99) == 99.0

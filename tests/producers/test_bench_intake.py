"""How long the intake takes to get its state at start: folding the whole log versus loading a snapshot
and catching up, and what a snapshot costs to write. Side by side in one run:

    pytest tests/producers/test_bench_intake.py --benchmark-enable
    CAUCUS_BENCH_EVENTS=100000 pytest tests/producers/test_bench_intake.py --benchmark-enable

The log mixes what an election night produces: per unit an opening, a report, a refused resubmission and
a correction (four events), plus the election's definition.
"""

from __future__ import annotations

import os
import shutil
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from ledger.events import (
    Channel,
    CorrectionStage,
    County,
    ElectionDefined,
    Event,
    Problem,
    Result,
    ResultCorrected,
    ResultReported,
    SubmissionRejected,
    UnitDefinition,
    UnitOpened,
    new_event,
)
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from producers.intake import Intake
from producers.intake_state import rejection_key

EVENTS = int(os.environ.get("CAUCUS_BENCH_EVENTS", "4000"))


def _events(units: int) -> list[Event[Any]]:
    definition = ElectionDefined(
        "Bench", "idp-2020", ("Biden", "Sanders", "Warren", "Uncommitted"), (County("c", "C", Fraction(21, 150)),),
        tuple(UnitDefinition(f"u{i}", f"Unit {i}", "c", 5) for i in range(units)),
    )  # fmt: skip
    result = Result({"Biden": 40, "Sanders": 35, "Warren": 25}, {"Biden": 40, "Sanders": 35, "Warren": 25}, 100,
                    {"Biden": 2, "Sanders": 2, "Warren": 1})  # fmt: skip
    out = [new_event(definition, election_id="e", actor="official", channel=Channel.APP, idempotency_key="define")]
    for i in range(units):
        unit = f"u{i}"

        def ev(payload: Any, key: str, **kw: Any) -> Event[Any]:
            return new_event(payload, election_id="e", unit_id=unit, actor="chair", channel=Channel.APP, idempotency_key=key, **kw)

        report = ev(ResultReported(result, "chair"), f"{unit}-report")
        refused_id = str(uuid.uuid4())
        refusal = SubmissionRejected("report", "{}", (Problem("unit_id", "ALREADY_REPORTED", "x"),), "chair")
        out += [
            ev(UnitOpened(100), f"{unit}-open"),
            report,
            ev(refusal, rejection_key(refused_id, f"{unit}-again"), event_id=refused_id),
            ev(ResultCorrected(result, report.event_id, "why", "IDP", CorrectionStage.REVIEW), f"{unit}-fix"),
        ]
    return out


@pytest.fixture(scope="module")
def bench_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "log.sqlite3"
    journal = Journal(SqliteLog(path, partitions=8))
    events = _events(max(1, EVENTS // 4))
    for i in range(0, len(events), 5000):
        journal.append_batch(events[i : i + 5000])
    journal.close()
    return path


def _start(log: Path, workdir: Path) -> Intake:
    return Intake(lambda: SqliteLog(log), workdir, name="bench").start()


@pytest.mark.benchmark(group="intake-start")
def test_start_by_folding_the_log(benchmark: Any, bench_log: Path, tmp_path: Path) -> None:
    def run() -> Intake:
        shutil.rmtree(tmp_path / "w", ignore_errors=True)
        return _start(bench_log, tmp_path / "w")

    intake = benchmark.pedantic(run, rounds=1, iterations=1)
    assert intake.state.applied == len(_events(0)) + 4 * max(1, EVENTS // 4)
    intake.close()


@pytest.mark.benchmark(group="intake-start")
def test_start_from_a_snapshot(benchmark: Any, bench_log: Path, tmp_path: Path) -> None:
    _start(bench_log, tmp_path / "w").close()
    intake = benchmark.pedantic(lambda: _start(bench_log, tmp_path / "w"), rounds=1, iterations=1)
    assert intake.state.applied == len(_events(0)) + 4 * max(1, EVENTS // 4)
    intake.close()


@pytest.mark.benchmark(group="intake-snapshot-save")
def test_save_a_snapshot(benchmark: Any, bench_log: Path, tmp_path: Path) -> None:
    intake = _start(bench_log, tmp_path / "w")
    assert benchmark.pedantic(lambda: intake.save_snapshot(force=True), rounds=1, iterations=1)
    intake.close()


@pytest.mark.benchmark(group="intake-submit")
def test_submit_latency(benchmark: Any, log_kind: str, defined: Any, intake: Intake, official: Any) -> None:
    """One accepted command end to end (catch up, validate, append durably): 100 opens in a row,
    embedded log versus the real broker."""
    import json

    from producers.commands import CommandKind
    from producers.intake import Receipt, Submission

    units = [f"b{i}" for i in range(100)]
    election = {"election_id": "bench", "name": "b", "rule_set": "idp-2020", "candidates": ["A", "B"],
                "counties": [{"county_id": "c", "name": "C", "sde_ratio": "1/7"}], "idempotency_key": "bench",
                "units": [{"unit_id": u, "name": u, "county_id": "c", "delegates": 3} for u in units]}  # fmt: skip
    assert intake.submit(Submission(CommandKind.DEFINE, json.dumps(election), official)).accepted

    def run() -> list[Any]:
        return [
            intake.submit(Submission(CommandKind.OPEN, '{"attendance": 30}', official, unit_id=u, idempotency_key=f"{u}-o"))
            for u in units
        ]

    outcomes = benchmark.pedantic(run, rounds=1, iterations=1)
    assert all(isinstance(o, Receipt) and o.status == "accepted" for o in outcomes)

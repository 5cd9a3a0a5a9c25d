"""What ``/health``, ``/ready`` and ``/metrics`` say is what the runner reported, all three at once: the
endpoints read from their own thread while the runner's loop goes on changing its live record, so the
observer keeps a copy made once its counters have it (a reason could show in /ready before /metrics had
counted the outage behind it)."""

from __future__ import annotations

from pathlib import Path

from ledger.log.sqlite import SqliteLog
from projections.observe import RunnerObserver
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.sqlite import SqliteStore


def _runner(tmp_path: Path) -> ProjectionRunner:
    store = SqliteStore(tmp_path / "store.sqlite3")
    sid = store.ensure_serving("tally", source="embedded").set_id
    return ProjectionRunner(store, sid, EmbeddedSource(SqliteLog(tmp_path / "log.sqlite3", partitions=2)))


def test_the_observer_shows_what_was_reported_not_the_runners_live_record(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    observer = RunnerObserver().attach(runner)
    runner.progress.log_outages += 1
    runner.progress.waiting_for_log = "the broker is unavailable"
    ready, details = observer.ready()
    assert not any(r.startswith("waiting for the event log") for r in details["reasons"]), details
    assert observer.registry.get_sample_value("caucus_runner_log_outages_total") == 0
    assert runner.on_progress is not None
    runner.on_progress(runner.progress)
    ready, details = observer.ready()
    assert not ready and "waiting for the event log: the broker is unavailable" in details["reasons"], details
    assert observer.registry.get_sample_value("caucus_runner_log_outages_total") == 1
    runner.progress.waiting_for_log = ""
    runner.progress.applied = 7
    _, details = observer.ready()
    assert "waiting for the event log: the broker is unavailable" in details["reasons"], "a change not yet reported"
    assert observer.health()[1]["applied"] == 0


def test_health_says_the_runner_stopped_though_its_last_report_was_left_out(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    observer = RunnerObserver().attach(runner)
    runner.run(until_caught_up=True)  # an empty log: the last report says nothing new and is left out
    assert observer.health()[1]["stopped"] == "caught up"

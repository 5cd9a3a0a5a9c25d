"""What a projection runner tells its operator: the progress line, Prometheus metrics, health and readiness.

It hooks into the runner from outside, through its ``on_progress`` and ``on_commit`` callbacks and the
source, so the runner's fold knows nothing about it.

Lag, in two figures, because they answer different questions:

- **events behind**: records the log holds beyond what is applied (high watermark minus position, over
  the partitions this runner owns). This is the figure for a replay of history.
- **seconds behind**: wall-clock time since the newest applied event was *recorded by the ledger*
  (its ``recorded_at``), measured now. For a live night it says how stale the tallies are. For a replay
  of 2020 it would be years and say nothing, so the progress line shows the recorded time of the newest
  applied event instead ("replaying history") whenever it is more than an hour old; the metric keeps
  the raw value, with the newest recorded time beside it.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from projections.runner import Progress, ProjectionRunner
from projections.stores.port import Changes

__all__ = ["RunnerObserver", "progress_line", "HISTORY_AFTER_SECONDS"]

log = logging.getLogger(__name__)

HISTORY_AFTER_SECONDS = 3600.0
"""Newer than this, the age of the newest applied event is shown in seconds; older, as a date."""


def _parts(parts: set[int]) -> str:
    """0,1,2,3,5 -> 0-3,5"""
    out: list[str] = []
    ordered = sorted(parts)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def progress_line(p: Progress, *, waiting_for_partitions: float | None = None, group: str = "",
                  now: datetime | None = None) -> str:
    """One line on the runner's state (module docstring for what the lag figures mean)."""
    if p.waiting_for_store:
        return f"waiting for the projection store ({p.waiting_for_store}); applied {p.applied:,} events so far"
    if p.waiting_for_log:
        return f"waiting for the event log ({p.waiting_for_log}); applied {p.applied:,} events so far"
    done = f"applied {p.applied:,} events ({p.rate:,.0f}/s)"
    if p.duplicates:
        done += f", {p.duplicates:,} duplicates dropped"
    if not p.assigned:
        # in steps of 5 s: the line changes (and is printed again) every 5 s, not every second
        wait = "" if waiting_for_partitions is None else f" for {int(waiting_for_partitions) // 5 * 5} s"
        who = f"consumer group {group}" if group else "the consumer group"
        return f"{done}; holds no partition{wait}: waiting for {who} to assign some"
    lag = p.lag_events
    if lag is None:
        behind = "lag unknown until each partition has answered a fetch"
    elif lag == 0:
        behind = "caught up with the log"
    else:
        behind = f"{lag:,} events behind the log"
    line = f"{done}; {behind}{_age(p, lag, now)}; partitions {_parts(p.assigned)}"
    if p.others_behind:
        who = f"consumer group {group}" if group else "the consumer group"
        line += f"; waiting for partitions {_parts(set(p.others_behind))}, held by other members of {who}, to be applied"
    return line


def _age(p: Progress, lag: int | None, now: datetime | None) -> str:
    if p.newest_recorded_at is None:
        return ""
    seconds = p.lag_seconds(now)
    assert seconds is not None
    if seconds > HISTORY_AFTER_SECONDS:
        when = p.newest_recorded_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if lag:
            return f"; replaying history (newest applied event recorded {when})"
        # Not "the log holds nothing newer": lag is per partition this runner holds, read at its last fetch.
        return f"; newest applied event recorded {when}"
    return f"; newest applied event recorded by the ledger {seconds:,.1f} s ago"


class RunnerObserver:
    """Metrics, health and readiness of one runner (module docstring). ``attach`` wraps the runner's
    callbacks (keeping any already set, e.g. the results feed's) and times each batch."""

    def __init__(self, registry: CollectorRegistry | None = None, *, stale_after: float = 60.0) -> None:
        self.registry = registry or CollectorRegistry()
        self.stale_after = stale_after
        r = self.registry
        self.applied = Counter("caucus_runner_events_applied", "Events applied to the projection.", registry=r)
        self.duplicates = Counter("caucus_runner_duplicates_dropped", "Events dropped as duplicates (same event id).", registry=r)
        self.batches = Counter("caucus_runner_batches", "Store transactions committed.", registry=r)
        self.outages = Counter("caucus_runner_store_outages", "Times the projection store could not be reached.", registry=r)
        self.log_outages = Counter("caucus_runner_log_outages", "Times the event log could not be reached.", registry=r)
        self.batch_seconds = Histogram("caucus_runner_batch_seconds", "Time to fold and commit one batch.", registry=r,
                                       buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.lag_events = Gauge("caucus_runner_lag_events", "Records the log holds beyond what is applied, over the "
                                "partitions this runner owns (NaN until each has answered a fetch).", registry=r)
        self.lag_seconds = Gauge("caucus_runner_lag_seconds", "Wall-clock seconds since the newest applied event was "
                                 "recorded by the ledger, measured at scrape time (years for a replay of history: "
                                 "use caucus_runner_lag_events there).", registry=r)
        self.newest = Gauge("caucus_runner_newest_recorded_timestamp_seconds",
                            "When the newest applied event was recorded by the ledger (Unix time).", registry=r)
        self.partitions = Gauge("caucus_runner_partitions_assigned", "Partitions this runner owns.", registry=r)
        self.caught_up = Gauge("caucus_runner_caught_up", "1 when every owned partition is applied up to its high watermark.", registry=r)
        self.mirror_failures = Gauge("caucus_runner_offset_mirror_failures", "Failed commits of positions to the Kafka group (a copy only).", registry=r)
        self.progress: Progress | None = None
        self.last_progress = time.monotonic()
        self.log_error: str | None = None
        self._seen = (0, 0, 0, 0, 0)
        self._waiting = ""
        self._waiting_log = ""
        self._was_caught_up = False
        self._source: Any = None
        self._live: Progress | None = None
        self.lag_seconds.set_function(self._lag_now)

    def _lag_now(self) -> float:
        p = self.progress
        value = None if p is None else p.lag_seconds()
        return float("nan") if value is None else value

    def attach(self, runner: ProjectionRunner) -> RunnerObserver:
        self._source = runner.source
        self._live = runner.progress  # read for one field only: ``stopped`` (see ``health``)
        self.progress = copy.deepcopy(runner.progress)
        before_progress = runner.on_progress
        before_commit = runner.on_commit

        def on_progress(p: Progress) -> None:
            self.observe(p)
            if before_progress is not None:
                before_progress(p)

        def on_commit(changes: Changes, positions: dict[int, int]) -> None:
            if before_commit is not None:
                before_commit(changes, positions)
            mirror = getattr(self._source, "mirror", None)
            if mirror is not None:
                mirror(positions)

        apply = runner.apply

        def timed_apply(records: list[Any]) -> None:
            began = time.perf_counter()
            apply(records)
            self.batch_seconds.observe(time.perf_counter() - began)

        runner.on_progress = on_progress
        runner.on_commit = on_commit
        runner.apply = timed_apply  # type: ignore[method-assign]
        return self

    def observe(self, p: Progress) -> None:
        if p.waiting_for_store and (self.progress is None or self._waiting != p.waiting_for_store):
            log.warning("the projection store is out of reach, retrying the batch: %s", p.waiting_for_store)
        elif self._waiting and not p.waiting_for_store:
            log.warning("the projection store is back")
        self._waiting = p.waiting_for_store
        if p.waiting_for_log and self._waiting_log != p.waiting_for_log:
            log.warning("the event log is out of reach, asking it again: %s", p.waiting_for_log)
        elif self._waiting_log and not p.waiting_for_log:
            log.warning("the event log is back")
        self._waiting_log = p.waiting_for_log
        caught_up = self._is_caught_up(p)
        if caught_up and not self._was_caught_up:
            log.info("caught up with the log: %d events applied", p.applied)
        self._was_caught_up = caught_up
        self.last_progress = time.monotonic()
        applied, dups, batches, outages, log_outages = self._seen
        self.applied.inc(max(0, p.applied - applied))
        self.duplicates.inc(max(0, p.duplicates - dups))
        self.batches.inc(max(0, p.batches - batches))
        self.outages.inc(max(0, p.store_outages - outages))
        self.log_outages.inc(max(0, p.log_outages - log_outages))
        self._seen = (p.applied, p.duplicates, p.batches, p.store_outages, p.log_outages)
        lag = p.lag_events
        self.lag_events.set(float("nan") if lag is None else lag)
        if p.newest_recorded_at is not None:
            self.newest.set(p.newest_recorded_at.timestamp())
        self.partitions.set(len(p.assigned))
        self.caught_up.set(1 if self._is_caught_up(p) else 0)
        self.mirror_failures.set(getattr(self._source, "mirror_failures", 0))
        # What /health and /ready read from their own thread: a copy, kept once the counters above
        # have it, not the runner's live record (a reason in /ready before /metrics had counted it).
        self.progress = copy.deepcopy(p)

    @staticmethod
    def _is_caught_up(p: Progress) -> bool:
        return bool(p.assigned) and p.lag_events == 0 and not p.waiting_for_store and not p.waiting_for_log

    def waiting_for_partitions(self) -> float | None:
        ask: Callable[[], float | None] | None = getattr(self._source, "without_partitions_for", None)
        return ask() if ask is not None else None

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Alive: the runner's loop reported within ``stale_after`` seconds."""
        age = time.monotonic() - self.last_progress
        p = self.progress
        return age <= self.stale_after, {
            "seconds_since_progress": round(age, 3),
            "applied": None if p is None else p.applied,
            # the live record's: the runner leaves out a last report that would only say it stopped
            "stopped": (self._live.stopped if self._live is not None else None if p is None else p.stopped) or None,
        }

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """Ready: alive, the log and store reachable, and caught up with the log."""
        alive, details = self.health()
        p = self.progress
        reasons = []
        if not alive:
            reasons.append("the runner's loop has not reported recently")
        if p is None or not p.assigned:
            reasons.append("holds no partition yet")
        elif p.lag_events is None:
            reasons.append("lag unknown until each partition has answered a fetch")
        elif p.lag_events:
            reasons.append(f"{p.lag_events:,} events behind the log")
        if p is not None and p.waiting_for_store:
            reasons.append(f"waiting for the store: {p.waiting_for_store}")
        if p is not None and p.waiting_for_log:
            reasons.append(f"waiting for the event log: {p.waiting_for_log}")
        if self.log_error:
            reasons.append(self.log_error)
        details.update({"lag_events": None if p is None else p.lag_events, "reasons": reasons,
                        "partitions": [] if p is None else sorted(p.assigned)})
        return not reasons, details

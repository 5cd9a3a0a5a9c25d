"""What a projection runner reports while it runs (``ProjectionRunner.progress``): counts, positions, lag,
store outages and the partitions it waits for; ``caucus project`` prints it and ``--json`` emits it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["Progress"]


@dataclass
class Progress:
    """What the runner has done in this session and how far behind the log it is."""

    applied: int = 0
    duplicates: int = 0
    skipped: int = 0
    batches: int = 0
    started: float = field(default_factory=time.monotonic)
    first_records_at: float | None = None
    positions: dict[int, int] = field(default_factory=dict)
    high_watermarks: dict[int, int] = field(default_factory=dict)
    assigned: set[int] = field(default_factory=set)
    newest_recorded_at: datetime | None = None
    caught_up: bool = False
    stopped: str = ""
    store_outages: int = 0
    waiting_for_store: str = ""
    log_outages: int = 0
    waiting_for_log: str = ""
    others_behind: dict[int, tuple[int, int]] = field(default_factory=dict)
    """``--until-caught-up`` in a group: partitions held by other members still below their
    targets, as ``{partition: (applied, target)}`` (``projections.whole_log``)."""

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def rate(self) -> float:
        """Events applied per second since the first records arrived: start-up and a group join are
        left out, reading the log is not (it is part of the work, as in the read-only ceiling)."""
        if self.first_records_at is None:
            return 0.0
        span = time.monotonic() - self.first_records_at
        return self.applied / span if span > 0 else 0.0

    @property
    def lag_events(self) -> int | None:
        if not self.assigned:
            return 0
        if any(p not in self.high_watermarks for p in self.assigned):
            return None
        return sum(max(0, self.high_watermarks[p] - self.positions.get(p, 0)) for p in self.assigned)

    def lag_seconds(self, now: datetime | None = None) -> float | None:
        if self.newest_recorded_at is None:
            return None
        return ((now or datetime.now(UTC)) - self.newest_recorded_at).total_seconds()

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "duplicates_dropped": self.duplicates,
            "skipped_already_applied": self.skipped,
            "batches": self.batches,
            "elapsed_s": round(self.elapsed, 3),
            "events_per_s": round(self.rate, 1),
            "positions": {str(p): o for p, o in sorted(self.positions.items())},
            "high_watermarks": {str(p): o for p, o in sorted(self.high_watermarks.items())},
            "assigned": sorted(self.assigned),
            "lag_events": self.lag_events,
            "lag_seconds": None if self.lag_seconds() is None else round(self.lag_seconds() or 0.0, 3),
            "newest_recorded_at": None if self.newest_recorded_at is None else self.newest_recorded_at.isoformat(),
            "caught_up": self.caught_up,
            "stopped": self.stopped,
            "store_outages": self.store_outages,
            "waiting_for_store": self.waiting_for_store,
            "log_outages": self.log_outages,
            "waiting_for_log": self.waiting_for_log,
            "waiting_for_partitions": {str(p): {"applied": a, "target": t} for p, (a, t) in sorted(self.others_behind.items())},
        }

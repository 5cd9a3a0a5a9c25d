"""How long a runner waits for its store to come back, and how often it asks.

A store that cannot be reached (PostgreSQL restarting, a failover) is waited out, not fatal: a batch is
retried, and so is the read of the other members' positions while ``--until-caught-up`` waits for them.
Both waits follow one rule, kept here so they cannot drift apart: the outage is bounded by
``--store-retry-seconds`` from its first failure, and the retries back off from 0.2 s to 5 s (asking
every poll hammered a store that was starting up, and a short bound was spent in a few fast failures).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LOG_RETRY_SECONDS", "STORE_RETRY_SECONDS", "StoreOutage"]

STORE_RETRY_SECONDS = 300.0
"""How long an outage is waited out by default (a PostgreSQL restart or failover takes seconds to minutes)."""
LOG_RETRY_SECONDS = 300.0
"""The same for the event log (a broker restarting, a partition's leader moving): a runner waits for
it by the same rule (``ProjectionRunner._wait_for_log``)."""
FIRST_DELAY = 0.2
LONGEST_DELAY = 5.0


class StoreOutage:
    """One outage at a time: ``failed`` at each failure, ``ended`` at the first success after it."""

    def __init__(self, retry_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.retry_seconds = retry_seconds
        self._clock = clock
        self._deadline: float | None = None
        self._delay = FIRST_DELAY
        self._last_try_given = False

    @property
    def ongoing(self) -> bool:
        return self._deadline is not None

    def failed(self) -> float | None:
        """The seconds to wait before the next try, or None when the outage has lasted past its bound
        (the caller gives up and raises). Past the bound one last try is given, once an outage: a failure
        just after the bound (a check that follows the first answer) is not taken as the end."""
        now = self._clock()
        if self._deadline is None:
            self._deadline = now + self.retry_seconds
        if now >= self._deadline:
            if self._last_try_given:
                return None
            self._last_try_given = True
            return FIRST_DELAY
        wait = min(self._delay, self._deadline - now)
        self._delay = min(self._delay * 2, LONGEST_DELAY)
        return wait

    def ended(self) -> None:
        self._deadline = None
        self._delay = FIRST_DELAY
        self._last_try_given = False

"""``--until-caught-up`` in a consumer group: the whole log applied, not just this runner's share.

Why: a runner that restarts after being killed joins its group while the dead member still holds
partitions (until its session expires). Counting only the partitions it owns, it would call itself
caught up with half the log applied and exit 0, leaving a store that looks finished and is not.
So once every owned partition is done, the runner also reads the store's positions of the others
(applied by whichever member holds them) and waits until they reach the high watermarks seen then.

A member that holds partitions and never applies them (a broker that never expires a killed member,
a runner stuck elsewhere) would make that wait endless: when none of the partitions still behind
has moved for ``timeout`` seconds the runner stops with an error naming them (0: wait as long as
it takes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

__all__ = ["OthersStalled", "OthersWatch", "behind"]


class OthersStalled(RuntimeError):
    """Partitions this runner does not own stayed behind the log for longer than the bound."""


def behind(targets: Mapping[int, int], applied: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """Partitions whose applied position is below their target: ``{partition: (applied, target)}``."""
    return {p: (applied.get(p, 0), t) for p, t in sorted(targets.items()) if applied.get(p, 0) < t}


class OthersWatch:
    """Raises ``OthersStalled`` when the partitions still behind stop moving for ``timeout`` seconds."""

    def __init__(self, timeout: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self._last: tuple[tuple[int, int], ...] | None = None
        self._since = 0.0

    def restart(self) -> None:
        """Count the bound from the next observation (the store was away: nobody could move)."""
        self._last = None

    def observe(self, lagging: Mapping[int, tuple[int, int]], group: str = "") -> None:
        now = self._clock()
        state = tuple((p, applied) for p, (applied, _) in sorted(lagging.items()))
        if state != self._last:
            self._last, self._since = state, now
            return
        if self.timeout > 0 and now - self._since >= self.timeout:
            where = ", ".join(f"{p} (applied to {a:,} of {t:,})" for p, (a, t) in sorted(lagging.items()))
            who = f"consumer group {group!r}" if group else "the consumer group"
            raise OthersStalled(
                f"every partition this runner owns is applied, but partitions {where} are held by another member "
                f"of {who} and none of them moved for {self.timeout:g} s, so the projection is not caught up. "
                "A member killed without leaving holds its partitions until its session expires; if they never "
                "come free, stop the other runners of the group or run with another --group (positions come from "
                "the store, so nothing is lost or applied twice); --no-partition-timeout 0 waits as long as it takes"
            )

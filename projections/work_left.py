"""What each partition of the log holds beyond the store's position, as a runner last saw both: a
consumer group's leader splits the partitions by it (``projections.lag_assignor``).

The runner notes every partition's stored position under each batch's lock (the other runners'
included) and every high watermark its source reports (partitions it has since left included); the
group's joining thread reads them. Each note replaces a dict whole, so the reader never meets one
half-written.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["WorkLeft"]


class WorkLeft:
    def __init__(self) -> None:
        self._stored: dict[int, int] = {}
        self._marks: dict[int, int] = {}

    def saw_stored(self, positions: Mapping[int, int]) -> None:
        """The store's positions (every partition it has one for)."""
        self._stored = dict(positions)

    def saw_marks(self, marks: Mapping[int, int]) -> None:
        """High watermarks, of some partitions: the others keep the last one seen."""
        self._marks = {**self._marks, **marks}

    def __call__(self) -> dict[int, int]:
        stored, marks = self._stored, self._marks
        return {p: max(0, hw - stored.get(p, 0)) for p, hw in marks.items()}

"""What this runner's own commits wrote since the results feed last published: the feed's shortcut.

Why: after each commit the feed publishes the tallies that changed. Reading them back from the store
meant a query, a JSON parse of each tally and of each unit's whole state (for its event count), about a
sixth of a first projection's time with the feed. When the store holds exactly this runner's snapshot
plus its own commits since (``FeedPublisher`` checks the positions), those rows are the ones the
commits carried, so the feed takes them from here; otherwise (another runner's commits, a definition,
a failed publish) it reads the store as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from projections.stores.port import Changes, TallyRow, UnitKey

__all__ = ["FreshRows"]


@dataclass
class FreshRows:
    """The newest tally row and state event count per unit that this runner committed since it last read."""

    tallies: dict[UnitKey, TallyRow] = field(default_factory=dict)
    events: dict[UnitKey, int] = field(default_factory=dict)

    def note(self, changes: Changes) -> None:
        self.tallies.update(((row.election_id, row.unit_id), row) for row in changes.tallies)
        for row in changes.units:
            key = (row.election_id, row.unit_id)
            if row.events is None:
                self.events.pop(key, None)  # a row read from a store: this key is read back from it
            else:
                self.events[key] = row.events

    def covers(self, keys: Iterable[UnitKey]) -> bool:
        """Whether every unit of ``keys`` was committed here with its event count (its tally, if it has
        one, came with it: a tally changes only with its state or with the election, which reloads)."""
        return all(key in self.events for key in keys)

    def clear(self) -> None:
        self.tallies.clear()
        self.events.clear()

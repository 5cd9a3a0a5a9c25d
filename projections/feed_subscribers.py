"""Where a named subscriber of the results feed stopped: ``caucus subscribe --group NAME``.

Why a checkpoint of its own, kept by the subscriber: a downstream system that restarts must go on
after the last line it was given, missing nothing and repeating nothing. Two things make that true,
and both are kept, in one transaction after every line printed:

* the feed position (the next offset of every partition of the results log), so reading goes on
  exactly there;
* the highest ``version`` printed per unit, county and state (``FeedDeduper.seen``), so a copy
  republished later (a runner restarting publishes its whole view again) is still recognised.

The file is ``subscribers.sqlite3`` in the data directory (on the subscriber's machine, whichever
backend the feed is on). It names the results log it was made for (its log id): a checkpoint of
another feed is refused rather than applied to offsets that mean something else. A subscriber killed
between printing a line and committing repeats at most that line.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from ledger.sqlite_setup import connect_private, create_schema, use_wal

__all__ = ["CHECKPOINT_FILE", "CheckpointMismatch", "SubscriberCheckpoint", "parse_feed_position", "feed_position_text"]

CHECKPOINT_FILE = "subscribers.sqlite3"
_POSITION = re.compile(r"^\s*\d+:\d+(\s*,\s*\d+:\d+)*\s*$")


def parse_feed_position(text: str | None) -> dict[int, int] | None:
    """A feed position ("0:12,1:40": the next offset of each partition named, as the read API's event ids
    and ``caucus subscribe --group`` keep them); None for none, ``ValueError`` naming what is wrong."""
    if text is None or not text.strip():
        return None
    if not _POSITION.match(text):
        raise ValueError(f"{text!r} is not a feed position (PARTITION:OFFSET,..., e.g. 0:12,1:40)")
    pairs = [item.split(":") for item in text.replace(" ", "").split(",")]
    named = [int(p) for p, _ in pairs]
    if len(set(named)) != len(named):
        raise ValueError(f"{text!r} names partition {next(p for p in named if named.count(p) > 1)} twice")
    return {int(p): int(o) for p, o in pairs}


def feed_position_text(positions: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(positions.items()))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS subscriber (grp TEXT PRIMARY KEY, feed_id TEXT);
CREATE TABLE IF NOT EXISTS subscriber_position (grp TEXT, part INTEGER, next_offset INTEGER, PRIMARY KEY (grp, part));
CREATE TABLE IF NOT EXISTS subscriber_seen (grp TEXT, election TEXT, kind TEXT, area TEXT, version INTEGER,
                                            PRIMARY KEY (grp, election, kind, area));
"""


class CheckpointMismatch(ValueError):
    """The group's checkpoint was made for another results feed."""


class SubscriberCheckpoint:
    """One group's position and seen versions, read at start and saved after each line."""

    def __init__(self, path: Path, group: str, *, timeout: float = 30.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.group = group
        self._conn = connect_private(path, timeout)
        use_wal(self._conn, timeout)
        self._conn.execute("PRAGMA synchronous=NORMAL")
        create_schema(self._conn, _SCHEMA)

    def load(self, feed_id: str | None) -> tuple[dict[int, int] | None, dict[tuple[str, str, str], int]]:
        """(positions, seen versions) of the group; (None, {}) for a new group, and positions None for a
        group that has printed but holds no position yet (its ``--latest`` cut short by ``--max``): it
        starts as a new group does, and what it printed is not printed again. ``CheckpointMismatch`` if
        the group followed another feed."""
        row = self._conn.execute("SELECT feed_id FROM subscriber WHERE grp = ?", (self.group,)).fetchone()
        if row is None:
            return None, {}
        if row[0] is not None and row[0] != feed_id:  # an id does not go away: a feed without one is another
            raise CheckpointMismatch(f"subscriber group {self.group!r} followed another results feed (log id {row[0]}, "
                                     f"this one is {feed_id or 'a feed with no id'}: replaced, or lost and made again); "
                                     "its positions mean nothing here: use another --group, or --from-beginning with a new one")
        positions = {int(p): int(o) for p, o in self._conn.execute(
            "SELECT part, next_offset FROM subscriber_position WHERE grp = ?", (self.group,))}
        seen = {(e, k, a): int(v) for e, k, a, v in self._conn.execute(
            "SELECT election, kind, area, version FROM subscriber_seen WHERE grp = ?", (self.group,))}
        return positions or None, seen

    def save(self, feed_id: str | None, positions: dict[int, int], changed: dict[tuple[str, str, str], int]) -> None:
        """Record the position and the versions printed since the last save, in one transaction."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO subscriber (grp, feed_id) VALUES (?, ?) ON CONFLICT (grp) DO UPDATE SET feed_id = excluded.feed_id",
                         (self.group, feed_id))
            conn.executemany("INSERT OR REPLACE INTO subscriber_position (grp, part, next_offset) VALUES (?, ?, ?)",
                             [(self.group, p, o) for p, o in positions.items()])
            conn.executemany("INSERT OR REPLACE INTO subscriber_seen (grp, election, kind, area, version) VALUES (?, ?, ?, ?, ?)",
                             [(self.group, e, k, a, v) for (e, k, a), v in changed.items()])
            conn.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._conn.close()

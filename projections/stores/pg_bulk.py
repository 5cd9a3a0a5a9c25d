"""A batch's unit states, tallies and history rows into PostgreSQL as sets, not row by row.

Why: these writes run under the set's row lock (``PostgresStore.transaction``), which every runner of
the set takes in turn; the time a batch holds it bounds what a second runner can add. Sent row by
row (``executemany``, pipelined), each row is its own bind, execute and index lookup, and a batch of
500 events held the lock for about 160 ms, two thirds of it in these upserts. Here each kind is
copied (``COPY``) into a temporary table of the connection, and one statement moves the rows into
their table: PostgreSQL loops over them itself.

The staging tables are emptied at each commit (``ON COMMIT DELETE ROWS``): the moves' DELETE leaves
dead rows, which PostgreSQL never vacuums in a temporary table, so a table kept for a connection's
life grew by every row staged, and each move scanned them all. They have no keys; a batch writes each unit once (its rows come from dicts keyed by
unit), so a key met twice would be a fault of the fold, and PostgreSQL refuses it (``ON CONFLICT DO
UPDATE`` cannot change a row twice; the history's primary key). A history row's ``high_at`` and
``in_order`` look at the unit's newest earlier row as the row-by-row insert did (``history_insert``):
the rows of one statement do not see each other, and a batch has one row per unit.
"""

from __future__ import annotations

from typing import Any

import psycopg

from projections.stores.port import Changes

__all__ = ["STAGING", "copy_rows", "move_rows"]

STAGING = """
CREATE TEMP TABLE IF NOT EXISTS proj_unit_states_in (
    set_id BIGINT NOT NULL, unit_id TEXT NOT NULL, election_id TEXT NOT NULL, part INTEGER NOT NULL, state TEXT NOT NULL
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS proj_unit_tallies_in (
    set_id BIGINT NOT NULL, unit_id TEXT NOT NULL, election_id TEXT NOT NULL, county_id TEXT, status TEXT NOT NULL,
    context TEXT NOT NULL, tally TEXT NOT NULL
) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS proj_unit_history_in (
    set_id BIGINT NOT NULL, election_id TEXT NOT NULL, unit_id TEXT NOT NULL, part INTEGER NOT NULL,
    first_offset BIGINT NOT NULL, last_offset BIGINT NOT NULL, low_at TEXT NOT NULL, high_at TEXT NOT NULL,
    sorted INTEGER NOT NULL, state TEXT NOT NULL
) ON COMMIT DELETE ROWS"""

_UNITS = "set_id, unit_id, election_id, part, state"
_TALLIES = "set_id, unit_id, election_id, county_id, status, context, tally"
_HISTORY = "set_id, election_id, unit_id, part, first_offset, last_offset, low_at, high_at, sorted, state"

_MOVE_UNITS = (
    f"WITH moved AS (DELETE FROM proj_unit_states_in RETURNING {_UNITS}) "
    f"INSERT INTO proj_unit_states ({_UNITS}) SELECT {_UNITS} FROM moved "
    "ON CONFLICT (set_id, election_id, unit_id) DO UPDATE SET part = excluded.part, state = excluded.state"
)
_MOVE_TALLIES = (
    f"WITH moved AS (DELETE FROM proj_unit_tallies_in RETURNING {_TALLIES}) "
    f"INSERT INTO proj_unit_tallies ({_TALLIES}) SELECT {_TALLIES} FROM moved "
    "ON CONFLICT (set_id, election_id, unit_id) DO UPDATE SET county_id = excluded.county_id, "
    "status = excluded.status, context = excluded.context, tally = excluded.tally"
)
_MOVE_HISTORY = (
    f"WITH moved AS (DELETE FROM proj_unit_history_in RETURNING {_HISTORY}) "
    "INSERT INTO proj_unit_history (set_id, election_id, unit_id, part, first_offset, last_offset, low_at, high_at, "
    "in_order, state) "
    "SELECT m.set_id, m.election_id, m.unit_id, m.part, m.first_offset, m.last_offset, m.low_at, "
    "GREATEST(m.high_at, COALESCE(prev.high_at, '')), "
    "CASE WHEN m.sorted = 1 AND m.low_at >= COALESCE(prev.high_at, '') THEN 1 ELSE 0 END, m.state "
    "FROM moved AS m LEFT JOIN LATERAL (SELECT h.high_at FROM proj_unit_history AS h WHERE h.set_id = m.set_id "
    "AND h.election_id = m.election_id AND h.unit_id = m.unit_id ORDER BY h.last_offset DESC LIMIT 1) AS prev ON true"
)


def copy_rows(cur: psycopg.Cursor[Any], set_id: int, changes: Changes, rows: dict[str, list[tuple[Any, ...]]]) -> None:
    """Copy the batch's unit states, tallies and history rows (``rows``: ``change_rows``) into the
    staging tables (``STAGING``, which must exist). Needs no lock: the tables are the connection's."""
    if rows["units"]:
        _copy(cur, f"COPY proj_unit_states_in ({_UNITS}) FROM STDIN", rows["units"])
    if rows["tallies"]:
        _copy(cur, f"COPY proj_unit_tallies_in ({_TALLIES}) FROM STDIN", rows["tallies"])
    if changes.history:
        _copy(cur, f"COPY proj_unit_history_in ({_HISTORY}) FROM STDIN",
              [(set_id, h.election_id, h.unit_id, h.partition, h.first_offset, h.last_offset, h.low_at, h.high_at,
                int(h.sorted), h.state) for h in changes.history])


def move_rows(cur: psycopg.Cursor[Any], changes: Changes, rows: dict[str, list[tuple[Any, ...]]]) -> None:
    """Move what ``copy_rows`` staged into the set's tables; the staging tables are empty again after."""
    if rows["units"]:
        cur.execute(_MOVE_UNITS)
    if rows["tallies"]:
        cur.execute(_MOVE_TALLIES)
    if changes.history:
        cur.execute(_MOVE_HISTORY)


def _copy(cur: psycopg.Cursor[Any], sql: str, rows: list[tuple[Any, ...]]) -> None:
    with cur.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)

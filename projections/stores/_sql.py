"""SQL shared by the SQLite and PostgreSQL stores: the schema and every query that reads the same.

The adapters differ in four places only: placeholders, how a list is matched (``IN`` chunks vs
``= ANY``), how a set's writers are serialised (SQLite's ``BEGIN IMMEDIATE`` vs a row lock), and how
rows are bulk-loaded (``executemany`` vs ``COPY``). Everything else is here, so the two cannot drift.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from projections.stores.port import (
    Changes,
    ElectionRow,
    EventRow,
    PositionRow,
    SetInfo,
    TallyRow,
    UnitKey,
    UnitRow,
    admitted,
    chunks,
)

SCHEMA_VERSION = "2"
"""2: units, tallies and the event index are keyed by (election id, unit id)."""

# {id} is the identity column type; {big} the 64-bit integer type.
SCHEMA = """
CREATE TABLE IF NOT EXISTS proj_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS proj_sets (
    set_id      {id},
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('building', 'serving', 'retired')),
    source      TEXT NOT NULL,
    rule_set    TEXT,
    params      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    promoted_at TEXT,
    UNIQUE (name, version)
);
CREATE TABLE IF NOT EXISTS proj_serving (
    name   TEXT PRIMARY KEY,
    set_id {big} NOT NULL REFERENCES proj_sets (set_id)
);
CREATE TABLE IF NOT EXISTS proj_positions (
    set_id           {big} NOT NULL,
    part             INTEGER NOT NULL,
    next_offset      {big} NOT NULL,
    last_recorded_at TEXT,
    PRIMARY KEY (set_id, part)
);
CREATE TABLE IF NOT EXISTS proj_elections (
    set_id      {big} NOT NULL,
    election_id TEXT NOT NULL,
    revision    TEXT NOT NULL,
    state       TEXT NOT NULL,
    PRIMARY KEY (set_id, election_id)
);
CREATE TABLE IF NOT EXISTS proj_unit_states (
    set_id      {big} NOT NULL,
    unit_id     TEXT NOT NULL,
    election_id TEXT NOT NULL,
    part        INTEGER NOT NULL,
    state       TEXT NOT NULL,
    PRIMARY KEY (set_id, election_id, unit_id)
);
CREATE TABLE IF NOT EXISTS proj_unit_tallies (
    set_id      {big} NOT NULL,
    unit_id     TEXT NOT NULL,
    election_id TEXT NOT NULL,
    county_id   TEXT,
    status      TEXT NOT NULL,
    context     TEXT NOT NULL,
    tally       TEXT NOT NULL,
    PRIMARY KEY (set_id, election_id, unit_id)
);
CREATE INDEX IF NOT EXISTS proj_unit_tallies_by_county ON proj_unit_tallies (set_id, election_id, county_id);
CREATE TABLE IF NOT EXISTS proj_events (
    set_id      {big} NOT NULL,
    event_id    TEXT NOT NULL,
    unit_key    TEXT NOT NULL,
    election_id TEXT NOT NULL,
    part        INTEGER NOT NULL,
    log_offset  {big} NOT NULL,
    type        TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (set_id, event_id)
);
CREATE INDEX IF NOT EXISTS proj_events_by_unit ON proj_events (set_id, election_id, unit_key, part, log_offset);
CREATE TABLE IF NOT EXISTS proj_unit_history (
    set_id       {big} NOT NULL,
    election_id  TEXT NOT NULL,
    unit_id      TEXT NOT NULL,
    part         INTEGER NOT NULL,
    first_offset {big} NOT NULL,
    last_offset  {big} NOT NULL,
    low_at       TEXT NOT NULL,
    high_at      TEXT NOT NULL,
    in_order     INTEGER NOT NULL,
    state        TEXT NOT NULL,
    PRIMARY KEY (set_id, election_id, unit_id, last_offset)
);
CREATE INDEX IF NOT EXISTS proj_unit_history_by_time ON proj_unit_history (set_id, election_id, unit_id, high_at, last_offset);
CREATE INDEX IF NOT EXISTS proj_unit_history_disorder ON proj_unit_history (set_id) WHERE in_order = 0;
CREATE TABLE IF NOT EXISTS proj_history_sets (
    set_id {big} PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS proj_feed_versions (
    set_id   {big} NOT NULL,
    feed_key TEXT NOT NULL,
    version  {big} NOT NULL,
    PRIMARY KEY (set_id, feed_key)
);
"""

EVENT_COLUMNS = "set_id, event_id, unit_key, election_id, part, log_offset, type, recorded_at"
"""The event index's columns, in ``EventRow`` order after the set id."""

DATA_TABLES = ("proj_positions", "proj_elections", "proj_unit_states", "proj_unit_tallies", "proj_events", "proj_unit_history",
               "proj_history_sets", "proj_feed_versions")
TOP_VERSION = ("SELECT COALESCE(MAX(version), 0), (SELECT value FROM proj_meta WHERE name = 'set_version:' || {ph}) "
               "FROM proj_sets WHERE name = {ph}")
NOTE_VERSION = ("INSERT INTO proj_meta (name, value) VALUES ('set_version:' || {ph}, {ph}) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value")
"""A name's versions are never given twice: the highest given is kept in ``proj_meta`` as well, since a
dropped set (an abandoned replay) takes its row with it, and ``set:tally@4`` must not come to mean
another set's contents. A store from before this note falls back on the sets it holds."""


def next_version(row: tuple[int, str | None]) -> int:
    held, noted = row
    return max(int(held), int(noted or 0)) + 1


HISTORY_MARK = "INSERT INTO proj_history_sets (set_id) VALUES ({ph})"
"""Run when a set is created: its history is kept from its first batch, so as-of reads may use it
(a set created before the history existed has none, and as-of reads replay the log for it)."""

SET_COLUMNS = "set_id, name, version, state, source, rule_set, params, created_at, promoted_at"


def version_mismatch(found: str, where: str, rebuild: str) -> str:
    """The one instruction for a store written by another layout: a projection holds nothing the
    log does not, so it is rebuilt rather than migrated."""
    return (
        f"the projection store {where} has schema version {found}, this code needs {SCHEMA_VERSION} "
        f"(units are now keyed by election and unit); it holds nothing that is not in the log: {rebuild}"
    )


def schema_statements() -> tuple[str, list[str]]:
    """The meta table's statement (run first, so the version can be checked before anything else is
    created) and the rest."""
    stmts = [s for s in SCHEMA.split(";") if s.strip()]
    return stmts[0], stmts[1:]


def now_text() -> str:
    return datetime.now(UTC).isoformat()


def set_info(row: Sequence[Any]) -> SetInfo:
    return SetInfo(int(row[0]), row[1], int(row[2]), row[3], row[4], row[5], row[6], row[7], row[8])


Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
QueryIn = Callable[[str, Sequence[Any], Sequence[str], str], list[tuple[Any, ...]]]


class SqlReader:
    """Reads of one set; ``q`` runs a query, ``q_in`` one with a list (``{in}`` marks where)."""

    def __init__(self, set_id: int, q: Query, q_in: QueryIn, ph: str) -> None:
        self.set_id = set_id
        self._q = q
        self._q_in = q_in
        self._ph = ph

    def _sql(self, text: str) -> str:
        return text.replace("?", self._ph)

    def positions(self) -> dict[int, PositionRow]:
        rows = self._q(self._sql("SELECT part, next_offset, last_recorded_at FROM proj_positions WHERE set_id = ?"), (self.set_id,))
        return {int(p): PositionRow(int(p), int(o), r) for p, o, r in rows}

    def elections(self) -> dict[str, ElectionRow]:
        rows = self._q(self._sql("SELECT election_id, revision, state FROM proj_elections WHERE set_id = ?"), (self.set_id,))
        return {e: ElectionRow(e, r, s) for e, r, s in rows}

    def election_revisions(self) -> dict[str, str]:
        rows = self._q(self._sql("SELECT election_id, revision FROM proj_elections WHERE set_id = ?"), (self.set_id,))
        return {e: r for e, r in rows}

    def unit_states(self, keys: Iterable[UnitKey] | None = None, *, election_id: str | None = None) -> dict[UnitKey, UnitRow]:
        base = "SELECT unit_id, election_id, part, state FROM proj_unit_states WHERE set_id = ?"
        params: list[Any] = [self.set_id]
        if election_id is not None:
            base += " AND election_id = ?"
            params.append(election_id)
        if keys is None:
            rows = self._q(self._sql(base), params)
        else:
            rows = self._keyed(base, params, keys)
        return {(e, u): UnitRow(u, e, int(p), s) for u, e, p, s in rows}

    def tally_mark(self) -> str | None:
        rows = self._q(self._sql("SELECT value FROM proj_meta WHERE name = ?"), [f"tally_rules:{self.set_id}"])
        return str(rows[0][0]) if rows else None

    def set_tally_mark(self, revision: str) -> None:
        self._q(self._sql("INSERT INTO proj_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = "
                          "excluded.value RETURNING name"), [f"tally_rules:{self.set_id}", revision])

    def tallies(
        self, *, election_id: str | None = None, county_id: str | None = None, keys: Iterable[UnitKey] | None = None
    ) -> dict[UnitKey, TallyRow]:
        base = "SELECT unit_id, election_id, county_id, status, context, tally FROM proj_unit_tallies WHERE set_id = ?"
        params: list[Any] = [self.set_id]
        if election_id is not None:
            base += " AND election_id = ?"
            params.append(election_id)
        if county_id is not None:
            base += " AND county_id = ?"
            params.append(county_id)
        if keys is None:
            rows = self._q(self._sql(base), params)
        else:
            rows = self._keyed(base, params, keys, probe=False)
        return {(r[1], r[0]): TallyRow(*r) for r in rows}

    def _keyed(self, base: str, params: list[Any], keys: Iterable[UnitKey], *, probe: bool = True) -> list[tuple[Any, ...]]:
        """Rows of the given (election, unit) keys: one election at a time, matched by unit id in the
        database (the list adapters take is of single values). Naming the election lets the primary
        key (set, election, unit) find each row; without it every chunk of ids scanned the whole set.
        ``probe=False``: the table has another index led by (set, election), which a planner without
        statistics takes as readily as the primary key for a single unit; ``q_in`` is asked to match
        the list in one statement (an empty column name) rather than key by key."""
        by_election: dict[str, set[str]] = {}
        for election_id, unit_id in keys:
            by_election.setdefault(election_id, set()).add(unit_id)
        rows: list[tuple[Any, ...]] = []
        sql = self._sql(base + " AND election_id = ? AND unit_id {in}")
        for election_id, ids in sorted(by_election.items()):
            rows.extend(self._q_in(sql, [*params, election_id], sorted(ids), "unit_id" if probe else ""))
        return rows

    def processed(self, event_ids: Sequence[str]) -> set[str]:
        ids = list(dict.fromkeys(event_ids))
        if not ids:
            return set()
        rows = self._q_in(self._sql("SELECT event_id FROM proj_events WHERE set_id = ? AND event_id {in}"), [self.set_id], ids, "event_id")
        return {r[0] for r in rows}

    def indexed_at(self, event_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        ids = list(dict.fromkeys(event_ids))
        if not ids:
            return {}
        rows = self._q_in(self._sql("SELECT event_id, part, log_offset FROM proj_events WHERE set_id = ? AND event_id {in}"),
                          [self.set_id], ids, "event_id")
        return {e: (int(p), int(o)) for e, p, o in rows}

    def events_for(self, election_id: str, unit_key: str) -> list[EventRow]:
        rows = self._q(
            self._sql(
                "SELECT event_id, unit_key, election_id, part, log_offset, type, recorded_at FROM proj_events "
                "WHERE set_id = ? AND election_id = ? AND unit_key = ? ORDER BY part, log_offset"
            ),
            (self.set_id, election_id, unit_key),
        )
        return [EventRow(e, k, el, int(p), int(o), t, r) for e, k, el, p, o, t, r in rows]

    def unattributed(self, undefined: Collection[str] = ()) -> list[EventRow]:
        named = sorted({"", *undefined})
        rows: list[tuple[Any, ...]] = []
        for chunk in chunks(named, 500):  # refusals may name any number of ids: a statement takes only so many
            rows += self._q(
                self._sql(
                    "SELECT event_id, unit_key, election_id, part, log_offset, type, recorded_at FROM proj_events "
                    f"WHERE set_id = ? AND election_id IN ({', '.join('?' * len(chunk))})"
                ),
                (self.set_id, *chunk),
            )
        found = [EventRow(e, k, el, int(p), int(o), t, r) for e, k, el, p, o, t, r in rows]
        return sorted(found, key=lambda row: (row.partition, row.offset))

    def event_count(self) -> int:
        rows = self._q(self._sql("SELECT COUNT(*) FROM proj_events WHERE set_id = ?"), (self.set_id,))
        return int(rows[0][0])

    # -- the unit history, for as-of reads (``projections.asof_store``) -------------------------

    def history_kept(self) -> bool:
        """Whether this set has kept its history since its first batch."""
        return bool(self._q(self._sql("SELECT 1 FROM proj_history_sets WHERE set_id = ?"), (self.set_id,)))

    def history_disordered(self) -> bool:
        """Whether some unit has an event recorded before one of its earlier events (a late spool)."""
        return bool(self._q(self._sql("SELECT 1 FROM proj_unit_history WHERE set_id = ? AND in_order = 0 LIMIT 1"), (self.set_id,)))

    def history_at_offsets(self, ends: Mapping[int, int], rest: int) -> list[tuple[Any, ...]]:
        """Per unit and election: its last entry ending before the cut (offsets, per partition) and the
        entry after it (see ``_HISTORY_CUT``)."""
        end_sql = "CASE k.part " + "".join("WHEN ? THEN ? " for _ in ends) + "ELSE ? END"
        end_params: list[Any] = [v for item in sorted(ends.items()) for v in item] + [rest]
        chosen = f"(SELECT MAX(last_offset) FROM proj_unit_history h WHERE {_SAME_KEY} AND h.last_offset < {end_sql})"
        return self._history_cut(chosen, [self.set_id, *end_params])

    def history_at_time(self, at: str) -> list[tuple[Any, ...]]:
        """The same for a time: the last entry whose events (and every earlier one's) were recorded by ``at``."""
        chosen = (f"(SELECT last_offset FROM proj_unit_history h WHERE {_SAME_KEY} AND h.high_at <= ? "
                  "ORDER BY h.high_at DESC, h.last_offset DESC LIMIT 1)")
        return self._history_cut(chosen, [self.set_id, at])

    def _history_cut(self, chosen: str, params: list[Any]) -> list[tuple[Any, ...]]:
        sid = self.set_id
        return self._q(self._sql(_HISTORY_CUT.format(chosen=chosen)), [sid, sid, *params, sid, sid, sid])


_SAME_KEY = "h.set_id = ? AND h.election_id = k.election_id AND h.unit_id = k.unit_id"
_HISTORY_CUT = """
WITH keys AS (
    SELECT election_id, unit_id, part FROM proj_unit_states WHERE set_id = ?
    UNION ALL
    SELECT DISTINCT e.election_id, '', h.part FROM proj_elections e JOIN proj_unit_history h
        ON h.set_id = e.set_id AND h.election_id = e.election_id AND h.unit_id = '' WHERE e.set_id = ?
), chosen AS (
    SELECT k.election_id, k.unit_id, k.part, {chosen} AS chosen FROM keys k
), picked AS (
    SELECT k.election_id, k.unit_id, k.part, k.chosen,
        (SELECT MIN(last_offset) FROM proj_unit_history h WHERE h.set_id = ? AND h.election_id = k.election_id
            AND h.unit_id = k.unit_id AND h.last_offset > COALESCE(k.chosen, -1)) AS nxt
    FROM chosen k
)
SELECT p.election_id, p.unit_id, p.part, p.chosen, c.state, n.first_offset, n.last_offset, n.low_at
FROM picked p
LEFT JOIN proj_unit_history c ON c.set_id = ? AND c.election_id = p.election_id AND c.unit_id = p.unit_id AND c.last_offset = p.chosen
LEFT JOIN proj_unit_history n ON n.set_id = ? AND n.election_id = p.election_id AND n.unit_id = p.unit_id AND n.last_offset = p.nxt
"""
"""Per unit (and election, unit id ''): the entry ``{chosen}`` picks (offset and state, or NULL) and the
entry after it (first and last offset, earliest time), whose events may straddle the cut."""


def upsert_statements(ph: str) -> dict[str, str]:
    """The upserts a batch needs, with the adapter's placeholder."""
    p = ph
    return {
        "units": (
            f"INSERT INTO proj_unit_states (set_id, unit_id, election_id, part, state) VALUES ({p}, {p}, {p}, {p}, {p}) "
            "ON CONFLICT (set_id, election_id, unit_id) DO UPDATE SET part = excluded.part, state = excluded.state"
        ),
        "tallies": (
            f"INSERT INTO proj_unit_tallies (set_id, unit_id, election_id, county_id, status, context, tally) "
            f"VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}) "
            "ON CONFLICT (set_id, election_id, unit_id) DO UPDATE SET county_id = excluded.county_id, "
            "status = excluded.status, context = excluded.context, tally = excluded.tally"
        ),
        "elections": (
            f"INSERT INTO proj_elections (set_id, election_id, revision, state) VALUES ({p}, {p}, {p}, {p}) "
            "ON CONFLICT (set_id, election_id) DO UPDATE SET revision = excluded.revision, state = excluded.state"
        ),
        "positions": (
            f"INSERT INTO proj_positions (set_id, part, next_offset, last_recorded_at) VALUES ({p}, {p}, {p}, {p}) "
            "ON CONFLICT (set_id, part) DO UPDATE SET next_offset = excluded.next_offset, last_recorded_at = excluded.last_recorded_at"
        ),
        "events": (
            f"INSERT INTO proj_events ({EVENT_COLUMNS}) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p})"
        ),
    }


def history_insert(ph: str, greatest: str) -> str:
    """A unit's (or an election's, unit id '') state after a batch, with where its events of the batch
    lie: ``high_at`` is the latest recorded time of all its events so far, ``in_order`` whether none
    of this batch's events was recorded before an earlier one (``projections.asof_store`` relies on both)."""
    p = ph
    prev = (f"(SELECT high_at FROM proj_unit_history WHERE set_id = {p} AND election_id = {p} AND unit_id = {p} "
            "ORDER BY last_offset DESC LIMIT 1)")
    return (
        "INSERT INTO proj_unit_history (set_id, election_id, unit_id, part, first_offset, last_offset, low_at, high_at, "
        f"in_order, state) SELECT {p}, {p}, {p}, {p}, {p}, {p}, {p}, {greatest}({p}, COALESCE(prev.high_at, '')), "
        f"CASE WHEN {p} = 1 AND {p} >= COALESCE(prev.high_at, '') THEN 1 ELSE 0 END, {p} "
        f"FROM (SELECT {prev} AS high_at) AS prev"
    )


def history_params(set_id: int, changes: Changes) -> list[tuple[Any, ...]]:
    """The parameters of ``history_insert``, row by row."""
    return [(set_id, h.election_id, h.unit_id, h.partition, h.first_offset, h.last_offset, h.low_at, h.high_at,
             int(h.sorted), h.low_at, h.state, set_id, h.election_id, h.unit_id) for h in changes.history]


def change_rows(set_id: int, changes: Changes) -> dict[str, list[tuple[Any, ...]]]:
    """The parameter tuples of each upsert, in the column order of ``upsert_statements``."""
    return {
        "units": [(set_id, u.unit_id, u.election_id, u.partition, u.state) for u in changes.units],
        "tallies": [(set_id, t.unit_id, t.election_id, t.county_id, t.status, t.context, t.tally) for t in changes.tallies],
        "elections": [(set_id, e.election_id, e.revision, e.state) for e in changes.elections],
        "positions": [(set_id, p.partition, p.next_offset, p.last_recorded_at) for p in changes.positions],
        "events": [(set_id, *e) for e in changes.events],  # EventRow's fields are the columns' order
    }


FEED_VERSIONS_READ = "SELECT feed_key, version FROM proj_feed_versions WHERE set_id = {ph} AND feed_key {in}"
"""The fence (``port.FeedFence``): the highest version published per feed key; ``{in}`` as in ``SqlReader``."""
FEED_VERSIONS_RAISE = (
    "INSERT INTO proj_feed_versions (set_id, feed_key, version) VALUES ({ph}, {ph}, {ph}) "
    "ON CONFLICT (set_id, feed_key) DO UPDATE SET version = excluded.version "
    "WHERE excluded.version > proj_feed_versions.version"
)


class SqlFeedFence:
    """``port.FeedFence`` on the ``proj_feed_versions`` rows, inside the adapter's locked transaction."""

    def __init__(self, set_id: int, q_in: QueryIn, execute_many: Callable[[str, list[tuple[Any, ...]]], Any], ph: str) -> None:
        self.set_id = set_id
        self._q_in = q_in
        self._many = execute_many
        self._ph = ph

    def admit(self, versions: Mapping[str, int]) -> set[str]:
        if not versions:
            return set()
        read = FEED_VERSIONS_READ.format(ph=self._ph, **{"in": "{in}"})
        held = {key: int(v) for key, v in self._q_in(read, [self.set_id], list(versions), "feed_key")}
        keys = admitted(held, versions)
        raised = [(self.set_id, key, versions[key]) for key in sorted(keys) if versions[key] > held.get(key, -1)]
        if raised:
            self._many(FEED_VERSIONS_RAISE.format(ph=self._ph), raised)
        return keys

"""PostgreSQL reads a list of keys by probing each key, whatever its statistics say.

Why: a batch reads the stored states and tallies of the units it touches, and the index of the
event ids it holds. A set filled since the last ANALYZE (every rebuild, every new set) has no
statistics, and the planner, asked for ``unit_id = ANY(list)``, took the leading key columns (set,
election) as a handful of rows and filtered the list over all of them: each batch read every unit
state of the set, and a rebuild grew with the square of its units. These tests count the rows the
database reads for the statements the store sends, on tables it has never analysed.

Tallies by key are not probed: their county index, led by (set, election) too, ties with the primary
key for such a planner, which then scans the county index once per key (``SqlReader._keyed``). For
them the store gathers statistics after a bulk write (``PostgresStore._gather_statistics``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from projections.stores.port import Changes, EventRow, PositionRow, TallyRow, UnitRow

pytestmark = pytest.mark.usefixtures("pg_dsn")

UNITS = 20_000
ASKED = 40


class _Recording:
    """The reader's connection, keeping each statement it is sent."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sent: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = None) -> Any:
        self.sent.append((sql, params))
        return self.conn.execute(sql, params)


def _plan_rows(plan: dict[str, Any], relation: str) -> int:
    """Rows the plan's scans of ``relation`` read: those they returned and those their filters removed."""
    loops = plan.get("Actual Loops", 1)
    read = 0
    if plan.get("Relation Name") == relation:
        read += (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
                 + plan.get("Rows Removed by Index Recheck", 0)) * loops
    return read + sum(_plan_rows(child, relation) for child in plan.get("Plans", ()))


def _rows() -> Changes:
    ch = Changes()
    for i in range(UNITS):
        ch.units.append(UnitRow(f"u{i}", "e1", i % 8, f'{{"u":{i}}}'))
        ch.tallies.append(TallyRow(f"u{i}", "e1", f"c{i % 99}", "reported", "ctx", f'{{"t":{i}}}'))
        ch.events.append(EventRow(f"ev-{i}", f"u{i}", "e1", i % 8, i, "ResultReported", "2020-02-03T19:00:00+00:00"))
    ch.positions.append(PositionRow(0, UNITS, "2020-02-03T19:00:00+00:00"))
    return ch


@pytest.fixture(params=["by the store", "beside it"])
def filled(request: pytest.FixtureRequest, pg_dsn: str) -> Iterator[tuple[Any, int, bool]]:
    """A set of ``UNITS`` units, written by the store's own transaction (which gathers statistics
    after a bulk write) or by its statements on a connection of their own (none gathered)."""
    from projections.stores.postgres import PostgresStore, _Tx

    store = PostgresStore(pg_dsn)
    set_id = store.create_set("tally", source="test").set_id
    by_store = request.param == "by the store"
    if by_store:
        with store.transaction(set_id) as tx:
            tx.write(_rows())
    else:
        with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.transaction(), ThreadPoolExecutor(1) as io:
            _Tx(set_id, conn, io).write(_rows())
    try:
        yield store, set_id, by_store
    finally:
        store.close()


def _rows_read(store: Any, set_id: int, relation: str, ask: Any) -> tuple[int, Any]:
    with store.reader(set_id) as tx:
        real = tx._conn
        tx._conn = recording = _Recording(real)
        answer = ask(tx)
        tx._conn = real
        (sql, params), = [(s, p) for s, p in recording.sent if relation in s]
        (plan,), = real.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
    return _plan_rows(plan["Plan"], relation), answer


def test_a_batch_s_unit_states_are_read_by_key(filled: tuple[Any, int, bool]) -> None:
    store, set_id, _ = filled
    relation = "proj_unit_states"
    keys = [("e1", f"u{i}") for i in range(0, UNITS, UNITS // ASKED)] + [("e1", "no-such-unit")]
    read, answer = _rows_read(store, set_id, relation, lambda tx: tx.unit_states(keys))
    assert set(answer) == set(keys[:-1])
    assert read <= 2 * len(keys), f"{read} rows of {relation} read for {len(keys)} keys (the set holds {UNITS})"


def test_held_event_ids_are_read_by_key(filled: tuple[Any, int, bool]) -> None:
    store, set_id, _ = filled
    ids = [f"ev-{i}" for i in range(0, UNITS, UNITS // ASKED)] + ["ev-none", "ev-0"]  # a repeat asks once
    read, answer = _rows_read(store, set_id, "proj_events", lambda tx: tx.processed(ids))
    assert answer == set(ids) - {"ev-none"}
    assert read <= 2 * len(ids), f"{read} rows of proj_events read for {len(ids)} ids (the set holds {UNITS})"


def test_tallies_by_key_after_the_store_s_own_bulk_write(filled: tuple[Any, int, bool]) -> None:
    """Not probed (see the module docstring): read by key once the store has gathered statistics
    after its bulk write; with none, the planner's choice is left open, and only the answer is checked."""
    store, set_id, by_store = filled
    relation = "proj_unit_tallies"
    keys = [("e1", f"u{i}") for i in range(0, UNITS, UNITS // ASKED)] + [("e1", "no-such-unit")]
    read, answer = _rows_read(store, set_id, relation, lambda tx: tx.tallies(keys=keys))
    assert set(answer) == set(keys[:-1])
    if by_store:
        assert read <= 2 * len(keys), f"{read} rows of {relation} read for {len(keys)} keys (the set holds {UNITS})"


def test_gathering_statistics_does_not_wait_on_a_held_lock(pg_dsn: str) -> None:
    """ANALYZE waits for a lock that another ANALYZE or a VACUUM holds (another runner's statistics,
    an anti-wraparound vacuum), and did so with the store's lock held: the batch did not return, nor
    could the runner's next one start, until the other let go. It now gives up after its lock timeout
    (the batch has committed; statistics are gathered at the next doubling)."""
    from projections.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn)
    set_id = store.create_set("tally", source="test").set_id
    returned = threading.Event()

    def batch() -> None:
        with store.transaction(set_id) as tx:
            tx.write(_rows())
        returned.set()

    try:
        with psycopg.connect(pg_dsn) as holder:  # not autocommit: the lock is held until the rollback
            holder.execute("LOCK TABLE proj_unit_tallies IN SHARE UPDATE EXCLUSIVE MODE")  # as ANALYZE or VACUUM take
            writer = threading.Thread(target=batch)
            writer.start()
            while_held = returned.wait(timeout=60)
            holder.rollback()
        writer.join()
        assert while_held, "the batch waited for the lock ANALYZE wanted"
        with store.reader(set_id) as tx:
            assert len(tx.unit_states([("e1", "u0"), ("e1", f"u{UNITS - 1}")])) == 2, "the batch committed"
    finally:
        store.close()


def test_the_staging_tables_do_not_grow_with_the_batches(pg_dsn: str) -> None:
    """A batch's rows go through temporary tables of the connection (``pg_bulk``, the event index's
    staging). Emptied by DELETE, they kept every dead row (PostgreSQL never vacuums a temporary table)
    and grew for the connection's life, each move scanning them all; they are emptied at each commit."""
    from projections.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn)
    try:
        set_id = store.create_set("tally", source="test").set_id
        with store.transaction(set_id) as tx:
            tx.index_new(_rows().events[:2000])
            tx.write(Changes(units=_rows().units[:2000], tallies=_rows().tallies[:2000]))
        with store._guarded() as conn:
            sizes = {t: conn.execute("SELECT pg_relation_size(%s)", (t,)).fetchone()[0]
                     for t in ("proj_events_in", "proj_unit_states_in", "proj_unit_tallies_in")}
        assert sizes == dict.fromkeys(sizes, 0), sizes
    finally:
        store.close()

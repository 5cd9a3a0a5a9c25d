"""The unit history a store keeps (``proj_unit_history``): each row's ``high_at`` (the latest recorded
time of the unit's events so far) and ``in_order`` (none of its batch's events recorded before an
earlier one), against a model written here, on SQLite (one row at a time) and PostgreSQL (the rows
of a batch as one set: ``projections.stores.pg_bulk``). As-of reads by time rely on both columns.

The batches are random: units sharing ids across two elections, an election's own row (unit ''),
late events (recorded before the unit's latest), batches whose own events are out of order, and a
unit written by several batches in a row."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.stores.port import Changes, HistoryRow, PositionRow, ProjectionStore, UnitRow

Open = Callable[[], ProjectionStore]


def _at(minute: int) -> str:
    return f"2020-02-03T{19 + minute // 60:02d}:{minute % 60:02d}:00+00:00"


def _batches(rnd: random.Random) -> list[list[HistoryRow]]:
    keys = [(e, u) for e in ("e1", "e2") for u in ("", "u1", "u2", "u3")]
    offsets = {k: 0 for k in keys}
    out = []
    for _ in range(rnd.randint(1, 6)):
        rows = []
        for key in rnd.sample(keys, rnd.randint(1, len(keys))):  # a key at most once a batch, as the fold writes
            first = offsets[key] + 1
            last = first + rnd.randint(0, 3)
            offsets[key] = last
            low = rnd.randint(0, 90)
            high = low + rnd.randint(0, 30)
            rows.append(HistoryRow(key[0], key[1], 0, first, last, _at(low), _at(high), rnd.random() < 0.7,
                                   f'{{"k":"{key[0]}/{key[1]}","last":{last}}}'))
        out.append(rows)
    return out


def _model(batches: list[list[HistoryRow]]) -> dict[tuple[str, str, int], tuple[str, int]]:
    """(election, unit, last offset) -> (high_at, in_order), by the definition in the module docstring."""
    latest: dict[tuple[str, str], str] = {}
    out = {}
    for rows in batches:
        before = dict(latest)  # the rows of one batch do not see each other (each key once anyway)
        for h in rows:
            prev = before.get((h.election_id, h.unit_id), "")
            high = max(h.high_at, prev)
            out[(h.election_id, h.unit_id, h.last_offset)] = (high, int(h.sorted and h.low_at >= prev))
            latest[(h.election_id, h.unit_id)] = high
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6))
def test_history_rows_keep_the_latest_time_and_the_order(open_store: Open, seed: int) -> None:
    batches = _batches(random.Random(seed))
    store = open_store()
    try:
        set_id = store.create_set(f"h{seed}", source="test").set_id
        for i, rows in enumerate(batches):
            units = [UnitRow(h.unit_id, h.election_id, 0, h.state) for h in rows if h.unit_id]
            with store.transaction(set_id) as tx:
                tx.write(Changes(units=units, history=rows, positions=[PositionRow(0, i + 1, _at(0))]))
        with store.reader(set_id) as reader:
            stored: list[Any] = reader._q(reader._sql(  # type: ignore[attr-defined]
                "SELECT election_id, unit_id, last_offset, high_at, in_order, state, first_offset, low_at "
                "FROM proj_unit_history WHERE set_id = ?"), (set_id,))
        got = {(e, u, int(last)): (high, int(order)) for e, u, last, high, order, *_ in stored}
        assert got == _model(batches)
        written = {(h.election_id, h.unit_id, h.last_offset): (h.state, h.first_offset, h.low_at) for rows in batches for h in rows}
        assert {(e, u, int(last)): (s, int(first), low) for e, u, last, _h, _o, s, first, low in stored} == written
    finally:
        store.close()

"""As-of tallies from the projection's unit history (``projections.asof_store``) equal the log's replay
(``projections.asof.tally_as_of``, the reference) on random histories: two elections sharing unit ids,
corrections, refusals, tosses, repeated records, certification; projected in random batch sizes (so
batches straddle the cuts); cut at random times and positions. Both stores; where the history cannot
answer, the view says so and replays."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.events import ResultsCertified, TieBroken, TieMethod
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from projections.asof import AsOfTally, Cut, tally_as_of
from projections.asof_store import history_tally
from projections.queries import view_as_of
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore, SetInfo

Open = Callable[[], ProjectionStore]


def _history(support: ModuleType, rnd: random.Random) -> list[Any]:
    """Two elections' events interleaved (each unit's in its order), a toss, repeats, a certification."""
    lists = [support.election_log(rnd.randint(2, 7), election_id=e, corrections=rnd.randint(0, 2),
                                  rejections=rnd.randint(0, 1), seed=rnd.randint(0, 999)) for e in ("e1", "e2")]
    events: list[Any] = []
    while any(lists):
        src = rnd.choice([q for q in lists if q])
        events.append(src.pop(0))
    late = max(e.recorded_at for e in events)
    toss_unit = next(e.unit_id for e in events if e.unit_id)
    events.append(support.ev(TieBroken(contenders=("Alvarez", "Baker"), seats=1, winners=("Baker",), method=TieMethod.COIN,
                                       caller="chair"), unit_id=toss_unit, at=late + timedelta(minutes=1)))
    events.append(support.ev(ResultsCertified(authority="party"), election_id="e2", at=late + timedelta(minutes=2)))
    for _ in range(rnd.randint(0, 3)):  # a producer's retry landing again later
        events.insert(rnd.randint(events.index(dup := rnd.choice(events)) + 1, len(events)), dup)
    return events


def _project(store: ProjectionStore, log: SqliteLog, batch: int) -> SetInfo:
    info = store.create_set(f"h{uuid.uuid4().hex[:8]}", source=f"log:{log.log_id}")
    ProjectionRunner(store, info.set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=batch, poll_timeout=0.01).run(until_caught_up=True)
    return info


def _same(got: AsOfTally | str, want: AsOfTally, *, positions: bool) -> None:
    assert not isinstance(got, str), got
    assert got.context.election_id == want.context.election_id
    assert {u: t.dumps() for u, t in got.units.items()} == {u: t.dumps() for u, t in want.units.items()}
    assert {e: s.dumps() for e, s in got.state.elections.items()} == {e: s.dumps() for e, s in want.state.elections.items()}
    if positions:
        assert got.positions == want.positions


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 100_000), batch=st.integers(1, 40))
def test_history_answers_as_the_replay(support: ModuleType, open_store: Open, tmp_path: Path, seed: int, batch: int) -> None:
    rnd = random.Random(seed)
    log = SqliteLog(tmp_path / f"log-{uuid.uuid4().hex}.sqlite3", partitions=4)
    events = _history(support, rnd)
    Journal(log).append_batch(events)
    store = open_store()
    try:
        info = _project(store, log, batch)
        marks = log.high_watermarks()
        times = sorted({e.recorded_at for e in events})
        for _ in range(6):
            election = rnd.choice(["e1", "e2"])
            at = rnd.choice(times) + rnd.choice([timedelta(0), timedelta(seconds=-1), timedelta(seconds=1)])
            cuts = [(Cut(at=at), False), (Cut(ends={p: rnd.randint(0, m) for p, m in marks.items()}), True),
                    (Cut(ends={0: rnd.randint(0, marks.get(0, 0))}, rest=rnd.choice([0, None])), True)]
            for cut, exact_positions in cuts:
                try:
                    want = tally_as_of(SqliteLog(log.path), cut, election_id=election)
                except Exception as exc:  # noqa: BLE001 (nothing of that election inside the cut): both refuse
                    try:
                        history_tally(store, info, log, cut, election_id=election)
                    except Exception as again:  # noqa: BLE001
                        assert type(again) is type(exc) and str(again) == str(exc)
                        continue
                    raise AssertionError(f"the history answered where the replay refused: {exc}") from None
                _same(history_tally(store, info, log, cut, election_id=election), want, positions=exact_positions)
    finally:
        store.close()


def test_a_history_that_cannot_answer_says_so_and_replays(support: ModuleType, open_store: Open, tmp_path: Path) -> None:
    events = support.election_log(6, corrections=1)
    late = events[-1]
    events.append(support.ev(TieBroken(contenders=("Alvarez", "Baker"), seats=1, winners=("Baker",), method=TieMethod.COIN,
                                       caller="chair"), unit_id=late.unit_id, at=late.recorded_at - timedelta(days=3)))
    log = SqliteLog(tmp_path / "log.sqlite3", partitions=4)
    Journal(log).append_batch(events)
    store = open_store()
    try:
        info = _project(store, log, 5)
        night = support.T0 + timedelta(hours=2)
        assert history_tally(store, info, log, Cut(at=night)) == "some unit's events were recorded out of order"
        view = view_as_of(store, info, night, log=log)
        assert "replayed from the log: some unit's events were recorded out of order" in view.set.name
        assert {u: t.dumps() for u, t in view.units.items()} == {
            u: t.dumps() for u, t in tally_as_of(SqliteLog(log.path), Cut(at=night)).units.items()}
        by_position = view_as_of(store, info, Cut(ends={p: m // 2 for p, m in log.high_watermarks().items()}), log=log)
        assert "from the projection's history" in by_position.set.name
        other = store.create_set("other", source="log:another")
        assert history_tally(store, other, log, Cut(at=night)) == "the projection was built from another log"
    finally:
        store.close()

"""The store contract: the same cases against SQLite, PostgreSQL and the in-memory store (``store_kind``)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from projections.stores.port import (
    Changes,
    ElectionRow,
    EventRow,
    PositionRow,
    ProjectionStore,
    SetNotFound,
    Staged,
    StoreError,
    TallyRow,
    UnitRow,
)

Open = Callable[[], ProjectionStore]


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _changes(n: int, *, set_part: int = 0, start: int = 0, election: str = "e1") -> Changes:
    ch = Changes()
    for i in range(start, start + n):
        uid = f"u{i}"
        ch.units.append(UnitRow(uid, election, set_part, f'{{"unit":"{uid}","v":1}}'))
        ch.tallies.append(TallyRow(uid, election, f"c{i % 3}", "reported", "ctx1", f'{{"t":"{uid}"}}'))
        ch.events.append(EventRow(f"ev-{i}", uid, election, set_part, i, "ResultReported", "2020-02-03T19:00:00+00:00"))
    ch.positions.append(PositionRow(set_part, start + n, "2020-02-03T19:00:00+00:00"))
    ch.elections.append(ElectionRow(election, f"rev-{start + n}", '{"election_id":"e1"}'))
    return ch


def test_sets_versions_and_atomic_promotion(open_store: Open) -> None:
    store = open_store()
    assert store.serving("tally") is None and store.sets() == []
    v1 = store.create_set("tally", source="sqlite:/log")
    assert (v1.version, v1.state) == (1, "building")
    store.promote(v1.set_id)
    assert store.serving("tally").set_id == v1.set_id
    v2 = store.create_set("tally", source="sqlite:/log", rule_set="idp-2016", params='{"until": null}')
    assert (v2.version, v2.rule_set, v2.params) == (2, "idp-2016", '{"until": null}')
    assert store.serving("tally").set_id == v1.set_id, "a building set does not serve"
    store.promote(v2.set_id)
    assert store.serving("tally").set_id == v2.set_id
    assert {s.version: s.state for s in store.sets("tally")} == {1: "retired", 2: "serving"}
    with pytest.raises(StoreError, match="serving"):
        store.drop_set(v2.set_id)
    with pytest.raises(SetNotFound):
        store.get_set(999)
    other = store.create_set("audit", source="x")
    assert other.version == 1, "versions count per name"


def test_a_version_is_never_given_twice_even_after_its_set_is_dropped(open_store: Open) -> None:
    """A replay killed mid-way leaves its set abandoned; the next replay drops it and built a set under
    the same version, so ``set:tally@4`` came to mean other contents. The highest given is kept."""
    store = open_store()
    v1 = store.ensure_serving("tally", source="s")
    v2 = store.create_set("tally", source="s")
    v3 = store.create_set("tally", source="s")
    store.drop_set(v3.set_id)
    store.drop_set(v2.set_id)
    assert [s.version for s in store.sets("tally")] == [v1.version] == [1]
    assert store.create_set("tally", source="s").version == 4
    assert open_store().create_set("tally", source="s").version == 5, "kept in the store, not in the process"
    assert store.create_set("audit", source="s").version == 1, "versions count per name"


def test_a_set_that_is_not_to_serve_is_marked_built_and_shown_so(open_store: Open) -> None:
    """A ``--no-promote`` or as-of set stayed ``building`` when done, shown as work in progress for good."""
    import json

    from projections.set_builders import built_at, shown_state

    store = open_store()
    serving = store.ensure_serving("tally", source="s")
    spare = store.create_set("tally", source="s", params='{"kind": "rebuild"}')
    assert shown_state(spare) == "building" and built_at(spare) is None
    done = store.finish_set(spare.set_id)
    again = open_store().get_set(spare.set_id)  # kept in the store
    assert done == again
    assert again.state == "building" and shown_state(again) == "built"
    params = json.loads(again.params)
    assert params["kind"] == "rebuild" and params["built_at"] == built_at(again)
    with pytest.raises(StoreError, match="serving, not building"):
        store.finish_set(serving.set_id)
    with pytest.raises(SetNotFound):
        store.finish_set(9999)
    assert shown_state(store.get_set(serving.set_id)) == "serving"


def test_ensure_serving_creates_once(open_store: Open) -> None:
    a, b = open_store(), open_store()
    s1 = a.ensure_serving("tally", source="s")
    s2 = b.ensure_serving("tally", source="s")
    assert s1.set_id == s2.set_id and s1.state == "serving"
    assert len(a.sets("tally")) == 1


def test_write_and_read_back_everything(open_store: Open) -> None:
    store = open_store()
    sid = store.create_set("tally", source="s").set_id
    with store.transaction(sid) as tx:
        tx.write(_changes(120))
    with store.reader(sid) as r:
        assert r.positions() == {0: PositionRow(0, 120, "2020-02-03T19:00:00+00:00")}
        assert r.election_revisions() == {"e1": "rev-120"}
        assert r.elections()["e1"].state == '{"election_id":"e1"}'
        assert len(r.unit_states()) == 120
        assert set(r.unit_states([("e1", "u1"), ("e1", "u5"), ("e1", "nope"), ("e2", "u1")])) == {("e1", "u1"), ("e1", "u5")}
        assert len(r.unit_states(election_id="e1")) == 120 and r.unit_states(election_id="e2") == {}
        assert set(r.tallies(county_id="c1")) == {("e1", f"u{i}") for i in range(120) if i % 3 == 1}
        assert r.tallies(keys=[("e1", "u7")])["e1", "u7"].tally == '{"t":"u7"}'
        assert r.processed([f"ev-{i}" for i in range(110, 130)]) == {f"ev-{i}" for i in range(110, 120)}
        assert r.processed([]) == set()
        assert [e.offset for e in r.events_for("e1", "u3")] == [3]
        assert r.events_for("e2", "u3") == []
        assert r.event_count() == 120


def test_two_elections_with_the_same_unit_ids_keep_their_own_rows(open_store: Open) -> None:
    """Identity is (election id, unit id): rows of one election never replace another's."""
    store = open_store()
    sid = store.create_set("tally", source="s").set_id
    with store.transaction(sid) as tx:
        tx.write(_changes(5, election="e1"))
    second = _changes(3, election="e2", start=100)
    second.units = [UnitRow(f"u{i}", "e2", 0, f'{{"e2":{i}}}') for i in range(3)]
    second.tallies = [TallyRow(f"u{i}", "e2", "c0", "corrected", "ctx-e2", f'{{"e2":{i}}}') for i in range(3)]
    second.events = [EventRow(f"e2-ev-{i}", f"u{i}", "e2", 0, 200 + i, "ResultCorrected", "2020-02-04T19:00:00+00:00")
                     for i in range(3)]
    with store.transaction(sid) as tx:
        tx.write(second)
    with store.reader(sid) as r:
        assert len(r.unit_states()) == 8 and len(r.tallies()) == 8
        assert r.unit_states([("e1", "u1")])["e1", "u1"].state == '{"unit":"u1","v":1}'
        assert r.unit_states([("e2", "u1")])["e2", "u1"].state == '{"e2":1}'
        assert set(r.unit_states(election_id="e1")) == {("e1", f"u{i}") for i in range(5)}
        assert set(r.tallies(election_id="e2")) == {("e2", f"u{i}") for i in range(3)}
        assert r.tallies(keys=[("e1", "u2"), ("e2", "u2")])["e1", "u2"].tally == '{"t":"u2"}'
        assert r.tallies(keys=[("e1", "u2"), ("e2", "u2")])["e2", "u2"].tally == '{"e2":2}'
        assert [e.event_id for e in r.events_for("e1", "u2")] == ["ev-2"]
        assert [e.event_id for e in r.events_for("e2", "u2")] == ["e2-ev-2"]
        assert r.unattributed() == []


def test_events_that_name_no_election_are_listed_apart(open_store: Open) -> None:
    store = open_store()
    sid = store.create_set("tally", source="s").set_id
    ch = _changes(2)
    ch.events.append(EventRow("refused-1", "u1", "", 0, 50, "SubmissionRejected", "2020-02-03T19:00:00+00:00"))
    with store.transaction(sid) as tx:
        tx.write(ch)
    with store.reader(sid) as r:
        assert [e.event_id for e in r.unattributed()] == ["refused-1"]
        assert [e.event_id for e in r.events_for("", "u1")] == ["refused-1"]
        assert [e.event_id for e in r.events_for("e1", "u1")] == ["ev-1"]


def test_events_naming_elections_nobody_defined_are_listed_apart_in_log_order(open_store: Open) -> None:
    """More undefined ids than a statement takes parameters at once (refusals may name any number)."""
    store = open_store()
    sid = store.create_set("tally", source="s").set_id
    ch = _changes(2)
    ch.events.extend(EventRow(f"refused-{i}", "u1", f"typo-{i}", i % 3, 100 + i, "SubmissionRejected",
                              "2020-02-03T19:00:00+00:00") for i in range(1200))
    ch.events.append(EventRow("refused-none", "u1", "", 1, 99, "SubmissionRejected", "2020-02-03T19:00:00+00:00"))
    with store.transaction(sid) as tx:
        tx.write(ch)
    with store.reader(sid) as r:
        assert [e.event_id for e in r.unattributed()] == ["refused-none"]
        listed = r.unattributed({f"typo-{i}" for i in range(1200)} | {"e1-not-asked"})
        assert len(listed) == 1201 and [(e.partition, e.offset) for e in listed] == sorted((e.partition, e.offset) for e in listed)
        assert {e.election_id for e in listed} == {"", *(f"typo-{i}" for i in range(1200))}
        assert [e.event_id for e in r.unattributed({"typo-7"})] == ["refused-none", "refused-7"]


def test_lists_longer_than_a_query_chunk(open_store: Open) -> None:
    store = open_store()
    sid = store.create_set("tally", source="s").set_id
    with store.transaction(sid) as tx:
        tx.write(_changes(1300))
    with store.reader(sid) as r:
        ids = [f"ev-{i}" for i in range(1400)]
        assert len(r.processed(ids)) == 1300
        assert len(r.unit_states([("e1", f"u{i}") for i in range(1300)])) == 1300


def test_upserts_replace_rows_and_positions(open_store: Open) -> None:
    store = open_store()
    sid = store.create_set("tally", source="s").set_id
    with store.transaction(sid) as tx:
        tx.write(_changes(3))
    later = Changes(
        units=[UnitRow("u1", "e1", 0, '{"v":2}')],
        tallies=[TallyRow("u1", "e1", "c9", "corrected", "ctx2", '{"t":2}')],
        positions=[PositionRow(0, 9, None), PositionRow(3, 4, "x")],
    )
    with store.transaction(sid) as tx:
        tx.write(later)
    with store.reader(sid) as r:
        assert r.unit_states([("e1", "u1")])["e1", "u1"].state == '{"v":2}'
        assert r.tallies(keys=[("e1", "u1")])["e1", "u1"] == TallyRow("u1", "e1", "c9", "corrected", "ctx2", '{"t":2}')
        assert {p: row.next_offset for p, row in r.positions().items()} == {0: 9, 3: 4}


def test_a_failed_transaction_writes_nothing(open_store: Open) -> None:
    store = open_store()
    sid = store.create_set("tally", source="s").set_id
    with pytest.raises(RuntimeError, match="crash"):
        with store.transaction(sid) as tx:
            tx.write(_changes(10))
            raise RuntimeError("crash before commit")
    with store.reader(sid) as r:
        assert r.positions() == {} and r.event_count() == 0 and r.unit_states() == {}
    # The same event ids can then be written (the rollback left no trace).
    with store.transaction(sid) as tx:
        tx.write(_changes(10))
    with store.reader(sid) as r:
        assert r.event_count() == 10


def test_a_batch_staged_before_the_lock_is_written_once_and_rolled_back_whole(open_store: Open, store_kind: str) -> None:
    """A runner hands the store its early-folded batch before the set's lock (``Staged``), so that
    PostgreSQL loads the rows while another runner holds the lock. Staged rows must be written exactly
    as if given under the lock: once, with the index naming the ids it held, and a rollback must leave
    none behind for the connection's next batch (its staging tables outlive a transaction)."""

    def batch(n: int, start: int) -> tuple[Changes, list[EventRow]]:
        changes = _changes(n, start=start)
        index, changes.events = changes.events, []  # the early path indexes its ids apart (``index_begin``)
        return changes, index

    store = open_store()
    sid = store.create_set("tally", source="s").set_id
    first, first_index = batch(50, 0)
    with store.transaction(sid, Staged(first, first_index)) as tx:
        assert tx.index_begin(first_index)() == set()
        tx.write(first)
    with pytest.raises(RuntimeError, match="moved"), store.transaction(sid, Staged(*batch(30, 50))):
        raise RuntimeError("the base moved: rolled back before the writes")
    with store.transaction(sid) as tx:
        tx.write(_changes(5, start=100))
    again, again_index = batch(10, 45)  # u45..u49 were indexed by the first batch
    with store.transaction(sid, Staged(again, again_index)) as tx:
        assert tx.index_begin(again_index)() == {f"ev-{i}" for i in range(45, 50)}
        tx.write(again)
    with store.reader(sid) as r:
        assert sorted(int(uid[1:]) for _, uid in r.unit_states()) == [*range(0, 55), *range(100, 105)], "the rolled-back batch left nothing"
        assert r.processed([f"ev-{i}" for i in range(50, 80)]) == {f"ev-{i}" for i in range(50, 55)}
        assert r.event_count() == 60 and r.positions()[0].next_offset == 55
    if store_kind == "postgres":  # rows other than the staged ones would be moved together with them
        other, other_index = batch(3, 200)
        with pytest.raises(StoreError, match="staged"), store.transaction(sid, Staged(other, other_index)) as tx:
            tx.write(_changes(3, start=300))


def test_an_event_id_is_stored_once_per_set(open_store: Open) -> None:
    store = open_store()
    a = store.create_set("tally", source="s").set_id
    b = store.create_set("tally", source="s").set_id
    with store.transaction(a) as tx:
        tx.write(_changes(60))
    with pytest.raises(Exception):  # noqa: B017 - the adapter's integrity error
        with store.transaction(a) as tx:
            tx.write(_changes(60))
    with store.transaction(b) as tx:
        tx.write(_changes(60))
    with store.reader(a) as ra:
        assert ra.event_count() == 60


def test_sets_are_isolated_and_dropped_whole(open_store: Open) -> None:
    store = open_store()
    a = store.create_set("tally", source="s")
    b = store.create_set("tally", source="s")
    with store.transaction(a.set_id) as tx:
        tx.write(_changes(5))
    with store.transaction(b.set_id) as tx:
        tx.write(_changes(2, set_part=1))
    with store.reader(b.set_id) as r:
        assert len(r.unit_states()) == 2 and set(r.positions()) == {1}
    store.promote(b.set_id)
    store.drop_set(a.set_id)
    with store.reader(a.set_id) as r:
        assert r.event_count() == 0 and r.tallies() == {}
    assert [s.set_id for s in store.sets()] == [b.set_id]
    with pytest.raises(SetNotFound):
        with store.transaction(a.set_id):
            pass


def test_readers_see_a_consistent_snapshot(open_store: Open) -> None:
    """A reader that started before a batch committed sees none of it (positions and rows agree)."""
    writer, reader_store = open_store(), open_store()
    sid = writer.create_set("tally", source="s").set_id
    with writer.transaction(sid) as tx:
        tx.write(_changes(5))
    with reader_store.reader(sid) as r:
        first = r.positions()[0].next_offset
        with writer.transaction(sid) as tx:
            tx.write(_changes(5, start=5))
        assert r.event_count() == first == 5
    with reader_store.reader(sid) as r:
        assert r.event_count() == r.positions()[0].next_offset == 10


def test_writers_of_one_set_are_serialised(open_store: Open) -> None:
    """While one transaction holds the set, another waits; it then sees what the first committed."""
    a, b = open_store(), open_store()
    sid = a.create_set("tally", source="s").set_id
    entered = threading.Event()
    release = threading.Event()
    seen: list[int] = []

    def second() -> None:
        entered.wait(10)
        with b.transaction(sid) as tx:
            seen.append(tx.event_count())

    t = threading.Thread(target=second)
    t.start()
    with a.transaction(sid) as tx:
        entered.set()
        tx.write(_changes(7))
        release.wait(0.3)  # give the second writer time to try and block
        assert seen == []
    t.join(10)
    assert seen == [7]


def test_index_new_records_events_and_names_those_already_held(open_store: Open) -> None:
    store = open_store()
    sid = store.create_set("tally", source="s").set_id
    other = store.create_set("tally", source="s").set_id

    def rows(ids: range, offset: int = 0) -> list[EventRow]:
        return [EventRow(f"ev-{i}", f"u{i % 7}", "e1", i % 3, i + offset, "ResultReported", "2020-02-03T19:00:00+00:00") for i in ids]

    with store.transaction(sid) as tx:
        assert tx.index_new(rows(range(0, 3000))) == set()
        assert tx.index_new([]) == set()
    with store.transaction(sid) as tx:
        # A producer retry: the same ids again at other offsets, beside new ones.
        assert tx.index_new(rows(range(2990, 3010), offset=10_000)) == {f"ev-{i}" for i in range(2990, 3000)}
    with store.transaction(sid) as tx:
        # The runner indexes a batch chunk by chunk and relies on this: an id an earlier call of the
        # same (uncommitted) transaction added is reported as held by a later call.
        assert tx.index_new(rows(range(4000, 4010))) == set()
        assert tx.index_new(rows(range(4005, 4020), offset=20_000)) == {f"ev-{i}" for i in range(4005, 4010)}
    with store.transaction(other) as tx:
        assert tx.index_new(rows(range(0, 5))) == set(), "sets do not share processed ids"
    with store.reader(sid) as r:
        assert r.event_count() == 3030
        held = {e.event_id: e.offset for e in r.events_for("e1", "u0")}
        assert held["ev-2996"] == 2996, "a duplicate leaves the first index row as it was"
        assert held["ev-3003"] == 13_003
    with pytest.raises(RuntimeError), store.transaction(sid) as tx:
        tx.index_new(rows(range(5000, 5010)))
        raise RuntimeError("the batch fails before commit")
    with store.reader(sid) as r:
        assert r.processed([f"ev-{i}" for i in range(5000, 5010)]) == set(), "a rolled-back batch indexes nothing"


def test_the_feed_fence_admits_no_version_below_one_published(open_store: Open) -> None:
    """``FeedFence``: a key's version below the highest published is refused, an equal one (a
    republish) passes; raised versions are kept per set, seen by another connection, and a block
    that fails keeps nothing."""
    a, b = open_store(), open_store()
    sid, other = a.create_set("tally", source="s").set_id, a.create_set("tally", source="s").set_id
    with a.feed_fence(sid) as fence:
        assert fence.admit({"state:e1": 5, "unit:e1:u1": 3}) == {"state:e1", "unit:e1:u1"}
    with b.feed_fence(sid) as fence:
        assert fence.admit({"state:e1": 4, "unit:e1:u1": 3, "county:e1:c1": 1}) == {"unit:e1:u1", "county:e1:c1"}
        assert fence.admit({"state:e1": 6}) == {"state:e1"}
    with pytest.raises(RuntimeError), a.feed_fence(sid) as fence:
        assert fence.admit({"state:e1": 9}) == {"state:e1"}
        raise RuntimeError("the append failed")
    with a.feed_fence(sid) as fence:
        assert fence.admit({"state:e1": 5}) == set(), "6 was published (9 was not)"
        assert fence.admit({"state:e1": 6}) == {"state:e1"}
    with b.feed_fence(other) as fence:
        assert fence.admit({"state:e1": 1}) == {"state:e1"}, "another set has a fence of its own"


def test_the_feed_fence_does_not_wait_for_a_batch(open_store: Open, store_kind: str) -> None:
    """Publishing takes a lock of its own: a runner publishes while another holds the set's batch
    lock (SQLite has one writer per file, so there it waits like any writer)."""
    if store_kind == "sqlite":
        pytest.skip("SQLite serialises every writer of the file")
    a, b = open_store(), open_store()
    sid = a.create_set("tally", source="s").set_id
    admitted: list[set[str]] = []

    def publish() -> None:
        with b.feed_fence(sid) as fence:
            admitted.append(fence.admit({"state:e1": 1}))

    with a.transaction(sid) as tx:
        tx.write(_changes(2))
        t = threading.Thread(target=publish)
        t.start()
        t.join(20)
        assert admitted == [{"state:e1"}], "the fence waited for the batch's lock"

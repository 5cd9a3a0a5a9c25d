"""A consumer group split by the work left in each partition (``projections.lag_assignor``): the
split alone, against a model that shares no code with it, and in a real group on the test broker."""

from __future__ import annotations

import itertools
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.log.kafka import KafkaLog, provision_topic
from projections.kafka_source import KafkaGroupSource
from projections.lag_assignor import split_by_work

PARTS = 8


def _best(work: list[int], members: int, cap: int) -> int:
    """The least largest load over every way to give each partition to a member, at most ``cap`` each."""
    best = None
    for owners in itertools.product(range(members), repeat=len(work)):
        if any(owners.count(m) > cap for m in range(members)):
            continue
        top = max(sum(w for w, o in zip(work, owners) if o == m) for m in range(members))
        best = top if best is None else min(best, top)
    assert best is not None
    return best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=7), st.integers(1, 3))
def test_every_partition_goes_to_one_member_and_the_load_is_near_the_best(work: list[int], members: int) -> None:
    ids = [f"m{i}" for i in range(members)]
    out = split_by_work(range(len(work)), ids, dict(enumerate(work)))
    given_out = sorted(p for ps in out.values() for p in ps)
    assert given_out == list(range(len(work))), "each partition once"
    cap = -(-len(work) // members)
    assert all(len(ps) <= cap for ps in out.values()), "no member over its share of the partitions' number"
    top = max(sum(work[p] for p in ps) for ps in out.values())
    # Longest processing time first is within 4/3 of the best split (Graham); the share cap can only
    # make the best split larger, never ours worse than that bound of it plus one partition.
    best = _best(work, members, cap)
    assert top <= best * 4 / 3 + max(work) / 3 + 1


def test_what_the_benchmark_left_is_split_evenly_where_range_was_not() -> None:
    """Two runners started together had read partitions 0 and 1 before the group split them."""
    left = {0: 0, 1: 0, 2: 5500, 3: 5500, 4: 5500, 5: 5500, 6: 5500, 7: 5500}
    out = split_by_work(range(PARTS), ["b-member", "a-member"], left)
    loads = sorted(sum(left[p] for p in ps) for ps in out.values())
    assert loads == [16500, 16500] and sorted(len(ps) for ps in out.values()) == [4, 4]


def test_nothing_known_deals_the_partitions_out_in_turn_and_unknown_ones_count_as_the_mean() -> None:
    assert split_by_work(range(4), ["x", "y"], {}) == {"x": [0, 2], "y": [1, 3]}
    # 3 is not known: it counts as the mean of the others (100), not as nothing
    out = split_by_work(range(4), ["x", "y"], {0: 100, 1: 100, 2: 100})
    assert sorted(len(ps) for ps in out.values()) == [2, 2]
    assert split_by_work(range(3), [], {}) == {}


class _Listener:
    def __init__(self, left: dict[int, int]) -> None:
        self.left = left
        self.owned: set[int] = set()

    def assigned(self, partitions: set[int]) -> dict[int, int]:
        self.owned |= partitions
        return {p: 0 for p in partitions}

    def revoked(self, partitions: set[int]) -> None:
        self.owned -= partitions

    def work_left(self) -> dict[int, int]:
        return self.left


def test_a_group_of_two_splits_the_partitions_with_work_left_between_them(kafka_bootstrap: str, unique_topic: str) -> None:
    """On the broker: the members agree on the assignor, and the leader's split is what each member gets.
    By number alone (range) one member would hold 0-3, where nothing is left."""
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    left = {p: (0 if p < 4 else 1000) for p in range(PARTS)}
    sources: list[KafkaGroupSource] = []
    listeners = [_Listener(left), _Listener(left)]
    try:
        for listener in listeners:
            log = KafkaLog(kafka_bootstrap, unique_topic, partitions=PARTS, session_timeout_ms=2000)
            source = KafkaGroupSource(log, f"g-{unique_topic}", static_start=False)
            source.start(listener)
            sources.append(source)
        deadline = time.monotonic() + 60
        while not (all(len(s.assigned()) == PARTS // 2 for s in sources)
                   and not sources[0].assigned() & sources[1].assigned()):
            assert time.monotonic() < deadline, [s.assigned() for s in sources]
            for s in sources:
                s.poll(10, 0.1)
        held: list[Any] = [s.assigned() for s in sources]
    finally:
        for s in sources:
            s.close()
    assert all(len(h & {4, 5, 6, 7}) == 2 for h in held), held


class _Cluster:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.topics[topic])) if topic in self.topics else None


class _Member:
    def __init__(self, member_id: str, *topics: str) -> None:
        from kafka.coordinator.assignors.abstract import ConsumerProtocolSubscription

        self.member_id = member_id
        self.group_instance_id = None
        self.metadata = ConsumerProtocolSubscription(0, list(topics), b"")


def _owned(assignment: dict[str, Any]) -> dict[str, set[tuple[str, int]]]:
    return {m: {(t, p) for t, ps in a.assigned_partitions for p in ps} for m, a in assignment.items()}


def test_the_assignor_splits_its_topic_by_work_other_topics_by_number_and_falls_back_to_range() -> None:
    from projections.lag_assignor import LagAssignor

    cluster = _Cluster({"log": 4, "other": 2})
    members = [_Member("m1", "log", "other"), _Member("m2", "log", "other")]
    out = _owned(LagAssignor(lambda: {0: 0, 1: 0, 2: 900, 3: 900}, "log").assign(cluster, members))
    assert {p for t, p in out["m1"] if t == "log"} in ({0, 2}, {0, 3}, {1, 2}, {1, 3})  # one of 2, 3 each
    assert sorted(len([1 for t, _ in o if t == "other"]) for o in out.values()) == [1, 1]
    assert set().union(*out.values()) == {("log", p) for p in range(4)} | {("other", p) for p in range(2)}

    def broken() -> dict[int, int]:
        raise RuntimeError("the runner cannot say")

    out = _owned(LagAssignor(broken, "log").assign(cluster, members))  # range's split, not an error
    assert out == {"m1": {("log", 0), ("log", 1), ("other", 0)}, "m2": {("log", 2), ("log", 3), ("other", 1)}}

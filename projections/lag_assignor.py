"""A consumer group's partitions split by the work left in each, not by their number alone.

Why: runners that start together read partitions before the group has split them (the static start,
``projections.kafka_source``), and not the same ones; Kafka's range assignor then gives each member
half the partitions whatever is left in them, and in the scale-out benchmark one runner finished its
half 0.8 to 2.2 s before the other, idle while the other worked. The leader of a rebalance asks its
runner how many records each partition still holds beyond what the store has applied (the runner
knows the store's positions of every partition from its last batch, and the log's high watermarks)
and deals the partitions out largest first, each to the member with the least work so far.

Imported only where a group is joined: kafka-python is not loaded by the commands that never read the log.

The group agrees on an assignor: each member offers this one first, then range and round robin, so
runners of an older release in the same group make the group fall back to range.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka.coordinator.assignors.abstract import (
    AbstractPartitionAssignor,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.coordinator.assignors.range import RangePartitionAssignor

__all__ = ["LagAssignor", "split_by_work"]

log = logging.getLogger(__name__)


def split_by_work(partitions: Iterable[int], members: Iterable[str], left: Mapping[int, int]) -> dict[str, list[int]]:
    """Longest processing time first: the partitions with the most records left go first, each to the
    member with the least work so far (then the fewest partitions, then the first id), and no member
    takes more than its share of the partitions' number (rounded up), so that a wrong count cannot
    leave a member with nearly all of them. A partition ``left`` does not name counts as the mean of
    those it names; with none named, the partitions are dealt out in turn."""
    parts, ids = sorted(partitions), sorted(members)
    if not ids:
        return {}
    known = [max(0, left[p]) for p in parts if p in left]
    guess = sum(known) // len(known) if known else 0
    work = {p: max(0, left[p]) if p in left else guess for p in parts}
    cap = -(-len(parts) // len(ids))
    load = {m: (0, 0) for m in ids}
    out: dict[str, list[int]] = {m: [] for m in ids}
    for p in sorted(parts, key=lambda p: (-work[p], p)):
        m = min((m for m in ids if load[m][1] < cap), key=lambda m: (*load[m], m))
        out[m].append(p)
        load[m] = (load[m][0] + work[p], load[m][1] + 1)
    return {m: sorted(ps) for m, ps in out.items()}


class LagAssignor(AbstractPartitionAssignor):  # type: ignore[misc]  # kafka-python has no types
    """``remaining``: the records each partition of ``topic`` still holds beyond the store's position
    (``split_by_work`` for those it does not name). Another topic's partitions are split by number."""

    name = "caucus-lag"
    version = 0

    def __init__(self, remaining: Callable[[], Mapping[int, int]], topic: str) -> None:
        self._remaining = remaining
        self._topic = topic

    def assign(self, cluster: Any, members: Any) -> dict[str, Any]:
        """A rebalance must come out with an assignment whatever happens here: on any error, range's."""
        try:
            return self._assign(cluster, members, dict(self._remaining()))
        except Exception:  # noqa: BLE001 -- see above
            log.warning("splitting the partitions by the work left failed; splitting them by number", exc_info=True)
            return RangePartitionAssignor.assign(cluster, members)

    def _assign(self, cluster: Any, members: Any, left: dict[int, int]) -> dict[str, Any]:
        by_topic: dict[str, list[str]] = defaultdict(list)
        for member in members:
            for topic in member.metadata.topics:
                by_topic[topic].append(member.member_id)
        assigned: dict[str, dict[str, list[int]]] = defaultdict(dict)
        for topic, ids in by_topic.items():
            partitions = cluster.partitions_for_topic(topic)
            if partitions is None:
                log.warning("no partition metadata for topic %s", topic)
                continue
            for member_id, parts in split_by_work(partitions, ids, left if topic == self._topic else {}).items():
                assigned[member_id][topic] = parts
        log.info("partitions split by the records left in each: %s", {m: dict(t) for m, t in assigned.items()})
        return {m.member_id: ConsumerProtocolAssignment(self.version, sorted(assigned[m.member_id].items()), b"")
                for m in members}

    def metadata(self, topics: Any) -> Any:
        return ConsumerProtocolSubscription(self.version, list(topics), b"")

    def on_assignment(self, assignment: Any, generation: Any) -> None:
        pass

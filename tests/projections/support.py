"""Helpers of the projection tests: synthetic elections and logs, Kafka producing, store snapshots.

Deterministic (seeded), so a test can build the same log twice and compare. The shapes follow the
real data: precincts with apportioned D in counties with exact SDE ratios, satellites whose D follows
attendance and whose SDE weight is explicit; reports, corrections at the three stages, coin tosses,
rejected submissions and producer retries (the same event id appended again).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

from ledger.codec import default_codec
from ledger.events import (
    Channel,
    CorrectionStage,
    County,
    ElectionDefined,
    Event,
    Problem,
    Result,
    ResultCorrected,
    ResultReported,
    SubmissionRejected,
    UnitDefinition,
    UnitOpened,
    new_event,
)
from ledger.journal import Journal
from projections.stores.port import ProjectionStore

CANDIDATES = ("Alvarez", "Baker", "Chen", "Uncommitted")
T0 = datetime(2020, 2, 3, 19, 0, tzinfo=UTC)
_NS = uuid.UUID("6f1f3f0e-8b1a-4c59-9a57-2d2b1f0c0a11")


def eid(*parts: object) -> str:
    return str(uuid.uuid5(_NS, "|".join(map(str, parts))))


def definition(n_units: int = 12, *, election_id: str = "e1", n_counties: int = 3, satellites: int = 1,
               rule_set: str = "idp-2020", seed: int = 7) -> ElectionDefined:
    rnd = random.Random(seed)
    counties = tuple(County(f"c{i}", f"County {i}", Fraction(rnd.randint(3, 40), 100)) for i in range(n_counties))
    units = []
    for i in range(n_units):
        units.append(UnitDefinition(f"u{i:05d}", f"Precinct {i}", counties[i % n_counties].county_id, rnd.randint(1, 12)))
    sat = County("sat", "Satellites", Fraction(1, 100))
    for i in range(satellites):
        units.append(UnitDefinition(f"s{i:03d}", f"Satellite {i}", "sat", None, satellite_group="SG", sde_weight=Fraction(3 + i, 4)))
    return ElectionDefined(name="Test caucus", rule_set=rule_set, candidates=CANDIDATES,
                           counties=counties + ((sat,) if satellites else ()), units=tuple(units))


def ev(payload: Any, *, election_id: str = "e1", unit_id: str = "", event_id: str | None = None,
       at: datetime = T0, actor: str = "chair", channel: Channel = Channel.APP) -> Event[Any]:
    return new_event(payload, election_id=election_id, unit_id=unit_id, actor=actor, channel=channel,
                     occurred_at=at, recorded_at=at, event_id=event_id)


def define(defn: ElectionDefined, election_id: str = "e1", at: datetime = T0) -> Event[Any]:
    return ev(defn, election_id=election_id, event_id=eid(election_id, "define"), at=at, actor="party", channel=Channel.IMPORT)


def counts(rnd: random.Random, total: int) -> dict[str, int]:
    cuts = sorted(rnd.randint(0, total) for _ in range(len(CANDIDATES) - 1))
    parts = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    return dict(zip(CANDIDATES, parts, strict=True))


def realign(rnd: random.Random, first: dict[str, int]) -> dict[str, int]:
    """Final alignment: the smallest group folds into the largest (locked groups never shrink)."""
    final = dict(first)
    small = min(final, key=lambda c: (final[c], c))
    big = max(final, key=lambda c: (final[c], c))
    if small != big:
        final[big] += final[small]
        final[small] = 0
    return final


def unit_events(unit_id: str, rnd: random.Random, *, election_id: str = "e1", corrections: int = 1,
                rejections: int = 0, at: datetime = T0) -> list[Event[Any]]:
    out: list[Event[Any]] = []
    t = rnd.randint(5, 300)
    out.append(ev(UnitOpened(t), election_id=election_id, unit_id=unit_id, event_id=eid(election_id, unit_id, "open"), at=at))
    first = counts(rnd, t)
    res = Result(first, realign(rnd, first))
    report_id = eid(election_id, unit_id, "report")
    out.append(ev(ResultReported(res, reporter="chair"), election_id=election_id, unit_id=unit_id, event_id=report_id,
                  at=at + timedelta(minutes=90)))
    for r in range(rejections):
        out.append(ev(SubmissionRejected("report", "{}", (Problem("final", "overcount", "too many"),), "phone"),
                      election_id=election_id, unit_id=unit_id, event_id=eid(election_id, unit_id, "rej", r),
                      at=at + timedelta(minutes=91 + r), channel=Channel.PHONE))
    prev = report_id
    stages = (CorrectionStage.REVIEW, CorrectionStage.RECANVASS, CorrectionStage.RECOUNT)
    for c in range(corrections):
        first = dict(first)
        k = rnd.choice(CANDIDATES)
        first[k] = max(0, first[k] - rnd.randint(0, 2))
        res = Result(first, realign(rnd, first))
        cid = eid(election_id, unit_id, "corr", c)
        out.append(ev(ResultCorrected(res, supersedes=prev, reason="worksheet recheck", authority="party",
                                      stage=stages[c % 3]), election_id=election_id, unit_id=unit_id, event_id=cid,
                      at=at + timedelta(days=1 + c), actor="party", channel=Channel.PAPER))
        prev = cid
    return out


def election_log(n_units: int = 12, *, election_id: str = "e1", corrections: int = 1, rejections: int = 1,
                 seed: int = 7, satellites: int = 1, definition_last: bool = False) -> list[Event[Any]]:
    """A whole election: the definition (first, or last), and every unit's events interleaved."""
    rnd = random.Random(seed)
    defn = definition(n_units, election_id=election_id, seed=seed, satellites=satellites)
    per_unit = [unit_events(u.unit_id, rnd, election_id=election_id, corrections=corrections, rejections=rejections)
                for u in defn.units]
    events: list[Event[Any]] = []
    # Round-robin so that units interleave the way a caucus night does.
    while any(per_unit):
        for q in per_unit:
            if q:
                events.append(q.pop(0))
    return [*events, define(defn, election_id)] if definition_last else [define(defn, election_id), *events]


def chunked(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def produce(bootstrap: str, topic: str, events: Sequence[Event[Any]], partitions: int, *, duplicate: Sequence[Event[Any]] = ()) -> None:
    """Append events to a topic through ``KafkaLog``; ``duplicate`` events are appended a second time
    as separate records (fresh record ids, so the log's own dedupe keeps both), as a producer retry
    that landed twice would be."""
    from ledger.log.kafka import KafkaLog
    from ledger.log.port import PendingRecord

    codec = default_codec()
    log = KafkaLog(bootstrap, topic, partitions=partitions)
    try:
        for chunk in chunked(list(events), 2000):
            Journal(log).append_batch(chunk)
        if duplicate:
            log.append_batch([PendingRecord(e.key, f"retry-{i}-{e.event_id}", codec.encode(e)) for i, e in enumerate(duplicate)])
    finally:
        log.close()


def snapshot(store: ProjectionStore, set_id: int) -> dict[str, Any]:
    """Everything a projection set holds, comparable across runs (positions excluded: see callers)."""
    with store.reader(set_id) as r:
        return {
            "tallies": {u: (row.status, row.context, row.tally) for u, row in sorted(r.tallies().items())},
            "units": {u: row.state for u, row in sorted(r.unit_states().items())},
            "elections": {e: row.state for e, row in sorted(r.elections().items())},
            "events": r.event_count(),
        }


def tallies_json(store: ProjectionStore, set_id: int) -> dict[str, Any]:
    with store.reader(set_id) as r:
        return {u: json.loads(row.tally) for u, row in r.tallies().items()}


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)

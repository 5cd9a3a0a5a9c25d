"""A deliberately small reference model of the ledger, for the model-based test.

It shares no code with the intake, the reducers or the tally: it imports nothing of the project and
re-derives from RULES.md what a log of commands should leave behind (which commands are accepted, each
unit's result, its county delegates and SDEs, its pending ties, the county and state sums). It covers
only what the test generates: three candidates, units that elect 1, 4, 5 or 7 delegates (so at most
three groups are ever viable, never more than D, and the §5.3 floor of one never pushes the sum above
D), reports that keep the §4.2 lock rule and admit nobody new, and the idp-2020 options (round-robin
for leftover delegates, plurality for a one-delegate unit).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from fractions import Fraction

CANDIDATES = ("Adams", "Baker", "Clark")
Tie = tuple[frozenset[str], int]


@dataclass(frozen=True)
class UnitDef:
    unit_id: str
    county_id: str
    delegates: int


@dataclass(frozen=True)
class ElectionDef:
    election_id: str
    ratios: dict[str, Fraction]
    units: dict[str, UnitDef]

    def to_json(self) -> dict[str, object]:
        """The definition as the intake takes it."""
        return {
            "election_id": self.election_id,
            "name": f"Model election {self.election_id}",
            "rule_set": "idp-2020",
            "candidates": list(CANDIDATES),
            "counties": [
                {"county_id": c, "name": c.upper(), "sde_ratio": f"{r.numerator}/{r.denominator}"} for c, r in self.ratios.items()
            ],
            "units": [
                {"unit_id": u.unit_id, "name": f"Unit {u.unit_id}", "county_id": u.county_id, "delegates": u.delegates}
                for u in self.units.values()
            ],
        }


def _election(eid: str, ratios: dict[str, Fraction], units: list[tuple[str, str, int]]) -> ElectionDef:
    return ElectionDef(eid, ratios, {u: UnitDef(u, c, d) for u, c, d in units})


# Two elections sharing unit ids U1-U3 with different delegates and ratios, as two cycles in one log.
ELECTIONS = {
    "A": _election("A", {"c1": Fraction(1, 7), "c2": Fraction(3, 20)}, [("U1", "c1", 4), ("U2", "c1", 5), ("U3", "c2", 1)]),
    "B": _election("B", {"c1": Fraction(3, 20), "c2": Fraction(1, 7)}, [("U1", "c1", 7), ("U2", "c2", 5), ("U3", "c2", 1), ("U4", "c1", 4)]),
}


def threshold(delegates: int, attendance: int) -> int:
    """RULES §3, in integers."""
    if delegates == 1:
        return (attendance + 1) // 2
    if delegates == 2:
        return (attendance + 3) // 4
    if delegates == 3:
        return (attendance + 5) // 6
    return (15 * attendance + 99) // 100


@dataclass(frozen=True)
class Result:
    attendance: int
    first: dict[str, int]
    final: dict[str, int]
    reported: dict[str, int] | None


@dataclass
class Allocation:
    cds: dict[str, int]
    pending: list[Tie]


def allocate(delegates: int, result: Result, settled: dict[Tie, tuple[str, ...]]) -> Allocation:
    """RULES §5.5 (largest remainder after a floor of one, leftover round-robin), §6 ties settled by
    the standing toss of exactly that tie, §7 plurality for one delegate."""
    cds = {c: 0 for c in CANDIDATES}
    final = {c: result.final.get(c, 0) for c in CANDIDATES}
    if delegates == 1:
        top = max(final.values())
        if top == 0:
            return Allocation(cds, [])
        leaders = [c for c in CANDIDATES if final[c] == top]
        if len(leaders) == 1:
            cds[leaders[0]] = 1
            return Allocation(cds, [])
        return _award_tie(cds, frozenset(leaders), 1, settled)
    bar = threshold(delegates, result.attendance)
    viable = [c for c in CANDIDATES if final[c] > 0 and final[c] >= bar]
    if not viable:
        return Allocation(cds, [])
    raw = {c: Fraction(final[c] * delegates, result.attendance) for c in viable}
    base = {c: max(1, math.floor(raw[c])) for c in viable}
    cds.update(base)
    left = delegates - sum(cds.values())
    if left < 0:
        raise AssertionError(f"the model does not cover a floor of one above D: {result}")
    rounds, part = divmod(left, len(viable))
    for c in viable:
        cds[c] += rounds
    if part == 0:
        return Allocation(cds, [])
    remainder = {c: raw[c] - base[c] for c in viable}
    ranked = sorted(remainder.values(), reverse=True)
    cut = ranked[part - 1]
    above = [c for c in viable if remainder[c] > cut]
    at_cut = [c for c in viable if remainder[c] == cut]
    for c in above:
        cds[c] += 1
    seats = part - len(above)
    if seats == len(at_cut):
        for c in at_cut:
            cds[c] += 1
        return Allocation(cds, [])
    return _award_tie(cds, frozenset(at_cut), seats, settled)


def ties_of_result(delegates: int, result: Result, settled: dict[Tie, tuple[str, ...]]) -> set[Tie]:
    """RULES §6: the ties a result calls for, those that follow a settled one included (a toss for any
    other tie is refused once the unit has a result)."""
    found: set[Tie] = set()
    use: dict[Tie, tuple[str, ...]] = {}
    while True:
        fresh = [t for t in allocate(delegates, result, use).pending if t not in found]
        found.update(fresh)
        more = {t: settled[t] for t in fresh if t in settled}
        if not more:
            return found
        use.update(more)


def _award_tie(cds: dict[str, int], contenders: frozenset[str], seats: int, settled: dict[Tie, tuple[str, ...]]) -> Allocation:
    winners = settled.get((contenders, seats))
    if winners is None:
        return Allocation(cds, [(contenders, seats)])
    for c in winners:
        cds[c] += 1
    return Allocation(cds, [])


@dataclass
class Unit:
    opened: bool = False
    result: Result | None = None
    result_event: str | None = None
    superseded: set[str] = field(default_factory=set)
    tosses: dict[Tie, tuple[str, tuple[str, ...]]] = field(default_factory=dict)  # standing toss id, winners
    trail: list[str] = field(default_factory=list)  # event types, log order
    certified_event: str | None = None  # the result event that stood when the election was certified

    def settled(self) -> dict[Tie, tuple[str, ...]]:
        return {tie: winners for tie, (_, winners) in self.tosses.items()}


@dataclass
class Ledger:
    """What the log says once every accepted command is in it."""

    defined: set[str] = field(default_factory=set)
    units: dict[tuple[str, str], Unit] = field(default_factory=dict)
    certified: set[str] = field(default_factory=set)

    def unit(self, eid: str, uid: str) -> Unit:
        return self.units.setdefault((eid, uid), Unit())

    def certify(self, eid: str) -> None:
        """The election's certification covers the results standing when it is recorded, and only
        those: a report or correction recorded afterwards is a new, uncertified result."""
        self.certified.add(eid)
        for (e, _), unit in self.units.items():
            if e == eid and unit.result is not None:
                unit.certified_event = unit.result_event

    def holders(self, uid: str) -> list[str]:
        return sorted(e for e in self.defined if uid in ELECTIONS[e].units)

    def snapshot(self) -> Ledger:
        return copy.deepcopy(self)

    # -- what a unit's tally should be -----------------------------------------------------------------

    def unit_tally(self, eid: str, uid: str) -> dict[str, object] | None:
        """None for a unit without a result; otherwise the fields the test compares."""
        unit = self.units.get((eid, uid))
        if unit is None or unit.result is None:
            return None
        d = ELECTIONS[eid].units[uid]
        alloc = allocate(d.delegates, unit.result, unit.settled())
        official = unit.result.reported if unit.result.reported is not None else alloc.cds
        ratio = ELECTIONS[eid].ratios[d.county_id]
        return {
            "first": {c: unit.result.first.get(c, 0) for c in CANDIDATES},
            "final": {c: unit.result.final.get(c, 0) for c in CANDIDATES},
            "cds_computed": alloc.cds,
            "cds": {c: official.get(c, 0) for c in CANDIDATES},
            "pending": sorted((sorted(c), s) for c, s in alloc.pending) if unit.result.reported is None else [],
            "sde": {c: ratio * official.get(c, 0) for c in CANDIDATES},
            "certified": eid in self.certified and unit.certified_event is not None and unit.certified_event == unit.result_event,
        }

    def state_sums(self, eid: str) -> dict[str, object]:
        reporting = [u for u in ELECTIONS[eid].units if self.unit_tally(eid, u) is not None]
        tallies = [self.unit_tally(eid, u) for u in reporting]
        return {
            "units_reporting": len(reporting),
            "cds": {c: sum(t["cds"][c] for t in tallies) for c in CANDIDATES},  # type: ignore[index]
            "first": {c: sum(t["first"][c] for t in tallies) for c in CANDIDATES},  # type: ignore[index]
            "final": {c: sum(t["final"][c] for t in tallies) for c in CANDIDATES},  # type: ignore[index]
            "sde": {c: sum((t["sde"][c] for t in tallies), Fraction(0)) for c in CANDIDATES},  # type: ignore[index]
        }

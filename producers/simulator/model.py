"""A made-up election that behaves like a real one, decided entirely by a seed.

Why a model and not random numbers: load tests and demos are only worth something if the data trip the
same rules real caucuses do. So units have apportioned D and county ratios, attendance spreads over two
orders of magnitude, viable groups are locked and the rest realign (RULES.md §4), delegates come from the
caucus math (``ledger.caucus_math``) and every tie it leaves pending is settled by a recorded toss.
Some units are built to tie, some are corrected days later, some chairs first send something malformed
or send their report twice. Everything is drawn from one ``random.Random(seed)`` in a fixed order, so
the same seed gives the same election on any machine.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from producers.simulator.rooms import (
    Caucus,
    Correction,
    Toss,
    corrected,
    delegates_of,
    errors,
    natural_caucus,
    satellite_caucus,
    tied_caucus,
)
from ledger.caucus_math import satellite_delegates

__all__ = [
    "DEFAULT_CANDIDATES", "DEFECTS", "SimConfig", "SimCounty", "SimGroup", "SimUnit", "Toss", "Caucus",
    "Correction", "SimElection", "generate",
]  # fmt: skip

DEFAULT_CANDIDATES = ("Abbott", "Baptiste", "Castillo", "Dunmore", "Eklund", "Farrow", "Uncommitted")
DEFECTS = ("negative_count", "count_as_string", "missing_field", "broken_json", "unknown_unit", "unknown_field")
_D_BANDS = ((1, 1, 7), (2, 4, 25), (5, 9, 35), (10, 20, 25), (21, 36, 8))  # (low, high, weight %)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Shares are of units; the expected counts are these shares × units (rounded by the draw)."""

    units: int = 200
    counties: int | None = None
    candidates: tuple[str, ...] = DEFAULT_CANDIDATES
    satellite_share: float = 0.05
    tie_share: float = 0.06
    correction_share: float = 0.05
    malformed_share: float = 0.04
    duplicate_share: float = 0.03
    caucus_start: datetime = datetime(2024, 1, 16, 1, 0, tzinfo=UTC)  # 7 pm Central

    def __post_init__(self) -> None:
        if self.units < 1:
            raise ValueError(f"units must be at least 1, got {self.units}")
        if len(set(self.candidates)) < 2:
            raise ValueError("candidates: at least two different candidates are needed")
        for name in ("satellite_share", "tie_share", "correction_share", "malformed_share", "duplicate_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class SimCounty:
    county_id: str
    name: str
    sde_ratio: Fraction


@dataclass(frozen=True, slots=True)
class SimGroup:
    group_id: str
    name: str
    sde_pool: Fraction
    attendance_base: int


@dataclass(frozen=True, slots=True)
class SimUnit:
    unit_id: str
    name: str
    county_id: str
    delegates: int | None  # None for satellites: D follows attendance
    satellite_group: str | None = None
    sde_weight: Fraction | None = None


@dataclass(frozen=True, slots=True)
class UnitStory:
    """A unit's night: the caucus, when it opened and reported, and what went wrong around it."""

    unit: SimUnit
    caucus: Caucus
    opened_at: datetime
    reported_at: datetime
    tie_planned: bool = False
    correction: Correction | None = None
    defect: str | None = None
    duplicate: bool = False


@dataclass(slots=True)
class SimElection:
    seed: int
    election_id: str
    name: str
    config: SimConfig
    counties: list[SimCounty] = field(default_factory=list)
    groups: list[SimGroup] = field(default_factory=list)
    stories: list[UnitStory] = field(default_factory=list)
    defined_at: datetime = datetime(2024, 1, 15, tzinfo=UTC)

    @property
    def units(self) -> list[SimUnit]:
        return [s.unit for s in self.stories]


def _unit_delegates(rng: random.Random) -> int:
    low, high, _ = rng.choices(_D_BANDS, weights=[b[2] for b in _D_BANDS])[0]
    return rng.randint(low, high)


def _preferences(rng: random.Random, candidates: tuple[str, ...], base: dict[str, float]) -> dict[str, float]:
    return {c: base[c] * rng.gammavariate(6, 1 / 6) for c in candidates}


@dataclass(frozen=True, slots=True)
class _Plan:
    """A unit before its caucus: where it is and what it elects (D is None for a satellite)."""

    unit_id: str
    name: str
    county: int | None
    delegates: int | None
    group: str | None


def _plans(rng: random.Random, cfg: SimConfig, n_counties: int) -> list[_Plan]:
    n_satellites = round(cfg.units * cfg.satellite_share) if cfg.units > 1 else 0
    plans = [_Plan(f"{100001 + i}", f"Precinct {i + 1:04d}", rng.randrange(n_counties), _unit_delegates(rng), None)
             for i in range(cfg.units - n_satellites)]  # fmt: skip
    groups = ["SAT-N", "SAT-S"][: max(1, min(2, n_satellites))]
    plans += [_Plan(f"{900001 + i}", f"Satellite {i + 1:03d}", None, None, groups[i % len(groups)])
              for i in range(n_satellites)]  # fmt: skip
    return plans


def _room(rng: random.Random, plan: _Plan, prefs: dict[str, float], want_tie: bool, candidates: tuple[str, ...]) -> Caucus | None:
    """The unit's caucus: built to tie when asked (None if its D cannot), else drawn from preferences.
    A room the intake would refuse (no delegate awardable) meets again: it is drawn anew."""
    caller = f"chair-{plan.unit_id}"
    d = plan.delegates
    if want_tie:
        if d is None:  # a satellite's D follows its attendance
            return tied_caucus(rng, satellite_delegates, (4, 150), candidates, caller)
        return tied_caucus(rng, lambda _t: d, (max(4, 2 * d), max(8, 12 * d)), candidates, caller)
    caucus: Caucus | None = None
    for _ in range(50):
        caucus = satellite_caucus(rng, prefs, caller) if d is None else natural_caucus(rng, d, prefs, caller)
        if not errors(delegates_of(d, caucus), caucus.attendance, caucus.first, caucus.final, caucus.delegates):
            break
    return caucus


def generate(seed: int, config: SimConfig | None = None) -> SimElection:
    cfg = config or SimConfig()
    rng = random.Random(seed)
    election = SimElection(seed, f"sim-{seed}", f"Simulated caucuses (seed {seed})", cfg,
                           defined_at=cfg.caucus_start - timedelta(days=1))  # fmt: skip
    n_counties = cfg.counties or max(1, round(cfg.units / 17))
    base_prefs = {c: rng.gammavariate(2, 1) * (0.15 if c == "Uncommitted" else 1) for c in cfg.candidates}
    county_prefs = [_preferences(rng, cfg.candidates, base_prefs) for _ in range(n_counties)]
    plans = _plans(rng, cfg, n_counties)
    flags = {name: set(rng.sample(range(cfg.units), round(cfg.units * share)))
             for name, share in (("tie", cfg.tie_share), ("correction", cfg.correction_share),
                                 ("malformed", cfg.malformed_share), ("duplicate", cfg.duplicate_share))}  # fmt: skip
    rooms: list[tuple[Caucus, bool]] = []  # (the caucus, built to tie)
    tie_debt = 0  # a unit whose D cannot tie (D = 2 under idp-2020) hands its tie on to the next unit
    for index, plan in enumerate(plans):
        prefs = county_prefs[plan.county] if plan.county is not None else base_prefs
        tie_debt += index in flags["tie"]
        tie_room = _room(rng, plan, prefs, True, cfg.candidates) if tie_debt else None
        tie_debt -= tie_room is not None
        caucus = tie_room or _room(rng, plan, prefs, False, cfg.candidates)
        assert caucus is not None
        rooms.append((caucus, tie_room is not None))
    election.counties = _counties(rng, n_counties, [(p.county, p.delegates or 0) for p in plans if p.county is not None])
    sats = [(p.unit_id, p.group, c.attendance) for p, (c, _) in zip(plans, rooms) if p.group is not None]
    election.groups, weights = _satellite_groups(rng, sats)
    for index, (plan, (caucus, tied)) in enumerate(zip(plans, rooms)):
        county_id = election.counties[plan.county].county_id if plan.county is not None else f"{plan.group}-sites"
        unit = SimUnit(plan.unit_id, plan.name, county_id, plan.delegates, plan.group, weights.get(plan.unit_id))
        opened = cfg.caucus_start + timedelta(seconds=rng.randint(0, 900))
        reported = opened + timedelta(seconds=round(60 * (20 + rng.lognormvariate(4.2, 0.5))))
        correction = None
        if index in flags["correction"]:
            when = cfg.caucus_start + timedelta(seconds=rng.randint(86_400, 14 * 86_400))
            correction = corrected(rng, delegates_of(plan.delegates, caucus), caucus, when)
        defect = rng.choice(DEFECTS) if index in flags["malformed"] else None
        election.stories.append(UnitStory(unit, caucus, opened, reported, tied, correction, defect, index in flags["duplicate"]))
    return election


def _counties(rng: random.Random, n: int, precincts: list[tuple[int, int]]) -> list[SimCounty]:
    """Ratios are exact: the county's state delegates over its county delegates."""
    totals: Counter[int] = Counter()
    for county, d in precincts:
        totals[county] += d
    out = []
    for i in range(n):
        cds = totals[i] or 1
        state = max(1, round(cds * rng.uniform(0.04, 0.42)))
        out.append(SimCounty(f"C{i + 1:02d}", f"County {i + 1:02d}", Fraction(state, cds)))
    return out


def _satellite_groups(rng: random.Random, sats: list[tuple[str, str, int]]) -> tuple[list[SimGroup], dict[str, Fraction]]:
    """Each group shares a pool of SDEs in proportion to attendance (RULES.md §8)."""
    groups: list[SimGroup] = []
    weights: dict[str, Fraction] = {}
    for gid in sorted({g for _, g, _ in sats}):
        members = [(u, t) for u, g, t in sats if g == gid]
        base = sum(t for _, t in members)
        pool = Fraction(rng.randint(2, 6))
        groups.append(SimGroup(gid, f"Satellites {gid[-1]}", pool, base))
        for unit_id, t in members:
            weights[unit_id] = pool * t / base if base else Fraction(0)
    return groups, weights

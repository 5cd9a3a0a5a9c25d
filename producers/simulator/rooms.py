"""One caucus room, drawn from a seeded random generator and settled by the caucus math.

Attendance spreads over two orders of magnitude; the first alignment is drawn from the county's
preferences; members of non-viable groups realign while viable groups stay locked (RULES.md §4); the
delegates come from ``ledger.caucus_math`` and every tie it leaves pending is decided by a recorded
toss. Rooms built to tie, and late corrections that the intake would accept, are made here too.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ledger.caucus_math import PendingTie, Severity, TieResolution, get_rule_set, satellite_delegates

__all__ = ["RULE_SET", "Toss", "Caucus", "Correction", "natural_caucus", "satellite_caucus", "tied_caucus",
           "corrected", "errors", "delegates_of", "draw"]  # fmt: skip

RULE_SET = "idp-2020"
_RULES = get_rule_set(RULE_SET)

@dataclass(frozen=True, slots=True)
class Toss:
    contenders: tuple[str, ...]
    seats: int
    winners: tuple[str, ...]
    method: str
    reason: str


@dataclass(frozen=True, slots=True)
class Caucus:
    """What happened in one room: T, both alignments, the tosses and the delegates awarded."""

    attendance: int
    first: dict[str, int]
    final: dict[str, int]
    delegates: dict[str, int]
    tosses: tuple[Toss, ...] = ()


@dataclass(frozen=True, slots=True)
class Correction:
    stage: str
    reason: str
    caucus: Caucus
    at: datetime


def _attendance(rng: random.Random, d: int) -> int:
    if rng.random() < 0.05:
        return rng.randint(1, max(1, d))  # a handful of people in a big precinct
    return max(1, round(d * rng.lognormvariate(2.2, 0.5)))


def draw(rng: random.Random, n: int, weights: dict[str, float]) -> dict[str, int]:
    names = sorted(weights)
    counts = Counter(rng.choices(names, weights=[weights[c] for c in names], k=n)) if n else Counter()
    return {c: counts.get(c, 0) for c in names}


def realign(rng: random.Random, first: dict[str, int], threshold: int, prefs: dict[str, float]) -> dict[str, int]:
    """Viable groups are locked (§4.2); each member of a non-viable group joins a viable group (75 %),
    leaves (15 %) or stays put (10 %). When nobody is viable the room gathers behind its largest
    groups (§4.3: non-viable groups may combine), which then stand as the destinations."""
    viable = [c for c, n in sorted(first.items()) if n >= threshold and n > 0]
    if not viable:
        ranked = sorted((c for c in first if first[c] > 0), key=lambda c: (-first[c], c))
        viable = sorted(ranked[:2])
    final = {c: (n if c in viable else 0) for c, n in first.items()}
    for c, n in sorted(first.items()):
        if c in viable:
            continue
        for _ in range(n):
            roll = rng.random()
            if roll < 0.75 and viable:
                final[rng.choices(viable, weights=[prefs[v] for v in viable])[0]] += 1
            elif roll >= 0.90:
                final[c] += 1
    return final


def settle(rng: random.Random, d: int, t: int, first: dict[str, int], final: dict[str, int],
            caller: str) -> Caucus:
    """Allocate; every pending tie is decided by a random (seeded) toss, as the room would."""
    tosses: list[Toss] = []
    resolutions: list[TieResolution] = []
    while True:
        alloc = _RULES.allocate(delegates=d, attendance=t, first=first, final=final, ties=tuple(resolutions))
        if alloc.settled:
            return Caucus(t, dict(first), dict(final), dict(alloc.delegates), tuple(tosses))
        tie: PendingTie = alloc.pending[0]
        winners = tuple(sorted(rng.sample(list(tie.contenders), tie.seats)))
        resolutions.append(TieResolution(tie.contenders, tie.seats, winners, tie.method, caller))
        tosses.append(Toss(tie.contenders, tie.seats, winners, tie.method, tie.reason))


def natural_caucus(rng: random.Random, d: int, prefs: dict[str, float], caller: str) -> Caucus:
    t = _attendance(rng, d)
    aligned = t - (rng.randint(1, min(3, t)) if rng.random() < 0.05 and t > 3 else 0)
    first = draw(rng, aligned, prefs)
    final = realign(rng, first, _RULES.threshold(t, d), prefs)
    return settle(rng, d, t, first, final, caller)


def tied_caucus(rng: random.Random, d_of: Callable[[int], int], t_range: tuple[int, int],
                 candidates: tuple[str, ...], caller: str) -> Caucus | None:
    """A room whose numbers leave a tie at the cut: k equal viable groups, the others splitting the rest.
    Not every such room ties (the cut may fall elsewhere), so rooms are drawn until one does."""
    for _ in range(200):
        t = rng.randint(*t_range)
        d = d_of(t)
        k = rng.choice((2, 2, 3))
        threshold = max(1, _RULES.threshold(t, d))
        if t // k < threshold or k > len(candidates):
            continue
        size = rng.randint(threshold, t // k)
        names = rng.sample(list(candidates), min(len(candidates), k + 2))
        rest = t - k * size
        if rest and len(names) == k:
            continue
        first = {c: 0 for c in candidates}
        for c in names[:k]:
            first[c] = size
        for c in names[k:-1]:
            first[c] = rng.randint(0, rest)
            rest -= first[c]
        if len(names) > k:
            first[names[-1]] += rest
        final = {c: (n if n >= threshold else 0) for c, n in first.items()}
        if _RULES.allocate(delegates=d, attendance=t, first=first, final=final).pending:
            return settle(rng, d, t, first, final, caller)
    return None


def corrected(rng: random.Random, d: int, caucus: Caucus, at: datetime) -> Correction | None:
    """A late correction: a few people counted in the wrong final group, as a recanvass finds. The
    corrected numbers still obey the lock rule (a first-viable group keeps at least its first count)
    and need no toss, so the intake accepts them."""
    stage, reason = rng.choice((
        ("review", "final alignment transposed between two groups on the reporting sheet"),
        ("recanvass", "math worksheet shows different final numbers than were reported"),
        ("recount", "presidential preference cards recounted"),
    ))  # fmt: skip
    threshold = _RULES.threshold(caucus.attendance, d)
    locked = {c for c, n in caucus.first.items() if n > 0 and n >= threshold}
    for _ in range(20):
        spare = {c: n - (caucus.first[c] if c in locked else 0) for c, n in caucus.final.items()}
        sources = [c for c, n in sorted(spare.items()) if n > 0]
        if not sources:
            return None
        source = rng.choice(sources)
        target = rng.choice([c for c in sorted(caucus.final) if c != source])
        moved = rng.randint(1, min(3, spare[source]))
        final = dict(caucus.final)
        final[source] -= moved
        final[target] += moved
        alloc = _RULES.allocate(delegates=d, attendance=caucus.attendance, first=caucus.first, final=final)
        if alloc.settled and not errors(d, caucus.attendance, caucus.first, final, dict(alloc.delegates)):
            return Correction(stage, reason, Caucus(caucus.attendance, dict(caucus.first), final, dict(alloc.delegates)), at)
    return None


def satellite_caucus(rng: random.Random, prefs: dict[str, float], caller: str) -> Caucus:
    """A satellite: attendance from a few to a few hundred, D from the attendance table (§8)."""
    t = max(1, round(rng.lognormvariate(3.2, 0.9)))
    first = draw(rng, t, prefs)
    d = satellite_delegates(t)
    return settle(rng, d, t, first, realign(rng, first, _RULES.threshold(t, d), prefs), caller)


def delegates_of(apportioned: int | None, caucus: Caucus) -> int:
    return apportioned if apportioned is not None else satellite_delegates(caucus.attendance)


def errors(d: int, t: int, first: dict[str, int], final: dict[str, int], delegates: dict[str, int]) -> list[str]:
    """The error findings the intake would refuse a report for (``caucus_math`` §12 checks)."""
    findings = _RULES.check(delegates=d, attendance=t, first=first, final=final, reported=delegates)
    return [f.code for f in findings if f.severity == Severity.ERROR]


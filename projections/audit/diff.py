"""Compare two tallies: unit by unit and candidate by candidate, and what that does to the totals.

Why a diff of tallies rather than of rows: the question an auditor asks is "which precincts moved, by
how much, and did it change who leads?", whether the two sides are two moments (release A vs release B),
two readings of the rules (idp-2020 vs idp-2016), the delegates chairs reported vs the ones the rules
give, or a rebuilt projection vs the one that serves. All of these reduce to two sets of unit tallies
(``projections.tally.UnitTally``) over one election definition, and county and state totals derived
from them with the same ``aggregate`` code ``caucus tally`` uses, so a diff can never disagree with
what the tallies show.

The sides, how they are written and loaded, are ``projections.audit.diff_sides``.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ledger.caucus_math import display_sde
from projections.audit.diff_sides import Snapshot
from projections.tally import (
    AreaTally,
    ElectionContext,
    UnitTally,
    aggregate,
    aggregate_counties,
    fraction_text,
)

__all__ = [
    "CandidateDelta",
    "UnitDiff",
    "AreaDelta",
    "DiffResult",
    "diff_snapshots",
    "sde_text",
    "signed",
]


def _delta(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else b - a


@dataclass(frozen=True)
class CandidateDelta:
    """One candidate of one unit or area on both sides (A, B); SDEs exact."""

    candidate: str
    first: tuple[int, int]
    final: tuple[int, int]
    cds: tuple[int | None, int | None]
    sde: tuple[Fraction | None, Fraction | None]
    sde_display_sum: tuple[Decimal, Decimal] | None = None

    def changed(self) -> list[str]:
        out = [m for m in ("first", "final", "cds", "sde") if getattr(self, m)[0] != getattr(self, m)[1]]
        if self.sde_display_sum is not None and self.sde_display_sum[0] != self.sde_display_sum[1]:
            out.append("sde_display_sum")
        return out

    def to_json(self) -> dict[str, Any]:
        def frac(v: Fraction | None) -> str | None:
            return None if v is None else fraction_text(v)

        def shown(v: Fraction | None) -> str | None:
            return None if v is None else str(display_sde(v))

        a, b = self.sde
        out: dict[str, Any] = {
            "candidate": self.candidate,
            "changed": self.changed(),
            "first": {"a": self.first[0], "b": self.first[1], "delta": self.first[1] - self.first[0]},
            "final": {"a": self.final[0], "b": self.final[1], "delta": self.final[1] - self.final[0]},
            "cds": {"a": self.cds[0], "b": self.cds[1], "delta": _delta(*self.cds)},
            "sde": {
                "a": shown(a), "b": shown(b), "delta": None if a is None or b is None else str(display_sde(b - a)),
                "a_exact": frac(a), "b_exact": frac(b),
            },
        }
        if self.sde_display_sum is not None:
            sa, sb = self.sde_display_sum
            out["sde_display_sum"] = {"a": str(sa), "b": str(sb), "delta": str(sb - sa)}
        return out


@dataclass(frozen=True)
class UnitDiff:
    unit_id: str
    name: str | None
    county_id: str | None
    county_name: str | None
    status: tuple[str, str]
    notes: tuple[str, ...]
    candidates: tuple[CandidateDelta, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "unit_id": self.unit_id,
            "name": self.name,
            "county_id": self.county_id,
            "county": self.county_name,
            "status": {"a": self.status[0], "b": self.status[1]},
            "notes": list(self.notes),
            "candidates": [c.to_json() for c in self.candidates],
        }


@dataclass(frozen=True)
class AreaDelta:
    """What the unit differences do to one area (a county, or the state)."""

    level: str
    area: str
    name: str
    units_reporting: tuple[int, int]
    candidates: tuple[CandidateDelta, ...]
    units_changed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "area": self.area,
            "name": self.name,
            "units_reporting": {"a": self.units_reporting[0], "b": self.units_reporting[1]},
            "units_changed": self.units_changed,
            "candidates": [c.to_json() for c in self.candidates],
        }


@dataclass
class DiffResult:
    a: Snapshot
    b: Snapshot
    units: list[UnitDiff]
    counties: list[AreaDelta]
    state: AreaDelta
    compared: int

    @property
    def equal(self) -> bool:
        reporting = self.state.units_reporting
        return not self.units and not self.counties and not self.state.candidates and reporting[0] == reporting[1]

    def summary(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "units_compared": self.compared,
            "units_changed": len(self.units),
            "counties_changed": len(self.counties),
            "candidates_changed_statewide": [c.candidate for c in self.state.candidates],
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "summary": self.summary(),
            "units": [u.to_json() for u in self.units],
            "counties": [c.to_json() for c in self.counties],
            "state": self.state.to_json(),
        }


def _status(t: UnitTally | None) -> str:
    if t is None or not t.reporting:
        return "not reporting"
    return t.status + (f" ({t.stage})" if t.stage else "")


def _candidates(a: ElectionContext, b: ElectionContext) -> list[str]:
    seen = dict.fromkeys(a.candidates)
    seen.update(dict.fromkeys(b.candidates))
    return list(seen)


def _unit_diff(uid: str, ta: UnitTally | None, tb: UnitTally | None, a: Snapshot, b: Snapshot, candidates: list[str]) -> UnitDiff | None:
    ra = ta is not None and ta.reporting
    rb = tb is not None and tb.reporting
    if not ra and not rb:
        return None
    notes: list[str] = []
    if ra and rb:
        assert ta is not None and tb is not None
        if ta.delegates != tb.delegates:
            notes.append(f"D {ta.delegates} -> {tb.delegates}")
        stated = {"reported", "opened"}
        if ta.attendance != tb.attendance and (ta.attendance_source in stated or tb.attendance_source in stated):
            notes.append(f"T {ta.attendance} ({ta.attendance_source}) -> {tb.attendance} ({tb.attendance_source})")
        pa = {(p.contenders, p.seats) for p in ta.pending}
        pb = {(p.contenders, p.seats) for p in tb.pending}
        if pa != pb:
            notes.append(f"ties pending: {_ties(pa)} -> {_ties(pb)}")
    ua, ub = uid in a.unknown, uid in b.unknown
    if ua != ub:
        notes.append("delegates not known in " + ("A" if ua else "B"))
    deltas = []
    for c in candidates:
        def get(t: UnitTally | None, unknown: bool) -> tuple[int, int, int | None, Fraction | None]:
            if t is None or not t.reporting:
                return 0, 0, 0, Fraction(0)
            cds = None if unknown else t.cds.get(c, 0)
            sde = None if unknown else t.sde.get(c, Fraction(0))
            return t.first.get(c, 0), t.final.get(c, 0), cds, sde

        fa, la, ca, sa = get(ta, ua)
        fb, lb, cb, sb = get(tb, ub)
        d = CandidateDelta(c, (fa, fb), (la, lb), (ca, cb), (sa, sb))
        if d.changed():
            deltas.append(d)
    if not deltas and not notes:
        return None
    if ua and ub:
        notes.append("delegates not known in A and B")
    ref = tb if tb is not None else ta
    assert ref is not None
    ctx = b.context if uid in b.context.units else a.context
    county = ctx.counties.get(ref.county_id or "")
    return UnitDiff(
        uid, ref.name, ref.county_id, county.name if county else ref.county_id,
        (_status(ta), _status(tb)), tuple(notes), tuple(deltas),
    )


def _ties(ties: set[tuple[tuple[str, ...], int]]) -> str:
    if not ties:
        return "none"
    return "; ".join(f"{s} among {'/'.join(c)}" for c, s in sorted(ties))


def _area_delta(level: str, aa: AreaTally, ab: AreaTally, candidates: list[str], units_changed: int) -> AreaDelta:
    zero = Decimal("0.0000")
    deltas = []
    for c in candidates:
        d = CandidateDelta(
            c,
            (aa.first.get(c, 0), ab.first.get(c, 0)),
            (aa.final.get(c, 0), ab.final.get(c, 0)),
            (aa.cds.get(c, 0), ab.cds.get(c, 0)),
            (aa.sde.get(c, Fraction(0)), ab.sde.get(c, Fraction(0))),
            (aa.sde_display_sum.get(c, zero), ab.sde_display_sum.get(c, zero)),
        )
        if d.changed():
            deltas.append(d)
    return AreaDelta(level, ab.area, ab.name or aa.name, (aa.units_reporting, ab.units_reporting), tuple(deltas), units_changed)


def diff_snapshots(a: Snapshot, b: Snapshot) -> DiffResult:
    """Every unit whose numbers differ between A and B, and the counties and state they move (pure)."""
    candidates = _candidates(a.context, b.context)
    ids = sorted(set(a.units) | set(b.units))
    units = [d for uid in ids if (d := _unit_diff(uid, a.units.get(uid), b.units.get(uid), a, b, candidates)) is not None]
    units.sort(key=lambda u: (u.county_name or "", u.name or "", u.unit_id))
    changed_by_county: dict[str, int] = {}
    for u in units:
        changed_by_county[u.county_id or ""] = changed_by_county.get(u.county_id or "", 0) + 1
    ca = aggregate_counties(a.context, a.units.values())
    cb = aggregate_counties(b.context, b.units.values())
    counties = []
    for cid in list(dict.fromkeys([*cb, *ca])):
        area_a = ca.get(cid) or _empty_like(cb[cid])
        area_b = cb.get(cid) or _empty_like(ca[cid])
        delta = _area_delta("county", area_a, area_b, candidates, changed_by_county.get(cid, 0))
        if delta.candidates or delta.units_reporting[0] != delta.units_reporting[1]:
            counties.append(delta)
    state = _area_delta("state", aggregate(a.context, a.units.values()), aggregate(b.context, b.units.values()), candidates, len(units))
    reporting = sum(1 for uid in ids if (a.units.get(uid) and a.units[uid].reporting) or (b.units.get(uid) and b.units[uid].reporting))
    return DiffResult(a, b, units, counties, state, reporting)


def _empty_like(area: AreaTally) -> AreaTally:
    return AreaTally(area.area, area.name, area.candidates)


def sde_text(value: Fraction | None) -> str:
    return "-" if value is None else str(display_sde(value))


def signed(value: int | Decimal | Fraction) -> str:
    if isinstance(value, Fraction):
        shown = display_sde(value)
        return f"+{shown}" if shown > 0 else str(shown)
    return f"+{value}" if value > 0 else str(value)

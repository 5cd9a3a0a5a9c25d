"""Tallies: a unit's numbers, computed and as reported, and their sums per county and statewide.

Why a tally is a pure function of (unit state, election state, rule set): the election definition
lives in one partition and the units in others, and several runners may read them in any order.
Computing a unit's tally from the two states, never from the order they arrived in, makes the
result the same whoever saw what first; the runner recomputes every unit of an election when its
definition changes.

What a unit tally holds (RULES.md §1, §5, §8, §9):

* first and final alignment per candidate (every candidate of the election, 0 if absent);
* T: the attendance reported with the result, else the attendance recorded when the unit opened,
  else the first-alignment total (``attendance_source`` says which);
* D: the apportioned delegates, or for a satellite ``satellite_delegates(T)``;
* county delegates three ways: as the chair reported them, as the rule set computes them (with any
  tie still pending), and the official figure: the reported ones where the chair reported them,
  the computed ones otherwise (``cds_source``);
* SDEs of the official CDs, exact and as displayed (4 dp). A unit's SDE weight is its
  ``sde_weight`` when the definition gives one; else, for a satellite, its share of its group's
  pool (T x pool / the group's attendance base, §8); else D x the county ratio. A candidate's SDE is
  weight x CDs / D. For satellites the weight is shared over the CDs the satellite actually
  awarded: three 2020 satellites awarded one delegate above the attendance table, and the
  published SDEs split their weight over that larger number (RULES.md §17.4).

The SDE weight and SDEs are ``projections.unit_sde``'s. County and state totals are sums over the units the election defines (``projections.area_tally``); the
election's context is ``projections.election_context``. Their names are importable from here too.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ledger.events import County, Result, UnitDefinition
from ledger.caucus_math import CaucusMathError, TieResolution, satellite_delegates
from projections.area_tally import AreaTally, aggregate, aggregate_counties
from projections.election_context import ElectionContext, RuleSetLike, context_key, election_context
from projections.fraction_text import fraction_text, parse_fraction
from projections.reducers import TieRecord, UnitState, UnitStatus, canonical_json
from projections.unit_inputs import threshold_alone, unit_attendance, unit_delegates
from projections.unit_sde import group_of, unit_sdes
from projections.tie_records import decided_nothing

__all__ = [
    "RuleSetLike",
    "ElectionContext",
    "election_context",
    "context_key",
    "PendingTieView",
    "UnitTally",
    "compute_unit_tally",
    "AreaTally",
    "aggregate",
    "aggregate_counties",
    "fraction_text",
    "parse_fraction",
]


_ZERO_SHOWN = Decimal("0.0000")


def _shown(value: Fraction) -> Decimal:
    """``display_sde`` for the non-negative values a tally holds, without its input checks (this is
    the hot path of every tally; a test holds the two equal)."""
    num, den = value.numerator, value.denominator
    return Decimal((2 * num * 10_000 + den) // (2 * den)).scaleb(-4)


@dataclass(frozen=True)
class PendingTieView:
    contenders: tuple[str, ...]
    seats: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"contenders": list(self.contenders), "seats": self.seats, "reason": self.reason}


def _counts(candidates: Iterable[str], values: Mapping[str, int] | None) -> dict[str, int]:
    out = dict.fromkeys(candidates, 0)
    if values:
        for k, v in values.items():
            out[k] = int(v)
    return out


@dataclass(frozen=True)
class UnitTally:
    """One unit's tally (see module docstring). Maps are keyed by every candidate of the election."""

    unit_id: str
    election_id: str
    name: str | None
    county_id: str | None
    satellite_group: str | None
    defined: bool
    status: str
    stage: str | None
    reporting: bool
    rule_set: str | None
    delegates: int | None
    delegates_source: str | None
    attendance: int | None
    attendance_source: str | None
    threshold: int | None
    """The threshold from T (RULES §3), which judged the first alignment."""
    first: Mapping[str, int]
    final: Mapping[str, int]
    cds_reported: Mapping[str, int] | None
    cds_computed: Mapping[str, int] | None
    cds: Mapping[str, int]
    cds_source: str | None
    viable_first: tuple[str, ...]
    viable_final: tuple[str, ...]
    must_realign: tuple[str, ...]
    pending: tuple[PendingTieView, ...]
    ties_applied: tuple[str, ...]
    sde_weight: Fraction | None
    sde_divisor: int | None
    sde: Mapping[str, Fraction]
    sde_display: Mapping[str, Decimal]
    rejected: int
    result_event_id: str | None
    result_recorded_at: str | None
    problems: tuple[str, ...] = field(default=())
    tie_history: tuple[TieRecord, ...] = field(default=())
    """Ties of the unit tossed more than once: redrawn by an official, or contradicted by a toss that
    was ignored (``TieRecord.later``); the audit reports them."""
    tosses_contradicted: tuple[str, ...] = field(default=())
    """Standing tosses whose outcome the reported delegates contradict (RULES §6, §12); the reported
    figure stays official, a problem and the audit's TOSS_CONTRADICTED say so."""
    tosses_before_result: tuple[str, ...] = field(default=())
    """Applied tosses recorded before the unit had any result (``projections.audit.tie_checks``)."""
    tosses_unused: tuple[str, ...] = field(default=())
    """Standing tosses the current result's allocation does not use: tossed for a tie of a result since
    corrected, or of another reading of the rules than the rule set's (``TOSS_UNUSED`` in the audit)."""
    after_certification: bool = False
    """The result was recorded after the election's certification, which therefore does not cover it."""
    final_threshold: int | None = None
    """The threshold the final alignment was judged by: ``threshold`` unless the rule set recomputes it
    from the final count (idp-2016, RULES §4.6)."""

    @property
    def settled(self) -> bool:
        return not self.pending

    def to_json(self) -> dict[str, Any]:
        return {
            "unit_id": self.unit_id,
            "election_id": self.election_id,
            "name": self.name,
            "county_id": self.county_id,
            "satellite_group": self.satellite_group,
            "defined": self.defined,
            "status": self.status,
            "stage": self.stage,
            "reporting": self.reporting,
            "rule_set": self.rule_set,
            "delegates": self.delegates,
            "delegates_source": self.delegates_source,
            "attendance": self.attendance,
            "attendance_source": self.attendance_source,
            "threshold": self.threshold,
            "first": dict(self.first),
            "final": dict(self.final),
            "cds_reported": None if self.cds_reported is None else dict(self.cds_reported),
            "cds_computed": None if self.cds_computed is None else dict(self.cds_computed),
            "cds": dict(self.cds),
            "cds_source": self.cds_source,
            "viable_first": list(self.viable_first),
            "viable_final": list(self.viable_final),
            "must_realign": list(self.must_realign),
            "pending": [p.to_json() for p in self.pending],
            "settled": self.settled,
            "ties_applied": list(self.ties_applied),
            "sde_weight": None if self.sde_weight is None else fraction_text(self.sde_weight),
            "sde_divisor": self.sde_divisor,
            "sde": {k: fraction_text(v) for k, v in self.sde.items()},
            "sde_display": {k: str(v) for k, v in self.sde_display.items()},
            "rejected": self.rejected,
            "result_event_id": self.result_event_id,
            "result_recorded_at": self.result_recorded_at,
            "problems": list(self.problems),
            "tie_history": [t.to_json() for t in self.tie_history],
            "tosses_contradicted": list(self.tosses_contradicted),
            "tosses_before_result": list(self.tosses_before_result),
            **({"tosses_unused": list(self.tosses_unused)} if self.tosses_unused else {}),
            "after_certification": self.after_certification,
            "final_threshold": self.final_threshold,
        }

    def dumps(self) -> str:
        return canonical_json(self.to_json())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> UnitTally:
        return cls(
            unit_id=d["unit_id"],
            election_id=d["election_id"],
            name=d.get("name"),
            county_id=d.get("county_id"),
            satellite_group=d.get("satellite_group"),
            defined=d["defined"],
            status=d["status"],
            stage=d.get("stage"),
            reporting=d["reporting"],
            rule_set=d.get("rule_set"),
            delegates=d.get("delegates"),
            delegates_source=d.get("delegates_source"),
            attendance=d.get("attendance"),
            attendance_source=d.get("attendance_source"),
            threshold=d.get("threshold"),
            first=d["first"],
            final=d["final"],
            cds_reported=d.get("cds_reported"),
            cds_computed=d.get("cds_computed"),
            cds=d["cds"],
            cds_source=d.get("cds_source"),
            viable_first=tuple(d.get("viable_first", ())),
            viable_final=tuple(d.get("viable_final", ())),
            must_realign=tuple(d.get("must_realign", ())),
            pending=tuple(PendingTieView(tuple(p["contenders"]), p["seats"], p["reason"]) for p in d.get("pending", ())),
            ties_applied=tuple(d.get("ties_applied", ())),
            sde_weight=None if d.get("sde_weight") is None else parse_fraction(d["sde_weight"]),
            sde_divisor=d.get("sde_divisor"),
            sde={k: parse_fraction(v) for k, v in d.get("sde", {}).items()},
            sde_display={k: Decimal(v) for k, v in d.get("sde_display", {}).items()},
            rejected=d.get("rejected", 0),
            result_event_id=d.get("result_event_id"),
            result_recorded_at=d.get("result_recorded_at"),
            problems=tuple(d.get("problems", ())),
            tie_history=tuple(TieRecord.from_json(t) for t in d.get("tie_history", ())),
            tosses_contradicted=tuple(d.get("tosses_contradicted", ())),
            tosses_before_result=tuple(d.get("tosses_before_result", ())),
            tosses_unused=tuple(d.get("tosses_unused", ())),
            after_certification=bool(d.get("after_certification", False)),
            final_threshold=d.get("final_threshold"),
        )

    @classmethod
    def loads(cls, text: str) -> UnitTally:
        return cls.from_json(json.loads(text))


def _after_certification(state: UnitState, ctx: ElectionContext) -> bool:
    """Whether the unit's result was recorded after the election's certification. The certification
    covers the results that stood when it was recorded; a report or correction recorded later was
    never certified (the two events sit in different partitions, so only their times order them)."""
    if state.result is None or not ctx.certified or ctx.state.certified_at is None or state.result_recorded_at is None:
        return False
    try:
        return datetime.fromisoformat(state.result_recorded_at) > datetime.fromisoformat(ctx.state.certified_at)
    except (TypeError, ValueError):
        return False


def _status(state: UnitState, ctx: ElectionContext, after_certification: bool) -> str:
    """Certified: a unit-level certification of the standing result, or the election's certification
    of a result recorded before it; a result recorded after it keeps its own status."""
    if state.result is not None and ctx.certified and state.status is not UnitStatus.CERTIFIED and not after_certification:
        return UnitStatus.CERTIFIED.value
    return state.status.value


def _resolutions(state: UnitState, problems: list[str], pending_of: Any = None, context: Hashable = None) -> tuple[TieResolution, ...]:
    out = []
    standing = {t.key: t for t in state.ties}
    for t in state.ties:
        if pending_of is not None and decided_nothing(t, standing, state.result, pending_of, context):
            problems.append(f"coin toss {t.event_id} decides nothing: the result it was recorded against had no tie of "
                            f"{t.seats} seat(s) among {', '.join(t.contenders)} (RULES §6); such a tie of this result is pending")
            continue
        checked = t.resolution()
        if isinstance(checked, str):
            problems.append(f"coin toss {t.event_id} cannot be used: {checked}")
        else:
            out.append(checked)
    return tuple(out)


def compute_unit_tally(state: UnitState, ctx: ElectionContext) -> UnitTally:
    """The tally of one unit under ``ctx`` (pure; never raises for bad data, records problems)."""
    problems: list[str] = []
    unit = ctx.units.get(state.unit_id)
    county = ctx.counties.get(unit.county_id) if unit is not None else None
    problems.extend(_definition_problems(state, ctx, unit, county))
    candidates = ctx.candidates
    result = state.result
    first = _counts(candidates, result.first_alignment if result else None)
    final = _counts(candidates, result.final_alignment if result else None)
    reported = None if result is None or result.delegates_reported is None else _counts(candidates, result.delegates_reported)
    attendance, att_source = unit_attendance(state, first)
    delegates, d_source = unit_delegates(unit, attendance, problems)
    if ctx.rules_error:
        problems.append(ctx.rules_error)
    computed = _computed_delegates(state, ctx, delegates, attendance if att_source in ("reported", "opened") else None,
                                   first, final, problems)

    if reported is not None:
        official, cds_source = reported, "reported"
    elif computed is not None:
        official, cds_source = computed.cds, "computed"
    else:
        official, cds_source = _counts(candidates, None), None
    if reported is not None and delegates is not None:
        problems.extend(_total_problems(sum(reported.values()), delegates, _owed(delegates, computed)))
    contradicted = _tosses_contradicted(state, reported, computed, problems)
    late = _after_certification(state, ctx)
    group = group_of(unit, ctx)
    weight, divisor, sde = unit_sdes(unit, county, group, delegates, attendance, official, cds_source,
                                 reporting=result is not None, problems=problems)
    display = {c: (_shown(v) if v else _ZERO_SHOWN) for c, v in sde.items()}
    shown = computed or _NOT_COMPUTED
    unused = () if computed is None else tuple(t.event_id for t in state.ties if t.event_id not in shown.applied)
    for event_id in unused:
        if not any(event_id in p for p in problems):
            problems.append(f"coin toss {event_id} matches no tie of this result under {ctx.rule_set_name}: it decides nothing")

    return UnitTally(
        unit_id=state.unit_id,
        election_id=state.election_id,
        name=unit.name if unit else None,
        county_id=unit.county_id if unit else None,
        satellite_group=unit.satellite_group if unit else None,
        defined=unit is not None,
        status=_status(state, ctx, late),
        after_certification=late,
        stage=state.stage,
        reporting=result is not None,
        rule_set=ctx.rule_set_name,
        delegates=delegates,
        delegates_source=d_source,
        attendance=attendance,
        attendance_source=att_source,
        threshold=shown.threshold if computed is not None else threshold_alone(ctx, attendance, delegates),
        final_threshold=shown.final_threshold,
        first=first,
        final=final,
        cds_reported=reported,
        cds_computed=computed.cds if computed else None,
        cds=official,
        cds_source=cds_source,
        viable_first=shown.viable_first,
        viable_final=shown.viable_final,
        must_realign=shown.must_realign,
        pending=shown.pending if cds_source == "computed" else (),
        ties_applied=shown.applied,
        sde_weight=weight,
        sde_divisor=divisor,
        sde=sde,
        sde_display=display,
        rejected=state.rejected,
        result_event_id=state.result_event_id,
        result_recorded_at=state.result_recorded_at,
        problems=tuple(problems),
        tie_history=tuple(t for t in state.ties if t.disputed),
        tosses_contradicted=contradicted,
        tosses_before_result=tuple(t.event_id for t in state.ties if t.recorded_against is None and t.event_id in shown.applied),
        tosses_unused=unused,
    )


def _tosses_contradicted(
    state: UnitState, reported: dict[str, int] | None, computed: _Computed | None, problems: list[str]
) -> tuple[str, ...]:
    """The standing tosses the reported delegates contradict (RULES §6, §12): once a toss settled a
    tie, only its outcome is legal, so a worksheet that gives the tie's seats otherwise is wrong. The
    reported figure stays official, as every reported figure does (the chair's signed worksheet is
    the legal record, §2.8); the problem says what the toss gives instead."""
    if reported is None or computed is None:
        return ()
    out = []
    for tie in state.ties:
        if tie.event_id not in computed.applied:
            continue
        differ = [c for c in tie.contenders if reported.get(c, 0) != computed.cds.get(c, 0)]
        if not differ:
            continue
        out.append(tie.event_id)
        problems.append(
            f"delegates_reported: contradict coin toss {tie.event_id}, which settled the tie of {tie.seats} seat(s) "
            f"among {', '.join(tie.contenders)} for {', '.join(tie.winners) or 'none'} (RULES §6: a settled tie has "
            f"only its outcome): reported {_pairs(reported, differ)}, the toss gives {_pairs(computed.cds, differ)}; "
            "the reported figure stays official"
        )
    return tuple(out)


def _pairs(counts: Mapping[str, int], names: Iterable[str]) -> str:
    return ", ".join(f"{c} {counts.get(c, 0)}" for c in names)


def _owed(delegates: int, computed: _Computed | None) -> int:
    """What a worksheet must award: all D, except where no group is viable at the final count (D >= 2,
    §4.3), when none can be; a one-delegate unit always awards its one (§7). Same rule as the audit's
    DELEGATE_TOTAL."""
    if delegates >= 2 and computed is not None and not computed.pending and not any(computed.cds.values()):
        return 0
    return delegates


def _total_problems(total: int, delegates: int, owed: int) -> list[str]:
    why = (f"the unit elects {delegates}" if owed == delegates else "but no group is viable at the final alignment: "
           f"none of the unit's {delegates} can be awarded (RULES §4.3)")
    return [] if total == owed else [f"reported county delegates add up to {total}, {why}"]


def _definition_problems(state: UnitState, ctx: ElectionContext, unit: UnitDefinition | None, county: County | None) -> list[str]:
    """Why the definition cannot place this unit, if it cannot."""
    if not ctx.defined:
        return [f"election {ctx.election_id!r} is not defined (yet): no ElectionDefined seen"]
    if unit is None:
        return [f"unit {state.unit_id!r} is not in the definition of election {ctx.election_id!r}"]
    if county is None:
        return [f"county {unit.county_id!r} of unit {state.unit_id!r} is not in the definition"]
    return []


@dataclass(frozen=True)
class _Computed:
    """The rule set's county delegates for a unit, with what explains them."""

    cds: dict[str, int] = field(default_factory=dict)
    threshold: int | None = None
    final_threshold: int | None = None
    pending: tuple[PendingTieView, ...] = ()
    viable_first: tuple[str, ...] = ()
    viable_final: tuple[str, ...] = ()
    must_realign: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()


_NOT_COMPUTED = _Computed()


def _computed_delegates(state: UnitState, ctx: ElectionContext, delegates: int | None, known_t: int | None,
                        first: dict[str, int], final: dict[str, int], problems: list[str]) -> _Computed | None:
    """County delegates computed by the rule set from the alignments and the standing tosses."""
    if state.result is None or delegates is None or ctx.rules is None:
        return None
    rules = ctx.rules

    def pending_of(result: Result, ties: tuple[TieResolution, ...]) -> Any:
        """A result's pending ties, as the unit had them when a toss was recorded against it."""
        opened = result.attendance if result.attendance is not None else state.attendance_opened
        first_then = dict(result.first_alignment)
        d = delegates if unit_def is None or unit_def.delegates is not None else satellite_delegates(opened or sum(first_then.values()))
        return rules.allocate(delegates=d, attendance=opened, first=first_then, final=dict(result.final_alignment), ties=ties).pending

    unit_def = ctx.units.get(state.unit_id)
    satellite = unit_def is not None and unit_def.delegates is None
    ties = _resolutions(state, problems, pending_of, (rules, None if satellite else delegates, state.attendance_opened))
    try:
        alloc = ctx.rules.allocate(delegates=delegates, attendance=known_t, first=first, final=final, ties=ties)
    except CaucusMathError as exc:
        problems.append(f"delegates cannot be computed: {exc}")
        return None
    by_key = {(t.contenders, t.seats): t.event_id for t in state.ties}
    return _Computed(
        cds=_counts(ctx.candidates, alloc.delegates),
        threshold=alloc.threshold,
        final_threshold=alloc.final_threshold,
        pending=tuple(PendingTieView(tuple(p.contenders), p.seats, p.reason) for p in alloc.pending),
        viable_first=tuple(sorted(alloc.viable_first)),
        viable_final=tuple(sorted(alloc.viable_final)),
        must_realign=tuple(sorted(alloc.must_realign)),
        applied=tuple(by_key.get((tuple(r.contenders), r.seats), "") for r in alloc.applied_ties),
    )

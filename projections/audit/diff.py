"""Compare two tallies: unit by unit and candidate by candidate, and what that does to the totals.

Why a diff of tallies rather than of rows: the question an auditor asks is "which precincts moved, by
how much, and did it change who leads?", whether the two sides are two moments (release A vs release B),
two readings of the rules (idp-2020 vs idp-2016), the delegates chairs reported vs the ones the rules
give, or a rebuilt projection vs the one that serves. All of these reduce to two sets of unit tallies
(``projections.tally.UnitTally``) over one election definition, and county and state totals derived
from them with the same ``aggregate`` code ``caucus tally`` uses, so a diff can never disagree with
what the tallies show.

A side is written ``PART[/PART...]``:

=====================  ===========================================================================
``live``               the serving projection in the store (its stored tallies, as they are)
``set:NAME[@VERSION]`` a projection table set by name (the serving one, else the newest version),
                       ``set:NAME@3`` a version, ``set:#12`` a set id: e.g. a rebuild not yet promoted
``log``                the whole log, replayed in memory (no store involved)
``as-of:TIME``         the log as of a time (``recorded_at`` <= TIME, inclusive; see ``projections.asof``)
``position:P:N,...``   the log as of per-partition positions (exclusive ends; see ``projections.asof``)
``rules:NAME``         recompute the delegates under another rule set (idp-2020, idp-2016)
``reported``           the county delegates as the chairs reported them
``computed``           the county delegates as the rule set computes them
``official``           the figure a tally publishes: reported where reported, else computed
=====================  ===========================================================================

A side that names no source (``rules:idp-2016``, ``reported``) uses the other side's source, so
``caucus diff live rules:idp-2016`` recomputes the same events both ways; if neither names one, both use
``live``. A rule set only changes *computed* delegates, so when either side names one, both sides compare
computed delegates unless told otherwise. A side with neither a rule set nor a delegate basis other than
``official`` is shown as stored; otherwise its tallies are recomputed from the stored unit states.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ledger.log.port import EventLog
from projections.asof import AsOfError, Cut, parse_positions, parse_time, replay, select_election
from ledger.caucus_math import CaucusMathError, display_sde, get_rule_set
from projections.queries import DEFAULT_SET, QueryError, choose_election, load_view
from projections.reducers import ElectionState, UnitState
from projections.stores.port import ProjectionStore, SetInfo, StoreError
from projections.tally import (
    AreaTally,
    ElectionContext,
    UnitTally,
    aggregate,
    aggregate_counties,
    compute_unit_tally,
    election_context,
    fraction_text,
)

__all__ = [
    "DiffError",
    "SideSpec",
    "parse_side",
    "resolve_sides",
    "Snapshot",
    "Sources",
    "load_snapshot",
    "snapshot_from_states",
    "CandidateDelta",
    "UnitDiff",
    "AreaDelta",
    "DiffResult",
    "diff_snapshots",
    "BASES",
    "BASES_OF_CDS",
    "sde_text",
    "signed",
]

BASES = ("live", "set", "log", "as-of", "position")
BASES_OF_CDS = ("official", "reported", "computed")


class DiffError(ValueError):
    """A side that cannot be read or loaded; the message names the side and the reason."""


@dataclass(frozen=True)
class SideSpec:
    """One parsed side. ``source`` is None when the side names none (it borrows the other's)."""

    text: str
    source: str | None = None
    argument: str | None = None
    rule_set: str | None = None
    basis: str | None = None
    cut: Cut | None = None

    @property
    def source_text(self) -> str:
        if self.source is None:
            return "?"
        return self.source if self.argument is None else f"{self.source}:{self.argument}"

    def describe(self) -> str:
        parts = [self.source_text]
        if self.rule_set:
            parts.append(f"rules {self.rule_set}")
        parts.append(f"{self.basis or 'official'} delegates")
        return ", ".join(parts)


_SET_ARG = re.compile(r"^(?:#(?P<id>\d+)|(?P<name>[^@]+?)(?:@(?P<version>\d+))?)$")


def parse_side(text: str) -> SideSpec:
    """Parse ``PART[/PART...]`` (see module docstring); errors name the part and what is allowed."""
    spec = SideSpec(text=text)
    parts = [p.strip() for p in text.split("/")]
    if not text.strip() or any(not p for p in parts):
        raise DiffError(f"side {text!r}: empty part; a side is e.g. live, as-of:2020-02-08T06:28:00Z, rules:idp-2016")
    for part in parts:
        name, _, arg = part.partition(":")
        name = name.strip().lower()
        arg = arg.strip()
        if name in ("live", "log"):
            if arg:
                raise DiffError(f"side {text!r}: {name} takes no argument")
            spec = _with_source(spec, name, None, None)
        elif name in ("as-of", "asof"):
            try:
                spec = _with_source(spec, "as-of", arg, Cut(at=parse_time(arg)))
            except AsOfError as exc:
                raise DiffError(f"side {text!r}: {exc}") from None
        elif name in ("position", "positions"):
            try:
                spec = _with_source(spec, "position", arg, parse_positions(arg))
            except AsOfError as exc:
                raise DiffError(f"side {text!r}: {exc}") from None
        elif name == "set":
            if not _SET_ARG.match(arg or ""):
                raise DiffError(f"side {text!r}: set needs a name (set:tally, set:tally@2) or an id (set:#12)")
            spec = _with_source(spec, "set", arg, None)
        elif name == "rules":
            if spec.rule_set is not None:
                raise DiffError(f"side {text!r}: names two rule sets")
            try:
                get_rule_set(arg)
            except CaucusMathError as exc:
                raise DiffError(f"side {text!r}: {exc}") from None
            spec = replace(spec, rule_set=arg)
        elif name in BASES_OF_CDS and not arg:
            if spec.basis is not None:
                raise DiffError(f"side {text!r}: names two delegate bases ({spec.basis}, {name})")
            spec = replace(spec, basis=name)
        else:
            raise DiffError(
                f"side {text!r}: unknown part {part!r}; use live, log, as-of:TIME, position:P:N,..., set:NAME, "
                "rules:NAME, reported, computed or official"
            )
    return spec


def _with_source(spec: SideSpec, source: str, argument: str | None, cut: Cut | None) -> SideSpec:
    if spec.source is not None:
        raise DiffError(f"side {spec.text!r}: names two sources ({spec.source_text} and {source})")
    return replace(spec, source=source, argument=argument, cut=cut)


def resolve_sides(a: SideSpec, b: SideSpec) -> tuple[SideSpec, SideSpec]:
    """Fill in what a side leaves out: its source from the other side (else ``live``), its delegate
    basis (``computed`` when either side names a rule set, else ``official``)."""
    if a.source is None and b.source is None:
        a = replace(a, source="live")
        b = replace(b, source="live")
    elif a.source is None:
        a = replace(a, source=b.source, argument=b.argument, cut=b.cut)
    elif b.source is None:
        b = replace(b, source=a.source, argument=a.argument, cut=a.cut)
    default = "computed" if (a.rule_set or b.rule_set) else "official"
    return replace(a, basis=a.basis or default), replace(b, basis=b.basis or default)


# -- loading ----------------------------------------------------------------------------------------


@dataclass
class Snapshot:
    """One side's unit tallies (under its delegate basis) and where they came from.

    ``unknown`` lists reporting units whose delegates are not known under the basis (``reported``
    for a unit whose chair reported none): their CDs and SDEs count as 0 in sums and are flagged."""

    spec: SideSpec
    description: str
    context: ElectionContext
    units: dict[str, UnitTally]
    unknown: frozenset[str] = frozenset()
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec.text,
            "source": self.spec.source_text,
            "rule_set": self.context.rule_set_name,
            "delegates": self.spec.basis,
            "description": self.description,
            "election_id": self.context.election_id,
            "units_reporting": sum(1 for t in self.units.values() if t.reporting),
            "units_delegates_unknown": sorted(self.unknown),
            **self.meta,
        }


@dataclass
class Sources:
    """How to reach the log and the store; opened only when a side needs them."""

    open_log: Callable[[], EventLog]
    open_store: Callable[[], ProjectionStore]
    describe_log: str = "the log"


def _zero_cds(t: UnitTally) -> UnitTally:
    zero = dict.fromkeys(t.cds, 0)
    return replace(t, cds=zero, sde={}, sde_display={}, cds_source=None)


def snapshot_from_states(
    spec: SideSpec,
    election: ElectionState,
    states: Iterable[UnitState],
    *,
    description: str,
    meta: dict[str, Any] | None = None,
) -> Snapshot:
    """Tallies of ``states`` under the side's rule set and delegate basis (pure)."""
    ctx = election_context(election, election.election_id, rule_set=spec.rule_set)
    if ctx.rules_error:
        raise DiffError(f"side {spec.text!r}: {ctx.rules_error}")
    units: dict[str, UnitTally] = {}
    unknown: set[str] = set()
    for s in states:
        if s.election_id != election.election_id:
            continue
        if spec.basis == "computed" and s.result is not None and s.result.delegates_reported is not None:
            s = replace(s, result=replace(s.result, delegates_reported=None))
        t = compute_unit_tally(s, ctx)
        if t.reporting and spec.basis != "official" and t.cds_source != spec.basis:
            # reported: the chair reported none; computed: the rule set could not compute them.
            t = _zero_cds(t)
            unknown.add(t.unit_id)
        units[t.unit_id] = t
    return Snapshot(spec, description, ctx, units, frozenset(unknown), meta or {})


def _resolve_store_set(store: ProjectionStore, spec: SideSpec) -> SetInfo:
    if spec.source == "live":
        info = store.serving(DEFAULT_SET)
        if info is None:
            raise DiffError(
                f"side {spec.text!r}: no projection {DEFAULT_SET!r} is serving in {store.describe()}; run `caucus project` first"
            )
        return info
    m = _SET_ARG.match(spec.argument or "")
    assert m is not None  # checked when parsed
    if m["id"]:
        return store.get_set(int(m["id"]))
    name, version = m["name"], m["version"]
    sets = store.sets(name)
    if not sets:
        known = ", ".join(sorted({s.name for s in store.sets()})) or "none"
        raise DiffError(f"side {spec.text!r}: no projection set named {name!r} in {store.describe()} (names: {known})")
    if version is not None:
        for s in sets:
            if s.version == int(version):
                return s
        raise DiffError(f"side {spec.text!r}: {name!r} has versions {', '.join(str(s.version) for s in sets)}, not {version}")
    serving = [s for s in sets if s.state == "serving"]
    return serving[0] if serving else max(sets, key=lambda s: s.version)


def _store_snapshot(store: ProjectionStore, spec: SideSpec, election_id: str | None) -> Snapshot:
    info = _resolve_store_set(store, spec)
    meta = {"projection_set": {"id": info.set_id, "name": info.name, "version": info.version, "state": info.state}}
    where = f"projection {info.name} v{info.version} ({info.state}) in {store.describe()}"
    if spec.rule_set is None and spec.basis == "official":
        view = load_view(store, set_id=info.set_id, election_id=election_id)
        meta["log_positions"] = {str(p): o for p, o in sorted(view.positions.items())}
        return Snapshot(spec, f"{where}, stored tallies", view.context, dict(view.units), frozenset(), meta)
    with store.reader(info.set_id) as reader:
        elections = {e: ElectionState.loads(row.state) for e, row in reader.elections().items()}
        chosen = choose_election(elections, election_id)
        states = [UnitState.loads(row.state) for row in reader.unit_states(election_id=chosen).values()]
        meta["log_positions"] = {str(p): row.next_offset for p, row in sorted(reader.positions().items())}
    spec_for_rules = spec if spec.rule_set else replace(spec, rule_set=info.rule_set)
    snap = snapshot_from_states(spec_for_rules, elections[chosen], states, description=f"{where}, recomputed from unit states", meta=meta)
    snap.spec = spec
    return snap


def _log_snapshot(log: EventLog, spec: SideSpec, election_id: str | None, log_name: str) -> Snapshot:
    cut = spec.cut if spec.source != "log" else None
    state = replay(log, cut)
    chosen = select_election(state.elections, election_id)
    what = "the whole log" if cut is None else cut.describe()
    meta = {"log": log_name, "as_of": state.to_json(),
            "compared": "the log replayed through the same reducers and caucus math as the projection: differences "
                        "are events the runner or store lost, applied twice or corrupted, not bugs of the fold"}
    return snapshot_from_states(spec, state.elections[chosen], state.units.values(),
                                description=f"{log_name}: {what}, replayed through the projection's own fold", meta=meta)


def load_snapshot(spec: SideSpec, sources: Sources, *, election_id: str | None = None) -> Snapshot:
    """Load one resolved side. Raises ``DiffError`` for anything that stops it being loaded."""
    try:
        if spec.source in ("live", "set"):
            store = sources.open_store()
            try:
                return _store_snapshot(store, spec, election_id)
            finally:
                store.close()
        log = sources.open_log()
        try:
            return _log_snapshot(log, spec, election_id, sources.describe_log)
        finally:
            log.close()
    except (AsOfError, QueryError, StoreError) as exc:
        raise DiffError(f"side {spec.text!r}: {exc}") from exc


# -- comparing --------------------------------------------------------------------------------------


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

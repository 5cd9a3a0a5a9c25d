"""Read side: the tallies a person or a program asks for, from a projection set.

``load_view`` resolves which set serves (or a named one), which election, and which rule set, and
returns a ``TallyView``: the election context plus every unit tally. Stored tallies are used as
they are when the rule set is the election's own; with another rule set (``--rule-set``), the
tallies are recomputed from the stored unit states, which is cheap (one allocation per unit) and
needs no replay. County and state sums are always derived from the unit tallies at read time
(``projections.tally.aggregate``), so they can never disagree with the units.

``--as-of``: a view "as of" a time (or log positions) is the same ``TallyView`` built from unit and
election states folded from the events inside that cut, replayed from the log by
``projections.asof`` (``view_as_of``; ``load_view`` passes ``as_of`` and the log to it); everything
downstream (aggregation, rendering, JSON) is shared.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ledger.log.port import EventLog
from projections.asof import AsOfError, Cut, NoElectionDefined, select_election, tally_as_of
from projections.asof_store import history_tally
from projections.reducers import ElectionState, UnitState
from projections.set_builders import shown_state
from projections.stores.port import ProjectionStore, SetInfo, StoreReader
from projections.tally import (
    AreaTally,
    ElectionContext,
    UnitTally,
    aggregate,
    aggregate_counties,
    compute_unit_tally,
    election_context,
)

__all__ = [
    "QueryError",
    "NoElectionYet",
    "TallyView",
    "load_view",
    "view_as_of",
    "resolve_set",
    "choose_election",
    "tallies_from_states",
    "find_county",
    "AmbiguousUnit",
    "find_unit",
    "find_unit_in",
    "DEFAULT_SET",
]

DEFAULT_SET = "tally"


class QueryError(LookupError):
    """What was asked for is not in the store; the message says what is."""


class RuleSetError(QueryError):
    """The rule set asked for (``--rule-set``) is not one the ledger can read: no record the projection has
    yet to read can answer that, so no hint points at the log."""


class AmbiguousUnit(QueryError):
    """A name several units share was given for one (``find_unit_in``): not a unit the log lacks."""


class NoElectionYet(QueryError):
    """The projection holds no defined election, and none was asked for by id (``asof.NoElectionDefined``)."""


@dataclass
class TallyView:
    set: SetInfo
    context: ElectionContext
    units: dict[str, UnitTally]
    positions: dict[int, int] = field(default_factory=dict)
    as_of: datetime | None = None
    cut: Cut | None = None

    @property
    def undefined_units(self) -> list[UnitTally]:
        """Units with results whose id the definition does not list (left out of every sum).

        A unit known only from refused submissions (an unknown precinct id, say) has no result and is
        not listed: its refusals are in its trail and in the log."""
        return sorted(
            (t for t in self.units.values() if t.unit_id not in self.context.units and t.status != "not_reported"),
            key=lambda t: t.unit_id,
        )

    def state(self) -> AreaTally:
        return aggregate(self.context, self.units.values())

    def county(self, county_id: str) -> AreaTally:
        return aggregate(self.context, self.units.values(), county_id)

    def counties(self) -> dict[str, AreaTally]:
        return aggregate_counties(self.context, self.units.values())

    def unit(self, unit_id: str) -> UnitTally | None:
        """The unit's tally; for a defined unit the view holds nothing of, its tally as not reported ("has
        precinct 7 reported?" has an answer: not yet); None for a unit the election does not define."""
        t = self.units.get(unit_id)
        if unit_id in self.context.units:
            return t if t is not None else compute_unit_tally(UnitState(unit_id, self.context.election_id), self.context)
        # not defined: only a result makes it a unit to answer for (refusals naming it are its trail's)
        return t if t is not None and t.status != "not_reported" else None

    def units_in(self, county_id: str) -> list[UnitTally]:
        """Every unit the definition puts in the county, those that have not reported too (a county's
        list is how a reader finds who is still out); the sums read ``units`` and are the same."""
        ids = [u.unit_id for u in self.context.units.values() if u.county_id == county_id]
        return [t for t in map(self.unit, ids) if t is not None]

    def meta(self) -> dict[str, Any]:
        defn = self.context.state.definition
        return {
            "election_id": self.context.election_id,
            "election": defn.name if defn else None,
            "rule_set": self.context.rule_set_name,
            "projection_set": {"id": self.set.set_id, "name": self.set.name, "version": self.set.version, "state": shown_state(self.set)},
            "log_positions": {str(p): o for p, o in sorted(self.positions.items())},
            "certified": self.context.certified,
            "as_of": None if self.as_of is None else self.as_of.isoformat(),
            **({} if self.cut is None else {"as_of_cut": self.cut.to_json()}),
        }


def resolve_set(store: ProjectionStore, name: str = DEFAULT_SET, set_id: int | None = None) -> SetInfo:
    if set_id is not None:
        return store.get_set(set_id)
    info = store.serving(name)
    if info is None:
        raise QueryError(f"no projection {name!r} is serving in {store.describe()}; run `caucus project --until-caught-up` first")
    return info


def choose_election(elections: dict[str, ElectionState], wanted: str | None, *, unit: str | None = None) -> str:
    """The election asked for, else the only one defined, else the only one defining ``unit``."""
    try:
        return select_election(elections, wanted, unit=unit, where="in the projection")
    except NoElectionDefined as exc:
        raise NoElectionYet(str(exc)) from None
    except AsOfError as exc:
        hint = (" (if it was defined since the projection last read the log, `caucus project --until-caught-up` brings it in)"
                if wanted is not None and (wanted not in elections or elections[wanted].definition is None) else "")
        raise QueryError(f"{exc}{hint}") from None


def tallies_from_states(states: Iterable[UnitState], ctx: ElectionContext) -> dict[str, UnitTally]:
    """Unit tallies under ``ctx`` computed from reducer states (another rule set, or an as-of view)."""
    return {s.unit_id: compute_unit_tally(s, ctx) for s in states}


def _read(reader: StoreReader, info: SetInfo, election_id: str | None, rule_set: str | None, unit: str | None) -> TallyView:
    elections = {e: ElectionState.loads(row.state) for e, row in reader.elections().items()}
    if election_id is not None and election_id not in elections and named_undefined(reader, election_id):
        defined = ", ".join(repr(e) for e, s in sorted(elections.items()) if s.definition is not None) or "none"
        raise QueryError(f"election {election_id!r} is not defined in the projection: only refused submissions name it "
                         f"(`caucus audit` lists them; defined: {defined})")
    chosen = choose_election(elections, election_id, unit=unit)
    positions = {p: row.next_offset for p, row in reader.positions().items()}
    own = election_context(elections[chosen], chosen, rule_set=info.rule_set)
    if rule_set is None or rule_set == own.rule_set_name:
        rows = reader.tallies(election_id=chosen)
        units = {uid: UnitTally.loads(row.tally) for (_, uid), row in rows.items() if row.context == own.key}
        stale = [key for key, row in rows.items() if row.context != own.key]
        if stale:  # computed under another meaning of the rule set's name: computed again, not served
            units.update(tallies_from_states((UnitState.loads(row.state) for row in reader.unit_states(stale).values()), own))
        return TallyView(info, own, units, positions)
    ctx = election_context(elections[chosen], chosen, rule_set=rule_set)
    if ctx.rules_error:
        raise RuleSetError(ctx.rules_error)
    states = (UnitState.loads(row.state) for row in reader.unit_states(election_id=chosen).values())
    return TallyView(info, ctx, tallies_from_states(states, ctx), positions)


def view_as_of(
    store: ProjectionStore,
    info: SetInfo | None,
    as_of: datetime | Cut,
    *,
    election_id: str | None = None,
    rule_set: str | None = None,
    log: EventLog | None = None,
    unit: str | None = None,
) -> TallyView:
    """The view as it stood at ``as_of``: a time (events recorded at or before it, inclusive) or a
    ``Cut`` (log positions, or both). Read from the projection's unit history when the set holds it
    for the cut (``projections.asof_store``), else folded from the log by ``projections.asof`` with
    the same reducers and tally code the runner uses; the view's set name says which. ``info`` (the
    set that would otherwise answer, if any) lends its rule set and history; the view's set is a
    stand-in (id 0, state ``as-of``)."""
    if log is None:
        raise QueryError("--as-of replays the log, but no log was given")
    cut = as_of if isinstance(as_of, Cut) else Cut(at=as_of)
    rules = rule_set or (info.rule_set if info else None)
    try:
        at = history_tally(store, info, log, cut, election_id=election_id, rule_set=rules, unit=unit)
        how = "from the projection's history"
        if isinstance(at, str):
            how = f"replayed from the log: {at}"
            at = tally_as_of(log, cut, election_id=election_id, rule_set=rules, unit=unit)
    except AsOfError as exc:
        raise QueryError(str(exc)) from exc
    stand_in = SetInfo(
        set_id=0, name=f"{info.name if info else DEFAULT_SET} ({how})", version=0, state="as-of",
        source="log", rule_set=at.context.rule_set_name, params=json.dumps(cut.to_json(), sort_keys=True),
        created_at=datetime.now(UTC).isoformat(), promoted_at=None,
    )
    return TallyView(stand_in, at.context, at.units, dict(at.positions), as_of=cut.at, cut=cut)


def load_view(
    store: ProjectionStore,
    *,
    set_name: str = DEFAULT_SET,
    set_id: int | None = None,
    election_id: str | None = None,
    rule_set: str | None = None,
    as_of: datetime | Cut | None = None,
    log: EventLog | None = None,
    unit: str | None = None,
) -> TallyView:
    """``unit``: a unit the caller names; with no ``election_id`` and several elections, the only
    election that defines it is chosen."""
    if as_of is not None:
        info = store.get_set(set_id) if set_id is not None else store.serving(set_name)
        return view_as_of(store, info, as_of, election_id=election_id, rule_set=rule_set, log=log, unit=unit)
    info = resolve_set(store, set_name, set_id)
    with store.reader(info.set_id) as reader:
        return _read(reader, info, election_id, rule_set, unit)


def find_county(ctx: ElectionContext, text: str) -> str:
    """A county by id or by name (case and spacing ignored)."""
    if text in ctx.counties:
        return text
    if not text.strip():  # "--county ''" showed the statewide tally, as if no county had been asked for
        raise QueryError("the county given is empty: give a county name or id")
    want = " ".join(text.split()).casefold()
    hits = [cid for cid, c in ctx.counties.items() if " ".join(c.name.split()).casefold() == want or cid.casefold() == want]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        import difflib

        names = sorted(c.name for c in ctx.counties.values())
        by_fold = {" ".join(n.split()).casefold(): n for n in names}  # compared as the lookup compares them
        near = [by_fold[n] for n in difflib.get_close_matches(want, list(by_fold), n=3, cutoff=0.6)]
        shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
        raise QueryError(f"no county {text!r} in election {ctx.election_id!r}"
                         + (f" (did you mean {', '.join(repr(n) for n in near)}?)" if near else "")
                         + f"; its counties (by name or id): {shown or 'none'}")
    raise QueryError(f"{text!r} names several counties: {', '.join(hits)}")


def find_unit(view: TallyView, text: str, county_id: str | None = None, *, county_option: bool = False) -> str:
    """A unit by id, short name or name (exact, then case-insensitive), in ``county_id`` when given."""
    return text if text in view.units else find_unit_in(view.context, text, county_id, county_option=county_option)


def find_unit_in(ctx: ElectionContext, text: str, county_id: str | None = None, *, county_option: bool = False) -> str:
    """A unit the election defines, by id, short name or name (exact, then case-insensitive); a name
    several units share (names repeat across counties) is narrowed to ``county_id`` when one is given
    (``--county``), and refused naming each unit and its county otherwise (and the option, when the
    command has it: ``county_option``)."""
    if text in ctx.units:
        return text
    if not text.strip():
        raise QueryError("the unit given is empty: give a unit id or name")
    want = " ".join(text.split()).casefold()
    hits = [  # an id in another case is a match as a name is (it was not: "p1" found the unit *named* P1)
        u.unit_id
        for u in ctx.units.values()
        if want in {" ".join(u.name.split()).casefold(), (u.short_name or "").casefold(), u.unit_id.casefold()}
    ]
    shown = ", ".join(f"{h} ({ctx.units[h].name}, {_county_name(ctx, ctx.units[h].county_id)})" for h in hits[:10])
    more = f", ... ({len(hits)} in all)" if len(hits) > 10 else ""
    if county_id is not None and len(hits) > 1:
        inside = [h for h in hits if ctx.units[h].county_id == county_id]
        if not inside:
            raise QueryError(f"no unit {text!r} in {_county_name(ctx, county_id)}; the units of that name: {shown}{more}")
        hits = inside
    if len(hits) == 1:
        return hits[0]
    if not hits:
        near = _near_units(ctx, text)
        raise QueryError(f"no unit {text!r} in election {ctx.election_id!r}, by id, short name or name"
                         + (f"; did you mean {near}?" if near else ""))
    raise AmbiguousUnit(f"{text!r} names several units: {shown}{more}; give the unit id"
                        + (", or its county with --county" if county_option and county_id is None else ""))


def _county_name(ctx: ElectionContext, county_id: str) -> str:
    county = ctx.counties.get(county_id)
    return county.name if county is not None else county_id


def _near_units(ctx: ElectionContext, text: str) -> str:
    """Up to three ids or names close to ``text``: "ID (NAME)" for an id, "'NAME'" and its unit, or how
    many units share it, for a name."""
    import difflib

    ids: dict[str, str] = {u.unit_id.casefold(): u.unit_id for u in ctx.units.values()}
    names: dict[str, list[str]] = {}
    for u in ctx.units.values():
        names.setdefault(" ".join(u.name.split()).casefold(), []).append(u.unit_id)
    out = []
    for key in difflib.get_close_matches(" ".join(text.split()).casefold(), [*ids, *names], n=3, cutoff=0.75):
        if key in ids:
            out.append(f"{ids[key]} ({ctx.units[ids[key]].name})")
        else:
            units = names[key]
            name = ctx.units[units[0]].name
            out.append(f"{name!r} ({units[0]})" if len(units) == 1 else f"{name!r} ({len(units)} units)")
    return ", ".join(out)


def named_undefined(reader: StoreReader, election_id: str) -> bool:
    """Whether ``election_id`` is one of ``undefined_elections``, looked up by its key (a read of a
    random id must not read every unit state)."""
    row = reader.elections().get(election_id)
    if row is not None:
        return bool(election_id) and json.loads(row.state).get("definition") is None
    return bool(election_id) and bool(reader.unit_states(election_id=election_id))


def undefined_elections(reader: StoreReader) -> set[str]:
    """The elections the projection holds events of but no definition: a submission refused for naming
    an election id nobody defined (mistyped, or of another ledger) is counted by no tally, and would be
    in no audit either if the audit looked only at elections that exist."""
    elections = reader.elections()
    defined = {eid for eid, row in elections.items() if json.loads(row.state).get("definition") is not None}
    named = {eid for eid, _unit in reader.unit_states()} | set(elections)
    return named - defined - {""}

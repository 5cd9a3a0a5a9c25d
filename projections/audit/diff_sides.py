"""The two sides of a diff: how a side is written, what it leaves to the other, and loading it.

A side is written ``PART[/PART...]``:

=====================  ===========================================================================
``live``               the serving projection in the store (its stored tallies, as they are)
``set:NAME[@VERSION]`` a projection table set by name (the serving one, else the newest version),
                       ``set:NAME@3`` a version, ``set:#12`` a set id: e.g. a rebuild not yet promoted
``log``                the whole log, replayed in memory (no store involved)
``as-of:TIME``         the log as of a time (``recorded_at`` <= TIME, inclusive; see ``projections.asof``)
``position:P:N,...``   the log as of per-partition positions (exclusive ends; see ``projections.asof``)
``rules:NAME``         recompute the delegates under another rule set (idp-2020, idp-2016, or a variant: idp-2020[leftover=lots])
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
from typing import Any

from ledger.log.port import EventLog
from projections.asof import AsOfError, Cut, inside, parse_positions, parse_time, replay, select_election
from ledger.caucus_math import CaucusMathError, get_rule_set
from projections.queries import DEFAULT_SET, QueryError, choose_election, load_view
from projections.reducers import ElectionState, UnitState
from projections.set_builders import shown_state
from projections.stores.port import ProjectionStore, SetInfo, StoreError
from projections.tally import ElectionContext, UnitTally, compute_unit_tally, election_context

__all__ = [
    "DiffError",
    "SideSpec",
    "parse_side",
    "resolve_sides",
    "Snapshot",
    "Sources",
    "load_snapshot",
    "stored_set",
    "snapshot_from_states",
    "BASES",
    "BASES_OF_CDS",
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


def stored_set(store: ProjectionStore, spec: SideSpec) -> SetInfo:
    if spec.source == "live":
        info = store.serving(DEFAULT_SET)
        if info is None:
            raise DiffError(
                f"side {spec.text!r}: no projection {DEFAULT_SET!r} is serving in {store.describe()}; run `caucus project --until-caught-up` first"
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
    info = stored_set(store, spec)
    state = shown_state(info)
    meta = {"projection_set": {"id": info.set_id, "name": info.name, "version": info.version, "state": state}}
    where = f"projection {info.name} v{info.version} ({state}) in {store.describe()}"
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
    chosen = select_election(state.elections, election_id, where=inside(cut))
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

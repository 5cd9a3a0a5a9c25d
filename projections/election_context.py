"""An election's definition indexed for tallies, with its rule set resolved once.

Why apart from the tallies: every unit tally of an election shares one context, and its ``key`` says
when the tallies computed under it are stale (a new definition, a certification, another rule set),
which the runner and the as-of reads check without computing a tally.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ledger.caucus_math import TieResolution, get_rule_set
from ledger.events import County, UnitDefinition
from projections.reducers import ElectionState

__all__ = ["RuleSetLike", "ElectionContext", "context_key", "election_context"]


class RuleSetLike(Protocol):
    """What the tallies need from ``ledger.caucus_math``'s rule sets."""

    @property
    def name(self) -> str: ...

    @property
    def meaning(self) -> str: ...

    def allocate(self, *, delegates: int, attendance: int | None, first: Mapping[str, int],
                 final: Mapping[str, int], ties: tuple[TieResolution, ...] = ()) -> Any: ...

    def threshold(self, attendance: int, delegates: int) -> int: ...


@functools.lru_cache(maxsize=16)
def _rule_set(name: str) -> RuleSetLike:
    return get_rule_set(name)


@dataclass(frozen=True)
class ElectionContext:
    """An election's definition indexed for tallies, with its rule set resolved once.

    ``key`` changes whenever anything a unit tally depends on changes (a new definition, a
    certification, another rule set): tallies computed under another key are stale.
    """

    state: ElectionState
    rule_set_name: str | None
    rules: RuleSetLike | None
    rules_error: str | None
    candidates: tuple[str, ...]
    units: Mapping[str, UnitDefinition]
    counties: Mapping[str, County]
    key: str

    @property
    def election_id(self) -> str:
        return self.state.election_id

    @property
    def defined(self) -> bool:
        return self.state.definition is not None

    @property
    def certified(self) -> bool:
        return self.state.certified_by is not None

    def county_of(self, unit_id: str) -> str | None:
        unit = self.units.get(unit_id)
        return None if unit is None else unit.county_id


def context_key(state: ElectionState | None, rule_set: str | None = None) -> str:
    """What a unit tally depends on besides the unit: the definition, certification, rule set."""
    if state is None:
        return f"-|-|{rule_set or '-'}"
    name = rule_set or (state.definition.rule_set if state.definition is not None else None)
    return f"{state.defined_by or '-'}|{state.certified_by or '-'}|{_named_meaning(name)}"


@functools.lru_cache(maxsize=64)
def _named_meaning(name: str | None) -> str:
    """The rule set's name and what it means now (``RuleSet.meaning``): a name may come to mean
    another reading of an [OPEN] point, and a tally computed under the old one must not pass as current."""
    if name is None:
        return "-"
    try:
        return f"{name}@{_rule_set(name).meaning}"
    except (KeyError, ValueError, LookupError):
        return name


def election_context(
    state: ElectionState | None, election_id: str = "", *, rule_set: str | None = None,
    rules: RuleSetLike | None = None,
) -> ElectionContext:
    """Index ``state`` (None: the election is not defined yet) for tallies.

    ``rule_set`` overrides the election's own rule set (an auditor comparing 2016 and 2020
    rules); ``rules`` injects a rule-set object directly.
    """
    st = state if state is not None else ElectionState(election_id=election_id)
    defn = st.definition
    name = rule_set or (defn.rule_set if defn is not None else None)
    err: str | None = None
    if rules is None and name is not None:
        try:
            rules = _rule_set(name)
        except (KeyError, ValueError, LookupError) as exc:
            err = f"rule set {name!r} is not available: {exc}"
    units = {u.unit_id: u for u in defn.units} if defn else {}
    counties = {c.county_id: c for c in defn.counties} if defn else {}
    key = context_key(st, rule_set)
    return ElectionContext(st, name, rules, err, tuple(defn.candidates) if defn else (), units, counties, key)

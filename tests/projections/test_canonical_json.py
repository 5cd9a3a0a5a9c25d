"""The canonical spelling of states and tallies: orjson's text must be the ``json`` text stores already
hold, value for value, or every stored tally would read as changed after an upgrade (and be written,
and published, again).

Two halves: a property test over every JSON value without floats (the two spell floats differently),
and the real 2020 history's states and tallies, which must hold no float at all.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.reducers import ElectionState, UnitFold, apply_election, canonical_json
from projections.tally import compute_unit_tally, election_context
from tests.shared_data import IOWA2020


def _json_text(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_scalars = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.text()
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    | st.tuples(inner, inner),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_the_spelling_is_json_s_for_every_value_without_floats(value: Any) -> None:
    """Lone surrogates, control characters, keys beyond the BMP, ints beyond 64 bits (which orjson
    refuses and ``json`` spells) included."""
    assert canonical_json(value) == _json_text(value)


def test_what_json_refuses_is_still_refused() -> None:
    """A datetime or a dataclass left in a state is a bug that ``json`` names; orjson would spell it."""
    from datetime import UTC, datetime

    from ledger.events import County

    with pytest.raises(TypeError):
        canonical_json({"at": datetime(2020, 2, 3, tzinfo=UTC)})
    with pytest.raises(TypeError):
        canonical_json([County("c", "C", 1)])
    assert canonical_json({1: "a"}) == _json_text({1: "a"})  # a key that is not a string: json's "1"


def _floats(value: Any, where: str = "") -> list[str]:
    if isinstance(value, float):
        return [where]
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in _floats(v, f"{where}.{k}")]
    if isinstance(value, list | tuple):
        return [f for i, v in enumerate(value) for f in _floats(v, f"{where}[{i}]")]
    return []


@pytest.mark.slow
def test_the_2020_states_and_tallies_hold_no_float_and_spell_as_json_does() -> None:
    if not (IOWA2020 / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {IOWA2020}")
    from producers.importers.idp2020 import plan_import

    events = plan_import(IOWA2020).events
    elections: dict[str, ElectionState | None] = defaultdict(lambda: None)
    runs: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for ev in events:
        eid, uid = ev.envelope.election_id, ev.envelope.unit_id
        if not uid:
            elections[eid] = apply_election(elections[eid], ev)
        else:
            runs[eid, uid].append(ev)
    documents: list[tuple[str, Any]] = []
    for eid, state in elections.items():
        assert state is not None
        documents.append((f"election {eid}", state.to_json()))
        ctx = election_context(state, eid)
        for (e, uid), run in runs.items():
            if e == eid:
                unit = UnitFold(None).add(run).state()
                documents.append((f"unit state {uid}", unit.to_json()))
                documents.append((f"tally {uid}", compute_unit_tally(unit, ctx).to_json()))
    assert len(documents) > 3000
    for name, doc in documents:
        assert _floats(doc) == [], f"{name} holds floats at {_floats(doc)}"
        assert canonical_json(doc) == _json_text(doc), name

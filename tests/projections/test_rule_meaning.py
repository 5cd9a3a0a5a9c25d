"""A rule set's name may come to mean another reading of an [OPEN] point (idp-2020's §4.5 cut inside
equal groups was "all of them realign" and is now "a lot decides"). A store built under the old meaning
holds tallies no event will ever recompute: they must be recognised as stale and computed again, by
the reads at once and by the runner before its first batch, never served as current."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from types import ModuleType

import pytest

from ledger.events import County, ElectionDefined, Result, ResultReported, UnitDefinition
from ledger.log.sqlite import SqliteLog
from projections.batch_fold import tally_row
from projections.queries import load_view
from projections.reducers import ElectionState, UnitState
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import Changes, ProjectionStore, TallyRow
from projections.tally import election_context

Open = Callable[[], ProjectionStore]
CUT = {"A": 12, "B": 9, "C": 9}  # RULES E05: D 2, three viable groups, B and C equal at the cut
PLAIN = {"A": 20, "B": 10, "C": 0}


def _events(support: ModuleType) -> list:
    defn = ElectionDefined("E05", "idp-2020", ("A", "B", "C"), (County("c", "C", Fraction(1, 10)),),
                           (UnitDefinition("cut", "Cut", "c", 2), UnitDefinition("plain", "Plain", "c", 3)))  # fmt: skip
    return [
        support.define(defn),
        support.ev(ResultReported(Result(CUT, CUT, attendance=30), "chair"), unit_id="cut", event_id=support.eid("cut")),
        support.ev(ResultReported(Result(PLAIN, PLAIN, attendance=30), "chair"), unit_id="plain", event_id=support.eid("plain")),
    ]


def _run(store: ProjectionStore, set_id: int, log: SqliteLog) -> None:
    ProjectionRunner(store, set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=50, poll_timeout=0.01).run(until_caught_up=True)


def _as_stored_under_the_old_meaning(store: ProjectionStore, set_id: int) -> TallyRow:
    """Rewrite the cut unit's row as a store built when idp-2020 meant ``all`` held it: the tally of
    that reading, and a context key that named the rule set without its meaning."""
    with store.transaction(set_id) as tx:
        election = ElectionState.loads(tx.elections()["e1"].state)
        state = UnitState.loads(tx.unit_states(election_id="e1")[("e1", "cut")].state)
        old = tally_row(state, election_context(election, "e1", rule_set="idp-2020[realign_ties=all]"))
        row = TallyRow(old.unit_id, old.election_id, old.county_id, old.status,
                       f"{election.defined_by or '-'}|-|idp-2020", old.tally.replace("idp-2020[realign_ties=all]", "idp-2020"))
        tx.write(Changes(tallies=[row]))
    return row


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_a_tally_stored_under_an_old_meaning_is_computed_again(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog], store_kind: str
) -> None:
    log = embedded_log(_events(support))
    store = open_store()
    sid = store.ensure_serving("tally", source="test").set_id
    _run(store, sid, log)
    fresh = load_view(store, set_id=sid).units["cut"]
    assert dict(fresh.cds) == {"A": 1, "B": 0, "C": 0} and len(fresh.pending) == 1, "E05: a lot decides B or C"
    plain_before = support.snapshot(store, sid)["tallies"][("e1", "plain")]

    old = _as_stored_under_the_old_meaning(store, sid)
    assert '"A": 2' in old.tally or '"A":2' in old.tally, "the old reading: both equal groups realign, A takes 2"

    # A read serves the current meaning at once, though the row is stale.
    view = load_view(store, set_id=sid)
    assert view.units["cut"].dumps() == fresh.dumps()

    # The runner recomputes it before its first batch, with no new event; the rest stays as it was.
    _run(store, sid, log)
    after = support.snapshot(store, sid)["tallies"]
    assert after[("e1", "cut")][1] != old.context and after[("e1", "cut")][2] == fresh.dumps()
    assert after[("e1", "plain")] == plain_before

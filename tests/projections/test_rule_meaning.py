"""A rule set's name may come to mean another reading of an [OPEN] point (idp-2020's §4.5 cut inside
equal groups was "all of them realign" and is now "a lot decides"). A store built under the old meaning
holds tallies no event will ever recompute: they must be recognised as stale and computed again, by
the reads at once and by the runner before its first batch, never served as current."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
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
from projections.stores.sqlite import SqliteStore
from projections.tally import election_context
from projections.tally_revision import TALLIES_REVISION
from producers.credentials import CredentialStore

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
    that reading, a context key that named the rule set without its meaning, and the set's mark of the
    rules' revision its tallies were checked against."""
    with store.transaction(set_id) as tx:
        election = ElectionState.loads(tx.elections()["e1"].state)
        state = UnitState.loads(tx.unit_states(election_id="e1")[("e1", "cut")].state)
        old = tally_row(state, election_context(election, "e1", rule_set="idp-2020[realign_ties=all]"))
        row = TallyRow(old.unit_id, old.election_id, old.county_id, old.status,
                       f"{election.defined_by or '-'}|-|idp-2020", old.tally.replace("idp-2020[realign_ties=all]", "idp-2020"))
        tx.write(Changes(tallies=[row]))
        tx.set_tally_mark("an earlier revision")  # the set was last checked by code that read idp-2020 so
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


def _cli(data: Path, *args: str, token: str = "", stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}
    env.update(CAUCUS_DATA_DIR=str(data), CAUCUS_TOKEN=token)
    return subprocess.run([sys.executable, "-c", "from ledger.cli import main; main()", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def _published_cds(data: Path) -> list[dict[str, int]]:
    done = _cli(data, "subscribe", "--from-beginning", "--until-idle", "1", "--json", "--unit", "cut")
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["cds"] for line in done.stdout.splitlines()]


def test_the_feed_publishes_no_tally_of_an_old_meaning(tmp_path: Path) -> None:
    """A store built under the old meaning, its feed started afresh: the runner computes the stale tally
    again before the feed publishes what the store holds (it once published A 2 of E05), and marks the
    set, so the next start does not look again."""
    data = tmp_path / "data"
    _, token = CredentialStore(data / "credentials.json").issue("official", name="Ann")
    election = {"election_id": "e1", "name": "E05", "rule_set": "idp-2020", "candidates": ["A", "B", "C"],
                "counties": [{"county_id": "c", "name": "C", "sde_ratio": "1/10"}],
                "units": [{"unit_id": "cut", "name": "Cut", "county_id": "c", "delegates": 2}]}
    for args, stdin in ((("define", "-"), json.dumps(election)),
                        (("report", "--unit", "cut", "--attendance", "30", "--first", "A=12,B=9,C=9", "--final", "A=12,B=9,C=9"), None),
                        (("project", "--until-caught-up"), None)):
        done = _cli(data, *args, token=token, stdin=stdin)
        assert done.returncode == 0, done.stderr
    assert _published_cds(data)[-1] == {"A": 1, "B": 0, "C": 0}

    store = SqliteStore(data / "store.sqlite3")
    try:
        set_id = store.serving("tally").set_id  # type: ignore[union-attr]
        old = _as_stored_under_the_old_meaning(store, set_id)
        with sqlite3.connect(data / "store.sqlite3") as conn:  # a store from before the mark
            conn.execute("DELETE FROM proj_meta WHERE name LIKE 'tally_rules:%'")
    finally:
        store.close()
    (data / "results.sqlite3").unlink()  # a feed started afresh on the old store

    done = _cli(data, "project", "--until-caught-up")
    assert done.returncode == 0, done.stderr
    assert "computed again" in done.stderr
    assert {"A": 2, "B": 0, "C": 0} not in _published_cds(data) and _published_cds(data)[-1] == {"A": 1, "B": 0, "C": 0}
    store = SqliteStore(data / "store.sqlite3")
    try:
        with store.reader(set_id) as reader:
            assert reader.tally_mark() == TALLIES_REVISION
            row = reader.tallies()[("e1", "cut")]
        assert row.context != old.context
    finally:
        store.close()
    again = _cli(data, "project", "--until-caught-up")
    assert again.returncode == 0 and "computed again" not in again.stderr, again.stderr


def test_a_feed_record_and_a_cached_answer_name_the_rules_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same tally at the same version under another meaning of the rules is another record, and another
    answer to a client holding the old one (its ETag)."""
    from projections import feed_events
    from projections.read_api import reader

    stamp = feed_events.FeedStamp.of("tally", 1, None, {0: 5}).at(7)
    before = feed_events.feed_event_id(stamp, "e1", "unit:cut"), reader._etag("/state", "e1", (0, 5))
    monkeypatch.setattr(feed_events, "TALLIES_REVISION", "another")
    monkeypatch.setattr(reader, "TALLIES_REVISION", "another")
    after = feed_events.feed_event_id(stamp, "e1", "unit:cut"), reader._etag("/state", "e1", (0, 5))
    assert before[0] != after[0] and before[1] != after[1]


@pytest.mark.parametrize("store_kind", ["sqlite"])
def test_a_tally_of_older_tally_code_is_computed_again_once(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog], store_kind: str
) -> None:
    """A tally an older ``compute_unit_tally`` wrote under the same context (it lacked a field the code
    now fills) is computed again when the set's mark names another revision, and only then."""
    log = embedded_log(_events(support))
    store = open_store()
    sid = store.ensure_serving("tally", source="test").set_id
    _run(store, sid, log)
    current = support.snapshot(store, sid)["tallies"][("e1", "plain")]
    with store.transaction(sid) as tx:
        row = tx.tallies()[("e1", "plain")]
        tx.write(Changes(tallies=[TallyRow(row.unit_id, row.election_id, row.county_id, row.status, row.context, "{}")]))
        tx.set_tally_mark("tallies v1;" + TALLIES_REVISION.partition(";")[2])
    runner = ProjectionRunner(store, sid, EmbeddedSource(SqliteLog(log.path)), batch_size=50, poll_timeout=0.01)
    assert runner.refresh_stale() == 1 and runner.refresh_stale() == 0
    assert support.snapshot(store, sid)["tallies"][("e1", "plain")] == current

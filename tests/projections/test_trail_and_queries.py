"""``caucus trail`` and ``caucus tally``: a unit's paper trail from the log, and readable tallies."""

from __future__ import annotations

import json
from datetime import timedelta
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import ledger.cli
from ledger.codec import default_codec
from ledger.events import (
    Channel,
    CorrectionStage,
    County,
    ElectionDefined,
    Problem,
    Result,
    ResultCorrected,
    ResultReported,
    SubmissionRejected,
    TieBroken,
    TieMethod,
    UnitDefinition,
    UnitOpened,
)
from ledger.journal import Journal
from ledger.log.port import PendingRecord
from ledger.log.sqlite import SqliteLog
from projections.cli import register
from projections.queries import QueryError, load_view
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore
from projections.stores.sqlite import SqliteStore
from projections.trail import unit_trail

ALIGN = {"Warren": 100, "Sanders": 50, "Biden": 50}


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(ledger.cli._global)
    register(app)
    return app


def _history(support: ModuleType, u2_name: str = "Mason City 2") -> list[Any]:
    t = support.T0
    defn = ElectionDefined(
        "Trail caucus", "idp-2020", ("Biden", "Sanders", "Warren"),
        (County("c", "Cerro Gordo", Fraction(1, 10)),),
        (UnitDefinition("u1", "Mason City 1", "c", 6, short_name="MC1"), UnitDefinition("u2", u2_name, "c", 4)),
    )
    report = support.ev(ResultReported(Result(ALIGN, ALIGN), "chair"), unit_id="u1", event_id="report", at=t + timedelta(hours=2))
    return [
        support.define(defn),
        support.ev(UnitOpened(200), unit_id="u1", event_id="open", at=t),
        report,
        support.ev(SubmissionRejected("report", '{"final": "x"}', (Problem("final.Warren", "not_a_number", "must be a whole number"),), "phone-bank"),
                   unit_id="u1", event_id="rejected", at=t + timedelta(hours=2, minutes=5), channel=Channel.PHONE),
        support.ev(TieBroken(("Sanders", "Biden"), 1, ("Sanders",), TieMethod.COIN, caller="Biden", witnesses=("sec",)),
                   unit_id="u1", event_id="toss", at=t + timedelta(hours=2, minutes=10)),
        support.ev(ResultCorrected(Result({**ALIGN, "Warren": 99}, {**ALIGN, "Warren": 99}), supersedes="report",
                                   reason="recount of preference cards", authority="IDP", stage=CorrectionStage.RECOUNT),
                   unit_id="u1", event_id="recount", at=t + timedelta(days=20), actor="idp", channel=Channel.PAPER),
        support.ev(ResultReported(Result({"Biden": 10}, {"Biden": 10}), "chair"), unit_id="u2", event_id="u2", at=t + timedelta(hours=3)),
    ]


@pytest.fixture
def projected(support: ModuleType, tmp_path: Path) -> tuple[Path, SqliteLog, ProjectionStore, int]:
    data = tmp_path / "data"
    log = SqliteLog(data / "log.sqlite3", partitions=4)
    events = _history(support)
    Journal(log).append_batch(events)
    log.append(PendingRecord("u1", "retry-of-report", default_codec().encode(events[2])))  # a retry stored twice
    store = SqliteStore(data / "store.sqlite3")
    from ledger.config import Settings
    from projections.wiring import log_identity

    sid = store.ensure_serving("tally", source=log_identity(Settings(data_dir=data))).set_id
    ProjectionRunner(store, sid, EmbeddedSource(SqliteLog(log.path)), batch_size=3).run(until_caught_up=True)
    return data, log, store, sid


def test_trail_shows_every_event_what_it_changed_and_the_tally_after(projected: tuple[Path, SqliteLog, ProjectionStore, int]) -> None:
    _, log, store, sid = projected
    with store.reader(sid) as r:
        trail = unit_trail(log, r, "e1", "u1")
    assert [e.event.event_id for e in trail.entries] == ["open", "report", "rejected", "toss", "recount"]
    assert all(e.projected for e in trail.entries)
    positions = [e.position for e in trail.entries]
    assert positions == sorted(positions) and len({p.partition for p in positions}) == 1
    opened, report, rejected, toss, recount = trail.entries
    assert "attendance at opening: none -> 200" in opened.changes
    assert "tie pending: 1 seat(s) among Biden, Sanders" in report.changes and not report.tally.settled
    assert "rejected submissions: 0 -> 1" in rejected.changes
    assert rejected.to_json()["details"]["errors"][0]["field"] == "final.Warren"
    assert "tie settled: 1 seat(s) among Biden, Sanders" in toss.changes
    assert (toss.tally.cds["Sanders"], toss.tally.cds["Biden"]) == (2, 1) and toss.tally.ties_applied == ("toss",)
    assert toss.to_json()["details"]["witnesses"] == ["sec"]
    assert "status: reported -> corrected (recount)" in recount.changes
    assert recount.to_json()["details"]["reason"] == "recount of preference cards"
    assert "first Warren: 100 -> 99" in recount.changes
    with store.reader(sid) as r:
        stored = json.loads(r.tallies(keys=[("e1", "u1")])["e1", "u1"].tally)
    assert recount.tally.to_json() == stored, "the last step of the trail is the projected tally"


def test_trail_includes_events_not_projected_yet(projected: tuple[Path, SqliteLog, ProjectionStore, int], support: ModuleType) -> None:
    _, log, store, sid = projected
    late = support.ev(UnitOpened(201), unit_id="u1", event_id="late", at=support.T0 + timedelta(days=30))
    Journal(log).append(late)
    with store.reader(sid) as r:
        trail = unit_trail(log, r, "e1", "u1")
    assert [(e.event.event_id, e.projected) for e in trail.entries][-2:] == [("recount", True), ("late", False)]


def test_trail_command_human_and_json(projected: tuple[Path, SqliteLog, ProjectionStore, int]) -> None:
    data, log, store, sid = projected
    runner = CliRunner()
    out = runner.invoke(_app(), ["--data-dir", str(data), "trail", "u1", "--json"], env={"CAUCUS_DATABASE": ""})
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert [e["type"] for e in doc["events"]] == ["UnitOpened", "ResultReported", "SubmissionRejected", "TieBroken", "ResultCorrected"]
    assert doc["events"][3]["tally"]["cds"] == {"Biden": 1, "Sanders": 2, "Warren": 3}
    human = runner.invoke(_app(), ["--data-dir", str(data), "trail", "Mason City 1"], env={"CAUCUS_DATABASE": ""})
    assert human.exit_code == 0, human.output
    assert "TieBroken" in human.stdout and "tie settled" in human.stdout and "by idp via paper" in human.stdout
    assert "event id: report" in human.stdout, human.stdout  # what `correct --supersedes` and `prove` take
    missing = runner.invoke(_app(), ["--data-dir", str(data), "trail", "nope"], env={"CAUCUS_DATABASE": ""})
    assert missing.exit_code == 2 and "no events for unit 'nope'" in missing.stderr and "defines no such unit" in missing.stderr  # a unit that is not there: a bad argument


def test_tally_command_state_county_unit_and_rule_set(projected: tuple[Path, SqliteLog, ProjectionStore, int]) -> None:
    data, *_ = projected
    runner = CliRunner()

    def run(*args: str) -> Any:
        res = runner.invoke(_app(), ["--data-dir", str(data), "tally", *args], env={"CAUCUS_DATABASE": ""})
        assert res.exit_code == 0, res.output
        return res.stdout

    state = json.loads(run("--json"))["state"]
    assert state["units_reporting"] == 2 and state["units_defined"] == 2
    assert state["cds"] == {"Biden": 1 + 4, "Sanders": 2, "Warren": 3}
    assert state["sde_display_sum"]["Biden"] == "0.5000"  # 1 x 0.1 + 4 x 0.1
    human = run()
    assert "units reporting: 2 of 2 (100.0%)" in human and "Warren" in human and "0.3000" in human
    county = json.loads(run("--county", "cerro gordo", "--json"))
    assert [u["unit_id"] for u in county["units"]] == ["u1", "u2"]
    assert "Mason City 2" in run("--county", "c")
    unit = json.loads(run("--unit", "MC1", "--json"))["unit"]
    assert unit["status"] == "corrected" and unit["stage"] == "recount" and unit["rejected"] == 1
    assert "threshold 30" in run("--unit", "u1")
    other = json.loads(run("--rule-set", "idp-2016", "--json"))
    assert other["rule_set"] == "idp-2016"
    # Under another rule set the table showed the official CDs alone, the same as without it: what the
    # rule set computes is now beside them, with what the two columns are.
    assert "CDs computed" not in human
    shown = run("--rule-set", "idp-2016")
    assert "CDs computed" in shown and "CDs computed: what idp-2016 gives from the alignments" in shown, shown
    computed = other["state"]["cds_computed"]
    (total,) = [line for line in shown.splitlines() if line.startswith("│ total")]
    assert [cell.strip() for cell in total.split("│")[1:-1]][4] == f"{sum(computed.values()):,}", total
    bad = runner.invoke(_app(), ["--data-dir", str(data), "tally", "--county", "Nowhere"], env={"CAUCUS_DATABASE": ""})
    assert bad.exit_code == 2 and "no county 'Nowhere'" in bad.stderr
    assert "its counties (by name or id): Cerro Gordo" in bad.stderr, bad.stderr  # what a user may give instead


def test_queries_explain_what_is_missing(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite3")
    with pytest.raises(QueryError, match="run `caucus project --until-caught-up` first"):
        load_view(store)
    store.ensure_serving("tally", source="x")
    with pytest.raises(QueryError, match="no election is defined"):
        load_view(store)
    store.close()


def test_projections_command_lists_sets(projected: tuple[Path, SqliteLog, ProjectionStore, int]) -> None:
    data, *_ = projected
    res = CliRunner().invoke(_app(), ["--data-dir", str(data), "projections", "--json"], env={"CAUCUS_DATABASE": ""})
    assert res.exit_code == 0, res.output
    (only,) = json.loads(res.stdout)
    assert (only["name"], only["state"], only["events"]) == ("tally", "serving", 7)




def _shared_names() -> Any:
    from projections.election_context import election_context
    from projections.reducers import ElectionState

    defn = ElectionDefined(
        "Names", "idp-2020", ("Biden",),
        (County("c", "Calhoun", Fraction(1, 10)), County("d", "Dallas", Fraction(1, 10)), County("a", "Adams", Fraction(1, 10))),
        (UnitDefinition("948238", "Union", "c", 4), UnitDefinition("1593476", "UNION", "d", 4),
         UnitDefinition("946901", "Northeast", "d", 2)),
    )  # fmt: skip
    return election_context(ElectionState("e", definition=defn), "e")


def test_a_name_several_units_share_names_each_and_a_county_narrows_it() -> None:
    """2020 Iowa has six precincts called Union: the refusal listed bare ids, and --county did not narrow."""
    from projections.queries import AmbiguousUnit, find_unit_in

    ctx = _shared_names()
    with pytest.raises(AmbiguousUnit) as said:
        find_unit_in(ctx, "union", county_option=True)
    assert str(said.value) == ("'union' names several units: 948238 (Union, Calhoun), 1593476 (UNION, Dallas); give the "
                               "unit id, or its county with --county")
    assert find_unit_in(ctx, "Union", "d") == "1593476"
    with pytest.raises(QueryError, match=r"no unit 'Union' in Adams; the units of that name: 948238 \(Union, Calhoun\)"):
        find_unit_in(ctx, "Union", "a")
    with pytest.raises(QueryError, match=r"did you mean 'Union' \(2 units\)\?"):
        find_unit_in(ctx, "Uniom")
    with pytest.raises(QueryError, match=r"did you mean 946901 \(Northeast\)"):
        find_unit_in(ctx, "946910")
    assert find_unit_in(ctx, "northeast") == "946901"


def test_a_trail_by_a_name_several_units_share_says_so(support: ModuleType, tmp_path: Path) -> None:
    """`trail NAME` for a name two units share said "the election defines no such unit" (exit 2), while
    `tally --unit NAME` said the name was shared: the trail took any lookup error for an unknown unit."""
    data = tmp_path / "data"
    Journal(SqliteLog(data / "log.sqlite3", partitions=4)).append_batch(_history(support, u2_name="Mason City 1"))
    store = SqliteStore(data / "store.sqlite3")
    from ledger.config import Settings
    from projections.wiring import log_identity

    sid = store.ensure_serving("tally", source=log_identity(Settings(data_dir=data))).set_id
    ProjectionRunner(store, sid, EmbeddedSource(SqliteLog(data / "log.sqlite3")), batch_size=3).run(until_caught_up=True)
    out = CliRunner().invoke(_app(), ["--data-dir", str(data), "trail", "mason city 1"], env={"CAUCUS_DATABASE": ""})
    assert out.exit_code == 2 and "'mason city 1' names several units: u1 (Mason City 1, Cerro Gordo), u2 (Mason City 1, " \
        "Cerro Gordo); give the unit id" in out.stderr, out.stderr


def test_an_id_in_another_case_is_found_as_a_name_is_and_an_empty_one_is_refused() -> None:
    """"p1" found the unit *named* P1, not the unit whose id is P1; "--county ''" showed the statewide tally."""
    from projections.election_context import election_context
    from projections.queries import AmbiguousUnit, find_county, find_unit_in
    from projections.reducers import ElectionState

    defn = ElectionDefined("Ids", "idp-2020", ("Biden",), (County("lee", "Lee", Fraction(1, 10)), County("polk", "Polk", Fraction(1, 5))),
                           (UnitDefinition("P1", "North", "lee", 4), UnitDefinition("P2", "P1", "lee", 4),
                            UnitDefinition("Q7", "South", "lee", 4)))  # fmt: skip
    ctx = election_context(ElectionState("e", definition=defn), "e")
    with pytest.raises(AmbiguousUnit, match=r"'p1' names several units: P1 \(North, Lee\), P2 \(P1, Lee\)"):
        find_unit_in(ctx, "p1")
    assert find_unit_in(ctx, "q7") == "Q7" and find_unit_in(ctx, "P1") == "P1"
    for blank in ("", "  "):
        with pytest.raises(QueryError, match="the unit given is empty"):
            find_unit_in(ctx, blank)
        with pytest.raises(QueryError, match="the county given is empty"):
            find_county(ctx, blank)
    with pytest.raises(QueryError, match=r"no county 'Plok' in election 'e' \(did you mean 'Polk'\?\); its counties"):
        find_county(ctx, "Plok")


def test_an_empty_county_or_unit_is_refused_not_read_as_none(projected: tuple[Path, SqliteLog, ProjectionStore, int]) -> None:
    data = projected[0]
    for option in ("--county", "--unit"):
        out = CliRunner().invoke(_app(), ["--data-dir", str(data), "tally", option, ""], env={"CAUCUS_DATABASE": ""})
        assert out.exit_code == 2 and "given is empty" in out.stderr, (option, out.output)

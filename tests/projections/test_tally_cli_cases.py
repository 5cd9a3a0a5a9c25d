"""``caucus tally`` end to end over an embedded log: define, report, toss and certify through the
command line, project, and read the unit's tally as an operator would."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

Run = Callable[..., tuple[int, Any]]

ELECTION = {
    "election_id": "e", "name": "E", "rule_set": "idp-2020", "candidates": ["A", "B", "C", "D"],
    "counties": [{"county_id": "lee", "name": "Lee", "sde_ratio": "21/150"}],
    "satellite_groups": [{"group_id": "cd2", "name": "CD2 Satellite", "sde_pool": "11", "attendance_base": 943}],
    "units": [{"unit_id": "P2", "name": "P2", "county_id": "lee", "delegates": 6},
              {"unit_id": "P4", "name": "P4", "county_id": "lee", "delegates": 3},
              {"unit_id": "P5", "name": "P5", "county_id": "lee", "delegates": 4},
              {"unit_id": "SAT1", "name": "SAT1", "county_id": "lee", "satellite_group": "cd2"}],
}  # fmt: skip


@pytest.fixture
def caucus(tmp_path: Path) -> Run:
    """``caucus(*args) -> (exit code, parsed JSON or text)``, in this process, over a data dir in tmp."""
    from ledger.cli import main

    def run(*args: str, rule_set: str = "idp-2020") -> tuple[int, Any]:
        out, err = io.StringIO(), io.StringIO()
        saved = dict(os.environ)
        os.environ.pop("CAUCUS_KAFKA", None)
        os.environ["CAUCUS_DATA_DIR"] = str(tmp_path / "data")
        code = 0
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    main(list(args))
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        try:
            return code, json.loads(out.getvalue())
        except ValueError:
            return code, out.getvalue() + err.getvalue()

    return run


def _define(caucus: Run, tmp_path: Path, rule_set: str = "idp-2020", **changed: Any) -> str:
    code, issued = caucus("credentials", "issue", "--official", "alice", "--json")
    assert code == 0, issued
    token: str = issued["token"]
    path = tmp_path / "el.json"
    path.write_text(json.dumps({**ELECTION, "rule_set": rule_set, "idempotency_key": f"def-{rule_set}", **changed}))
    code, receipt = caucus("define", str(path), "--token", token, "--json")
    assert code == 0 and receipt["status"] == "accepted", receipt
    return token


def _unit(caucus: Run, unit_id: str) -> dict[str, Any]:
    code, done = caucus("project", "--until-caught-up")
    assert code == 0, done
    code, shown = caucus("tally", "--unit", unit_id, "--json")
    assert code == 0, shown
    unit: dict[str, Any] = shown["unit"]
    return unit


def test_all_groups_tied_at_the_cut_wait_for_a_lot(caucus: Run, tmp_path: Path) -> None:
    """§4.5: four groups of 25 for three delegates. Realigning all of them (APP) would elect nobody:
    the tally shows a pending lot among the four for three seats, not a settled 0 of 3."""
    token = _define(caucus, tmp_path)
    code, receipt = caucus("report", "--unit", "P4", "--attendance", "100", "--first", "A=25,B=25,C=25,D=25",
                           "--final", "A=25,B=25,C=25,D=25", "--token", token, "--json")  # fmt: skip
    assert code == 0 and receipt["status"] == "accepted", receipt
    unit = _unit(caucus, "P4")
    assert not unit["settled"] and not any(unit["cds"].values()) and unit["must_realign"] == []
    assert [(p["contenders"], p["seats"]) for p in unit["pending"]] == [(["A", "B", "C", "D"], 3)]
    code, tossed = caucus("toss", "P4", "--contender", "A,B,C,D", "--seats", "3", "--winner", "A,B,D", "--method", "lots", "--caller", "A",
                          "--token", token, "--json")  # fmt: skip
    assert code == 0, tossed
    unit = _unit(caucus, "P4")
    assert unit["settled"] and unit["must_realign"] == ["C"] and unit["problems"] == []
    assert {k: v for k, v in unit["cds"].items() if v} == {"A": 1, "B": 1, "D": 1}


def _certify(caucus: Run, tmp_path: Path, token: str) -> None:
    """The party certifies the election: written straight to the log by an official, as the canvass does."""
    from ledger.events import Channel, ResultsCertified, new_event
    from ledger.render import event_to_json

    event = new_event(ResultsCertified("State Central Committee"), election_id="e", actor="official:alice", channel=Channel.APP)
    source = tmp_path / "certified.jsonl"
    source.write_text(json.dumps(event_to_json(event)) + "\n")
    code, appended = caucus("log", "append", str(source), "--token", token, "--json")
    assert code == 0, appended


def test_only_results_recorded_before_the_certification_are_certified(caucus: Run, tmp_path: Path) -> None:
    """A unit first reported after the election's certification, or corrected after it, is not certified:
    the certification covers the results that stood when it was recorded."""
    token = _define(caucus, tmp_path)
    align = ("--first", "A=60,B=40", "--final", "A=60,B=40")
    code, before = caucus("report", "--unit", "P2", "--attendance", "100", *align, "--token", token, "--json")
    assert code == 0 and before["status"] == "accepted", before
    code, before5 = caucus("report", "--unit", "P5", "--attendance", "100", *align, "--token", token, "--json")
    assert code == 0 and before5["status"] == "accepted", before5
    _certify(caucus, tmp_path, token)
    assert (_unit(caucus, "P2")["status"], _unit(caucus, "P2")["after_certification"]) == ("certified", False)
    code, late = caucus("report", "--unit", "P4", "--attendance", "100", *align, "--token", token, "--json")
    assert code == 0 and late["status"] == "accepted", late
    code, fixed = caucus("correct", "--unit", "P5", "--attendance", "100", "--first", "A=50,B=50", "--final", "A=50,B=50",
                         "--supersedes", before5["event_id"], "--reason", "recount", "--authority", "county chair",
                         "--stage", "recanvass", "--token", token, "--json")  # fmt: skip
    assert code == 0 and fixed["status"] == "accepted", fixed
    p4, p5 = _unit(caucus, "P4"), _unit(caucus, "P5")
    assert (p4["status"], p4["after_certification"]) == ("reported", True)
    assert (p5["status"], p5["after_certification"]) == ("corrected", True)
    assert _unit(caucus, "P2")["status"] == "certified"
    code, table = caucus("tally", "--unit", "P4")
    assert code == 0 and "after certification" in table
    # and the audit names both (it said "no findings" over numbers the certification never covered)
    code, audit = caucus("audit", "--json")
    late_units = {(f["unit_id"], f["severity"], f["reported"]) for f in audit["findings"] if f["code"] == "CHANGED_AFTER_CERTIFICATION"}
    assert late_units == {("P4", "warn", late["event_id"]), ("P5", "warn", fixed["event_id"])}
    assert "State Central Committee" in next(f["message"] for f in audit["findings"] if f["unit_id"] == "P4")


def test_idp2016_shows_the_threshold_the_final_alignment_was_judged_by(caucus: Run, tmp_path: Path) -> None:
    """idp-2016 recomputes the threshold from the final count (RULES §4.6): D=4, T=100, final A14 B0 C76
    -> 14 of 90 is viable (threshold 14, not the first 15), A 1 CD and C 3. The tally says so."""
    token = _define(caucus, tmp_path, "idp-2016")
    code, receipt = caucus("report", "--unit", "P5", "--attendance", "100", "--first", "A=14,B=10,C=76",
                           "--final", "A=14,B=0,C=76", "--token", token, "--json")  # fmt: skip
    assert code == 0 and receipt["status"] == "accepted", receipt
    unit = _unit(caucus, "P5")
    assert {k: v for k, v in unit["cds"].items() if v} == {"A": 1, "C": 3}
    assert (unit["threshold"], unit["final_threshold"]) == (15, 14)
    code, table = caucus("tally", "--unit", "P5")
    assert code == 0 and "threshold 15 (first alignment), 14 (final alignment)" in " ".join(table.split())


def test_a_worksheet_against_the_toss_is_a_problem_and_an_audit_error(caucus: Run, tmp_path: Path) -> None:
    """RULES §6, §12, E10: A100 B50 C50 for six; the toss gives C the contested seat but the worksheet
    says B 2, C 1. The reported figure stays official; the tally and the audit say it contradicts the toss."""
    token = _define(caucus, tmp_path)
    code, receipt = caucus("report", "--unit", "P2", "--attendance", "200", "--first", "A=100,B=50,C=50",
                           "--final", "A=100,B=50,C=50", "--delegates", "A=3,B=2,C=1", "--token", token, "--json")  # fmt: skip
    assert code == 0 and receipt["status"] == "accepted", receipt
    code, tossed = caucus("toss", "P2", "--contender", "B,C", "--winner", "C", "--caller", "B", "--token", token, "--json")
    assert code == 0, tossed
    unit = _unit(caucus, "P2")
    assert unit["cds_source"] == "reported" and {k: v for k, v in unit["cds"].items() if v} == {"A": 3, "B": 2, "C": 1}
    assert unit["tosses_contradicted"] == [tossed["event_id"]]
    assert any("the toss gives B 1, C 2" in p for p in unit["problems"]), unit["problems"]
    code, audit = caucus("audit", "--json")
    assert code == 1, audit
    found = [f for f in audit["findings"] if f["code"] == "TOSS_CONTRADICTED"]
    assert [(f["unit_id"], f["severity"], f["expected"], f["reported"]) for f in found] == [
        ("P2", "error", {"B": 1, "C": 2}, {"B": 2, "C": 1})
    ]


def test_a_defined_unit_that_has_not_reported_answers_not_reported(caucus: Run, tmp_path: Path) -> None:
    """"Has P4 reported?" has an answer, not yet, on the command line and over HTTP alike; a unit the
    definition does not list is still an error (exit 1, 404)."""
    polk = {"county_id": "polk", "name": "Polk", "sde_ratio": "1/10"}
    token = _define(caucus, tmp_path, counties=[*ELECTION["counties"], polk])  # type: ignore[list-item]
    code, sent = caucus("report", "--unit", "P2", "--attendance", "100", "--first", "A=60,B=40", "--final", "A=60,B=40",
                        "--token", token, "--json")
    assert code == 0 and sent["status"] == "accepted", sent
    p4 = _unit(caucus, "P4")
    assert (p4["status"], p4["reporting"], p4["county_id"], p4["delegates"]) == ("not_reported", False, "lee", 3)
    assert set(p4["cds"].values()) == {0} and p4["result_event_id"] is None
    code, table = caucus("tally", "--unit", "P4")
    assert code == 0 and "P4" in table, table
    code, missing = caucus("tally", "--unit", "P9", "--json")
    assert code != 0 and "P9" in str(missing)
    # a unit the definition does not list, named only by a refused report: not a unit that "has not reported"
    code, refused = caucus("report", "--unit", "ZZZ", "--election", "e", "--attendance", "10", "--first", "A=10",
                           "--final", "A=10", "--token", token, "--json")
    assert code == 1 and refused["status"] == "rejected", refused
    assert caucus("project", "--until-caught-up")[0] == 0
    code, ghost = caucus("tally", "--unit", "ZZZ", "--json")
    assert code == 1 and "not in the definition" in str(ghost), ghost
    # the county lists every unit it has, the ones still out too, and its sums are the reported ones'
    code, lee = caucus("tally", "--county", "lee", "--json")
    assert code == 0 and [u["unit_id"] for u in lee["units"]] == ["P2", "P4", "P5", "SAT1"], lee
    assert {u["unit_id"]: u["status"] for u in lee["units"]}["P5"] == "not_reported"
    assert lee["county"]["units_reporting"] == 1
    code, table = caucus("tally", "--county", "lee")
    assert code == 0 and all(f"│ {u} " in table for u in ("P2", "P4", "P5", "SAT1")), table
    code, table = caucus("tally", "--unit", "P4")
    assert code == 0 and "no result recorded yet" in table and "None" not in table, table
    code, contradiction = caucus("tally", "--unit", "P4", "--county", "Polk", "--json")
    assert code == 2 and "is in county 'lee', not 'polk'" in str(contradiction), contradiction

    from fastapi.testclient import TestClient

    from ledger.config import Settings
    from projections.read_api.cli import results_app

    with TestClient(results_app(Settings(data_dir=tmp_path / "data"))) as client:
        answer = client.get("/api/elections/e/units/P4")
        assert answer.status_code == 200 and answer.json()["unit"] == p4
        assert client.get("/api/elections/e/units/P9").status_code == 404
        assert client.get("/api/elections/e/units/ZZZ").status_code == 404
        assert client.get("/api/elections/e/counties/lee").json()["units"] == lee["units"]
        page = client.get("/elections/e/units/P4")
        assert page.status_code == 200 and 'data-field="status">not_reported<' in page.text


def test_bracketed_words_reach_the_reader(caucus: Run, tmp_path: Path) -> None:
    """Human output is data, not markup: a rule set variant, a unit's ``[tie pending]`` and a trail's
    ``[not projected yet]`` are printed as they are (rich took ``[...]`` for a style and dropped it)."""
    token = _define(caucus, tmp_path)
    code, receipt = caucus("report", "--unit", "P4", "--attendance", "100", "--first", "A=25,B=25,C=25,D=25",
                           "--final", "A=25,B=25,C=25,D=25", "--token", token, "--json")  # fmt: skip
    assert code == 0 and receipt["status"] == "accepted", receipt
    assert _unit(caucus, "P4")["pending"]
    code, table = caucus("tally", "--county", "lee")
    assert code == 0 and "[tie pending]" in table, table
    code, header = caucus("tally", "--rule-set", "idp-2020[leftover=lots]")
    assert code == 0 and "rule set idp-2020[leftover=lots]" in header, header
    # --json has the human table's total row too
    code, shown = caucus("tally", "--json")
    state = shown["state"]
    assert code == 0 and state["total"]["first"] == sum(state["first"].values()) == 100, state
    assert state["total"]["cds"] == sum(state["cds"].values())
    assert state["total"]["sde_display_sum"] == str(sum((Decimal(v) for v in state["sde_display_sum"].values()), Decimal(0)))
    code, receipt = caucus("report", "--unit", "P2", "--attendance", "100", "--first", "A=60,B=40", "--final", "A=60,B=40",
                           "--token", token, "--json")  # fmt: skip
    assert code == 0, receipt
    code, trail = caucus("trail", "P2")
    assert code == 0 and "[not projected yet]" in trail, trail


def test_a_tally_behind_the_log_says_so_and_one_of_another_log_is_refused(caucus: Run, tmp_path: Path) -> None:
    """The tally is the store's: a result accepted but not yet projected is not in it, and the reader is
    told (the text; JSON stays the document). A store built from another log is refused, exit 3, as
    ``project`` and ``audit`` refuse it; with no log to read (a store moved on its own) it is shown."""
    token = _define(caucus, tmp_path)
    assert caucus("project", "--until-caught-up")[0] == 0
    code, text = caucus("tally")
    assert code == 0 and "has not read" not in text and "note:" not in text
    code, receipt = caucus("report", "--unit", "P4", "--attendance", "100", "--first", "A=60,B=40", "--final", "A=60,B=40",
                           "--token", token, "--json")  # fmt: skip
    assert code == 0 and receipt["status"] == "accepted", receipt
    code, text = caucus("tally")
    assert code == 0 and "note: the log holds 1 record(s) the projection has not read yet" in text
    code, doc = caucus("tally", "--json")
    assert code == 0 and doc["state"]["units_reporting"] == 0
    data = tmp_path / "data"
    moved = tmp_path / "moved-log.sqlite3"
    (data / "log.sqlite3").rename(moved)
    for suffix in ("-wal", "-shm"):
        (data / f"log.sqlite3{suffix}").unlink(missing_ok=True)
    code, text = caucus("tally")
    assert code == 0 and "is not there, but this projection was built from log" in text
    from ledger.log.sqlite import SqliteLog

    SqliteLog(data / "log.sqlite3").close()  # another log, with an id of its own
    code, text = caucus("tally")
    assert code == 3 and "another log" in text


def test_a_tally_answers_from_the_store_when_the_log_does_not_answer(caucus: Run, tmp_path: Path) -> None:
    """A broker that is down: the tally is the store's, with a note, not an error after the client's own
    timeout (nothing listens on port 1)."""
    _define(caucus, tmp_path)
    assert caucus("project", "--until-caught-up")[0] == 0
    code, text = caucus("--kafka", "127.0.0.1:1", "tally")
    assert code == 0, text
    assert "note: the log" in text and "this is the projection as of its last batch" in text
    assert "units reporting: 0 of" in text


def test_a_trail_or_audit_of_a_projection_whose_log_is_gone_or_another_is_a_lost_log(caucus: Run, tmp_path: Path) -> None:
    """``trail`` and ``audit`` read the log beside the projection. With the log it was built from gone (a
    memory-only broker restarted, a file removed), or another log in its place, neither can speak for
    the projection: exit 3, as ``project`` says of a lost log, not "nothing there" (exit 2) or a trail
    of another log's events."""
    token = _define(caucus, tmp_path)
    code, receipt = caucus("report", "--unit", "P4", "--attendance", "100", "--first", "A=60,B=40", "--final", "A=60,B=40",
                           "--token", token, "--json")  # fmt: skip
    assert code == 0 and receipt["status"] == "accepted", receipt
    assert caucus("project", "--until-caught-up")[0] == 0
    assert caucus("trail", "P4", "--json")[0] == 0
    assert caucus("audit", "--json")[0] in (0, 1)
    data = tmp_path / "data"
    for suffix in ("", "-wal", "-shm"):
        (data / f"log.sqlite3{suffix}").unlink(missing_ok=True)
    for command in (("trail", "P4"), ("audit",)):
        code, text = caucus(*command)
        assert code == 3, (command, text)
        assert "was built from log" in text and "lost" in text, text
    from ledger.log.sqlite import SqliteLog

    SqliteLog(data / "log.sqlite3").close()  # another log, with an id of its own
    for command in (("trail", "P4"), ("audit",)):
        code, text = caucus(*command)
        assert code == 3 and "another log" in text, (command, text)


def test_a_unit_no_election_defines_is_named_as_such_when_the_log_holds_several(caucus: Run, tmp_path: Path) -> None:
    """With two elections, a unit only one defines needs no --election; a mistyped one is said to be
    defined by none, not taken for a unit both define ("choose one")."""
    _define(caucus, tmp_path)
    _define(caucus, tmp_path, election_id="f", name="F", idempotency_key="def-f",
            units=[{"unit_id": "Q1", "name": "Q1", "county_id": "lee", "delegates": 2}])
    assert caucus("project", "--until-caught-up")[0] == 0
    code, shown = caucus("tally", "--unit", "Q1", "--json")
    assert code == 0 and shown["unit"]["unit_id"] == "Q1", shown
    for command in (("tally", "--unit", "ZZZ"), ("trail", "ZZZ")):
        code, text = caucus(*command)
        assert code == 2, (command, text)
        assert "no election in the projection defines a unit 'ZZZ' (elections: e, f)" in text, text
        assert "choose one with --election" not in text


def test_a_checkpoint_after_the_projection_is_no_record_it_has_not_read(caucus: Run, tmp_path: Path) -> None:
    """``caucus checkpoint`` appends a signed statement about the log, which changes no tally: right
    after ``caucus project`` the readers said "1 record(s) the projection has not read yet" for it."""
    token = _define(caucus, tmp_path)
    assert caucus("project", "--until-caught-up")[0] == 0
    code, signed = caucus("checkpoint")
    assert code == 0, signed
    for command in (("tally",), ("audit",)):
        code, text = caucus(*command)
        assert code in (0, 1) and "has not read" not in text and "not projected" not in text, (command, text)
    code, receipt = caucus("report", "--unit", "P4", "--attendance", "100", "--first", "A=60,B=40", "--final", "A=60,B=40",
                           "--token", token, "--json")  # fmt: skip
    assert code == 0 and receipt["status"] == "accepted", receipt
    for command in (("tally",), ("audit",)):  # the report is counted, the checkpoint before it is not
        code, text = caucus(*command)
        assert code == 0 and "note: the log holds 1 record(s) the projection has not read yet" in text, (command, text)


def test_an_audit_behind_the_log_says_so(caucus: Run, tmp_path: Path) -> None:
    """An auditor reads the projection: a correction accepted but not yet projected is not in what was
    audited, and the audit says so (stderr), as the tally does; once projected, no note."""
    token = _define(caucus, tmp_path)
    assert caucus("project", "--until-caught-up")[0] == 0
    code, text = caucus("audit")
    assert code == 0 and "note:" not in text, text
    code, receipt = caucus("report", "--unit", "P4", "--attendance", "100", "--first", "A=60,B=40", "--final", "A=60,B=40",
                           "--token", token, "--json")  # fmt: skip
    assert code == 0 and receipt["status"] == "accepted", receipt
    code, text = caucus("audit")
    assert code == 0 and "note: the log holds 1 record(s) the projection has not read yet" in text, text
    code, doc = caucus("audit", "--json")
    assert code == 0 and doc["unread_records"] == 1
    assert caucus("project", "--until-caught-up")[0] == 0
    code, doc = caucus("audit", "--json")
    assert doc["unread_records"] == 0


def test_a_slow_unread_tail_still_gives_the_count_not_a_log_that_did_not_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, support: Any) -> None:
    """Telling checkpoints apart reads the unread tail within the tally's wait for the log: a slow read
    there made the note say the log did not answer, though its id and marks had come back. The count
    of every unread record is given instead."""
    import threading

    import projections.tally_freshness as freshness
    from ledger.config import Settings
    from ledger.journal import Journal
    from ledger.log.sqlite import SqliteLog

    data = tmp_path / "data"
    Journal(SqliteLog(data / "log.sqlite3", partitions=2)).append_batch(support.election_log(20))
    release = threading.Event()

    def stuck(*_args: Any, **_kw: Any) -> int:
        release.wait(30)
        return 0

    monkeypatch.setattr(freshness, "unread_events", stuck)
    monkeypatch.setattr(freshness, "LOG_ANSWER_SECONDS", 0.5)
    try:
        answer = freshness.ask_the_log(Settings(data_dir=data), {0: 0, 1: 0})
    finally:
        release.set()
    assert answer is not None and answer["unread"] == sum(answer["marks"].values()) > 0, answer

"""A settled tie stays settled (DESIGN.md): the intake refuses a second toss of a tie unless an official
redraws it, naming the toss it replaces and giving a reason; the projection, the paper trail and the
audit agree on which toss stands. The regression is the hostile user's sequence: ``caucus toss UNIT
--contender Adams,Baker,Clark --winner Baker``, then the same with ``--winner Clark``, which flipped the
seat with nothing in the audit."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import ledger.cli
import producers.cli
import projections.audit.audit_cli
import projections.cli
from ledger.events import Channel, TieBroken, TieMethod, new_event
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from producers.commands import CommandKind, parse_command
from producers.credentials import Credential
from producers.intake import Intake, Outcome, Receipt, Refusal, Submission
from producers.intake_state import IntakeState
from producers.validation import conflicts, to_payload

# One delegate, three groups of ten: a three-way tie for the seat (RULES §7), drawn by lots.
ELECTION = {
    "election_id": "t1", "name": "Tie test", "rule_set": "idp-2020", "candidates": ["Adams", "Baker", "Clark"],
    "counties": [{"county_id": "c", "name": "C", "sde_ratio": "1/1"}],
    "units": [{"unit_id": "U1", "name": "Unit 1", "county_id": "c", "delegates": 1},
              {"unit_id": "U2", "name": "Unit 2", "county_id": "c", "delegates": 1}],
}  # fmt: skip
THIRDS = "Adams=10,Baker=10,Clark=10"


@pytest.fixture
def caucus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, Any]]:
    """The ``caucus`` commands a chair, an operator and an auditor use, over one data directory."""
    app = typer.Typer()
    app.callback()(ledger.cli._global)
    for module in (producers.cli, projections.cli, projections.audit.audit_cli):
        module.register(app)
    runner = CliRunner()
    for name in ("CAUCUS_TOKEN", "CAUCUS_KAFKA", "CAUCUS_DATABASE"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> tuple[int, Any]:
        result = runner.invoke(app, ["--data-dir", str(tmp_path / "data"), *args])
        assert "Traceback" not in result.output
        try:
            return result.exit_code, json.loads(result.stdout)
        except ValueError:
            return result.exit_code, result.output

    return run


def _toss(caucus: Callable[..., tuple[int, Any]], token: str, winner: str, *extra: str) -> tuple[int, Any]:
    return caucus("toss", "U1", "--contender", "Adams,Baker,Clark", "--winner", winner, "--method", "lots",
                  "--caller", "Adams captain", "--token", token, "--json", *extra)  # fmt: skip


def _state(caucus: Callable[..., tuple[int, Any]]) -> tuple[dict[str, Any], dict[str, Any], tuple[int, dict[str, Any]]]:
    """Project, then the unit's tally, its trail and the audit (exit code, report), as a user reads them."""
    code, _ = caucus("project", "--until-caught-up")
    assert code == 0
    code, shown = caucus("tally", "--unit", "U1", "--json")
    assert code == 0
    tally = shown["unit"]
    code, trail = caucus("trail", "U1", "--json")
    assert code == 0
    return tally, trail, caucus("audit", "--json")


def test_a_second_toss_is_refused_a_redraw_is_shown_and_a_smuggled_toss_is_ignored(
    caucus: Callable[..., tuple[int, Any]], tmp_path: Path
) -> None:
    code, cred = caucus("credentials", "issue", "--official", "Pat", "--json")
    token = cred["token"]
    (tmp_path / "election.json").write_text(json.dumps(ELECTION))
    assert caucus("define", str(tmp_path / "election.json"), "--token", token)[0] == 0
    assert caucus("report", "--unit", "U1", "--first", THIRDS, "--final", THIRDS, "--attendance", "30", "--token", token)[0] == 0
    code, first = _toss(caucus, token, "Baker")
    assert code == 0 and first["status"] == "accepted"

    # the hostile user's second toss: refused, naming the toss it would contradict, and recorded
    code, second = _toss(caucus, token, "Clark")
    assert code == 1 and second["category"] == "conflict"
    (error,) = second["errors"]
    assert (error["field"], error["code"]) == ("contenders", "TIE_ALREADY_SETTLED") and first["event_id"] in error["message"]
    tally, trail, (audit_code, audit) = _state(caucus)
    assert tally["cds"] == {"Adams": 0, "Baker": 1, "Clark": 0} and tally["ties_applied"] == [first["event_id"]]
    assert [e["type"] for e in trail["events"]][-2:] == ["TieBroken", "SubmissionRejected"]
    assert trail["events"][-1]["details"]["errors"][0]["code"] == "TIE_ALREADY_SETTLED"
    assert audit_code == 0 and not [f for f in audit["findings"] if f["code"].startswith("TIE_")]

    # a redraw needs a reason and must name the toss that stands
    code, no_reason = _toss(caucus, token, "Clark", "--supersedes", first["event_id"])
    assert code == 1 and [(e["field"], e["code"]) for e in no_reason["errors"]] == [("reason", "REQUIRED")]
    code, wrong = _toss(caucus, token, "Clark", "--supersedes", "no-such-toss", "--reason", "r")
    assert code == 1 and [(e["field"], e["code"]) for e in wrong["errors"]] == [("supersedes", "UNKNOWN_EVENT")]
    reason = "the lots were drawn from an open box; county chair ordered a redraw"
    code, redraw = _toss(caucus, token, "Clark", "--supersedes", first["event_id"], "--reason", reason)
    assert code == 0 and redraw["status"] == "accepted"
    code, stale = _toss(caucus, token, "Adams", "--supersedes", first["event_id"], "--reason", "again")
    assert code == 1 and stale["errors"][0]["code"] == "ALREADY_SUPERSEDED" and redraw["event_id"] in stale["errors"][0]["message"]
    tally, trail, (audit_code, audit) = _state(caucus)
    assert tally["cds"] == {"Adams": 0, "Baker": 0, "Clark": 1} and tally["ties_applied"] == [redraw["event_id"]]
    redrawn = next(e for e in trail["events"] if e["event_id"] == redraw["event_id"])
    assert redrawn["details"]["supersedes"] == first["event_id"] and redrawn["tally"]["cds"] == tally["cds"]
    assert any(c.startswith("tie redrawn by an official") and reason in c for c in redrawn["changes"])
    (finding,) = [f for f in audit["findings"] if f["code"].startswith("TIE_")]
    assert (finding["code"], finding["severity"], finding["expected"], finding["reported"]) == ("TIE_REDRAWN", "info", "Baker", "Clark")
    assert audit_code == 0 and reason in finding["message"]

    # a history that bypasses the intake: a third toss appended to the log directly
    smuggled = new_event(TieBroken(("Clark", "Baker", "Adams"), 1, ("Adams",), TieMethod.LOTS, caller="someone"),
                         election_id="t1", unit_id="U1", actor="import", channel=Channel.IMPORT)  # fmt: skip
    journal = Journal(SqliteLog(tmp_path / "data" / "log.sqlite3"))
    journal.append(smuggled)
    journal.close()
    tally, trail, (audit_code, audit) = _state(caucus)
    assert tally["cds"] == {"Adams": 0, "Baker": 0, "Clark": 1}, "the smuggled toss flips nothing"
    assert tally["ties_applied"] == [redraw["event_id"]]
    ignored = trail["events"][-1]
    assert ignored["event_id"] == smuggled.event_id and ignored["tally"]["cds"] == tally["cds"]
    assert any(c.startswith("toss ignored") and redraw["event_id"] in c for c in ignored["changes"])
    contradicted = [f for f in audit["findings"] if f["code"] == "TIE_CONTRADICTED"]
    assert audit_code == 1 and len(contradicted) == 1
    assert (contradicted[0]["severity"], contradicted[0]["expected"], contradicted[0]["reported"]) == ("error", "Clark", "Adams")
    assert smuggled.event_id in contradicted[0]["message"] and redraw["event_id"] in contradicted[0]["message"]
    assert trail["events"][-1]["tally"] == tally, "the trail's last step is the projected tally"


def test_a_redraw_of_a_tie_the_current_result_does_not_have_is_refused(
    caucus: Callable[..., tuple[int, Any]], tmp_path: Path
) -> None:
    """Tie, toss, a correction without the tie, a redraw, a correction with the tie again: the redraw was
    accepted against a result without its tie, so it decided nothing (the tally held the tie pending) yet
    replaced the toss, and every new toss for the tie was refused as already settled."""
    code, cred = caucus("credentials", "issue", "--official", "Pat", "--json")
    token = cred["token"]
    (tmp_path / "election.json").write_text(json.dumps(ELECTION))
    assert caucus("define", str(tmp_path / "election.json"), "--token", token)[0] == 0
    code, report = caucus("report", "--unit", "U1", "--first", THIRDS, "--final", THIRDS, "--attendance", "30",
                          "--token", token, "--json")
    assert code == 0
    code, toss = _toss(caucus, token, "Baker")
    assert code == 0

    def correct(supersedes: str, counts: str) -> str:
        code, done = caucus("correct", "--unit", "U1", "--supersedes", supersedes, "--reason", "recount", "--authority",
                            "county chair", "--stage", "recount", "--first", counts, "--final", counts, "--attendance", "30",
                            "--token", token, "--json")
        assert code == 0, done
        return str(done["event_id"])

    untied = correct(report["event_id"], "Adams=12,Baker=10,Clark=8")
    code, redraw = _toss(caucus, token, "Clark", "--supersedes", toss["event_id"], "--reason", "the lots were marked")
    assert code == 1 and [(e["field"], e["code"]) for e in redraw["errors"]] == [("contenders", "NO_SUCH_TIE")], redraw
    correct(untied, THIRDS)
    tally, _trail, (audit_code, audit) = _state(caucus)
    assert tally["cds"] == {"Adams": 0, "Baker": 1, "Clark": 0} and tally["ties_applied"] == [toss["event_id"]], tally
    assert tally["pending"] == [] and audit_code == 0
    assert not [f for f in audit["findings"] if f["code"] == "TOSS_UNUSED"], audit["findings"]
    # With the tie back, a redraw is what it was before: accepted, and it decides the tie.
    code, redraw = _toss(caucus, token, "Clark", "--supersedes", toss["event_id"], "--reason", "the lots were marked")
    assert code == 0, redraw
    tally, _trail, _audit = _state(caucus)
    assert tally["cds"] == {"Adams": 0, "Baker": 0, "Clark": 1} and tally["ties_applied"] == [redraw["event_id"]], tally


def _tie(winner: str, **kw: Any) -> str:
    return json.dumps({"contenders": ["Biden", "Sanders"], "seats": 1, "winners": [winner], "method": "coin", "caller": "x", **kw})


def test_the_intake_keeps_a_tie_settled_across_restarts_and_logs(
    log_kind: str, defined: Outcome, send: Callable[..., Outcome], make_intake: Callable[..., Intake], chair: Credential,
    official: Credential, tmp_path: Path,
) -> None:  # fmt: skip
    first = send(CommandKind.TOSS, _tie("Biden"), unit="E10", key="t1")
    assert isinstance(first, Receipt) and first.status == "accepted"
    # other ties of the unit, and the same tie in another unit, are tossed independently
    assert send(CommandKind.TOSS, _tie("Biden", seats=1, contenders=["Biden", "Warren"]), unit="E10", key="t2").accepted
    assert send(CommandKind.TOSS, _tie("Sanders"), unit="E01", key="t3").accepted
    cases = {
        "second": ("E10", _tie("Sanders"), [("contenders", "TIE_ALREADY_SETTLED")]),
        "same-winners": ("E10", _tie("Biden", reason="recorded again"), [("contenders", "TIE_ALREADY_SETTLED")]),
        "other-tie": ("E10", _tie("Sanders", supersedes=first.event_id, reason="r", contenders=["Sanders", "Warren"]),
                      [("supersedes", "OTHER_TIE")]),
        "other-unit": ("E01", _tie("Biden", supersedes=first.event_id, reason="r"), [("supersedes", "OTHER_UNITS_EVENT")]),
        "blank-reason": ("E10", _tie("Sanders", supersedes=first.event_id, reason="  "), [("reason", "REQUIRED")]),
        "invisible-reason": ("E10", _tie("Sanders", supersedes=first.event_id, reason="\u200b\u3164"), [("reason", "REQUIRED")]),
    }  # fmt: skip
    for name, (unit, body, expected) in cases.items():
        refusal = send(CommandKind.TOSS, body, unit=unit, key=f"x-{name}")
        assert isinstance(refusal, Refusal), name
        assert [(e.field, e.code) for e in refusal.errors] == expected, (name, refusal.errors)
    chair_redraw = send(CommandKind.TOSS, _tie("Sanders", supersedes=first.event_id, reason="r"), chair, unit="E10", key="c")
    assert isinstance(chair_redraw, Refusal) and chair_redraw.errors[0].code == "FORBIDDEN"
    # a restarted intake (snapshot, then the log) still knows the tie is settled
    restarted = make_intake()
    restarted.save_snapshot(force=True)
    again = make_intake()
    refusal = again.submit(_submission(_tie("Sanders"), official, "E10", "after-restart"))
    assert isinstance(refusal, Refusal) and refusal.errors[0].code == "TIE_ALREADY_SETTLED"
    redraw = again.submit(_submission(_tie("Sanders", supersedes=first.event_id, reason="coin fell off the table"), official, "E10", "r"))
    assert isinstance(redraw, Receipt) and redraw.status == "accepted"


def _submission(body: str, sender: Credential, unit: str, key: str) -> Submission:
    return Submission(CommandKind.TOSS, body, sender, Channel.APP, unit_id=unit, idempotency_key=key)


def test_a_spooled_toss_is_refused_on_arrival_if_the_tie_was_settled_meanwhile() -> None:
    """While the log was out of reach, another intake settled the tie: the spooled toss must not land."""
    state = IntakeState()
    parsed = parse_command(CommandKind.DEFINE, json.dumps({**ELECTION, "idempotency_key": "d"}))
    assert parsed.command is not None
    payload, _ = to_payload(parsed.command, "official")
    state.apply(new_event(payload, election_id="t1", actor="official", channel=Channel.APP))
    toss = TieBroken(("Adams", "Baker"), 1, ("Adams",), TieMethod.COIN, caller="x")
    settled = new_event(toss, election_id="t1", unit_id="U1", actor="official", channel=Channel.APP)
    state.apply(settled)
    spooled = new_event(TieBroken(("Baker", "Adams"), 1, ("Baker",), TieMethod.COIN, caller="y"),
                        election_id="t1", unit_id="U1", actor="official", channel=Channel.APP)  # fmt: skip
    (problem,) = conflicts(spooled, state)
    assert (problem.code, settled.event_id in problem.message) == ("TIE_ALREADY_SETTLED", True)
    redraw = new_event(TieBroken(("Baker", "Adams"), 1, ("Baker",), TieMethod.COIN, caller="y", reason="r", supersedes=settled.event_id),
                       election_id="t1", unit_id="U1", actor="official", channel=Channel.APP)  # fmt: skip
    assert conflicts(redraw, state) == ()
    assert conflicts(settled, state) == (), "the toss that stands does not clash with itself"

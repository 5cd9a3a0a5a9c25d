"""The intake end to end, over the embedded log and the real broker: commands become events, refusals
are recorded with every error, idempotency keys hold, and the state survives a restart."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ledger.events import Channel, ResultCorrected, ResultReported, SubmissionRejected, TieBroken
from ledger.journal import LoggedEvent
from producers.commands import CommandKind
from producers.credentials import Credential, CredentialStore
from producers.intake import Intake, Outcome, Receipt, Refusal, Submission

Send = Callable[..., Outcome]
Logged = Callable[[], list[LoggedEvent]]


def _receipt(outcome: Outcome) -> Receipt:
    assert isinstance(outcome, Receipt), outcome.to_json()
    return outcome


def _refusal(outcome: Outcome) -> Refusal:
    assert isinstance(outcome, Refusal), outcome.to_json()
    return outcome


def _by_id(logged: Logged) -> dict[str, LoggedEvent]:
    return {le.event.event_id: le for le in logged()}


def test_report_becomes_an_event_with_its_actor(defined: Outcome, send: Send, chair: Credential, fm5: dict[str, Any],
                                                logged: Logged) -> None:  # fmt: skip
    receipt = _receipt(send(CommandKind.REPORT, json.dumps(fm5), chair, unit="FM5", key="fm5-report"))
    assert receipt.status == "accepted" and receipt.position is not None
    assert receipt.warnings == ()
    stored = _by_id(logged)[receipt.event_id]
    assert stored.position == receipt.position
    event = stored.event
    assert isinstance(event.payload, ResultReported)
    assert event.envelope.actor == chair.actor and event.payload.reporter == chair.actor
    assert event.envelope.election_id == "ia-test" and event.unit_id == "FM5"
    assert event.envelope.idempotency_key == "fm5-report"
    assert dict(event.payload.result.delegates_reported or {}) == {"Biden": 3, "Buttigieg": 5, "Sanders": 4}


def test_second_report_is_refused_naming_the_first_and_recorded(defined: Outcome, send: Send, chair: Credential,
                                                                fm5: dict[str, Any], logged: Logged) -> None:  # fmt: skip
    first = _receipt(send(CommandKind.REPORT, json.dumps(fm5), chair, unit="FM5", key="a"))
    again = json.dumps({**fm5, "final_alignment": {"Biden": 25, "Buttigieg": 36, "Sanders": 31}}, indent=1)
    refusal = _refusal(send(CommandKind.REPORT, again, chair, unit="FM5", key="b"))
    assert refusal.category == "conflict"
    assert refusal.errors[0].code == "ALREADY_REPORTED" and refusal.errors[0].field == "unit_id"
    assert first.event_id in refusal.errors[0].message and "correction" in refusal.errors[0].message
    stored = _by_id(logged)[refusal.rejection_event_id].event
    assert isinstance(stored.payload, SubmissionRejected)
    assert stored.payload.raw_input == again  # verbatim, whitespace and all
    assert stored.payload.errors == refusal.errors
    assert stored.payload.sender == chair.actor and stored.unit_id == "FM5"
    reports = [le for le in logged() if isinstance(le.event.payload, ResultReported)]
    assert [le.event.event_id for le in reports] == [first.event_id]


def test_same_key_same_content_gives_the_original_receipt_and_appends_nothing(
    defined: Outcome, send: Send, chair: Credential, fm5: dict[str, Any], logged: Logged
) -> None:
    first = _receipt(send(CommandKind.REPORT, json.dumps(fm5), chair, unit="FM5", key="once"))
    count = len(logged())
    # same content, other formatting, key in the body instead of the header
    again = _receipt(send(CommandKind.REPORT, json.dumps({**fm5, "idempotency_key": "once"}, indent=2), chair, unit="FM5"))
    assert again.status == "duplicate"
    assert (again.event_id, again.position) == (first.event_id, first.position)
    assert len(logged()) == count


def test_same_key_other_content_is_refused_and_recorded(defined: Outcome, send: Send, chair: Credential,
                                                        fm5: dict[str, Any], logged: Logged) -> None:  # fmt: skip
    first = _receipt(send(CommandKind.REPORT, json.dumps(fm5), chair, unit="FM5", key="k"))
    changed = {**fm5, "delegates_reported": {"Biden": 4, "Buttigieg": 4, "Sanders": 4}}
    refusal = _refusal(send(CommandKind.REPORT, json.dumps(changed), chair, unit="FM5", key="k"))
    assert [e.code for e in refusal.errors] == ["IDEMPOTENCY_CONFLICT"]
    assert first.event_id in refusal.errors[0].message
    assert isinstance(_by_id(logged)[refusal.rejection_event_id].event.payload, SubmissionRejected)


def test_another_senders_key_is_refused_without_naming_what_they_sent(
    defined: Outcome, send: Send, chair: Credential, official: Credential, store: CredentialStore,
    fm5: dict[str, Any], logged: Logged,
) -> None:
    """A chair who meets a key another sender took hears it is taken, and nothing of the original (the
    refusal is kept in the log under the chair's name); the original's sender and officials hear which."""
    first = _receipt(send(CommandKind.REPORT, json.dumps(fm5), chair, unit="FM5", key="shared"))
    other_chair = store.issue("chair", unit_id="E01")[0]
    e01 = {"first_alignment": {"Biden": 3}, "final_alignment": {"Biden": 3}, "attendance": 3,
           "delegates_reported": {"Biden": 5}}
    refusal = _refusal(send(CommandKind.REPORT, json.dumps(e01), other_chair, unit="E01", key="shared"))
    assert [e.code for e in refusal.errors] == ["IDEMPOTENCY_CONFLICT"]
    assert "another sender" in refusal.errors[0].message
    kept = _by_id(logged)[refusal.rejection_event_id].event.payload
    assert isinstance(kept, SubmissionRejected)
    assert first.event_id not in refusal.errors[0].message
    assert all(first.event_id not in e.message and "FM5" not in e.message for e in kept.errors)
    for sender in (chair, official):  # the original's own sender, and an official, hear which event took it
        changed = {**fm5, "attendance": fm5["attendance"] + 1}
        told = _refusal(send(CommandKind.REPORT, json.dumps(changed), sender, unit="FM5", key="shared"))
        assert [e.code for e in told.errors] == ["IDEMPOTENCY_CONFLICT"]
        assert first.event_id in told.errors[0].message
    # the same content from an official is not "different content": the key is another sender's
    same = _refusal(send(CommandKind.REPORT, json.dumps(fm5), official, unit="FM5", key="shared"))
    assert "already used by " + chair.actor in same.errors[0].message and "different content" not in same.errors[0].message


def test_corrections_supersede_the_current_result_only(defined: Outcome, send: Send, chair: Credential,
                                                       fm5: dict[str, Any], logged: Logged) -> None:  # fmt: skip
    report = _receipt(send(CommandKind.REPORT, json.dumps(fm5), chair, unit="FM5", key="r"))
    fix = {**fm5, "supersedes": report.event_id, "reason": "recanvass", "authority": "IDP", "stage": "recanvass"}
    fix["final_alignment"] = {"Biden": 25, "Buttigieg": 36, "Sanders": 31}
    fix["attendance"] = 92
    fix["first_alignment"] = {"Biden": 25, "Buttigieg": 36, "Sanders": 31}
    fix["delegates_reported"] = {"Biden": 3, "Buttigieg": 5, "Sanders": 4}
    # a chair may not correct
    denied = _refusal(send(CommandKind.CORRECT, json.dumps(fix), chair, unit="FM5", key="c1"))
    assert denied.category == "forbidden" and denied.errors[0].code == "FORBIDDEN"
    corrected = _receipt(send(CommandKind.CORRECT, json.dumps(fix), unit="FM5", key="c1"))
    event = _by_id(logged)[corrected.event_id].event
    assert isinstance(event.payload, ResultCorrected) and event.payload.supersedes == report.event_id
    # the original is now superseded: correcting it again is refused, naming the current result
    stale = _refusal(send(CommandKind.CORRECT, json.dumps(fix), unit="FM5", key="c2"))
    assert stale.errors[0].code == "ALREADY_SUPERSEDED" and corrected.event_id in stale.errors[0].message
    unknown = _refusal(send(CommandKind.CORRECT, json.dumps({**fix, "supersedes": "no-such-event"}), unit="FM5", key="c3"))
    assert unknown.errors[0].code == "UNKNOWN_EVENT" and unknown.errors[0].field == "supersedes"
    other_unit = _refusal(send(CommandKind.CORRECT, json.dumps(fix), unit="E01", key="c4"))
    assert other_unit.errors[0].code == "OTHER_UNITS_EVENT" and other_unit.errors[0].field == "supersedes"
    # the correction itself can be corrected
    chained = _receipt(send(CommandKind.CORRECT, json.dumps({**fix, "supersedes": corrected.event_id}), unit="FM5", key="c5"))
    assert chained.status == "accepted"


def test_toss_is_recorded_and_a_bad_one_refused_with_every_error(defined: Outcome, send: Send, chair: Credential,
                                                                 logged: Logged) -> None:  # fmt: skip
    toss = {"contenders": ["Biden", "Sanders"], "seats": 1, "winners": ["Sanders"], "method": "coin",
            "caller": "Biden captain", "witnesses": ["secretary"]}  # fmt: skip
    receipt = _receipt(send(CommandKind.TOSS, json.dumps(toss), unit="E10", key="t1"))
    payload = _by_id(logged)[receipt.event_id].event.payload
    assert isinstance(payload, TieBroken) and payload.winners == ("Sanders",) and payload.witnesses == ("secretary",)
    assert _refusal(send(CommandKind.TOSS, json.dumps(toss), chair, unit="FM5", key="t2")).category == "forbidden"
    bad = {**toss, "contenders": ["Biden", "Sanders", "Warren"], "winners": ["Yang", "Biden"]}
    refusal = _refusal(send(CommandKind.TOSS, json.dumps(bad), unit="E10", key="t3"))
    codes = {(e.field, e.code) for e in refusal.errors}
    assert ("winners.0", "WINNER_NOT_CONTENDER") in codes and ("winners", "WINNER_COUNT") in codes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"first_alignment": {"Biden": 3}, ', {("body", "MALFORMED_JSON")}),
        ('{"unit_id": "NOPE", "first_alignment": {}, "final_alignment": {}}', {("unit_id", "UNKNOWN_UNIT")}),
        ('{"first_alignment": {"Biden": -3, "Bloomberg": 2}, "final_alignment": {"Biden": 2.5}}',
         {("first_alignment.Biden", "NEGATIVE"), ("final_alignment.Biden", "NOT_AN_INTEGER"),
          ("first_alignment.Bloomberg", "UNKNOWN_CANDIDATE")}),
        ('{"first_alignment": {"Biden": 40, "Sanders": 35, "Warren": 25}, "final_alignment": {"Biden": 40, '
         '"Sanders": 35, "Warren": 25}, "delegates_reported": {"Biden": 2, "Sanders": 2}}',
         {("delegates_reported", "DELEGATE_TOTAL")}),
        ('{"first_alignment": {"Biden": 40, "Sanders": 35}, "final_alignment": {"Biden": 40, "Sanders": 45}, '
         '"attendance": 75}', {("final_alignment", "FINAL_GT_FIRST")}),
        ('{"first_alignment": {"Biden": 40}, "final_alignment": {"Biden": 40}, "attendance": 30}',
         {("first_alignment", "OVERCOUNT")}),
    ],
    ids=["malformed", "unknown-unit", "bad-counts", "delegates-do-not-add-up", "final-above-first", "overcount"],
)  # fmt: skip
def test_bad_reports_are_refused_with_every_error_and_recorded_verbatim(
    defined: Outcome, send: Send, logged: Logged, text: str, expected: set[tuple[str, str]]
) -> None:
    refusal = _refusal(send(CommandKind.REPORT, text, unit=None if "unit_id" in text else "E01", key="bad"))
    assert expected <= {(e.field, e.code) for e in refusal.errors}, refusal.to_json()
    assert all(e.message for e in refusal.errors)
    stored = _by_id(logged)[refusal.rejection_event_id].event.payload
    assert isinstance(stored, SubmissionRejected) and stored.raw_input == text and stored.errors == refusal.errors
    assert not any(isinstance(le.event.payload, ResultReported) for le in logged())


def test_warnings_are_carried_on_the_event(defined: Outcome, send: Send, logged: Logged) -> None:
    # E04: four groups viable for three delegates -> TOO_MANY_VIABLE is a warning, not a refusal
    report = {"first_alignment": {"Biden": 10, "Buttigieg": 11, "Warren": 6, "Uncommitted": 7},
              "final_alignment": {"Biden": 10, "Buttigieg": 11, "Warren": 6, "Uncommitted": 7}, "attendance": 40}  # fmt: skip
    receipt = _receipt(send(CommandKind.REPORT, json.dumps(report), unit="E01", key="w"))
    assert {w.code for w in receipt.warnings} >= {"UNDERCOUNT"}
    payload = _by_id(logged)[receipt.event_id].event.payload
    assert isinstance(payload, ResultReported) and payload.warnings == receipt.warnings


def test_state_survives_a_restart_with_and_without_snapshot(
    defined: Outcome, send: Send, intake: Intake, make_intake: Callable[..., Intake], official: Credential,
    fm5: dict[str, Any], tmp_path: Any
) -> None:
    report = _receipt(send(CommandKind.REPORT, json.dumps(fm5), unit="FM5", key="r"))
    intake.close()
    assert intake.snapshot_path.exists()
    for workdir in (intake.workdir, tmp_path / "fresh"):  # from the snapshot; rebuilt from the log
        restarted = make_intake(workdir)
        dup = restarted.submit(Submission(CommandKind.REPORT, json.dumps(fm5), official, Channel.APP, unit_id="FM5", idempotency_key="r"))
        assert isinstance(dup, Receipt) and dup.status == "duplicate" and dup.event_id == report.event_id
        second = restarted.submit(Submission(CommandKind.REPORT, json.dumps(fm5), official, Channel.APP, unit_id="FM5", idempotency_key="r2"))
        assert isinstance(second, Refusal) and second.errors[0].code == "ALREADY_REPORTED"
        restarted.close()


def test_lookup_answers_receipts_and_refusals(defined: Outcome, send: Send, intake: Intake, fm5: dict[str, Any]) -> None:
    report = _receipt(send(CommandKind.REPORT, json.dumps(fm5), unit="FM5", key="look"))
    refused = _refusal(send(CommandKind.REPORT, "{", unit="E01", key="broken"))
    found = intake.lookup("look")
    assert isinstance(found, Receipt) and (found.event_id, found.status) == (report.event_id, "accepted")
    gone = intake.lookup("broken")
    assert isinstance(gone, Refusal) and gone.rejection_event_id == refused.rejection_event_id
    assert intake.lookup("never-sent") is None


def test_concurrent_reports_for_one_unit_accept_exactly_one(defined: Outcome, intake: Intake, official: Credential,
                                                            fm5: dict[str, Any], logged: Logged) -> None:  # fmt: skip
    from concurrent.futures import ThreadPoolExecutor

    def report(n: int) -> Outcome:
        return intake.submit(Submission(CommandKind.REPORT, json.dumps(fm5), official, unit_id="FM5", idempotency_key=f"k{n}"))

    with ThreadPoolExecutor(max_workers=6) as pool:
        outcomes = list(pool.map(report, range(12)))
    accepted = [o for o in outcomes if isinstance(o, Receipt)]
    assert len(accepted) == 1
    assert all(isinstance(o, Refusal) and o.errors[0].code == "ALREADY_REPORTED" for o in outcomes if o not in accepted)
    assert sum(isinstance(le.event.payload, ResultReported) for le in logged()) == 1


@pytest.mark.parametrize("log_kind", ["embedded"])
def test_intakes_sharing_a_log_see_each_others_events(defined: Outcome, send: Send, make_intake: Callable[..., Intake],
                                                      official: Credential, fm5: dict[str, Any], tmp_path: Any) -> None:  # fmt: skip
    other = make_intake(tmp_path / "second-intake")
    first = _receipt(send(CommandKind.REPORT, json.dumps(fm5), unit="FM5", key="here"))
    there = other.submit(Submission(CommandKind.REPORT, json.dumps(fm5), official, unit_id="FM5", idempotency_key="there"))
    assert isinstance(there, Refusal) and first.event_id in there.errors[0].message


@pytest.mark.parametrize("log_kind", ["embedded"])
def test_a_state_that_no_longer_matches_the_log_is_reported(defined: Outcome, intake: Intake, connect: Any,
                                                            make_intake: Callable[..., Intake], official: Credential,
                                                            election: dict[str, Any], tmp_path: Any) -> None:  # fmt: skip
    from ledger.log.port import LogLostError

    intake.close()
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"log.sqlite3{suffix}").unlink(missing_ok=True)
    with pytest.raises(LogLostError):
        make_intake(intake.workdir)  # its snapshot describes a log that is gone
    # a new log with other content at the same positions is caught too
    fresh = make_intake(tmp_path / "elsewhere")
    assert fresh.submit(Submission(CommandKind.DEFINE, json.dumps(election), official)).accepted
    fresh.close()
    with pytest.raises(LogLostError):
        make_intake(intake.workdir)
    rebuilt = Intake(connect, intake.workdir, name="test-log")
    assert rebuilt.rebuild()["events_applied"] == 1
    rebuilt.close()
    assert make_intake(intake.workdir).state.applied == 1


@pytest.mark.parametrize("log_kind", ["embedded"])
def test_only_a_rebuild_ends_a_lost_log_for_a_running_intake(defined: Outcome, intake: Intake, connect: Any,
                                                              official: Credential, fm5: dict[str, Any]) -> None:  # fmt: skip
    """A command run beside a service whose log was lost refuses as the service does (the loss is kept on
    disk), and a snapshot saved beside (by one that folded the refilled log as a new one before) must not
    end the service's "log lost", nor may a lost log confirm a receipt; only ``caucus intake rebuild`` (a
    snapshot of a later generation) does."""
    from ledger.log.port import LogError, LogLostError
    from producers.intake_state import IntakeState

    intake._lost("partition 0 no longer holds the event the intake last applied there")  # as a refill is found
    beside = Intake(connect, intake.workdir, name="test-log")  # e.g. `caucus intake status`
    with pytest.raises(LogLostError, match="no longer holds"):  # the loss is kept on disk: it refuses too
        beside.start()
    beside.close()
    beside = Intake(connect, intake.workdir, name="test-log")  # one that folded the log before the loss was found
    beside.state, beside.started = IntakeState(), True
    beside.save_snapshot(force=True)
    beside.close()
    with pytest.raises(LogLostError, match="lost"):
        intake.submit(Submission(CommandKind.OPEN, json.dumps({"attendance": 91}), official, unit_id="FM5", idempotency_key="o"))
    with pytest.raises(LogError, match="lost"):
        intake.lookup(defined.to_json()["idempotency_key"] or "", official)
    assert intake.log_lost is not None
    Intake(connect, intake.workdir, name="test-log").rebuild()
    opened = intake.submit(Submission(CommandKind.OPEN, json.dumps({"attendance": 91}), official, unit_id="FM5", idempotency_key="o"))
    assert opened.accepted and intake.log_lost is None


def test_a_command_after_the_certification_is_accepted_with_a_warning_that_says_so(
    defined: Outcome, send: Send, fm5: dict[str, Any], connect: Callable[[], Any], intake: Intake,
    make_intake: Callable[..., Intake], official: Credential, logged: Logged,
) -> None:
    """A certification covers the results that stood when it was recorded: a report or a correction
    recorded later is accepted (a recount after certification is lawful), and its receipt and event say
    that the certification does not cover it (they said nothing). A restarted intake still knows."""
    from ledger.events import ResultsCertified, new_event
    from ledger.journal import Journal

    # a certification record that names a unit (older logs hold such) certifies no election
    Journal(connect(), writer="official:canvass").append(new_event(
        ResultsCertified("somebody"), election_id="ia-test", unit_id="E10", actor="official:canvass", channel=Channel.APP))
    before = _receipt(send(CommandKind.REPORT, json.dumps(fm5), unit="FM5", key="before"))
    assert "AFTER_CERTIFICATION" not in {w.code for w in before.warnings}
    certification = new_event(ResultsCertified("State Central Committee"), election_id="ia-test", actor="official:canvass",
                              channel=Channel.APP)
    Journal(connect(), writer="official:canvass").append(certification)
    e01 = {"first_alignment": {"Biden": 3}, "final_alignment": {"Biden": 3}, "attendance": 3, "delegates_reported": {"Biden": 5}}
    late = _receipt(send(CommandKind.REPORT, json.dumps(e01), unit="E01", key="late"))
    notice = [w for w in late.warnings if w.code == "AFTER_CERTIFICATION"]
    assert len(notice) == 1 and certification.event_id in notice[0].message and notice[0].field == "election_id"
    recorded = _by_id(logged)[late.event_id].event.payload
    assert isinstance(recorded, ResultReported) and "AFTER_CERTIFICATION" in {w.code for w in recorded.warnings}
    intake.close()  # its snapshot now holds the certification
    restarted = make_intake()
    fix = {**fm5, "supersedes": before.event_id, "reason": "recount", "authority": "IDP", "stage": "recount"}
    fixed = restarted.submit(Submission(CommandKind.CORRECT, json.dumps(fix), official, Channel.APP, unit_id="FM5",
                                        idempotency_key="fix"))
    assert "AFTER_CERTIFICATION" in {w.code for w in _receipt(fixed).warnings}


def test_a_command_that_occurred_after_it_was_received_is_refused(defined: Outcome, send: Send, fm5: dict[str, Any]) -> None:
    """occurred_at in 2099 was accepted; a few minutes ahead (a phone's clock) still is."""
    from datetime import UTC, datetime, timedelta

    late = _refusal(send(CommandKind.REPORT, json.dumps({**fm5, "occurred_at": "2099-01-01T00:00:00Z"}), unit="FM5", key="f1"))
    assert [(e.field, e.code) for e in late.errors] == [("occurred_at", "IN_THE_FUTURE")]
    soon = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    assert _receipt(send(CommandKind.REPORT, json.dumps({**fm5, "occurred_at": soon}), unit="FM5", key="f2")).status == "accepted"


def test_reported_delegates_that_contradict_a_standing_toss_are_accepted_with_a_warning(
    defined: Outcome, send: Send, logged: Logged,
) -> None:
    """RULES E10 (D 6, Warren 100, Sanders 50, Biden 50): a coin gave the contested seat to Sanders. A
    worksheet that gives it to Biden is recorded as sent (the legal record), and its sender now hears at
    once what the audit reports (TOSS_CONTRADICTED); one that agrees with the toss hears nothing of it."""
    toss = {"contenders": ["Biden", "Sanders"], "seats": 1, "winners": ["Sanders"], "method": "coin", "caller": "Biden captain"}
    tossed = _receipt(send(CommandKind.TOSS, json.dumps(toss), unit="E10", key="t1"))
    counts = {"Warren": 100, "Sanders": 50, "Biden": 50}
    wrong = {"first_alignment": counts, "final_alignment": counts, "attendance": 200,
             "delegates_reported": {"Warren": 3, "Sanders": 1, "Biden": 2}}
    receipt = _receipt(send(CommandKind.REPORT, json.dumps(wrong), unit="E10", key="r1"))
    notice = [w for w in receipt.warnings if w.code == "TOSS_CONTRADICTED"]
    assert len(notice) == 1 and notice[0].field == "delegates_reported" and tossed.event_id in notice[0].message
    assert "Sanders 1" in notice[0].message and "Sanders 2" in notice[0].message
    stored = _by_id(logged)[receipt.event_id].event.payload
    assert isinstance(stored, ResultReported) and stored.result.delegates_reported == {"Warren": 3, "Sanders": 1, "Biden": 2}
    right = {**wrong, "delegates_reported": {"Warren": 3, "Sanders": 2, "Biden": 1}, "supersedes": receipt.event_id,
             "reason": "the toss", "authority": "IDP", "stage": "review"}
    fixed = _receipt(send(CommandKind.CORRECT, json.dumps(right), unit="E10", key="c1"))
    assert fixed.status == "accepted" and "TOSS_CONTRADICTED" not in {w.code for w in fixed.warnings}

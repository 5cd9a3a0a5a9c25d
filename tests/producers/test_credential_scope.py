"""A chair's credential reports for one unit of one election.

Unit ids repeat across elections (precinct numbers are reused every cycle), so a credential that named
only its unit would let the chair of unit FM5 in one election report for unit FM5 in every other. Found
by the ledger's model test, which defines two elections sharing unit ids and sends each chair's
credential to the other election.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from producers.commands import CommandKind
from producers.credentials import CredentialStore
from producers.intake import Outcome



def _second_election(election: dict[str, Any]) -> dict[str, Any]:
    other = json.loads(json.dumps(election))
    other["election_id"] = "ia-other"
    other["idempotency_key"] = "define-ia-other"
    return other


def _report(fm5: dict[str, Any], key: str, election_id: str | None = None) -> str:
    body = {**fm5, "unit_id": "FM5", "idempotency_key": key}
    if election_id is not None:
        body["election_id"] = election_id
    return json.dumps(body)


def test_a_scoped_chair_reports_into_its_election_and_no_other(
    send: Callable[..., Outcome], defined: Outcome, store: CredentialStore, election: dict[str, Any], fm5: dict[str, Any]
) -> None:
    assert send(CommandKind.DEFINE, json.dumps(_second_election(election))).accepted
    chair, _ = store.issue("chair", unit_id="FM5", election_id="ia-test")

    wrong = send(CommandKind.REPORT, _report(fm5, "r-other", "ia-other"), sender=chair)
    assert not wrong.accepted
    assert [(p["field"], p["code"]) for p in wrong.to_json()["errors"]] == [("election_id", "WRONG_ELECTION")]

    right = send(CommandKind.REPORT, _report(fm5, "r-own", "ia-test"), sender=chair)
    assert right.accepted, right.to_json()
    assert right.to_json()["election_id"] == "ia-test"


def test_an_unscoped_chair_is_refused_once_two_elections_share_its_unit(
    send: Callable[..., Outcome], defined: Outcome, store: CredentialStore, election: dict[str, Any], fm5: dict[str, Any]
) -> None:
    chair, _ = store.issue("chair", unit_id="FM5")
    assert send(CommandKind.DEFINE, json.dumps(_second_election(election))).accepted

    for election_id in ("ia-test", "ia-other"):
        refused = send(CommandKind.REPORT, _report(fm5, f"r-{election_id}", election_id), sender=chair)
        assert not refused.accepted
        codes = [p["code"] for p in refused.to_json()["errors"]]
        assert codes == ["AMBIGUOUS_CREDENTIAL"], refused.to_json()


def test_an_unscoped_chair_still_reports_while_one_election_has_its_unit(
    send: Callable[..., Outcome], defined: Outcome, store: CredentialStore, fm5: dict[str, Any]
) -> None:
    chair, _ = store.issue("chair", unit_id="FM5")
    outcome = send(CommandKind.REPORT, _report(fm5, "r-1"), sender=chair)
    assert outcome.accepted, outcome.to_json()


def test_the_scope_is_kept_in_the_store_and_shown(store: CredentialStore) -> None:
    issued, _ = store.issue("chair", unit_id="FM5", election_id="ia-test")
    again = CredentialStore(store.path).list()
    assert [(c.cred_id, c.election_id) for c in again] == [(issued.cred_id, "ia-test")]
    assert issued.public()["election_id"] == "ia-test"
    with pytest.raises(ValueError, match="official"):
        store.issue("official", name="Pat", election_id="ia-test")


def test_a_retry_that_names_no_election_gets_its_receipt_after_a_second_election_shares_the_unit(
    send: Callable[..., Outcome], defined: Outcome, store: CredentialStore, election: dict[str, Any], fm5: dict[str, Any]
) -> None:
    """Found by the model test: the report was accepted while one election had FM5; the chair did not
    hear the answer and sent it again after a second election with an FM5 was defined. The retry was
    refused (AMBIGUOUS_ELECTION, then AMBIGUOUS_CREDENTIAL), telling the chair the accepted report was
    not taken. A retry is answered with the original receipt; a new command is still refused."""
    chair, _ = store.issue("chair", unit_id="FM5")
    first = send(CommandKind.REPORT, _report(fm5, "r-1"), sender=chair)
    assert first.accepted
    assert send(CommandKind.DEFINE, json.dumps(_second_election(election))).accepted

    again = send(CommandKind.REPORT, _report(fm5, "r-1"), sender=chair)
    assert again.accepted and again.to_json()["status"] == "duplicate", again.to_json()
    assert again.to_json()["event_id"] == first.to_json()["event_id"]

    new = send(CommandKind.REPORT, _report(fm5, "r-2"), sender=chair)
    assert not new.accepted
    assert [p["code"] for p in new.to_json()["errors"]] == ["AMBIGUOUS_ELECTION"]


def test_a_scoped_chair_need_not_name_its_election_when_another_shares_the_unit(
    send: Callable[..., Outcome], defined: Outcome, store: CredentialStore, election: dict[str, Any], fm5: dict[str, Any]
) -> None:
    """The credential names the election its chair was trusted with: a report that names none is about
    that one, however many elections have the unit (it was refused AMBIGUOUS_ELECTION). A refusal for
    what the credential may not do is 'forbidden' (HTTP 403), as WRONG_UNIT is, not 'invalid'."""
    assert send(CommandKind.DEFINE, json.dumps(_second_election(election))).accepted
    chair, _ = store.issue("chair", unit_id="FM5", election_id="ia-other")
    outcome = send(CommandKind.REPORT, _report(fm5, "r-scoped"), sender=chair)
    assert outcome.accepted, outcome.to_json()
    assert outcome.to_json()["election_id"] == "ia-other"
    wrong = send(CommandKind.REPORT, _report(fm5, "r-wrong", "ia-test"), sender=chair)
    assert not wrong.accepted and wrong.to_json()["category"] == "forbidden"
    unscoped, _ = store.issue("chair", unit_id="FM5")
    ambiguous = send(CommandKind.REPORT, _report(fm5, "r-unscoped", "ia-test"), sender=unscoped)
    assert [p["code"] for p in ambiguous.to_json()["errors"]] == ["AMBIGUOUS_CREDENTIAL"]
    assert ambiguous.to_json()["category"] == "forbidden"


def test_a_chairs_input_without_a_unit_is_told_what_is_missing_and_one_for_another_unit_is_forbidden(
    send: Callable[..., Outcome], defined: Outcome, store: CredentialStore, fm5: dict[str, Any]
) -> None:
    """A chair's report with no unit id was refused WRONG_UNIT ("not for '(no unit given)'"), where an
    official's is refused REQUIRED: the chair hears the missing fields as an official does. A report
    that does name a unit is still held to the chair's own."""
    chair, _ = store.issue("chair", unit_id="FM5", election_id="ia-test")
    blank = send(CommandKind.REPORT, json.dumps({"idempotency_key": "blank"}), sender=chair)
    assert not blank.accepted and blank.to_json()["category"] == "invalid"
    assert {(p["field"], p["code"]) for p in blank.to_json()["errors"]} >= {("unit_id", "REQUIRED"), ("first_alignment", "REQUIRED")}
    no_unit = {k: v for k, v in fm5.items() if k != "unit_id"}
    unnamed = send(CommandKind.REPORT, json.dumps({**no_unit, "idempotency_key": "unnamed"}), sender=chair)
    assert [(p["field"], p["code"]) for p in unnamed.to_json()["errors"]] == [("unit_id", "REQUIRED")]
    other = send(CommandKind.REPORT, json.dumps({**fm5, "unit_id": "E01", "idempotency_key": "other"}), sender=chair)
    assert [p["code"] for p in other.to_json()["errors"]] == ["WRONG_UNIT"] and other.to_json()["category"] == "forbidden"
    own = send(CommandKind.REPORT, json.dumps({**fm5, "unit_id": "FM5", "idempotency_key": "own"}), sender=chair)
    assert own.accepted, own.to_json()

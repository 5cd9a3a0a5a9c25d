"""A second definition of an election, a certification and a checkpoint written by ``caucus log append``.

The tallies use an election's latest definition, so re-appending it with a reported unit's D raised
from 6 to 600 once multiplied that unit's county delegates by a hundred with no result event saying so.
A redefinition outside the import channel may now change only what no opened or reported unit is
counted under; the intake then judges commands by it, as the tallies count them. A certification of an
undefined election and a checkpoint no key signed were accepted too; a bad checkpoint makes
``caucus verify`` fail on every run after it."""

from __future__ import annotations

import copy
import json
import os
import shutil
import uuid
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from ledger.events import Channel, County, ElectionDefined, Result, ResultReported, SatelliteGroup, UnitDefinition, UnitOpened, new_event
from producers.credentials import CredentialStore
from producers.intake_state import IntakeState
from producers.redefinition import redefinition_problems
from tests.producers.test_direct_writes import _append, _caucus, _log_size, reported  # noqa: F401  (fixture)


def _key_home_of_its_own(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key home with no record of what was signed before, holding the key the intake sealed this
    log's records with (``ledger.integrity.writer_seals``): a checkpoint trusts those seals."""
    shutil.copytree(os.environ["CAUCUS_KEY_HOME"], home, ignore=shutil.ignore_patterns("*.signed.json"))
    monkeypatch.setenv("CAUCUS_KEY_HOME", str(home))


def _log(data: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()]


def _again(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The logged event ``doc`` as a new event: a fresh id and key, now, the envelope changed as given."""
    out = {k: v for k, v in copy.deepcopy(doc).items() if k not in ("position", "record_headers")}
    now = datetime.now(UTC).isoformat()
    out.update(event_id=str(uuid.uuid4()), idempotency_key=f"again-{uuid.uuid4()}", recorded_at=now, occurred_at=now)
    out.update(changes)
    return out


def _definition(data: Path) -> dict[str, Any]:
    return next(e for e in _log(data) if e["type"] == "ElectionDefined")


def _unit(doc: dict[str, Any], unit_id: str) -> dict[str, Any]:
    return next(u for u in doc["payload"]["units"] if u["unit_id"] == unit_id)


def _state_tally(data: Path) -> dict[str, Any]:
    assert _caucus(data, "project", "--until-caught-up", "-q").returncode == 0
    return json.loads(_caucus(data, "tally", "--json").stdout)


def test_a_reported_units_d_may_not_be_redefined(reported: tuple[Path, str], tmp_path: Path) -> None:
    data, token = reported
    before_tally = _state_tally(data)
    before = _log_size(data)
    amended = _again(_definition(data))
    _unit(amended, "P3")["delegates"] = 600  # P3 reported A=60 through the intake
    done = _append(data, token, tmp_path, amended)
    assert done.returncode == 1, done.stdout
    assert "units.P3.delegates: DELEGATES_CHANGED" in done.stderr and "600" in done.stderr, done.stderr
    assert _log_size(data) == before
    assert _state_tally(data) == before_tally


@pytest.mark.parametrize("change,code", [
    (lambda d: d["payload"]["units"].pop(0), "UNIT_REMOVED"),
    (lambda d: d["payload"].update(candidates=["B"]), "CANDIDATE_REMOVED"),
    (lambda d: d["payload"]["counties"][0].update(sde_ratio={"numerator": 1, "denominator": 1}), "COUNTY_RATIO_CHANGED"),
    (lambda d: d["payload"].update(rule_set="idp-2016"), "RULE_SET_CHANGED"),
], ids=["unit removed", "candidate removed", "county ratio", "rule set"])
def test_what_a_reported_unit_is_counted_under_may_not_change(reported: tuple[Path, str], tmp_path: Path,
                                                              change: Any, code: str) -> None:
    data, token = reported
    amended = _again(_definition(data))
    assert amended["payload"]["units"][0]["unit_id"] == "P3"
    change(amended)
    done = _append(data, token, tmp_path, amended)
    assert done.returncode == 1 and code in done.stderr, (done.stdout, done.stderr)


def test_a_redefinition_of_what_nobody_reported_is_written_and_the_intake_follows_it(
    reported: tuple[Path, str], tmp_path: Path
) -> None:
    """P4 (unreported) gets D 5 and a unit P5 is added: written. The intake then takes a report for P5
    (it judged by the first definition and refused it as an unknown unit) and the tally counts P4 with 5."""
    data, token = reported
    amended = _again(_definition(data))
    _unit(amended, "P4")["delegates"] = 5
    amended["payload"]["units"].append({**_unit(amended, "P4"), "unit_id": "P5", "name": "P5", "delegates": 2})
    done = _append(data, token, tmp_path, amended)
    assert done.returncode == 0, done.stderr
    for unit in ("P4", "P5"):
        sent = _caucus(data, "report", "--unit", unit, "--attendance", "40", "--first", "B=40", "--final", "B=40",
                       "--key", f"after-{unit}", token=token)
        assert sent.returncode == 0, sent.stderr
    assert _caucus(data, "project", "--until-caught-up", "-q").returncode == 0
    units = {u: json.loads(_caucus(data, "tally", "--unit", u, "--json").stdout) for u in ("P4", "P5")}
    assert "5" in json.dumps(units["P4"]) and units["P5"], units


def test_a_published_amendment_may_reweight_but_not_change_a_reported_units_d(reported: tuple[Path, str],
                                                                               tmp_path: Path) -> None:
    """A release that amends a definition is a published record (the 2020 history holds one, re-weighting
    satellites): an SDE weight may change. Any official can write on the import channel, so a reported
    unit's D may not change there either."""
    data, token = reported
    amended = _again(_definition(data), channel="import", actor="idp-results-site")
    _unit(amended, "P3")["delegates"] = 600
    done = _append(data, token, tmp_path, amended)
    assert done.returncode == 1 and "units.P3.delegates: DELEGATES_CHANGED" in done.stderr, done.stderr
    reweighted = _again(_definition(data), channel="import", actor="idp-results-site")
    _unit(reweighted, "P3")["sde_weight"] = {"numerator": 1000, "denominator": 1}  # P3 is no satellite
    done = _append(data, token, tmp_path, reweighted)
    assert done.returncode == 1 and "units.P3.sde_weight: UNIT_CHANGED" in done.stderr, done.stderr
    with_satellite = _again(_definition(data))
    with_satellite["payload"]["satellite_groups"] = [{"group_id": "g", "name": "G", "sde_pool": {"numerator": 3,
                                                      "denominator": 2}, "attendance_base": 40}]
    with_satellite["payload"]["units"].append({"unit_id": "S1", "name": "S1", "county_id": "lee", "delegates": None,
                                               "satellite_group": "g", "short_name": None, "sde_weight": None})
    assert _append(data, token, tmp_path, with_satellite).returncode == 0
    sent = _caucus(data, "report", "--unit", "S1", "--attendance", "10", "--first", "A=10", "--final", "A=10",
                   "--key", "s1", token=token)
    assert sent.returncode == 0, sent.stderr
    amended = _again(with_satellite, channel="import", actor="idp-results-site")
    _unit(amended, "S1")["sde_weight"] = {"numerator": 1, "denominator": 4}
    done = _append(data, token, tmp_path, amended)
    assert done.returncode == 0, done.stderr


def test_a_definition_with_a_unit_id_is_refused(reported: tuple[Path, str], tmp_path: Path) -> None:
    """The projections fold such an event into the unit, where it changes nothing; the intake took it as the
    election's definition, and a later redefinition (D 6 -> 600 for a reported unit) was then compared with it."""
    data, token = reported
    ghost = _again(_definition(data), unit_id="ZZ")
    _unit(ghost, "P4")["delegates"] = 600
    done = _append(data, token, tmp_path, ghost)
    assert done.returncode == 1 and "unit_id: NOT_AN_ELECTION_RECORD" in done.stderr, done.stderr
    state = _state(_event(_definition_payload()))
    state.apply(_event(_definition_payload(units=(UnitDefinition("P1", "P1", "lee", 600),)), unit="ZZ"))
    info = state.election("e")
    assert info is not None and info.units["P1"].delegates == 4 and "S1" in info.units


def test_a_certification_of_an_undefined_election_is_refused(reported: tuple[Path, str], tmp_path: Path) -> None:
    data, token = reported
    now = datetime.now(UTC).isoformat()
    cert = {"actor": "official:Bob", "channel": "system", "election_id": "nowhere", "unit_id": "",
            "event_id": str(uuid.uuid4()), "idempotency_key": "cert-nowhere", "occurred_at": now, "recorded_at": now,
            "schema_version": 1, "type": "ResultsCertified", "payload": {"authority": "", "statement": "done"}}
    done = _append(data, token, tmp_path, cert)
    assert done.returncode == 1, done.stdout
    assert "election_id: UNKNOWN_ELECTION" in done.stderr and "payload.authority: REQUIRED" in done.stderr, done.stderr
    good = _append(data, token, tmp_path, {**cert, "election_id": "e", "idempotency_key": "cert-e",
                                            "event_id": str(uuid.uuid4()), "payload": {"authority": "IDP", "statement": ""}})
    assert good.returncode == 0, good.stderr


def test_a_checkpoint_must_be_signed_by_the_key_it_names(reported: tuple[Path, str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A forged or zeroed checkpoint is refused; the genuine one restores into a fresh log with the
    records it covers, and that log verifies."""
    data, token = reported
    _key_home_of_its_own(tmp_path / "keys", monkeypatch)
    signed = _caucus(data, "checkpoint", "--json", token=token)
    assert signed.returncode == 0, signed.stderr
    history = _log(data)
    checkpoint = next(e for e in history if e["type"] == "CheckpointSigned")
    forged = copy.deepcopy(checkpoint)
    forged.pop("position"), forged.pop("record_headers", None)
    forged["event_id"] = forged["idempotency_key"] = str(uuid.uuid4())
    signature = bytes.fromhex(forged["payload"]["signature"]) if isinstance(forged["payload"]["signature"], str) else None
    assert signature is not None, forged["payload"]
    forged["payload"]["signature"] = bytes(64).hex()
    done = _append(data, token, tmp_path, forged)
    assert done.returncode == 1 and "payload.signature: CHECKPOINT_SIGNATURE" in done.stderr, done.stderr
    fresh = str(uuid.uuid4())
    zeroed = {**forged, "event_id": fresh, "idempotency_key": fresh,
              "payload": {**forged["payload"], "partition_sizes": [], "partition_roots": [], "tree_size": 0}}
    done = _append(data, token, tmp_path, zeroed)
    assert done.returncode == 1 and "CHECKPOINT_MALFORMED" in done.stderr, done.stderr
    unit_bound = {**forged, "event_id": str(uuid.uuid4()), "unit_id": "P3", "payload": checkpoint["payload"]}
    unit_bound["idempotency_key"] = unit_bound["event_id"]
    done = _append(data, token, tmp_path, unit_bound)
    assert done.returncode == 1 and "unit_id: NOT_A_LOG_RECORD" in done.stderr, done.stderr
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(data, elsewhere)
    monkeypatch.setenv("CAUCUS_KEY_HOME", str(tmp_path / "other-keys"))
    assert _caucus(elsewhere, "checkpoint", "--json", "--public-key", str(tmp_path / "keys" / "checkpoint-key.pub"),
                   token=token).returncode == 0
    monkeypatch.setenv("CAUCUS_KEY_HOME", str(tmp_path / "keys"))
    self_signed = next(e for e in _log(elsewhere) if e["type"] == "CheckpointSigned" and e["event_id"] != checkpoint["event_id"])
    self_signed = {k: v for k, v in self_signed.items() if k not in ("position", "record_headers")}
    done = _append(data, token, tmp_path, self_signed)  # states this log, but signed by a key nobody trusts here
    assert done.returncode == 1 and "payload.key_id: CHECKPOINT_UNTRUSTED" in done.stderr, done.stderr
    restored = tmp_path / "restored"
    _, other = CredentialStore(restored / "credentials.json").issue("official", name="Restorer")
    genuine = [{k: v for k, v in e.items() if k not in ("position", "record_headers")} for e in history]
    assert _append(restored, other, tmp_path, *genuine).returncode == 0
    verified = _caucus(restored, "verify", "--json", "--public-key", str(tmp_path / "keys" / "checkpoint-key.pub"))
    report = json.loads(verified.stdout)
    assert report["checkpoints_verified"] == 1, report
    # The values verify against the signed trees; the restored records carry the restorer as their writer
    # (not what the checkpoint signed beside them), and verify says so rather than hiding it.
    assert {f["kind"] for f in report["findings"]} <= {"headers"}, report["findings"]


def _state(*events: Any) -> IntakeState:
    state = IntakeState()
    for event in events:
        state.apply(event)
    return state


def _definition_payload(**changes: Any) -> ElectionDefined:
    base = dict(name="E", rule_set="idp-2020", candidates=("A", "B", "C"),
                counties=(County("lee", "Lee", Fraction(21, 150)),),
                units=(UnitDefinition("P1", "P1", "lee", 4), UnitDefinition("S1", "S1", "lee", None, satellite_group="g"),
                       UnitDefinition("S2", "S2", "lee", None, satellite_group="g")),
                satellite_groups=(SatelliteGroup("g", "G", Fraction(3, 2), 100),))
    base.update(changes)
    return ElectionDefined(**base)  # type: ignore[arg-type]


def _event(payload: Any, unit: str = "") -> Any:
    return new_event(payload, election_id="e", unit_id=unit, actor="t", channel=Channel.APP, idempotency_key=str(uuid.uuid4()))


def test_the_rule_as_a_table() -> None:
    """Each change against a state where P1 reported (naming A and B) and S1 only opened."""
    first = _definition_payload()
    result = Result(first_alignment={"A": 10, "B": 5}, final_alignment={"A": 10, "B": 5}, attendance=15)
    state = _state(_event(first), _event(ResultReported(result=result, reporter="c"), "P1"), _event(UnitOpened(attendance=9), "S1"))
    units = {u.unit_id: u for u in first.units}

    def codes(**changes: Any) -> set[str]:
        return {p.code for p in redefinition_problems(_definition_payload(**changes), "e", state)}

    assert codes() == set()
    assert codes(candidates=("A", "B")) == set()  # C is named by no result
    assert codes(candidates=("A", "C")) == {"CANDIDATE_REMOVED"}
    assert codes(units=(units["P1"], units["S1"])) == set()  # S2: neither opened nor reported
    assert codes(units=(units["S1"], units["S2"])) == {"UNIT_REMOVED"}
    changed_s2 = UnitDefinition("S2", "S2", "lee", None, satellite_group="g", sde_weight=Fraction(1, 3))
    assert codes(units=(units["P1"], units["S1"], changed_s2)) == set()
    opened_moved = UnitDefinition("S1", "S1", "lee", 1)
    assert codes(units=(units["P1"], opened_moved, units["S2"])) == {"UNIT_CHANGED", "DELEGATES_CHANGED"}
    assert codes(satellite_groups=(SatelliteGroup("g", "G", Fraction(3, 2), 120),)) == {"GROUP_CHANGED"}  # S1 opened
    assert codes(counties=(County("lee", "Lee", Fraction(1, 7)),)) == {"COUNTY_RATIO_CHANGED"}
    assert codes(rule_set="idp-2016") == {"RULE_SET_CHANGED"}
    assert redefinition_problems(first, "other", state) == ()  # no standing definition: nothing to amend
    weighed_s1 = UnitDefinition("S1", "S1", "lee", None, satellite_group="g", sde_weight=Fraction(3, 4))
    (weighed,) = redefinition_problems(_definition_payload(units=(units["P1"], weighed_s1, units["S2"])), "e", state)
    assert weighed.code == "SDE_WEIGHT_CHANGED" and "Fraction" not in weighed.message, weighed  # as the input writes it
    assert weighed.message.endswith("from none (its share of the group's pool) to \"3/4\""), weighed.message


def test_the_intake_judges_by_the_latest_definition() -> None:
    state = _state(_event(_definition_payload()))
    later = _definition_payload(units=(UnitDefinition("P1", "P1", "lee", 4), UnitDefinition("P9", "P9", "lee", 2)))
    state.apply(_event(later))
    info = state.election("e")
    assert info is not None and set(info.units) == {"P1", "P9"}
    assert state.elections_of_unit("P9") == ["e"] and state.elections_of_unit("S1") == []
    again = IntakeState.from_snapshot(json.loads(json.dumps(state.to_snapshot())))
    assert set(again.elections["e"].units) == {"P1", "P9"}


def test_a_checkpoint_of_another_log_is_refused(reported: tuple[Path, str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Validly signed, by this ledger's own key, but over another log: `caucus verify` would report
    tampering on every run after it. Its roots are checked against this log's records."""
    data, token = reported
    _key_home_of_its_own(tmp_path / "keys", monkeypatch)
    other = tmp_path / "other"
    _, other_token = CredentialStore(other / "credentials.json").issue("official", name="Ann")
    for args in (["define", str(tmp_path / "el.json")],
                 ["report", "--unit", "P4", "--attendance", "9", "--first", "B=9", "--final", "B=9", "--key", "x"]):
        assert _caucus(other, *args, token=other_token).returncode == 0
    assert _caucus(other, "checkpoint", "--json", token=other_token).returncode == 0
    foreign = next(e for e in _log(other) if e["type"] == "CheckpointSigned")
    foreign = {k: v for k, v in foreign.items() if k not in ("position", "record_headers")}
    foreign["recorded_at"] = foreign["occurred_at"] = datetime.now(UTC).isoformat()
    done = _append(data, token, tmp_path, foreign)
    assert done.returncode == 1 and "CHECKPOINT_MISMATCH" in done.stderr, done.stderr
    assert _caucus(data, "verify", "--json").returncode == 0


def test_a_copy_of_a_logged_command_under_a_new_id_is_refused(reported: tuple[Path, str], tmp_path: Path) -> None:
    """The intake answers a retry with the event it recorded; under a new event id the tallies would
    fold the copy again, over what came after it: P3's original report copied back after its correction
    reverted the correction."""
    data, token = reported
    genuine = next(e for e in _log(data) if e["type"] == "ResultReported")
    corrected = _caucus(data, "correct", "--unit", "P3", "--supersedes", genuine["event_id"], "--attendance", "60",
                        "--first", "A=20,B=40", "--final", "A=20,B=40", "--reason", "recount", "--authority", "county chair", "--stage", "recount",
                        "--key", "p3-fix", token=token)
    assert corrected.returncode == 0, corrected.stderr
    before = _state_tally(data)
    for recorded_at in ("2020-01-01T00:00:00+00:00", datetime.now(UTC).isoformat()):
        copy_of = _again(genuine, idempotency_key=genuine["idempotency_key"], recorded_at=recorded_at)
        done = _append(data, token, tmp_path, copy_of)
        assert done.returncode == 1 and "idempotency_key: ALREADY_RECORDED" in done.stderr, done.stderr
    assert _state_tally(data) == before


def test_a_number_no_encoder_can_write_is_named_not_an_internal_error(reported: tuple[Path, str], tmp_path: Path) -> None:
    data, token = reported
    now = datetime.now(UTC).isoformat()
    cert = {"actor": "official:Bob", "channel": "system", "election_id": "e", "unit_id": "", "event_id": str(uuid.uuid4()),
            "idempotency_key": "cert", "occurred_at": now, "recorded_at": now, "schema_version": 1,
            "type": "UnitOpened", "payload": {"attendance": 2**70}}
    done = _append(data, token, tmp_path, {**cert, "unit_id": "P4"})
    # judged before it is encoded: too large for the intake first, a refusal naming the field and the rule
    assert done.returncode == 1 and "line 1" in done.stderr and "attendance: TOO_LARGE" in done.stderr, done.stderr
    zero = bytes(32).hex()
    huge = {**cert, "type": "CheckpointSigned", "schema_version": 3, "election_id": "", "payload": {
        "tree_size": 2**70, "root_hash": zero, "key_id": "0" * 16, "public_key": zero, "signature": bytes(64).hex(),
        "scope": "", "partition_sizes": [2**70], "partition_roots": [zero], "timestamp_micros": 0, "column_roots": [],
        "column_signature": ""}}
    done = _append(data, token, tmp_path, huge)
    assert done.returncode == 1 and "line 1" in done.stderr and "CHECKPOINT_MALFORMED" in done.stderr, done.stderr
    assert "internal error" not in done.stderr
    for blank in ("\u00a0\u200b", "\u3164"):  # a Hangul filler is a letter by its category, blank on screen
        invisible = {**cert, "type": "ResultsCertified", "payload": {"authority": blank, "statement": ""}}
        done = _append(data, token, tmp_path, invisible)
        assert done.returncode == 1 and "payload.authority: REQUIRED" in done.stderr, done.stderr


def test_an_instant_the_log_cannot_read_back_is_refused(reported: tuple[Path, str], tmp_path: Path) -> None:
    """9999-12-31T23:59:59-14:00 is valid ISO 8601 but past the last UTC year: written, it made every
    later read of the log fail. A time without a UTC offset is no instant at all."""
    data, token = reported
    before = _log_size(data)
    late = _again(next(e for e in _log(data) if e["type"] == "ResultReported"), unit_id="P4",
                  occurred_at="9999-12-31T23:59:59-14:00")
    done = _append(data, token, tmp_path, late)
    assert done.returncode == 2 and "line 1" in done.stderr and "internal error" not in done.stderr, done.stderr
    naive = {**late, "occurred_at": late["recorded_at"], "recorded_at": "2026-11-26T21:10:00"}
    done = _append(data, token, tmp_path, naive)
    assert done.returncode == 2 and "recorded_at" in done.stderr and "no UTC offset" in done.stderr, done.stderr
    sent = _caucus(data, "report", "--unit", "P4", "--attendance", "9", "--first", "B=9", "--final", "B=9", "--key", "late",
                   "--occurred-at", "9999-12-31T23:59:59-14:00", token=token)
    said = sent.stdout + sent.stderr
    assert sent.returncode == 1 and "occurred_at" in said and "years 1 to 9999" in said and "internal error" not in said, said
    assert "TIME_OUT_OF_RANGE" in said and "Value error" not in said, said  # our words and code, not the validator library's
    assert _log_size(data) == before + 1  # the refusal is recorded; nothing else
    assert _caucus(data, "log", "tail", "--json").returncode == 0


def test_a_unit_with_a_toss_and_no_result_may_not_be_removed_or_recounted(reported: tuple[Path, str], tmp_path: Path) -> None:
    """A toss may be recorded before the unit's result. A redefinition that removed such a unit left the
    accepted toss belonging to no unit, with no finding; one that changed its D changed the tie it settles."""
    data, token = reported
    tossed = _caucus(data, "toss", "P4", "--contender", "A,B", "--seats", "1", "--winner", "B", "--method", "coin",
                     "--caller", "A", token=token)  # fmt: skip
    assert tossed.returncode == 0, tossed.stdout + tossed.stderr
    removed = _again(_definition(data))
    removed["payload"]["units"] = [u for u in removed["payload"]["units"] if u["unit_id"] != "P4"]
    done = _append(data, token, tmp_path, removed)
    assert done.returncode == 1 and "UNIT_REMOVED" in done.stderr and "coin toss" in done.stderr, done.stderr
    changed = _again(_definition(data))
    _unit(changed, "P4")["delegates"] = 5
    done = _append(data, token, tmp_path, changed)
    assert done.returncode == 1 and "units.P4.delegates: DELEGATES_CHANGED" in done.stderr, done.stderr


def test_a_candidate_named_only_by_a_toss_may_not_be_removed(reported: tuple[Path, str], tmp_path: Path) -> None:
    """P4 has no result, only a toss between A and B; a redefinition without B would leave the toss naming
    a candidate the election no longer has."""
    data, token = reported
    tossed = _caucus(data, "toss", "P4", "--contender", "A,B", "--seats", "1", "--winner", "B", "--method", "coin",
                     "--caller", "A", token=token)  # fmt: skip
    assert tossed.returncode == 0, tossed.stdout + tossed.stderr
    amended = _again(_definition(data))
    amended["payload"]["candidates"] = ["A"]
    done = _append(data, token, tmp_path, amended)
    assert done.returncode == 1 and "CANDIDATE_REMOVED" in done.stderr and "'B'" in done.stderr, done.stderr

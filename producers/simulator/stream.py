"""The simulated election as the intake would receive it: a time-ordered stream of commands.

Each command is a plain JSON-able body in the shape ``producers.commands`` parses (``DefineElection``,
``OpenUnit``, ``ReportResult``, ``RecordTie``, ``CorrectResult``), plus what the simulator expects the
intake to answer (``accepted``, ``refused`` or ``duplicate``). Malformed submissions carry the raw
text a careless client would send (a negative count, a count as a string, a missing field, truncated
JSON, an unknown unit or field), each followed by the chair's corrected resend. A correction names
the report it replaces by that report's idempotency key (``supersedes_key``): the event id it must
quote is only known from the intake's receipt, so the driver fills it in when it sends.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from producers.simulator.model import Caucus, SimElection, UnitStory

__all__ = ["SimCommand", "command_stream", "define_body", "result_fields"]

Expect = str  # "accepted" | "refused" | "duplicate"


@dataclass(frozen=True, slots=True)
class SimCommand:
    seq: int
    at: datetime
    kind: str  # define | open | report | toss | correct
    unit_id: str
    idempotency_key: str
    body: dict[str, Any] | None
    expect: Expect
    defect: str | None = None
    text: str | None = None  # the raw input when it is not a JSON document of ``body``
    supersedes_key: str | None = None
    tags: tuple[str, ...] = field(default=())

    def payload(self, supersedes: str | None = None) -> str:
        """The text to send; for a correction, ``supersedes`` is the event id from the report's receipt."""
        if self.text is not None:
            return self.text
        body = dict(self.body or {})
        if self.supersedes_key is not None:
            body["supersedes"] = supersedes or f"unresolved:{self.supersedes_key}"
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq, "at": self.at.isoformat(), "kind": self.kind, "unit_id": self.unit_id,
            "idempotency_key": self.idempotency_key, "expect": self.expect, "defect": self.defect,
            "body": self.body, "text": self.text, "supersedes_key": self.supersedes_key,
        }  # fmt: skip


def _ratio(value: Any) -> str:
    return f"{value.numerator}/{value.denominator}"


def define_body(election: SimElection) -> dict[str, Any]:
    return {
        "election_id": election.election_id,
        "name": election.name,
        "rule_set": "idp-2020",
        "candidates": list(election.config.candidates),
        "counties": [{"county_id": c.county_id, "name": c.name, "sde_ratio": _ratio(c.sde_ratio)} for c in election.counties]
        + [{"county_id": f"{g.group_id}-sites", "name": f"{g.name} sites", "sde_ratio": "0"} for g in election.groups],
        "units": [_unit_body(u) for u in election.units],
        "satellite_groups": [{"group_id": g.group_id, "name": g.name, "sde_pool": _ratio(g.sde_pool),
                              "attendance_base": g.attendance_base} for g in election.groups],  # fmt: skip
        "idempotency_key": f"{election.election_id}-define",
        "occurred_at": election.defined_at.isoformat(),
    }


def _unit_body(unit: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"unit_id": unit.unit_id, "name": unit.name, "county_id": unit.county_id}
    if unit.delegates is not None:
        body["delegates"] = unit.delegates
    if unit.satellite_group is not None:
        body["satellite_group"] = unit.satellite_group
        body["sde_weight"] = _ratio(unit.sde_weight)
    return body


def digest(election_id: str, unit_id: str, caucus: Caucus) -> str:
    """A stand-in for the SHA-256 of the signed worksheet photo."""
    text = json.dumps([election_id, unit_id, caucus.first, caucus.final, caucus.delegates], sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def result_fields(election_id: str, unit_id: str, caucus: Caucus) -> dict[str, Any]:
    return {
        "first_alignment": dict(caucus.first),
        "final_alignment": dict(caucus.final),
        "attendance": caucus.attendance,
        "delegates_reported": dict(caucus.delegates),
        "worksheet_digest": digest(election_id, unit_id, caucus),
    }


def _malformed(defect: str, body: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """A broken variant of a report body and the text a careless client would send."""
    bad = json.loads(json.dumps(body))
    some = sorted(bad["first_alignment"])[0]
    if defect == "negative_count":
        bad["first_alignment"][some] = -3
    elif defect == "count_as_string":
        bad["final_alignment"][some] = str(bad["final_alignment"][some])
    elif defect == "missing_field":
        del bad["final_alignment"]
    elif defect == "unknown_unit":
        bad["unit_id"] = f"{bad['unit_id']}9"
    elif defect == "unknown_field":
        bad["precinct_notes"] = "coffee ran out at 8"
    text = json.dumps(bad, sort_keys=True, separators=(",", ":"))
    if defect == "broken_json":
        return None, text[: len(text) // 2]
    return bad, text


def _unit_commands(election: SimElection, story: UnitStory) -> list[tuple[datetime, dict[str, Any]]]:
    eid, unit_id = election.election_id, story.unit.unit_id
    key = f"{eid}-{unit_id}"
    out: list[tuple[datetime, dict[str, Any]]] = []
    out.append((story.opened_at, {"kind": "open", "key": f"{key}-open", "expect": "accepted", "body": {
        "election_id": eid, "unit_id": unit_id, "attendance": story.caucus.attendance,
        "idempotency_key": f"{key}-open", "occurred_at": story.opened_at.isoformat()}}))  # fmt: skip
    report = {"election_id": eid, "unit_id": unit_id, **result_fields(eid, unit_id, story.caucus),
              "reporter": f"chair-{unit_id}", "idempotency_key": f"{key}-report",
              "occurred_at": story.reported_at.isoformat()}  # fmt: skip
    if story.defect is not None:
        bad, text = _malformed(story.defect, {**report, "idempotency_key": f"{key}-report-attempt1"})
        out.append((story.reported_at - timedelta(seconds=90), {"kind": "report", "key": f"{key}-report-attempt1",
                    "expect": "refused", "defect": story.defect, "body": bad, "text": text}))  # fmt: skip
    out.append((story.reported_at, {"kind": "report", "key": f"{key}-report", "expect": "accepted", "body": report}))
    if story.duplicate:
        out.append((story.reported_at + timedelta(seconds=45), {"kind": "report", "key": f"{key}-report",
                    "expect": "duplicate", "body": report, "tags": ("retry",)}))  # fmt: skip
    for n, toss in enumerate(story.caucus.tosses, 1):
        at = story.reported_at + timedelta(minutes=2 * n)
        out.append((at, {"kind": "toss", "key": f"{key}-toss{n}", "expect": "accepted", "body": {
            "election_id": eid, "unit_id": unit_id, "contenders": list(toss.contenders), "seats": toss.seats,
            "winners": list(toss.winners), "method": toss.method, "caller": f"chair-{unit_id}",
            "witnesses": [f"secretary-{unit_id}"], "reason": toss.reason, "idempotency_key": f"{key}-toss{n}",
            "occurred_at": at.isoformat()}}))  # fmt: skip
    if story.correction is not None:
        c = story.correction
        out.append((c.at, {"kind": "correct", "key": f"{key}-correct", "expect": "accepted", "supersedes_key": f"{key}-report",
                           "body": {"election_id": eid, "unit_id": unit_id, **result_fields(eid, unit_id, c.caucus),
                                    "reason": c.reason, "authority": "state party recanvass committee",
                                    "stage": c.stage, "idempotency_key": f"{key}-correct",
                                    "occurred_at": c.at.isoformat()}}))  # fmt: skip
    return out


def command_stream(election: SimElection) -> list[SimCommand]:
    """Every command in the order it would arrive (by time; a unit's own commands keep their order)."""
    timed: list[tuple[datetime, str, int, dict[str, Any]]] = []
    for story in election.stories:
        for n, (at, spec) in enumerate(_unit_commands(election, story)):
            timed.append((at, story.unit.unit_id, n, spec))
    timed.sort(key=lambda item: (item[0], item[1], item[2]))
    define = define_body(election)
    out = [SimCommand(0, election.defined_at, "define", "", define["idempotency_key"], define, "accepted")]
    for seq, (at, unit_id, _, spec) in enumerate(timed, 1):
        out.append(SimCommand(seq, at, spec["kind"], unit_id, spec["key"], spec.get("body"), spec["expect"],
                              spec.get("defect"), spec.get("text"), spec.get("supersedes_key"), spec.get("tags", ())))  # fmt: skip
    return out

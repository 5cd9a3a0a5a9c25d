"""Events as JSON for people and programs (``log tail --json``, recount packages, subscribers).

The JSON form is the Avro record with readable leaves: times in ISO 8601 UTC, bytes in hex, ratios as
``{"numerator", "denominator"}``. It round-trips: ``event_from_json(event_to_json(e)) == e``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ledger.events import PAYLOAD_TYPES, Channel, Envelope, Event
from ledger.journal import LoggedEvent

__all__ = ["event_to_json", "event_from_json", "event_as_given", "event_summary", "unknown_fields"]

_BYTES_FIELDS = {
    "CheckpointSigned": ("root_hash", "public_key", "signature", "partition_roots", "column_roots", "column_signature"),
    "SubmissionRejected": ("raw_bytes",),
}


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def event_to_json(item: Event[Any] | LoggedEvent) -> dict[str, Any]:
    event = item.event if isinstance(item, LoggedEvent) else item
    env = event.envelope
    out: dict[str, Any] = {
        "event_id": env.event_id,
        "type": event.type,
        "schema_version": event.payload.VERSION,
        "election_id": env.election_id,
        "unit_id": env.unit_id,
        "occurred_at": env.occurred_at.isoformat(),
        "recorded_at": env.recorded_at.isoformat(),
        "actor": env.actor,
        "channel": env.channel.value,
        "idempotency_key": env.idempotency_key,
        "payload": _jsonable(event.payload.to_avro()),
    }
    if isinstance(item, LoggedEvent):
        out["position"] = str(item.position)
    return out


def event_from_json(data: Mapping[str, Any]) -> Event[Any]:
    type_name = data["type"]
    if type_name not in PAYLOAD_TYPES:
        raise ValueError(f"type: unknown event type {type_name!r}; known: {', '.join(sorted(PAYLOAD_TYPES))}")
    payload = dict(data["payload"])
    for name in _BYTES_FIELDS.get(type_name, ()):
        if name in payload:
            value = payload[name]
            payload[name] = [bytes.fromhex(v) for v in value] if isinstance(value, list) else bytes.fromhex(value)
    envelope = Envelope(
        event_id=data["event_id"],
        election_id=data["election_id"],
        unit_id=data["unit_id"],
        occurred_at=datetime.fromisoformat(data["occurred_at"]),
        recorded_at=datetime.fromisoformat(data["recorded_at"]),
        actor=data["actor"],
        channel=Channel(data["channel"]),
        idempotency_key=data["idempotency_key"],
    )
    return Event(envelope, PAYLOAD_TYPES[type_name].from_avro(_with_defaults(type_name, payload)))


def event_as_given(data: Mapping[str, Any]) -> Event[Any]:
    """``event_from_json`` for a line that must be written as given (``caucus log append``): a field the
    event does not have is a ValueError naming it, not left out. ``position`` and ``record_headers``
    (``log tail --json`` prints them) are where the log puts the event, not part of it."""
    bad = bad_ratio(data.get("payload"), "payload")
    if bad:
        raise ValueError(bad)
    event = event_from_json(data)
    extra = unknown_fields({k: v for k, v in data.items() if k not in ("position", "record_headers")}, event_to_json(event))
    if extra:
        raise ValueError(f"unknown field {', '.join(extra)} (it would be left out; `caucus log tail --json` shows an "
                         "event's fields)")
    return event


_RATIO_FIELDS = frozenset({"sde_ratio", "sde_pool", "sde_weight"})
"""The fields of a definition that hold a ratio (``ledger.event_values.ratio_to_avro``)."""


def bad_ratio(value: Any, path: str) -> str | None:
    """The first ratio in ``value`` (``{"numerator": n, "denominator": d}`` under one of ``_RATIO_FIELDS``,
    as ``log tail --json`` prints a definition) that cannot be read as a fraction (terms not whole
    numbers, a zero denominator), named by its field: read as a ``Fraction``, it was a bare
    "ZeroDivisionError: Fraction(1, 0)" that named none. A negative ratio reads, and is refused by the
    definition's checks with the rest of its problems. Only those fields: counts keyed by candidates
    named "numerator" and "denominator" are counts."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}"
            if key in _RATIO_FIELDS and isinstance(item, Mapping) and set(item) == {"numerator", "denominator"}:
                n, d = item["numerator"], item["denominator"]
                if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, d)) or d == 0:
                    return (f"field {where!r} must be a ratio of whole numbers with a denominator other than 0; got "
                            f"{json.dumps(dict(item), sort_keys=True)}")
            elif (found := bad_ratio(item, where)) is not None:
                return found
        return None
    if isinstance(value, list):
        return next((b for i, v in enumerate(value) if (b := bad_ratio(v, f"{path}[{i}]"))), None)
    return None


def unknown_fields(given: Any, known: Any, path: str = "") -> list[str]:
    """The fields of ``given`` (an event's JSON as read) that ``known`` (the same event rendered again
    by ``event_to_json``) does not have, as dotted paths. ``event_from_json`` reads the fields it knows
    and ignores the rest: a misspelt ``delegates_reportd`` was dropped, and the event written without it."""
    if isinstance(given, Mapping) and isinstance(known, Mapping):
        out: list[str] = []
        for key, value in given.items():
            where = f"{path}.{key}" if path else str(key)
            out.extend([where] if key not in known else unknown_fields(value, known[key], where))
        return out
    if isinstance(given, list) and isinstance(known, list):
        return [f for i, (g, k) in enumerate(zip(given, known)) for f in unknown_fields(g, k, f"{path}[{i}]")]
    return []


def _with_defaults(type_name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Tolerate JSON that leaves out optional fields, as the Avro schemas do."""
    if type_name in ("ResultReported", "ResultCorrected"):
        result = dict(payload["result"])
        for key in ("attendance", "delegates_reported", "worksheet_digest"):
            result.setdefault(key, None)
        payload["result"] = result
        payload.setdefault("warnings", [])
    return payload


def event_summary(item: LoggedEvent) -> str:
    """One line a person can scan: position, time, type, election/unit, actor. An event that names no
    election (a submission refused before it could be attributed) says so: no tally counts it."""
    e = item.event
    when = e.recorded_at.strftime("%Y-%m-%d %H:%M:%S")
    election = e.envelope.election_id or "(no election)"
    where = f"{election}/{e.unit_id}" if e.unit_id else election
    return f"{str(item.position):>9}  {when}  {e.type:<18} {where:<30} {e.envelope.actor} via {e.envelope.channel.value}"

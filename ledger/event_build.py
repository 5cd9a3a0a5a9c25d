"""Events built straight from the values a compiled reader (``ledger.avro_reader``) reads, for the
decoder's hot path.

Why: a rebuild decodes every event of the log, and the frozen dataclasses' generated ``__init__``
(keyword arguments, one ``object.__setattr__`` per field, ``__post_init__`` copying each alignment
into sorted order again) cost as much as reading the bytes. These builders set the same slots to the same values in
one step; the objects are the ones ``Envelope(...)`` and ``from_avro`` make, field for field (the
property test in ``tests/ledger/test_fast_decode.py`` holds them to it). The alignment maps are
kept in sorted candidate order, as ``Result`` keeps them.

Only the event types a fold reads for every unit have their own builder; the others are built from
the record dict by their ``from_avro``, like the generic path does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ledger.event_values import Channel, CorrectionStage, Problem, Result
from ledger.events import Envelope, Event, Payload, ResultCorrected, ResultReported, UnitOpened

__all__ = ["builders_for"]

_new = object.__new__
_proxy = MappingProxyType


def _setters(cls: type, *fields: str) -> tuple[Callable[[Any, Any], None], ...]:
    """The slots' own setters: what a frozen dataclass's ``__init__`` reaches through
    ``object.__setattr__``, without the attribute lookup per field."""
    return tuple(cls.__dict__[name].__set__ for name in fields)


_ENV = _setters(Envelope, "event_id", "election_id", "unit_id", "occurred_at", "recorded_at", "actor", "channel",
                "idempotency_key")
_RES = _setters(Result, "first_alignment", "final_alignment", "attendance", "delegates_reported", "worksheet_digest")
_PRB = _setters(Problem, "field", "code", "message")
_EVT = _setters(Event, "envelope", "payload")
_RR = _setters(ResultReported, "result", "reporter", "warnings")
_UO = _setters(UnitOpened, "attendance")
_STAGES = {stage.value: stage for stage in CorrectionStage}


def _sorted(counts: dict[str, int]) -> Mapping[str, int]:
    """``Result``'s canonical order (sorted candidates); a record written by this ledger already has it."""
    keys = list(counts)
    if keys == sorted(keys):
        return _proxy(counts)
    return _proxy({k: counts[k] for k in sorted(keys)})


def _envelope(event_id: str, _type: str, _version: int, election_id: str, unit_id: str, occurred_at: Any,
              recorded_at: Any, actor: str, channel: Channel, idempotency_key: str) -> Envelope:
    env = _new(Envelope)
    s0, s1, s2, s3, s4, s5, s6, s7 = _ENV
    s0(env, event_id)
    s1(env, election_id)
    s2(env, unit_id)
    s3(env, occurred_at)
    s4(env, recorded_at)
    s5(env, actor)
    s6(env, channel)
    s7(env, idempotency_key)
    return env


def _result(first: dict[str, int], final: dict[str, int], attendance: int | None,
            delegates: dict[str, int] | None, digest: str | None) -> Result:
    result = _new(Result)
    s0, s1, s2, s3, s4 = _RES
    s0(result, _sorted(first))
    s1(result, _sorted(final))
    s2(result, attendance)
    s3(result, None if delegates is None else _sorted(delegates))
    s4(result, digest)
    return result


def _problem(field: str, code: str, message: str) -> Problem:
    problem = _new(Problem)
    s0, s1, s2 = _PRB
    s0(problem, field)
    s1(problem, code)
    s2(problem, message)
    return problem


def _event(envelope: Envelope, payload: Payload) -> Event[Any]:
    event: Event[Any] = _new(Event)
    _EVT[0](event, envelope)
    _EVT[1](event, payload)
    return event


def _result_reported(envelope: Envelope, result: Result, reporter: str, warnings: list[Problem]) -> Event[Any]:
    payload = _new(ResultReported)
    s0, s1, s2 = _RR
    s0(payload, result)
    s1(payload, reporter)
    s2(payload, tuple(warnings))
    return _event(envelope, payload)


def _result_corrected(envelope: Envelope, result: Result, supersedes: str, reason: str, authority: str, stage: str,
                      warnings: list[Problem]) -> Event[Any]:
    payload = ResultCorrected(result, supersedes, reason, authority, _STAGES[stage], tuple(warnings))
    return _event(envelope, payload)


def _unit_opened(envelope: Envelope, attendance: int | None) -> Event[Any]:
    payload = _new(UnitOpened)
    _UO[0](payload, attendance)
    return _event(envelope, payload)


_HOT: dict[str, tuple[type[Payload], Callable[..., Event[Any]], bool]] = {
    # type: (its payload class, its builder, whether its schema holds a Result and Problems)
    "ResultReported": (ResultReported, _result_reported, True),
    "ResultCorrected": (ResultCorrected, _result_corrected, True),
    "UnitOpened": (UnitOpened, _unit_opened, False),
}


def _generic(cls: type[Payload], names: list[str]) -> Callable[..., Event[Any]]:
    def build(envelope: Envelope, *values: Any) -> Event[Any]:
        return _event(envelope, cls.from_avro(dict(zip(names, values, strict=True))))

    return build


def builders_for(type_name: str, cls: type[Payload], parsed: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``compile_reader`` calls per named type of ``type_name``'s schema (``parsed``): each
    record's values in field order, enum symbols turned into their Python values. None for a schema
    whose first field is not the envelope (not an event this module knows how to build)."""
    namespace = parsed["name"].rsplit(".", 1)[0]
    build: dict[str, Any] = {f"{namespace}.Envelope": _envelope, f"{namespace}.Channel": Channel}
    hot = _HOT.get(type_name)
    if hot is not None and hot[0] is cls:
        build[parsed["name"]] = hot[1]
        if hot[2]:
            build[f"{namespace}.Result"] = _result
            build[f"{namespace}.Problem"] = _problem
    elif parsed["fields"][0]["name"] == "envelope":
        names = [f["name"] for f in parsed["fields"][1:]]
        build[parsed["name"]] = _generic(cls, names)
    else:
        return None
    return build

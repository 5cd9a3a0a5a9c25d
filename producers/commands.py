"""What a producer may ask the ledger to record, as typed commands, and how raw input becomes one.

Every surface (CLI, HTTP, importers) hands the intake the input *as the sender sent it* (JSON text), so
that a refusal can be recorded verbatim and every surface gets the same errors. Parsing is strict on
purpose: ``"5"``, ``5.0`` and ``true`` are not head counts, unknown fields are mistakes, a JSON object
with the same key twice is refused instead of silently keeping the last value, and so is anything the
ledger could not record faithfully (``producers.strict_json``: nesting, NaN, lone surrogates). The dataclasses below are
also the published schema: their JSON Schema is what the HTTP service shows at ``/docs``.

Parsing only checks shape and types. Whether the unit exists, whether the numbers obey the caucus rules,
whether the unit already reported: that needs the ledger's state and lives in ``producers.validation``.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, AwareDatetime, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError,
                      WithJsonSchema)
from pydantic_core import PydanticCustomError

from ledger.events import Problem
from producers.identifiers import plain_id, plain_text, said, shown_name
from producers.strict_json import escaped, has_surrogates, load_json, quoted

__all__ = [
    "CommandKind",
    "MAX_COUNT",
    "CountySpec",
    "SatelliteGroupSpec",
    "UnitSpec",
    "DefineElection",
    "OpenUnit",
    "ReportResult",
    "CorrectResult",
    "RecordTie",
    "Command",
    "COMMAND_TYPES",
    "Parsed",
    "parse_command",
    "load_json",
    "claimable",
    "parse_ratio",
    "derive_key",
    "json_schema",
    "REJECTED_KEY_PREFIX",
]

MAX_COUNT = 1_000_000
"""Largest head count or delegate number accepted: far above any caucus, far below Avro's 32-bit int."""

REJECTED_KEY_PREFIX = "rejected:"
"""Idempotency keys of SubmissionRejected events start with this; senders may not use it."""

_STRICT = ConfigDict(extra="forbid", strict=True)

Count = Annotated[int, Field(ge=0, le=MAX_COUNT, description="a non-negative whole number")]
Text = Annotated[str, Field(min_length=1, max_length=200)]
Said = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(said)]
ShownName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(said), AfterValidator(shown_name)]
"""Free text a reader must be able to see: names, reasons, authorities, callers, witnesses."""
Ident = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^\S(.*\S)?$"), AfterValidator(plain_id)]
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(plain_text)]
"""A candidate's name (see ``producers.identifiers``)."""
Counts = dict[Name, Count]


def _ratio_given(value: Any) -> Any:
    """A ratio as the log prints one (``{"numerator": n, "denominator": d}``, ``caucus log tail --json``)
    read as the text "n/d", so a definition copied from the log defines again; anything but a whole
    number, text or that object is one error (the union's three, one per member, said it three times)."""
    if isinstance(value, Mapping) and set(value) == {"numerator", "denominator"} and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value.values()):
        if value["numerator"] < 0 or value["denominator"] < 1:  # said of the object sent, not of the text it reads as
            raise PydanticCustomError("bad_ratio", "must have a numerator of at least 0 and a denominator of at least 1, "
                                      "got {given}", {"given": _shown(dict(value))})
        return f"{value['numerator']}/{value['denominator']}"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise PydanticCustomError("bad_ratio", 'must be an exact ratio "n/d", a whole number, or {"numerator": n, '
                                  '"denominator": d} of whole numbers, got {given}', {"given": _shown(value)})
    return value


Ratio = Annotated[
    int | str,
    BeforeValidator(_ratio_given),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}, {
        "type": "object", "additionalProperties": False, "required": ["numerator", "denominator"],
        "properties": {"numerator": {"type": "integer", "minimum": 0}, "denominator": {"type": "integer", "minimum": 1}}}]}),
    Field(description='an exact ratio "n/d" (or a whole number, or {"numerator": n, "denominator": d} as the log '
                      'prints one), e.g. "21/150"', examples=["21/150"]),
]
Key = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]*$",
        description="chosen by the sender; sending the same command again with the same key is safe",
    ),
]
Digest = Annotated[
    str,
    Field(
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="SHA-256 of the signed worksheet image, as sha256:<64 lowercase hex>",
    ),
]
def _recordable(value: Any) -> Any:
    """An instant the log can record and read back: the codec stores UTC, and 9999-12-31T23:59-14:00
    (valid ISO 8601) is past the last UTC year a datetime holds; written, it made the log unreadable."""
    try:
        value.astimezone(UTC)
    except OverflowError as exc:
        raise PydanticCustomError("time_out_of_range", "is outside the instants the log can record (years 1 to 9999 in UTC)",
                                  {}) from exc
    return value


When = Annotated[AwareDatetime, Field(strict=False, description="ISO 8601 with a UTC offset"), AfterValidator(_recordable)]


class CommandKind(enum.StrEnum):
    DEFINE = "define"
    OPEN = "open"
    REPORT = "report"
    CORRECT = "correct"
    TOSS = "toss"


# -- election definition ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CountySpec:
    __pydantic_config__ = _STRICT
    county_id: Ident
    name: ShownName
    sde_ratio: Ratio


@dataclass(frozen=True)
class SatelliteGroupSpec:
    __pydantic_config__ = _STRICT
    group_id: Ident
    name: ShownName
    sde_pool: Ratio
    attendance_base: Count | None = None


@dataclass(frozen=True)
class UnitSpec:
    __pydantic_config__ = _STRICT
    unit_id: Ident
    name: ShownName
    county_id: Ident
    delegates: Annotated[
        Count | None,
        Field(description="D, the county delegates the unit elects; leave out for satellites (D follows attendance)"),
    ] = None
    satellite_group: Ident | None = None
    short_name: ShownName | None = None
    sde_weight: Ratio | None = None


@dataclass(frozen=True)
class DefineElection:
    """Reference data for an election: candidates, counties with exact SDE ratios, units, rule set."""

    __pydantic_config__ = _STRICT
    KIND = CommandKind.DEFINE
    election_id: Ident
    name: ShownName
    rule_set: Text
    candidates: Annotated[tuple[Name, ...], Field(min_length=1)]
    counties: tuple[CountySpec, ...]
    units: Annotated[tuple[UnitSpec, ...], Field(min_length=1)]
    idempotency_key: Key
    satellite_groups: tuple[SatelliteGroupSpec, ...] = ()
    occurred_at: When | None = None

    @property
    def unit_id(self) -> str:
        return ""


# -- unit commands ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenUnit:
    """The caucus opened; ``attendance`` is T, counted before the first alignment."""

    __pydantic_config__ = _STRICT
    KIND = CommandKind.OPEN
    unit_id: Ident
    idempotency_key: Key
    attendance: Count | None = None
    election_id: Ident | None = None
    occurred_at: When | None = None


@dataclass(frozen=True, kw_only=True)
class _ResultFields:
    """What a report and a correction both carry: the unit's numbers as on the worksheet."""

    __pydantic_config__ = _STRICT
    unit_id: Ident
    first_alignment: Counts
    final_alignment: Counts
    idempotency_key: Key
    attendance: Count | None = None
    delegates_reported: Counts | None = None
    worksheet_digest: Digest | None = None
    election_id: Ident | None = None
    occurred_at: When | None = None


@dataclass(frozen=True, kw_only=True)
class ReportResult(_ResultFields):
    """A unit's first report: both alignments, optionally T, the delegates awarded and the worksheet digest."""

    KIND = CommandKind.REPORT
    reporter: Annotated[Said | None, Field(description="who filled in the worksheet; defaults to the sender")] = None


@dataclass(frozen=True, kw_only=True)
class CorrectResult(_ResultFields):
    """Replaces the unit's current result; names the event it supersedes, why, and on whose authority."""

    KIND = CommandKind.CORRECT
    supersedes: Ident
    reason: Said
    authority: Said
    stage: Literal["review", "recanvass", "recount"]


@dataclass(frozen=True)
class RecordTie:
    """A coin toss (two groups) or drawing of lots (three or more) for contested seats. A tie is tossed
    once; an official redraws a settled tie only by naming the toss it replaces and giving a reason."""

    __pydantic_config__ = _STRICT
    KIND = CommandKind.TOSS
    unit_id: Ident
    contenders: Annotated[tuple[Name, ...], Field(min_length=2)]
    seats: Annotated[int, Field(ge=1, le=MAX_COUNT)]
    winners: Annotated[tuple[Name, ...], Field(min_length=1)]
    method: Literal["coin", "lots"]
    caller: Said
    idempotency_key: Key
    witnesses: tuple[Said, ...] = ()
    reason: Annotated[
        str,
        Field(max_length=2000, description="what the tie was about; for a redraw, why the settled toss is replaced (required)"),
    ] = ""
    supersedes: Annotated[
        Ident | None,
        Field(description="only to redraw a tie that is already settled (an official's correction): the event id of the toss that stands"),
    ] = None
    election_id: Ident | None = None
    occurred_at: When | None = None


Command = DefineElection | OpenUnit | ReportResult | CorrectResult | RecordTie

COMMAND_TYPES: dict[CommandKind, type[Any]] = {
    CommandKind.DEFINE: DefineElection,
    CommandKind.OPEN: OpenUnit,
    CommandKind.REPORT: ReportResult,
    CommandKind.CORRECT: CorrectResult,
    CommandKind.TOSS: RecordTie,
}

_ADAPTERS: dict[CommandKind, TypeAdapter[Any]] = {kind: TypeAdapter(cls) for kind, cls in COMMAND_TYPES.items()}


def json_schema(kind: CommandKind) -> dict[str, Any]:
    """The JSON Schema of a command's body, as published in the HTTP service's OpenAPI document."""
    return _ADAPTERS[kind].json_schema()


# -- parsing ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Parsed:
    """The outcome of parsing: a command, or the problems; plus what could be read of the input even
    when it was refused (election, unit, key), so the refusal can be filed under them."""

    command: Command | None
    errors: tuple[Problem, ...]
    election_id: str = ""
    unit_id: str = ""
    idempotency_key: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


def _shown(value: Any) -> str:
    """A value as a message may quote it: JSON, escaped, and short (a refusal must stay small)."""
    return escaped(json.dumps(value, ensure_ascii=False, default=str))


def _field_name(loc: tuple[Any, ...]) -> str:
    # A map key's error is the key's own: "first_alignment.A ", not "first_alignment.A .[key]".
    return ".".join(str(part) for part in loc if part != "[key]") or "body"


def _problem_of(error: Mapping[str, Any], kind: CommandKind) -> Problem:
    """A pydantic error rephrased with our codes: the field path, a stable code, a plain message."""
    loc = tuple(error.get("loc", ()))
    kind_ = error["type"]
    value = error.get("input")
    where = _field_name(loc)
    ctx = error.get("ctx") or {}
    if kind_ == "missing":
        return Problem(where, "REQUIRED", f"{where} is required")
    if kind_ == "bad_ratio":
        return Problem(where, "BAD_RATIO", f"{where} {error['msg']}")
    if kind_ in ("unexpected_keyword_argument", "extra_forbidden"):
        known = ", ".join(sorted(COMMAND_TYPES[kind].__dataclass_fields__)) if len(loc) == 1 else ""
        hint = f"; a {kind.value} command has: {known}" if known else ""
        return Problem(where, "UNKNOWN_FIELD", f"{where} is not a field of this command{hint}")
    if kind_ in ("int_type", "int_parsing", "int_from_float"):
        return Problem(where, "NOT_AN_INTEGER", f"{where} must be a whole number, got {_shown(value)}")
    if kind_ == "greater_than_equal":
        code = "NEGATIVE" if ctx.get("ge") == 0 else "TOO_SMALL"
        return Problem(where, code, f"{where} must be at least {ctx.get('ge')}, got {value}")
    if kind_ == "less_than_equal":
        return Problem(where, "TOO_LARGE", f"{where} must be at most {ctx.get('le')}, got {value}")
    if kind_ in ("string_type", "dict_type", "tuple_type", "list_type", "dataclass_type", "model_type", "bool_type"):
        wanted = {
            "string_type": "a string",
            "dict_type": "an object",
            "tuple_type": "an array",
            "list_type": "an array",
            "dataclass_type": "an object",
            "model_type": "an object",
            "bool_type": "true or false",
        }[kind_]
        return Problem(where, "WRONG_TYPE", f"{where} must be {wanted}, got {_shown(value)}")
    if kind_ == "string_too_short":
        return Problem(where, "EMPTY", f"{where} must not be empty")
    if kind_ in ("string_too_long", "too_long"):
        return Problem(where, "TOO_LONG", f"{where} is too long ({error['msg'].lower()})")
    if kind_ == "too_short":
        need = ctx.get("min_length")
        got = len(value) if isinstance(value, (list, tuple)) else ctx.get("actual_length")
        return Problem(where, "TOO_FEW", f"{where} needs at least {need} item{'s' if need != 1 else ''}, got {got}")
    if kind_ == "string_pattern_mismatch":
        return Problem(where, "BAD_FORMAT", _pattern_message(where, loc, value))
    if kind_ == "literal_error":
        return Problem(where, "NOT_ALLOWED", f"{where} must be one of {ctx.get('expected')}, got {_shown(value)}")
    if kind_.startswith("datetime") or kind_.startswith("timezone"):
        return Problem(where, "BAD_TIME", f"{where} must be an ISO 8601 time with a UTC offset, got {_shown(value)}")
    return Problem(where, kind_.upper(), f"{where}: {error['msg']}")


def _own_errors(errors: list[Any]) -> list[Any]:
    """Pydantic counts only the items that validated against a list's minimum length: one unit with a bad
    field was also "units needs at least 1 item, got 0". A length error is kept only when the list given
    really is too short (then ``_problem_of`` counts what was given)."""

    def given_enough(e: Any) -> bool:
        value, need = e.get("input"), (e.get("ctx") or {}).get("min_length")
        return isinstance(value, (list, tuple)) and isinstance(need, int) and len(value) >= need

    return [e for e in errors if not (e["type"] == "too_short" and given_enough(e))]


def _pattern_message(where: str, loc: tuple[Any, ...], value: Any) -> str:
    last = str(loc[-1]) if loc else ""
    if last == "idempotency_key":
        return f"{where} must be 1-128 characters of letters, digits and ._:@/+=- starting with a letter or digit, got {_shown(value)}"
    if last == "worksheet_digest":
        return f"{where} must be sha256:<64 lowercase hex digits>, got {_shown(value)}"
    return f"{where} must not be blank or start or end with spaces, got {_shown(value)}"


MAX_RATIO_TERM = 2**63 - 1
"""Largest numerator or denominator of a ratio: the Avro ``Ratio`` record holds two signed 64-bit longs."""


def parse_ratio(value: int | str, where: str) -> tuple[Fraction | None, Problem | None]:
    """ "n/d" or a whole number into an exact, non-negative Fraction that the event schema can hold.

    Why the bound: a term beyond a 64-bit long cannot be encoded, and an input that cannot be
    recorded would be lost; it is refused, by field, like any other bad ratio. Only ASCII digits
    count (``int`` reads other scripts' digits, and ``isdigit`` accepts superscripts it cannot read)."""
    if isinstance(value, int):
        if value < 0:
            return None, Problem(where, "BAD_RATIO", f"{where} must not be negative")
        parsed = Fraction(value)
    else:
        text = value.strip()
        num, sep, den = text.partition("/")
        if not re.fullmatch(r"[0-9]{1,40}", num.strip()) or (sep and not re.fullmatch(r"[0-9]{1,40}", den.strip())):
            return None, Problem(
                where, "BAD_RATIO", f'{where} must be an exact ratio "n/d" of whole numbers (up to {MAX_RATIO_TERM}), got {_shown(value)}'
            )
        denominator = int(den) if sep else 1
        if denominator == 0:
            return None, Problem(where, "BAD_RATIO", f"{where} has a zero denominator")
        parsed = Fraction(int(num), denominator)
    if parsed.numerator > MAX_RATIO_TERM or parsed.denominator > MAX_RATIO_TERM:
        return None, Problem(
            where, "TOO_LARGE", f"{where}: numerator and denominator (in lowest terms) must be at most {MAX_RATIO_TERM}"
        )
    return parsed, None


def parse_command(
    kind: CommandKind,
    text: str | bytes,
    *,
    unit_id: str | None = None,
    idempotency_key: str | None = None,
) -> Parsed:
    """Parse a command body. ``unit_id`` (from a URL or CLI argument) and ``idempotency_key`` (from a
    header) fill in the body's fields; if the body names different values, that is an error."""
    given_problems = [
        Problem(name, "NOT_UTF8", f"{name} {quoted(value)} (from the request) is not UTF-8 text")
        for name, value in (("unit_id", unit_id), ("idempotency_key", idempotency_key))
        if value is not None and has_surrogates(value)
    ]
    if given_problems:
        return Parsed(None, tuple(given_problems))
    data, problems = load_json(text)
    if problems:
        return Parsed(None, problems, unit_id=claimable(unit_id), idempotency_key=claimable(idempotency_key))
    if not isinstance(data, dict):
        return Parsed(
            None,
            (Problem("body", "NOT_AN_OBJECT", f"the input must be a JSON object, got {type(data).__name__}"),),
            unit_id=claimable(unit_id),
            idempotency_key=claimable(idempotency_key),
        )
    errors: list[Problem] = []
    for name, given in (("unit_id", unit_id), ("idempotency_key", idempotency_key)):
        if given is None or (name == "unit_id" and kind is CommandKind.DEFINE):
            continue
        if name in data and data[name] != given:
            errors.append(
                Problem(
                    name,
                    "CONFLICTING_VALUES",
                    f"{name} is {quoted(given)} in the request but {_shown(data[name])} in the body",
                )
            )
        else:
            data[name] = given
    claimed = {name: claimable(data.get(name)) for name in ("election_id", "unit_id", "idempotency_key")}
    try:
        # JSON mode: strict types as JSON knows them (an ISO string is a time, a 5.0 is not a count)
        command = _ADAPTERS[kind].validate_json(json.dumps(data))
    except ValidationError as exc:
        errors.extend(_problem_of(e, kind) for e in _own_errors(exc.errors(include_url=False)))
        command = None
    if claimed["idempotency_key"].startswith(REJECTED_KEY_PREFIX):
        errors.append(
            Problem("idempotency_key", "RESERVED_KEY", f"idempotency keys starting with {REJECTED_KEY_PREFIX!r} are reserved")
        )
    if errors:
        return Parsed(None, tuple(errors), data=data, **claimed)
    return Parsed(command, (), data=data, **claimed)


def validate_command(kind: CommandKind, text: str) -> Command:
    """A command from JSON text, as ``parse_command`` reads it, raising pydantic's ``ValidationError``."""
    command: Command = _ADAPTERS[kind].validate_json(text)
    return command


def claimable(value: Any) -> str:
    """``value`` if a refusal may be filed under it (an id of sane length that UTF-8 can encode), else ""."""
    if isinstance(value, str) and 0 < len(value) <= 200 and not has_surrogates(value):
        return value
    return ""


def derive_key(kind: CommandKind, data: Mapping[str, Any], sender: str) -> str:
    """A key for senders that did not choose one (the CLI): the same command from the same sender gets
    the same key, so running it twice records it once."""
    body = {k: v for k, v in data.items() if k != "idempotency_key"}
    canonical = json.dumps([kind.value, sender, body], sort_keys=True, separators=(",", ":"), default=str)
    return f"{kind.value}-{hashlib.sha256(canonical.encode()).hexdigest()[:32]}"


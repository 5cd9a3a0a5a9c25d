"""Parsing raw input into commands: strict types, every problem named by field and rule."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest

from producers.commands import COMMAND_TYPES, CommandKind, ReportResult, derive_key, json_schema, parse_command, parse_ratio


def _codes(kind: CommandKind, text: str, **kw: Any) -> set[tuple[str, str]]:
    parsed = parse_command(kind, text, **kw)
    assert parsed.command is None
    assert all(p.message for p in parsed.errors)
    return {(p.field, p.code) for p in parsed.errors}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ("body", "EMPTY_INPUT")),
        ("{'unit_id': 'x'}", ("body", "MALFORMED_JSON")),
        ('{"a": 1, "a": 2}', ("a", "DUPLICATE_KEY")),
        ('{"first_alignment": {"Biden": NaN}}', ("first_alignment.Biden", "NOT_A_NUMBER")),
        ("[1, 2]", ("body", "NOT_AN_OBJECT")),
        (b"\xff\xfe{}", ("body", "NOT_UTF8")),
    ],
    ids=["empty", "single-quotes", "duplicate-key", "nan", "array", "not-utf8"],
)
def test_input_that_is_not_a_json_object(text: str | bytes, expected: tuple[str, str]) -> None:
    assert _codes(CommandKind.REPORT, text) == {expected}  # type: ignore[arg-type]


def test_types_are_strict_and_every_field_is_named() -> None:
    text = json.dumps(
        {
            "unit_id": "E01",
            "first_alignment": {"Biden": -1, "Sanders": "12", "Warren": 2.0, "Yang": True},
            "final_alignment": {"Biden": 2_000_000},
            "attendance": 10.5,
            "worksheet_digest": "md5:abc",
            "occurred_at": "2020-02-03T19:00:00",
            "idempotency_key": "has space",
            "extra": 1,
        }
    )
    assert _codes(CommandKind.REPORT, text) == {
        ("first_alignment.Biden", "NEGATIVE"),
        ("first_alignment.Sanders", "NOT_AN_INTEGER"),
        ("first_alignment.Warren", "NOT_AN_INTEGER"),
        ("first_alignment.Yang", "NOT_AN_INTEGER"),
        ("final_alignment.Biden", "TOO_LARGE"),
        ("attendance", "NOT_AN_INTEGER"),
        ("worksheet_digest", "BAD_FORMAT"),
        ("occurred_at", "BAD_TIME"),
        ("idempotency_key", "BAD_FORMAT"),
        ("extra", "UNKNOWN_FIELD"),
    }


def test_required_fields_match_the_published_schema() -> None:
    for kind in CommandKind:
        required = set(json_schema(kind)["required"])
        missing = {field for field, code in _codes(kind, "{}") if code == "REQUIRED"}
        assert missing == required, kind


def test_request_values_fill_in_and_must_agree_with_the_body() -> None:
    body = json.dumps({"first_alignment": {"Biden": 3}, "final_alignment": {"Biden": 3}})
    parsed = parse_command(CommandKind.REPORT, body, unit_id="E01", idempotency_key="k-1")
    assert isinstance(parsed.command, ReportResult)
    assert (parsed.command.unit_id, parsed.command.idempotency_key) == ("E01", "k-1")
    clash = json.dumps({"unit_id": "E02", "idempotency_key": "k-2", "first_alignment": {}, "final_alignment": {}})
    assert _codes(CommandKind.REPORT, clash, unit_id="E01", idempotency_key="k-1") == {
        ("unit_id", "CONFLICTING_VALUES"),
        ("idempotency_key", "CONFLICTING_VALUES"),
    }


def test_rejection_keys_are_reserved() -> None:
    body = json.dumps({"attendance": 3, "idempotency_key": "rejected:abc:def"})
    assert ("idempotency_key", "RESERVED_KEY") in _codes(CommandKind.OPEN, body, unit_id="E01")


def test_tie_shapes() -> None:
    body = json.dumps({"contenders": ["A"], "seats": 0, "winners": [], "method": "dice", "caller": ""})
    assert _codes(CommandKind.TOSS, body, unit_id="E01", idempotency_key="t") == {
        ("contenders", "TOO_FEW"),
        ("seats", "TOO_SMALL"),
        ("winners", "TOO_FEW"),
        ("method", "NOT_ALLOWED"),
        ("caller", "EMPTY"),
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [("21/150", Fraction(21, 150)), ("6", Fraction(6)), (11, Fraction(11)), (" 101 / 500 ", Fraction(101, 500))],
)
def test_ratios_are_exact(value: Any, expected: Fraction) -> None:
    ratio, problem = parse_ratio(value, "sde_ratio")
    assert problem is None and isinstance(ratio, Fraction) and ratio == expected


@pytest.mark.parametrize("value", ["0.14", "1/0", "-1/2", "a/b", -3])
def test_bad_ratios_are_refused(value: Any) -> None:
    ratio, problem = parse_ratio(value, "counties.0.sde_ratio")
    assert ratio is None and problem is not None and problem.code == "BAD_RATIO"
    assert problem.field == "counties.0.sde_ratio"


def test_derived_keys_depend_on_content_and_sender_only() -> None:
    data = {"unit_id": "E01", "attendance": 5}
    key = derive_key(CommandKind.OPEN, data, "chair:E01#x")
    assert key == derive_key(CommandKind.OPEN, {"attendance": 5, "unit_id": "E01"}, "chair:E01#x")
    assert key != derive_key(CommandKind.OPEN, {**data, "attendance": 6}, "chair:E01#x")
    assert key != derive_key(CommandKind.OPEN, data, "official:someone#y")
    assert parse_command(CommandKind.OPEN, json.dumps({**data, "idempotency_key": key})).command is not None
    assert set(COMMAND_TYPES) == set(CommandKind)

"""What else is wrong with an election definition that did not parse, so that its sender hears every
error at once (the intake's promise: "every error, each naming its field and rule").

A definition is long (a state's precincts), and its problems come from three places: the parse (types,
ranges, required fields), the ratios (text until parsed) and the checks of the whole (ids listed twice,
units naming a county that is not there, an unknown rule set). Each used to stop the next: a file with a
bad unit, a bad ratio and an unknown county took three refused, recorded submissions to hear of all three.

Here each field the parse refused gets a stand-in (an optional one is left out; an item that is not an
object at all is left out of its list), and the rest is judged as any definition is. What that finds
about the fields the parse already refused is not said again, and what it finds about the others is given
under the fields of the input as sent (a unit's index in the file, not in a shortened list).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from ledger.events import Problem
from producers.commands import CommandKind, DefineElection, validate_command
from producers.intake_state import IntakeView
from producers.payloads import lenient_definition
from producers.validation import check

__all__ = ["definition_precheck"]

_LISTS = ("candidates", "counties", "satellite_groups", "units")
_TOP = {"name": "unparsed", "election_id": "unparsed", "rule_set": "idp-2020", "idempotency_key": "unparsed"}
_FIELDS = {"name": "unparsed", "sde_ratio": "1", "sde_pool": "1", "delegates": 1}
"""Stand-ins for an item's required fields; an id gets one of its own (unique), an optional field none."""
_IDS = ("unit_id", "county_id", "group_id")
_OPTIONAL = ("satellite_group", "short_name", "sde_weight", "attendance_base", "occurred_at", "satellite_groups")


def definition_precheck(data: Mapping[str, Any] | None, errors: Sequence[Problem], view: IntakeView) -> tuple[Problem, ...]:
    """The problems of ``data`` (a definition's body) beyond ``errors``, those its parse found."""
    if not isinstance(data, Mapping) or not errors:
        return ()
    mended = _mended(data, errors)
    if mended is None:
        return ()
    body, kept = mended
    try:
        command = validate_command(CommandKind.DEFINE, json.dumps(body))
    except (ValidationError, TypeError, ValueError):
        return ()  # still does not parse: the parse's errors are all there is to say
    assert isinstance(command, DefineElection)
    payload, problems = lenient_definition(command)
    refused = {p.field for p in errors}
    out: list[Problem] = []
    for problem in (*problems, *check(command, payload, command.election_id, view).errors):
        problem = _as_sent(problem, kept)
        if not any(problem.field == f or problem.field.startswith(f + ".") for f in refused):
            out.append(problem)
    return tuple(out)


def _mended(data: Mapping[str, Any], errors: Sequence[Problem]) -> tuple[dict[str, Any], dict[str, list[int]]] | None:
    """The body with a stand-in for each field the parse refused, and for each list it shortened (items
    that are not objects) the input index of each item kept; None when nothing sensible is left."""
    body: dict[str, Any] = {k: [dict(i) if isinstance(i, dict) else i for i in v] if isinstance(v, list) else v
                            for k, v in data.items()}  # copies: the parsed data is recorded with the refusal
    dropped: dict[str, set[int]] = {}
    for problem in errors:
        path = problem.field.split(".")
        if path[0] in _TOP:
            body[path[0]] = _TOP[path[0]]
        elif path[0] in _LISTS and len(path) > 1 and path[1].isdigit() and isinstance(body.get(path[0]), list):
            index = int(path[1])
            items = body[path[0]]
            if index >= len(items):
                return None
            if path[0] == "candidates":
                items[index] = f"unparsed candidate {index}"
            elif len(path) == 2 or not isinstance(items[index], dict):
                dropped.setdefault(path[0], set()).add(index)
            else:
                _stand_in(items[index], path[2], f"unparsed-{path[0]}-{index}")
        elif path[0] in _OPTIONAL or (path[0] not in _LISTS and path[0] != "body"):
            body.pop(path[0], None)  # optional, or a field no definition has
        else:
            return None  # a list itself is wrong (not a list, too short): nothing to judge item by item
    kept: dict[str, list[int]] = {}
    for name, indexes in dropped.items():
        kept[name] = [i for i in range(len(body[name])) if i not in indexes]
        body[name] = [body[name][i] for i in kept[name]]
    return body, kept


def _stand_in(item: dict[str, Any], field: str, unique: str) -> None:
    if field in _IDS:
        item[field] = unique
    elif field in _FIELDS:
        item[field] = _FIELDS[field]
    else:
        item.pop(field, None)  # optional, or a field an item does not have


def _as_sent(problem: Problem, kept: Mapping[str, list[int]]) -> Problem:
    """The problem under the field of the input as sent: ``units.3`` of a shortened list is the fifth unit."""
    head, _, rest = problem.field.partition(".")
    index, dot, tail = rest.partition(".")
    if head not in kept or not index.isdigit() or int(index) >= len(kept[head]):
        return problem
    return Problem(f"{head}.{kept[head][int(index)]}{dot}{tail}", problem.code, problem.message)

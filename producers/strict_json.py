"""Strict JSON for input the ledger did not write: every way a body can be hostile becomes a Problem.

Why not plain ``json.loads``: it recurses once per nesting level (a body of 100,000 ``[`` raises
RecursionError), keeps the last of two equal keys, reads ``NaN`` and ``1e400`` as floats, turns
``"\\ud800"`` into a string no UTF-8 encoder (and so no Avro record) can hold, and refuses a body with
one bad byte as a whole. Each of those is a refusal here, named by field where there is a field:

- nesting deeper than ``MAX_DEPTH`` is measured before parsing, without recursion (``body``/``TOO_DEEP``);
- a key given twice (``field.key``/``DUPLICATE_KEY``);
- ``NaN``/``Infinity`` (``NOT_A_NUMBER``) and numbers no command could hold (``TOO_LARGE``);
- lone surrogates, and bytes that are not UTF-8, in any string or key (``NOT_UTF8``); a body whose bad
  bytes keep it from being JSON at all is ``body``/``NOT_UTF8``.

Problems never carry the offending text raw: keys and values are shown escaped, so the refusal itself
can always be encoded and recorded.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ledger.events import Problem

__all__ = ["MAX_DEPTH", "MAX_PROBLEMS", "load_json", "has_surrogates", "escaped", "quoted", "nesting_exceeds"]

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects accepted; the commands need four (election > units > unit > field)."""

MAX_PROBLEMS = 100
"""Problems reported for one body; a body with more says how many were left out."""

_MAX_INT_DIGITS = 40
"""Longer integers are refused before Python converts them: far beyond any count, and beyond 4,300
digits ``int()`` refuses (and converting a long one costs quadratic time)."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """True if ``text`` holds a code point UTF-8 cannot encode (a lone surrogate, or a byte that
    ``surrogateescape`` carried over from input that was not UTF-8)."""
    return _SURROGATE.search(text) is not None


def escaped(text: str, limit: int = 80) -> str:
    """``text`` as it may be shown in a message: surrogates as ``\\udXXX``, cut at ``limit`` characters."""
    shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def quoted(text: str, limit: int = 80) -> str:
    """``text`` in double quotes for a message, escaped as ``escaped`` does."""
    return f'"{escaped(text, limit)}"'


def nesting_exceeds(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays/objects in ``text`` nest deeper than ``limit``, counted without recursion.

    Brackets inside strings do not count; an unterminated string's brackets do (that text is not
    JSON anyway). Unbalanced text is measured by its openers, which is what a parser would recurse on.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = 0
    for char in skeleton:
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


class _Refused:
    """A value JSON's grammar allows but no command may hold; reported at the field where it sits."""

    __slots__ = ("code", "message")

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message


class _Object(dict[str, Any]):
    """A JSON object that named some key more than once (the first value is kept, for the record)."""

    __slots__ = ("duplicates",)

    def __init__(self, items: dict[str, Any], duplicates: list[str]) -> None:
        super().__init__(items)
        self.duplicates = duplicates


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    duplicates: list[str] = []
    for key, value in pairs:
        if key in out:
            duplicates.append(key)
        else:
            out[key] = value
    return _Object(out, list(dict.fromkeys(duplicates))) if duplicates else out


def _constant(name: str) -> _Refused:
    return _Refused("NOT_A_NUMBER", f"{name} is not a number JSON allows; send a number")


def _integer(text: str) -> int | _Refused:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        return _Refused("TOO_LARGE", f"a number of {len(text.lstrip('-')):,} digits is larger than any command accepts")
    return int(text)


def _real(text: str) -> float | _Refused:
    value = float(text)
    if math.isinf(value):
        return _Refused("TOO_LARGE", f"the number {escaped(text, 24)} is too large to be represented")
    return value


def _where(path: list[str | int]) -> str:
    return ".".join(str(part) for part in path) or "body"


def _bad_leaves(value: Any) -> list[Problem]:
    """Every refused leaf, duplicate key and non-UTF-8 string or key, by field; iterative (the
    nesting is bounded already, but a list of 100,000 items must not cost 100,000 frames either)."""
    found: list[Problem] = []
    stack: list[tuple[list[str | int], Any]] = [([], value)]
    while stack and len(found) <= MAX_PROBLEMS:
        path, node = stack.pop()
        if isinstance(node, dict):
            for key in getattr(node, "duplicates", ()):
                where = _where([*path, escaped(key)])
                found.append(Problem(where, "DUPLICATE_KEY", f"{_where(path)} names the key {quoted(key)} more than once; send each key once"))
            for key, item in reversed(node.items()):
                if has_surrogates(key):
                    where = _where([*path, escaped(key)])
                    found.append(Problem(where, "NOT_UTF8", f"the key {quoted(key)} is not UTF-8 text (it holds a lone surrogate or a byte that is not UTF-8)"))
                stack.append(([*path, key if not has_surrogates(key) else escaped(key)], item))
        elif isinstance(node, list):
            stack.extend(([*path, i], item) for i, item in reversed(list(enumerate(node))))
        elif isinstance(node, str):
            if has_surrogates(node):
                where = _where(path)
                found.append(Problem(where, "NOT_UTF8", f"{where} is not UTF-8 text: {quoted(node)} holds a lone surrogate or a byte that is not UTF-8"))
        elif isinstance(node, _Refused):
            where = _where(path)
            found.append(Problem(where, node.code, f"{where}: {node.message}"))
    return found


def _capped(problems: list[Problem]) -> tuple[Problem, ...]:
    if len(problems) <= MAX_PROBLEMS:
        return tuple(problems)
    return (*problems[:MAX_PROBLEMS], Problem("body", "TOO_MANY_ERRORS", f"the first {MAX_PROBLEMS} problems are shown; fix them and send again"))


def load_json(text: str | bytes) -> tuple[Any, tuple[Problem, ...]]:
    """Strict JSON (see module docstring). Returns (value, ()) or (None, problems)."""
    not_utf8: UnicodeDecodeError | None = None
    if isinstance(text, bytes):
        data = text
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            not_utf8 = exc
            text = data.decode("utf-8", "surrogateescape")  # bad bytes stay visible, as U+DC80..U+DCFF
    if not text.strip():
        return None, (Problem("body", "EMPTY_INPUT", "the input is empty; send a JSON object"),)
    if nesting_exceeds(text):
        return None, (Problem("body", "TOO_DEEP", f"the JSON nests arrays and objects deeper than {MAX_DEPTH} levels; no command needs more than 4"),)
    try:
        value = json.loads(text, object_pairs_hook=_object, parse_constant=_constant, parse_int=_integer, parse_float=_real)
    except json.JSONDecodeError as exc:
        if not_utf8 is not None:
            return None, (Problem("body", "NOT_UTF8", f"the input is not UTF-8 text: {not_utf8}"),)
        return None, (Problem("body", "MALFORMED_JSON", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"),)
    except (ValueError, RecursionError) as exc:  # RecursionError: cannot happen past nesting_exceeds; kept as a guard
        return None, (Problem("body", "MALFORMED_JSON", f"not valid JSON: {escaped(str(exc), 200)}"),)
    problems = _bad_leaves(value)
    if problems:
        return None, _capped(problems)
    return value, ()

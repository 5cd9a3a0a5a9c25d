"""What an identifier or a candidate name may contain, and when two candidate names are one.

Why: ids and candidate names are compared exactly everywhere (states, rows, feed keys, trails), so text
that looks the same but is spelled differently splits one thing in two. Control and format characters
(NUL, tab, the bidi overrides such as U+202E, zero-width spaces) are invisible or reorder what is shown;
an id in a decomposed Unicode form (NFD) looks like its composed form (NFC) but is another id; and a
ballot with candidates "Warren" and "warren" would let a count land on the wrong one.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from pydantic_core import PydanticCustomError

from ledger.events import Problem

__all__ = ["plain_text", "plain_id", "candidate_collisions", "folded", "shows_a_word", "said", "hidden_character",
           "shown_name", "id_lookalikes", "looks_alike"]

_HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
"""The Hangul fillers: letters by their Unicode category, blank on every screen ("\u3164" is "a name")."""


def _hidden(value: str) -> str | None:
    for ch in value:
        if unicodedata.category(ch) in _HIDDEN or ch in _BLANK_LETTERS:
            return f"U+{ord(ch):04X}"
    return None


def hidden_character(value: str) -> str | None:
    """The first control, format or invisible character of ``value`` (as U+XXXX), or None."""
    return _hidden(value)


def shows_a_word(value: str) -> bool:
    """Whether ``value`` holds a letter or digit a reader can see: a name that is blank on screen names
    nobody (spaces, invisible marks, the Hangul fillers)."""
    return any(ch.isalnum() and ch not in _BLANK_LETTERS for ch in value)


def plain_text(value: str) -> str:
    """A candidate name: no control, format or unassigned characters, no spaces around it."""
    found = _hidden(value)
    if found is not None:
        raise PydanticCustomError("bad_characters", "must not contain control or invisible characters (found {char})", {"char": found})
    if value != value.strip():
        raise PydanticCustomError("bad_characters", "must not start or end with spaces", {})
    return value


def plain_id(value: str) -> str:
    """An identifier: plain text as above, and in NFC, so that one id has one spelling. No '/': an id is
    one segment of a URL path (``/units/{unit}/report``, ``/api/elections/{election}/units/{unit}``), and
    the HTTP servers read an encoded '/' as a separator, so a unit named with one could be defined but
    never opened, reported or read over HTTP."""
    plain_text(value)
    if unicodedata.normalize("NFC", value) != value:
        raise PydanticCustomError("bad_characters", "must be in Unicode normal form NFC (composed characters)", {})
    if "/" in value:
        raise PydanticCustomError("slash_in_id", "must not contain '/': an id is one segment of the HTTP intake's "
                                  "and the read API's paths", {})
    return value


def said(value: str) -> str:
    """Free text that must say something: a reason, an authority, a caller, a name. Blank on screen
    (spaces, zero-width marks, Hangul fillers) it would leave the paper trail an entry naming nobody."""
    if not shows_a_word(value):
        raise PydanticCustomError("blank", "must contain a visible letter or digit (it is blank on screen)", {})
    return value


def shown_name(value: str) -> str:
    """A name people read on the results site, in tables and trails (a county's, a unit's, an
    election's): no control, format or invisible characters. A NUL or a line separator breaks the
    page and the table it is printed in, and a bidi override (U+202E) makes one name display as
    another."""
    found = _hidden(value)
    if found is not None:
        raise PydanticCustomError("hidden_character", "must not contain control or invisible characters (found {char})",
                                  {"char": found})
    return value


def folded(name: str) -> str:
    """A candidate name as compared for collisions: NFC, then case-folded."""
    return unicodedata.normalize("NFC", name).casefold()


def looks_alike(name: str) -> str:
    """A name or id as a reader tells it apart: compatibility forms folded too (NFKC, case-folded and
    normalised again), so that the fullwidth "Ｓａｎｄｅｒｓ" and "Sanders", or the ids "P1" and "p1", are one."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


def candidate_collisions(candidates: Iterable[str]) -> list[Problem]:
    """Candidate names that differ only by case or Unicode form from an earlier one (exact repeats are
    the ``DUPLICATE`` rule's): ``CANDIDATE_COLLISION`` by case or canonical form, ``CANDIDATE_LOOKALIKE``
    by a compatibility form (fullwidth letters, ligatures, superscripts) a reader cannot tell apart either."""
    seen: dict[str, str] = {}
    out = []
    for i, name in enumerate(candidates):
        key = looks_alike(name)
        earlier = seen.get(key)
        if earlier is not None and earlier != name:
            same_case = folded(earlier) == folded(name)
            out.append(
                Problem(
                    f"candidates.{i}",
                    "CANDIDATE_COLLISION" if same_case else "CANDIDATE_LOOKALIKE",
                    f"candidate {name!r} differs from {earlier!r} only by case"
                    + (" or Unicode form" if same_case else ", width or Unicode compatibility form")
                    + "; one election's candidates must be told apart",
                )
            )
        seen.setdefault(key, name)
    return out


def id_lookalikes(ids: Iterable[str], where: str, what: str) -> list[Problem]:
    """Ids that differ from an earlier one only by case or a compatibility form ("P1" and "p1", "lee" and
    "Lee"): each is its own unit or county to the ledger, one to a reader, and a count meant for one
    can be sent for the other unnoticed (exact repeats are the ``DUPLICATE`` rule's)."""
    seen: dict[str, str] = {}
    out = []
    for i, value in enumerate(ids):
        earlier = seen.setdefault(looks_alike(value), value)
        if earlier != value:
            out.append(Problem(f"{where}.{i}", "ID_LOOKALIKE", f"{what} {value!r} differs from {earlier!r} only by case or "
                               "Unicode form; ids must be told apart by a reader"))
    return out

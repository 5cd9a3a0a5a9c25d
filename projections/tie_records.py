"""What a unit's state records of each tie: the toss that stands, and every later toss of the same tie.

Its own module because the rule it keeps is the ledger's most disputed one (DESIGN: a settled tie stays
settled): the first toss of a tie settles it, and a later toss replaces it only as an official's redraw
(``TieBroken.redraws``); any other later toss is kept visibly, for the trail and the audit, and changes
nothing. The reducers apply it; the tallies, the trail and the audit read the records.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.caucus_math import CaucusMathError, PendingTie, TieResolution, ties_called_for
from ledger.events import Event, Result, TieBroken

__all__ = ["TossNote", "TieRecord", "tossed_ties", "decided_nothing"]

TieKey = tuple[tuple[str, ...], int]
Toss = tuple[tuple[str, ...], str] | None
"""A standing toss as a resolution reads it (winners, method), or None where the tie has none."""


@dataclass(frozen=True, slots=True)
class TossNote:
    """A toss of a tie that was already settled: an official's redraw (``redrew``: it replaced the
    standing toss) or a toss that was ignored (``ignored``: it named no standing toss, or gave no
    reason). ``against`` is the toss that stood when it came, and ``against_winners`` its winners."""

    event_id: str
    winners: tuple[str, ...]
    method: str
    outcome: str
    against: str
    against_winners: tuple[str, ...]
    supersedes: str = ""
    reason: str = ""

    @property
    def redrew(self) -> bool:
        return self.outcome == "redrew"

    def to_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "winners": list(self.winners),
            "method": self.method,
            "outcome": self.outcome,
            "against": self.against,
            "against_winners": list(self.against_winners),
            "supersedes": self.supersedes,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TossNote:
        return cls(d["event_id"], tuple(d["winners"]), d["method"], d["outcome"], d["against"], tuple(d["against_winners"]),
                   d.get("supersedes", ""), d.get("reason", ""))  # fmt: skip


@dataclass(frozen=True, slots=True)
class TieRecord:
    """The toss that stands for one tie of a unit (contenders sorted, seats), as ``TieBroken`` recorded
    it, and every later toss of the same tie (``later``, in log order): a settled tie stays settled,
    so a later toss replaces the standing one only as an official's redraw (``TieBroken.redraws``);
    any other is kept here, visibly, and changes nothing."""

    contenders: tuple[str, ...]
    seats: int
    winners: tuple[str, ...]
    method: str
    event_id: str
    later: tuple[TossNote, ...] = ()
    recorded_against: Result | None = None  # the unit's result when the standing toss was recorded
    _checked: TieResolution | str | None = field(default=None, init=False, repr=False, compare=False)
    _decided: tuple[Hashable, tuple[tuple[TieKey, Toss], ...], bool] | None = field(
        default=None, init=False, repr=False, compare=False)  # ``decided_nothing``'s last answer, with what it read

    @property
    def key(self) -> tuple[tuple[str, ...], int]:
        return self.contenders, self.seats

    @property
    def disputed(self) -> bool:
        """Tossed more than once (redrawn, or contradicted by an ignored toss)."""
        return bool(self.later)

    def note_of(self, event_id: str) -> TossNote | None:
        """What became of a later toss of this tie, if ``event_id`` is one."""
        return next((n for n in self.later if n.event_id == event_id), None)

    def tossed(self, event_id: str, toss: TieBroken, result: Result | None = None) -> TieRecord:
        """This tie after one more toss of it (see the class docstring); ``result``: the unit's result then."""
        winners = tuple(sorted(toss.winners))
        redraw = toss.redraws(self.event_id)
        note = TossNote(event_id, winners, toss.method.value, "redrew" if redraw else "ignored", self.event_id, self.winners,
                        toss.supersedes, toss.reason)  # fmt: skip
        if redraw:
            return TieRecord(self.contenders, self.seats, winners, toss.method.value, event_id, (*self.later, note), result)
        return TieRecord(self.contenders, self.seats, self.winners, self.method, self.event_id, (*self.later, note),
                         self.recorded_against)  # fmt: skip

    def resolution(self) -> TieResolution | str:
        """The toss as the caucus math takes it, or why it cannot be used. Checked once per record:
        a unit's tally is computed again whenever the unit changes, its recorded tosses with it."""
        checked = self._checked
        if checked is None:
            try:
                checked = TieResolution(self.contenders, self.seats, self.winners, self.method)  # type: ignore[arg-type]
            except CaucusMathError as exc:
                checked = str(exc)
            object.__setattr__(self, "_checked", checked)
        return checked

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "contenders": list(self.contenders),
            "seats": self.seats,
            "winners": list(self.winners),
            "method": self.method,
            "event_id": self.event_id,
        }
        if self.later:  # absent for a tie tossed once: stored states of such units keep their bytes
            out["later"] = [n.to_json() for n in self.later]
        if self.recorded_against is not None:  # absent for a toss recorded before any result (and in older states)
            r = self.recorded_against
            out["recorded_against"] = {"first": dict(r.first_alignment), "final": dict(r.final_alignment), "attendance": r.attendance}
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TieRecord:
        later = tuple(TossNote.from_json(n) for n in d.get("later", ()))
        against = d.get("recorded_against")
        return cls(tuple(d["contenders"]), d["seats"], tuple(d["winners"]), d["method"], d["event_id"], later,
                   None if against is None else Result(against["first"], against["final"], against.get("attendance")))  # fmt: skip


def tossed_ties(
    ties: tuple[TieRecord, ...], event: Event[Any], toss: TieBroken, result: Result | None = None
) -> tuple[TieRecord, ...]:
    """A unit's ties after a toss: the first toss of a tie settles it, later ones go to its record.
    ``result`` is the unit's result when the toss came: a toss decides a tie of that result (RULES §6),
    so the tallies use it only if that result called for the tie (a toss recorded against a result
    without the tie does not decide a tie a later correction creates)."""
    contenders, seats = toss.tie
    for i, tie in enumerate(ties):
        if tie.key == (contenders, seats):
            return (*ties[:i], tie.tossed(event.event_id, toss, result), *ties[i + 1 :])
    return (*ties, TieRecord(contenders, seats, tuple(sorted(toss.winners)), toss.method.value, event.event_id,
                             recorded_against=result))  # fmt: skip


def decided_nothing(
    tie: TieRecord, standing: Mapping[TieKey, TieRecord], current: Result | None,
    pending_of: Callable[[Result, tuple[TieResolution, ...]], Sequence[PendingTie]], context: Hashable = None,
) -> bool:
    """Whether the standing toss of ``tie`` was recorded against an earlier result that did not call
    for that tie (RULES §6: a toss decides a tie of the result it was tossed for). Such a toss decides
    nothing, and a tie that a later correction creates stays pending. ``pending_of(result, resolutions)``
    is that result's pending ties under the unit's rules; ``standing``: the unit's tie records by key.

    ``context``: what ``pending_of`` depends on besides its arguments (the rules, the unit's delegates),
    or None. Given, the answer is kept on the record with the standing tosses it read, and reused while
    they and the context are the same: a unit's tally is computed again whenever the unit changes, and
    each recorded toss would otherwise allocate its old result again every time."""
    against = tie.recorded_against
    if against is None or current is None or _same_counts(against, current):
        return False  # before any result, or for the result that stands: the allocation itself decides
    kept = tie._decided
    if kept is not None and context is not None and kept[0] == context and all(
            _toss(standing.get(key)) == toss for key, toss in kept[1]):
        return kept[2]
    read: list[tuple[TieKey, Toss]] = []

    def resolution(key: TieKey) -> TieResolution | None:
        record = standing.get(key)
        read.append((key, _toss(record)))
        found = None if record is None else record.resolution()
        return found if isinstance(found, TieResolution) else None

    try:
        answer = tie.key not in ties_called_for(lambda resolutions: pending_of(against, resolutions), resolution)
    except CaucusMathError:
        answer = True  # the numbers it was tossed for cannot even be allocated: it decided no tie
    if context is not None:
        object.__setattr__(tie, "_decided", (context, tuple(read), answer))
    return answer


def _toss(record: TieRecord | None) -> Toss:
    return None if record is None else (record.winners, record.method)


def _same_counts(a: Result, b: Result) -> bool:
    """Mappings compare as dicts do, whatever their order and type (a Result's are read-only views):
    no copies, for every recorded toss of every tally."""
    if a is b:
        return True
    return (a.attendance == b.attendance and a.first_alignment == b.first_alignment
            and a.final_alignment == b.final_alignment)

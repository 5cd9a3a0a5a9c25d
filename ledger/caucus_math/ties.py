"""Ties that only a coin toss or drawing of lots can settle (RULES.md §6).

Why ties are data and not a guess: the 2016 caucuses settled county delegates
by coin tosses that were never recorded, and nobody could check them afterwards.
Here a tie at the cut is *never* decided by the code.  The math returns a
:class:`PendingTie` naming exactly the tied groups and the number of contested
seats; the caucus tosses the coin, the ledger records a ``TieBroken`` event, and
the matching :class:`TieResolution` turns the pending result into the final one.

Meaning of ``seats`` and ``winners`` is the same at every stage: the winners are
the ``seats`` contenders that come out one delegate (or, for §4.5, viability)
better than the others.

* remainder tie (§5.4/5.5): winners receive the contested delegate;
* too-many-delegates tie (§5.4): winners *keep* a delegate the others lose;
* leftover lot (2016, §5.5): winners receive a leftover delegate;
* more viable groups than delegates (§4.5): winners stay viable, the others
  must realign;
* one-delegate unit (§7): the winner takes the delegate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .errors import CaucusMathError

__all__ = [
    "ties_called_for",
    "TieStage",
    "TieMethod",
    "PendingTie",
    "TieResolution",
    "suggested_method",
]

TieStage = Literal["realign", "remainder", "surplus", "leftover", "one_delegate"]
"""Where in the procedure a tie arose (``surplus``: too many rounded delegates)."""

TieMethod = Literal["coin", "lots"]

_METHODS: frozenset[str] = frozenset({"coin", "lots"})


def suggested_method(contenders: int) -> TieMethod:
    """Two groups toss a coin; three or more draw lots (§6; APP and WAPP)."""
    return "coin" if contenders == 2 else "lots"


def _names(field_name: str, names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(names, str):
        raise CaucusMathError(field_name, f"must be a sequence of group names, not the string {names!r}")
    out = tuple(names)
    for name in out:
        if not isinstance(name, str) or not name:
            raise CaucusMathError(field_name, f"group names must be non-empty strings, got {name!r}")
    if len(set(out)) != len(out):
        raise CaucusMathError(field_name, f"names a group twice: {out!r}")
    return tuple(sorted(out))


@dataclass(frozen=True)
class PendingTie:
    """A decision the caucus must make by coin or lots before the result is final.

    ``contenders`` is sorted by name, so the same tie always looks the same no
    matter in which order the candidates were given.
    """

    contenders: tuple[str, ...]
    seats: int
    reason: str
    stage: TieStage = "remainder"

    @property
    def method(self) -> TieMethod:
        """How §6 says to decide it: a coin for two contenders, lots for more."""
        return suggested_method(len(self.contenders))

    def matches(self, resolution: "TieResolution") -> bool:
        """True when ``resolution`` decides this very tie (same groups, same seats)."""
        return resolution.contenders == self.contenders and resolution.seats == self.seats


@dataclass(frozen=True)
class TieResolution:
    """The recorded outcome of a coin toss or drawing of lots (event ``TieBroken``).

    Validated on construction so that an impossible record (a winner who was not
    in the tie, the wrong number of winners) is rejected where it is made, with a
    message the person recording it can act on.
    """

    contenders: tuple[str, ...]
    seats: int
    winners: tuple[str, ...]
    method: TieMethod = "coin"
    caller: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        contenders = _names("contenders", self.contenders)
        winners = _names("winners", self.winners)
        object.__setattr__(self, "contenders", contenders)
        object.__setattr__(self, "winners", winners)
        if isinstance(self.seats, bool) or not isinstance(self.seats, int):
            raise CaucusMathError("seats", f"must be an integer, got {self.seats!r}")
        if len(contenders) < 2:
            raise CaucusMathError("contenders", "a tie needs at least two groups", "RULES §6")
        if not 1 <= self.seats < len(contenders):
            raise CaucusMathError(
                "seats",
                f"{self.seats} contested seats among {len(contenders)} groups is not a tie",
                "RULES §6",
            )
        stray = set(winners) - set(contenders)
        if stray:
            raise CaucusMathError("winners", f"{sorted(stray)} did not take part in the tie", "RULES §6")
        if len(winners) != self.seats:
            raise CaucusMathError(
                "winners", f"{len(winners)} winners recorded for {self.seats} contested seats", "RULES §6"
            )
        if self.method not in _METHODS:
            raise CaucusMathError("method", f"must be 'coin' or 'lots', got {self.method!r}", "RULES §6")




TieKey = tuple[tuple[str, ...], int]


def ties_called_for(
    pending_with: Callable[[tuple[TieResolution, ...]], Sequence[PendingTie]],
    standing: Callable[[TieKey], TieResolution | None],
) -> set[TieKey]:
    """Every tie a result calls for (contenders sorted, seats): those pending with no toss, then, each
    one that a standing toss settles applied, the ties that come after it (a leftover tie after a §4.5
    lot). Why: a toss decides a tie of a result (RULES §6); one for any other tie decides nothing.

    ``pending_with(resolutions)`` is the result's allocation's pending ties under those resolutions;
    ``standing(tie)`` the toss that stands for a tie, if any."""
    found: set[TieKey] = set()
    resolutions: tuple[TieResolution, ...] = ()
    while True:
        fresh = [key for key in ((tuple(sorted(p.contenders)), p.seats) for p in pending_with(resolutions)) if key not in found]
        found.update(fresh)
        more = tuple(r for r in (standing(key) for key in fresh) if r is not None)
        if not more:
            return found
        resolutions += more

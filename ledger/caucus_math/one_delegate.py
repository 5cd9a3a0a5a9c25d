"""Units that elect a single delegate (RULES.md §7; 121 precincts in 2020).

Why this is not the proportional formula: with one delegate nothing is shared.
The caucus as a whole elects the delegate, so the question is only *who wins*.
The APP treats a group of at least half the attendance (``ceil(T/2)``) as viable;
the Warren calculator awards the delegate to the plurality.  Whenever a group has
a majority it is also the plurality, so the two readings differ only when nobody
reaches 50 %: then the APP has no answer at all (56 of the 121 one-delegate
precincts of 2020 had no majority group at the final alignment).  The rule set
chooses what happens then (``no_majority``):

* ``"plurality"``: the largest final group wins (the auditor's reference, §7);
* ``"unawarded"``: the delegate stays unawarded (``unallocated == 1``) until the
  caucus realigns again.

Equal leaders (two groups of exactly 50 %, or equal pluralities) are a coin toss
or lots: a :class:`~ledger.caucus_math.ties.PendingTie` with one seat.
"""

from __future__ import annotations

from typing import Literal

from ._core import TieBook
from .ties import PendingTie

__all__ = ["NoMajorityRule", "one_delegate_winner"]

NoMajorityRule = Literal["plurality", "unawarded"]


def one_delegate_winner(
    final: list[tuple[str, int]],
    threshold: int,
    no_majority: NoMajorityRule,
    book: TieBook,
) -> tuple[frozenset[str], str | None, PendingTie | None]:
    """Decide a one-delegate unit from its (name, members) final alignment.

    Returns ``(eligible, winner, pending)``: the groups that could win under the
    rule, the winner if decided, and the toss still to be made otherwise.
    """
    majority = [name for name, members in final if members > 0 and members >= threshold]
    if majority:
        contenders = majority
        why = "groups of exactly half the caucus"
    elif no_majority == "plurality":
        top = max((members for _, members in final), default=0)
        if top == 0:
            return frozenset(), None, None
        contenders = [name for name, members in final if members == top]
        why = f"equal largest groups ({top} each) and no majority"
    else:
        return frozenset(), None, None
    eligible = frozenset(contenders)
    if len(contenders) == 1:
        return eligible, contenders[0], None
    tie = PendingTie(
        contenders=tuple(sorted(contenders)),
        seats=1,
        reason=f"one-delegate unit: {why}; the delegate goes to one of them by {'coin toss' if len(contenders) == 2 else 'lot'}",
        stage="one_delegate",
    )
    res = book.take(tie)
    if res is None:
        return eligible, None, tie
    return eligible, res.winners[0], None

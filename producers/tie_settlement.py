"""A settled tie stays settled (DESIGN.md): which tosses the intake may record for a tie.

A tie is (election, unit, contenders, seats). Its first ``TieBroken`` settles it. Another toss for it
is refused (``TIE_ALREADY_SETTLED``, naming the toss that stands), unless it is an official's redraw: it
names the standing toss in ``supersedes`` and gives a reason; the trail and the audit then show the
redraw. Only officials may toss at all (``producers.credentials.authorize``). Pure functions of the
command (or spooled event) and the intake's view, like the rest of ``producers.validation``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledger.caucus_math import CaucusMathError, TieResolution, get_rule_set, satellite_delegates, ties_called_for
from ledger.events import Event, Problem, TieBroken
from producers.commands import RecordTie
from producers.identifiers import shows_a_word
from producers.intake_state import ElectionInfo, IntakeView

__all__ = ["settlement_problems", "settled_meanwhile", "no_such_tie"]


def _tie_text(contenders: Iterable[str], seats: int) -> str:
    return f"{seats} seat(s) among {', '.join(sorted(contenders))}"


def settlement_problems(command: RecordTie, election_id: str, view: IntakeView) -> list[Problem]:
    """A settled tie stays settled: a toss for it is refused unless it redraws the standing toss
    (names it in ``supersedes``, with a reason). Chairs cannot toss at all (``credentials.authorize``)."""
    contenders = tuple(sorted(command.contenders))
    tie = (election_id, command.unit_id, contenders, command.seats)
    standing = view.settled_by(tie)
    what = f"the tie of {_tie_text(contenders, command.seats)} in unit {command.unit_id!r}"
    if command.supersedes is None:
        if standing is None:
            return []
        settled = view.toss(standing)
        won = f" (winners: {', '.join(settled.winners)})" if settled is not None else ""
        return [
            Problem(
                "contenders",
                "TIE_ALREADY_SETTLED",
                f"{what} was settled by toss {standing}{won}; a second toss is refused. An official may redraw it "
                f"only as a correction: send supersedes={standing} and the reason",
            )
        ]
    errors: list[Problem] = []
    target = view.toss(command.supersedes)
    if target is None:
        errors.append(Problem("supersedes", "UNKNOWN_EVENT", f"no coin toss {command.supersedes!r} is recorded"))
    elif (target.election_id, target.unit_id) != (election_id, command.unit_id):
        errors.append(
            Problem("supersedes", "OTHER_UNITS_EVENT", f"toss {command.supersedes} is a toss of unit {target.unit_id!r} of "
                    f"election {target.election_id!r}, not of unit {command.unit_id!r} of election {election_id!r}")
        )
    elif (target.contenders, target.seats) != (contenders, command.seats):
        errors.append(
            Problem(
                "supersedes",
                "OTHER_TIE",
                f"toss {command.supersedes} settled {_tie_text(target.contenders, target.seats)}, not {_tie_text(contenders, command.seats)}",
            )
        )
    elif standing != command.supersedes:
        errors.append(
            Problem(
                "supersedes",
                "ALREADY_SUPERSEDED",
                f"toss {command.supersedes} was already redrawn by {standing}; a redraw must name the toss that stands ({standing})",
            )
        )
    if not shows_a_word(command.reason):  # blank, or only spaces and invisible marks
        errors.append(Problem("reason", "REQUIRED", "a redraw of a settled tie must say why the settled toss is replaced"))
    return errors


def settled_meanwhile(event: Event[Any], view: IntakeView) -> tuple[Problem, ...]:
    """What makes a spooled toss wrong now: its tie was settled (or redrawn) by another intake while
    the log was out of reach."""
    payload = event.payload
    assert isinstance(payload, TieBroken)
    env = event.envelope
    contenders, seats = payload.tie
    standing = view.settled_by((env.election_id, env.unit_id, contenders, seats))
    if standing is None or standing == event.event_id or payload.redraws(standing):
        return ()
    code = "ALREADY_SUPERSEDED" if payload.supersedes else "TIE_ALREADY_SETTLED"
    where = "supersedes" if payload.supersedes else "contenders"
    return (Problem(where, code, f"the tie of {_tie_text(contenders, seats)} was settled meanwhile by toss {standing}"),)


def _ties_of_result(election: ElectionInfo, unit_id: str, view: IntakeView) -> set[tuple[tuple[str, ...], int]] | None:
    """Every tie the unit's current result calls for, those after a settled one included
    (``ties_called_for``). None when there is no result, or its delegates cannot be computed."""
    status = view.unit(election.election_id, unit_id)
    result, unit = status.result, election.units.get(unit_id)
    if result is None or unit is None:
        return None
    first, final = dict(result.first_alignment), dict(result.final_alignment)
    attendance = result.attendance if result.attendance is not None else status.attendance
    rules = get_rule_set(election.definition.rule_set)

    def standing(key: tuple[tuple[str, ...], int]) -> TieResolution | None:
        toss = view.toss(view.settled_by((election.election_id, unit_id, *key)) or "")
        return None if toss is None else TieResolution(toss.contenders, toss.seats, toss.winners)

    try:
        delegates = unit.delegates if unit.delegates is not None else satellite_delegates(attendance or sum(first.values()))
        return ties_called_for(
            lambda ties: rules.allocate(delegates=delegates, attendance=attendance, first=first, final=final, ties=ties).pending,
            standing,
        )
    except CaucusMathError:
        return None


def no_such_tie(command: RecordTie, election: ElectionInfo, view: IntakeView) -> list[Problem]:
    """A toss decides a tie of the unit's result (RULES §6): with a result recorded, a toss for a tie
    that result does not have is refused, or it would lie in wait and silently decide a tie a later
    correction creates. Before any result a toss is accepted: the precinct tosses before it reports
    (RULES §2, steps 8 and 9). A redraw is held to the same: against a result without its tie it would
    decide nothing (the tally uses a toss only for a tie of the result it was recorded against), yet
    still replace the toss it names, leaving a tie the result comes to have again pending, and every new
    toss for it refused as already settled."""
    ties = _ties_of_result(election, command.unit_id, view)
    contenders = tuple(sorted(command.contenders))
    if ties is None or (contenders, command.seats) in ties:
        return []
    status = view.unit(election.election_id, command.unit_id)
    known = "; ".join(_tie_text(c, n) for c, n in sorted(ties)) or "none"
    return [
        Problem(
            "contenders",
            "NO_SUCH_TIE",
            f"the current result of unit {command.unit_id!r} (event {status.result_event_id}) has no tie of "
            f"{_tie_text(contenders, command.seats)} (its ties: {known}); a toss decides a tie of the result (RULES §6)",
        )
    ]

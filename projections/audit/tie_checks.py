"""Audit findings for ties tossed more than once (DESIGN.md: a settled tie stays settled).

The intake refuses a second toss of a settled tie unless it is an official's redraw, which names the
toss it replaces and gives a reason. So in a log that went through the intake, a tie tossed twice is
always a redraw, and an auditor should see every one (``TIE_REDRAWN``, info). A second toss that is not
a redraw can only come from a history that bypassed the intake (an import, a hand-written log, a
hostile producer): the projection ignores it and keeps the toss that stood, and the audit reports it
(``TIE_CONTRADICTED``, error), so nobody can flip a seat with a second coin unnoticed.

A worksheet that gives a settled tie's seats otherwise than the toss did is reported too
(``TOSS_CONTRADICTED``, error; RULES §6, §12): the reported figure stays official, as every reported
figure does, but once a tie is settled only its outcome is legal.

A standing toss the current result's allocation does not use is reported (``TOSS_UNUSED``, warn): tossed
for a tie of a result since corrected, or recorded under another reading of the rules; the tally says so
among its problems, but nothing else would show that a recorded toss changed nothing.

A tie settled by a toss recorded before the unit had any result is reported too (``TOSS_BEFORE_RESULT``,
warn): a precinct may toss before its chair reports, so the toss stands, but when it was recorded
nothing could check that the tie existed (RULES §6: a toss decides a tie of the result it was tossed
for), and an official could otherwise settle likely ties of every unit in advance, unseen.

The findings are read off the unit tally (``UnitTally.tie_history``), i.e. off what the projection did
with each toss, so the audit, the tally and the paper trail tell the same story.
"""

from __future__ import annotations

from projections.audit.checks import AuditFinding
from projections.reducers import TieRecord, TossNote
from projections.tally import ElectionContext, UnitTally
from projections.trail import ignored_because

__all__ = ["TIE_CODES", "tie_findings", "unit_finding"]

TIE_CODES: tuple[str, ...] = ("TIE_CONTRADICTED", "TIE_REDRAWN", "TOSS_CONTRADICTED", "TOSS_BEFORE_RESULT", "TOSS_UNUSED")


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(names) or "none"


def unit_finding(t: UnitTally, ctx: ElectionContext, code: str, severity: str, message: str, *, expected: object = None,
                  reported: object = None, likely_cause: str | None = None) -> AuditFinding:
    """A tie finding of unit ``t``: the unit's columns are the same for every code."""
    county = ctx.counties.get(t.county_id or "")
    return AuditFinding(
        unit_id=t.unit_id,
        unit_name=t.name,
        county_id=t.county_id,
        county_name=county.name if county else t.county_id,
        satellite=t.satellite_group is not None,
        status=t.status + (f" ({t.stage})" if t.stage else ""),
        result_event_id=t.result_event_id,
        code=code,
        severity=severity,
        message=message,
        candidate=None,
        expected=expected,
        reported=reported,
        likely_cause=likely_cause,
    )


def _finding(t: UnitTally, ctx: ElectionContext, tie: TieRecord, note: TossNote) -> AuditFinding:
    what = f"the tie of {tie.seats} seat(s) among {_names(tie.contenders)}"
    if note.redrew:
        code, severity, cause = "TIE_REDRAWN", "info", None
        message = (
            f"toss {note.event_id} redrew {what}: it replaces toss {note.against} (winners {_names(note.against_winners)}) "
            f"with winners {_names(note.winners)}; reason given: {note.reason}"
        )
    else:
        code, severity = "TIE_CONTRADICTED", "error"
        cause = "a toss that bypassed the intake (which refuses a second toss of a settled tie), e.g. an imported or hand-written history"
        message = (
            f"toss {note.event_id} (winners {_names(note.winners)}) contradicts toss {note.against} (winners "
            f"{_names(note.against_winners)}), which had settled {what}: {ignored_because(note)}. It was ignored; "
            f"the tally keeps toss {note.against}"
        )
    return unit_finding(t, ctx, code, severity, message, expected=_names(note.against_winners),
                         reported=_names(note.winners), likely_cause=cause)


def _toss_contradicted(t: UnitTally, ctx: ElectionContext, event_id: str) -> AuditFinding:
    """The reported delegates give a tie's seats otherwise than the toss that settled it."""
    reported, computed = t.cds_reported or {}, t.cds_computed or {}
    differ = [c for c in sorted(set(reported) | set(computed)) if reported.get(c, 0) != computed.get(c, 0)]
    return unit_finding(
        t, ctx, "TOSS_CONTRADICTED", "error",
        f"the reported delegates contradict coin toss {event_id}, which settled a tie (RULES §6: only its "
        "outcome is legal); the reported figure stays official",
        expected={c: computed.get(c, 0) for c in differ}, reported={c: reported.get(c, 0) for c in differ},
        likely_cause="the worksheet was filled in before, or without, the coin toss",
    )


def _toss_before_result(t: UnitTally, ctx: ElectionContext, event_id: str) -> AuditFinding:
    return unit_finding(
        t, ctx, "TOSS_BEFORE_RESULT", "warn",
        f"coin toss {event_id} settles a tie of this result but was recorded before the unit had any result: "
        "nothing checked then that the tie existed (RULES §6); check it against the worksheet",
        likely_cause="the toss was entered before the report, or decided in advance",
    )


def _toss_unused(t: UnitTally, ctx: ElectionContext, event_id: str) -> AuditFinding:
    return unit_finding(
        t, ctx, "TOSS_UNUSED", "warn",
        f"coin toss {event_id} stands but matches no tie of the current result under {t.rule_set}: the tally "
        "does not use it (RULES §6: a toss decides a tie of the result it was tossed for)",
        likely_cause="one of: the result was corrected after the toss; the toss was recorded before the result, for a tie "
                     "the result turned out not to have; or it was recorded under another reading of the rules (such as "
                     "idp-2020's §4.5 cut inside equal groups, read as 'all realign' before it was read as a lot)",
    )


def tie_findings(t: UnitTally, ctx: ElectionContext) -> list[AuditFinding]:
    """One finding per toss of a unit's ties after the first, whether or not the unit reports, one per
    standing toss the reported delegates contradict, one per applied toss recorded before any result, and
    one per standing toss the current result's allocation does not use."""
    return [_finding(t, ctx, tie, note) for tie in t.tie_history for note in tie.later] + [
        _toss_contradicted(t, ctx, event_id) for event_id in t.tosses_contradicted
    ] + [_toss_before_result(t, ctx, event_id) for event_id in t.tosses_before_result] + [
        _toss_unused(t, ctx, event_id) for event_id in t.tosses_unused]

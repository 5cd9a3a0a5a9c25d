"""Audit findings for results recorded after their election was certified (``CHANGED_AFTER_CERTIFICATION``).

A certification covers the results that stood when it was recorded. The ledger still records a later
report or correction (a recount ordered after certification is lawful), and the unit's tally marks it,
but the election's header keeps saying "certified" over numbers the certification never covered.
Without a finding here the audit would say "no findings" over them, so each such unit is named (warn:
the change may be lawful; an auditor checks its authority).
"""

from __future__ import annotations

from projections.audit.checks import AuditFinding
from projections.audit.tie_checks import unit_finding
from projections.tally import ElectionContext, UnitTally

__all__ = ["CERTIFICATION_CODES", "certification_findings"]

CERTIFICATION_CODES: tuple[str, ...] = ("CHANGED_AFTER_CERTIFICATION",)


def certification_findings(t: UnitTally, ctx: ElectionContext) -> list[AuditFinding]:
    """One finding for a unit whose current result was recorded after the certification."""
    if not t.after_certification:
        return []
    authority = ctx.state.certified_authority
    by = f" by {authority}" if authority else ""
    return [unit_finding(
        t, ctx, "CHANGED_AFTER_CERTIFICATION", "warn",
        f"the unit's current result (event {t.result_event_id}, {t.status}{f', {t.stage}' if t.stage else ''}) was "
        f"recorded after the election was certified{by}: the certification does not cover it",
        expected="the certified result", reported=t.result_event_id,
        likely_cause="a recount or correction after certification, or a report that came in late",
    )]

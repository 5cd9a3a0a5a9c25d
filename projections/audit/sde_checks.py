"""Audit findings for delegates that carry no State Delegate Equivalents (RULES §8, §9).

A unit's SDEs are its county delegates weighed by its county's ratio, or, for a satellite, by its share
of its group's pool (attendance x pool / the group's attendance base). When that weight cannot be
computed (a group with no attendance base, a base of 0, a satellite with more attendees than its whole
group) the tally keeps the unit's delegates but can give them no SDEs, so the unit drops out of the SDE
totals while its delegates still count. The tally names the reason among its problems; without a
finding here the audit would say "no findings" over a statewide SDE total that leaves a unit out
(``SDE_UNWEIGHED``, error).
"""

from __future__ import annotations

from projections.audit.checks import AuditFinding
from projections.audit.tie_checks import unit_finding
from projections.tally import ElectionContext, UnitTally

__all__ = ["SDE_CODES", "sde_findings"]

SDE_CODES: tuple[str, ...] = ("SDE_UNWEIGHED",)


def sde_findings(t: UnitTally, ctx: ElectionContext) -> list[AuditFinding]:
    """One finding for a reporting unit that awards delegates none of which carries an SDE."""
    awarded = sum(t.cds.values())
    if not t.reporting or awarded == 0 or t.sde_weight is not None:
        return []
    why = next((p for p in t.problems if "SDE" in p), "its SDE weight cannot be computed")
    return [unit_finding(
        t, ctx, "SDE_UNWEIGHED", "error",
        f"{awarded} county delegate(s) carry no SDEs, so the unit is missing from every SDE total: {why}",
        expected="an SDE weight", reported=None,
        likely_cause="the satellite group's attendance base is missing, 0 or below the satellite's attendance"
        if t.satellite_group is not None else "the unit's county is not in the definition, so no SDE ratio applies",
    )]

"""The auditor's acceptance checks (RULES.md §12) over every unit's current result, and every tie
tossed more than once (``projections.audit.tie_checks``).

Why here and not in the caucus math: ``caucus_math`` checks one unit given numbers; an audit has to
decide, for each unit of a real election, *which* numbers: the result that stands now (the latest report
or correction), the unit's D (apportioned, or from attendance for a satellite), T when a chair reported
it (else the first-alignment total stands in, as §12 says), the delegates as reported, and for a
satellite the headcount its SDE weight was computed from. All of these come from the unit tallies
(``projections.tally``), so the audit sees exactly what ``caucus tally`` shows.

Satellite headcounts: the definition gives each satellite an SDE weight ``headcount x pool / base``
(RULES §8); when that yields a whole headcount it is the attendance the D table is checked against, so
a satellite whose headcount exceeded its first alignment (Central Iowa Center for Independent Living,
67 vs 50) is flagged ``SATELLITE_DELEGATES``. A headcount the chair reported wins over the derived one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ledger.caucus_math import CHECK_CODES, CaucusMathError, Counts, Finding, RuleSet, Severity, get_rule_set
from projections.tally import ElectionContext, UnitTally

__all__ = [
    "SEVERITY_ORDER",
    "AuditFinding",
    "AuditReport",
    "satellite_headcount",
    "audit_unit",
    "audit_tallies",
    "plain",
]

SEVERITY_ORDER: tuple[str, ...] = ("error", "warn", "ambiguous", "soft", "info")
"""How findings are grouped, worst first."""


def plain(value: object) -> Any:
    """A finding's expected/reported value as JSON: delegate maps keep their non-zero entries."""
    if isinstance(value, Counts) or isinstance(value, Mapping):
        return {k: v for k, v in value.items() if v}
    if isinstance(value, (tuple, list, frozenset, set)):
        return [plain(v) for v in value]
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    return value


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, Mapping):
        shown = [f"{k} {v}" for k, v in value.items() if v]
        return ", ".join(shown) if shown else "none"
    if isinstance(value, (tuple, list)):
        return " or ".join(_text(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class AuditFinding:
    """A §12 finding placed in the election: which unit, where, which result was checked."""

    unit_id: str
    unit_name: str | None
    county_id: str | None
    county_name: str | None
    satellite: bool
    status: str
    result_event_id: str | None
    code: str
    severity: str
    message: str
    candidate: str | None
    expected: object
    reported: object
    likely_cause: str | None

    @property
    def expected_text(self) -> str:
        return _text(self.expected)

    @property
    def reported_text(self) -> str:
        return _text(self.reported)

    def to_json(self) -> dict[str, Any]:
        return {
            "unit_id": self.unit_id,
            "unit_name": self.unit_name,
            "county_id": self.county_id,
            "county": self.county_name,
            "satellite": self.satellite,
            "status": self.status,
            "result_event_id": self.result_event_id,
            "code": self.code,
            "severity": self.severity,
            "candidate": self.candidate,
            "expected": plain(self.expected),
            "reported": plain(self.reported),
            "likely_cause": self.likely_cause,
            "message": self.message,
        }

    def csv_row(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "code": self.code,
            "unit_id": self.unit_id,
            "unit_name": self.unit_name or "",
            "county": self.county_name or "",
            "candidate": self.candidate or "",
            "expected": self.expected_text,
            "reported": self.reported_text,
            "likely_cause": self.likely_cause or "",
            "message": self.message,
            "result_event_id": self.result_event_id or "",
        }


CSV_FIELDS = ("severity", "code", "unit_id", "unit_name", "county", "candidate", "expected", "reported",
              "likely_cause", "message", "result_event_id")


@dataclass
class AuditReport:
    """Every finding of an audit, and what was (not) checked."""

    election_id: str
    rule_set: str
    source: str
    units_defined: int
    units_checked: int
    findings: list[AuditFinding]
    not_checked: list[tuple[str, str]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def filtered(self, severities: Collection[str] = (), codes: Collection[str] = (), county: str | None = None,
                 unit: str | None = None) -> AuditReport:
        kept = [
            f for f in self.findings
            if (not severities or f.severity in severities) and (not codes or f.code in codes)
            and (county is None or f.county_id == county) and (unit is None or f.unit_id == unit)
        ]
        return AuditReport(self.election_id, self.rule_set, self.source, self.units_defined, self.units_checked, kept,
                           self.not_checked, dict(self.meta))  # fmt: skip

    def counts(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(code, severity) -> (findings, units), in §12 order then severity order."""
        findings: Counter[tuple[str, str]] = Counter()
        units: dict[tuple[str, str], set[str]] = {}
        for f in self.findings:
            findings[(f.code, f.severity)] += 1
            units.setdefault((f.code, f.severity), set()).add(f.unit_id)
        order = {c: i for i, c in enumerate(CHECK_CODES)}
        sev = {s: i for i, s in enumerate(SEVERITY_ORDER)}
        keys = sorted(findings, key=lambda k: (order.get(k[0], len(order)), sev.get(k[1], len(sev))))
        return {k: (findings[k], len(units[k])) for k in keys}

    def by_severity(self) -> dict[str, list[AuditFinding]]:
        out: dict[str, list[AuditFinding]] = {s: [] for s in SEVERITY_ORDER}
        for f in self.findings:
            out.setdefault(f.severity, []).append(f)
        return {s: fs for s, fs in out.items() if fs}

    @property
    def units_with_findings(self) -> int:
        return len({f.unit_id for f in self.findings})

    @property
    def has_errors(self) -> bool:
        return any(f.severity == Severity.ERROR.value for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "election_id": self.election_id or None,  # None: no election is defined (refusals only)
            "rule_set": self.rule_set or None,
            "source": self.source,
            "units_defined": self.units_defined,
            "units_checked": self.units_checked,
            "units_with_findings": self.units_with_findings,
            "not_checked": [{"unit_id": u, "reason": r} for u, r in self.not_checked],
            "counts": [
                {"code": c, "severity": s, "findings": n, "units": u} for (c, s), (n, u) in self.counts().items()
            ],
            "findings": [f.to_json() for f in self.findings],
            **self.meta,
        }


def satellite_headcount(ctx: ElectionContext, t: UnitTally) -> int | None:
    """The headcount of a satellite: as reported (or recorded when it opened), else the whole number
    its SDE weight implies (weight x group attendance base / group pool), else None."""
    if t.attendance_source in ("reported", "opened"):
        return t.attendance
    unit = ctx.units.get(t.unit_id)
    defn = ctx.state.definition
    if unit is None or unit.satellite_group is None or unit.sde_weight is None or defn is None:
        return None
    group = next((g for g in defn.satellite_groups if g.group_id == unit.satellite_group), None)
    if group is None or not group.attendance_base or not group.sde_pool:
        return None
    implied = unit.sde_weight * group.attendance_base / group.sde_pool
    return int(implied) if implied.denominator == 1 else None


def _satellite_attendance(ctx: ElectionContext, t: UnitTally) -> int | None:
    """What a satellite's D table is checked against: its headcount, or else the attendance its D was
    computed from (so a satellite that reported more delegates than that D gives is still flagged)."""
    headcount = satellite_headcount(ctx, t)
    return headcount if headcount is not None else t.attendance


def audit_unit(t: UnitTally, ctx: ElectionContext, rules: RuleSet) -> tuple[list[AuditFinding], str | None]:
    """The findings of one unit's current result, or why it could not be checked."""
    if not t.reporting:
        return [], "not reporting"
    if t.delegates is None:
        return [], "D unknown: " + ("; ".join(t.problems) or "the unit is not in the definition")
    known_t = t.attendance if t.attendance_source in ("reported", "opened") else None
    sat = t.satellite_group is not None
    try:
        found: list[Finding] = rules.check(
            delegates=t.delegates,
            attendance=known_t,
            first=t.first,
            final=t.final,
            reported=t.cds_reported,
            satellite_attendance=_satellite_attendance(ctx, t) if sat else None,
        )
    except CaucusMathError as exc:
        return [], f"cannot be checked: {exc}"
    county = ctx.counties.get(t.county_id or "")
    status = t.status + (f" ({t.stage})" if t.stage else "")
    return [
        AuditFinding(
            t.unit_id, t.name, t.county_id, county.name if county else t.county_id, sat, status, t.result_event_id,
            f.code, str(f.severity), f.message, f.candidate, f.expected, f.reported, f.likely_cause,
        )
        for f in found
    ], None


def audit_tallies(
    ctx: ElectionContext,
    tallies: Iterable[UnitTally],
    *,
    rule_set: str | None = None,
    source: str = "",
    meta: dict[str, Any] | None = None,
) -> AuditReport:
    """Run the §12 checks over every reporting unit, under ``rule_set`` (default: the election's)."""
    name = rule_set or ctx.rule_set_name
    if name is None:
        raise CaucusMathError("rule_set", "the election names no rule set and none was given")
    from projections.audit.certification_checks import certification_findings  # they build AuditFindings:
    from projections.audit.sde_checks import sde_findings  # imported here, not at the top
    from projections.audit.tie_checks import tie_findings

    rules = get_rule_set(name)
    findings: list[AuditFinding] = []
    not_checked: list[tuple[str, str]] = []
    checked = 0
    for t in sorted(tallies, key=lambda x: ((x.county_id or ""), (x.name or ""), x.unit_id)):
        if t.unit_id not in ctx.units:
            if t.reporting:
                not_checked.append((t.unit_id, "not in the election's definition"))
            continue
        findings.extend(tie_findings(t, ctx))  # a tie tossed twice, whether or not the unit reports
        findings.extend(sde_findings(t, ctx))  # these two whether or not the §12 checks can run
        findings.extend(certification_findings(t, ctx))
        unit_findings, why = audit_unit(t, ctx, rules)
        if why is not None:
            if why != "not reporting":
                not_checked.append((t.unit_id, why))
            continue
        checked += 1
        findings.extend(unit_findings)
    sev = {s: i for i, s in enumerate(SEVERITY_ORDER)}
    order = {c: i for i, c in enumerate(CHECK_CODES)}
    findings.sort(key=lambda f: (sev.get(f.severity, 9), order.get(f.code, 99), f.county_name or "", f.unit_name or "",
                                 f.unit_id, f.candidate or ""))  # fmt: skip
    return AuditReport(ctx.election_id, rules.name, source, len(ctx.units), checked, findings, not_checked, meta or {})

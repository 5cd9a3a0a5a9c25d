"""Every code an audit finding can carry, and every severity, in one list: what a filter may name.

The command (``caucus audit --code``) and the read API (``?code=``, ``?severity=``) refuse a name that is
not here rather than answer "no findings" for a typing mistake.
"""

from __future__ import annotations

from ledger.caucus_math import CHECK_CODES
from projections.audit.certification_checks import CERTIFICATION_CODES
from projections.audit.checks import SEVERITY_ORDER
from projections.audit.record_checks import RECORD_CODES
from projections.audit.sde_checks import SDE_CODES
from projections.audit.tie_checks import TIE_CODES

__all__ = ["AUDIT_CODES", "SEVERITY_ORDER", "unknown_filters"]

AUDIT_CODES: tuple[str, ...] = CHECK_CODES + TIE_CODES + SDE_CODES + CERTIFICATION_CODES + RECORD_CODES


def unknown_filters(severity: list[str] | None, code: list[str] | None) -> str | None:
    """Why a filter names a severity or code no finding has (naming the ones it may), else None."""
    for name, given, allowed, norm in (("severity", severity, SEVERITY_ORDER, str.lower), ("code", code, AUDIT_CODES, str.upper)):
        bad = [v for v in given or () if norm(v) not in allowed]
        if bad:
            return f"{name} {', '.join(repr(b) for b in bad)}: not one of {', '.join(allowed)}"
    return None

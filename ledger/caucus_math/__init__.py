"""The caucus math: pure, exact functions of caucus counts (RULES.md).

Why a package of its own: every number the ledger projects -- thresholds,
county delegates, SDEs, audit findings -- must be recomputable by anyone from
the events and a named rule set.  So this package does no IO, keeps no state,
uses only ``int`` and ``fractions.Fraction`` (rounding happens only for
display), never guesses a coin toss, and gives the same answer whatever order
the candidates come in.

Typical use::

    from ledger.caucus_math import get_rule_set, TieResolution

    rs = get_rule_set()                       # "idp-2020"
    alloc = rs.allocate(delegates=6, attendance=200,
                        first={"Warren": 100, "Sanders": 50, "Biden": 50},
                        final={"Warren": 100, "Sanders": 50, "Biden": 50})
    alloc.pending      # (PendingTie(contenders=('Biden', 'Sanders'), seats=1, ...),)
    toss = TieResolution(contenders=("Biden", "Sanders"), seats=1, winners=("Sanders",))
    rs.allocate(..., ties=(toss,)).delegates   # Warren 3, Sanders 2, Biden 1
"""

from __future__ import annotations

from ._counts import Counts
from .allocation import Allocation, LeftoverRule
from .checks import CHECK_CODES, Finding, Severity
from .errors import CaucusMathError
from .one_delegate import NoMajorityRule
from .rulesets import DEFAULT_RULE_SET, RULE_SETS, RULES_REVISION, RuleSet, get_rule_set
from .satellites import (
    SATELLITE_SDE_POOLS_2020,
    satellite_delegates,
    satellite_sde_ratio,
    satellite_sde_weight,
)
from .sde import cds_from_sde, county_sde_ratio, display_sde, sde_for, sum_displayed
from .thresholds import is_viable, viability_share, viability_threshold
from .ties import PendingTie, TieResolution, ties_called_for
from .viability import RealignmentCut, RealignTieRule, locked_groups, too_many_viable, viable_groups

__all__ = [
    "RuleSet",
    "get_rule_set",
    "RULE_SETS",
    "RULES_REVISION",
    "DEFAULT_RULE_SET",
    "Allocation",
    "PendingTie",
    "TieResolution",
    "ties_called_for",
    "Finding",
    "Severity",
    "CHECK_CODES",
    "CaucusMathError",
    "Counts",
    "LeftoverRule",
    "RealignTieRule",
    "NoMajorityRule",
    "RealignmentCut",
    "viability_threshold",
    "viability_share",
    "is_viable",
    "viable_groups",
    "locked_groups",
    "too_many_viable",
    "satellite_delegates",
    "satellite_sde_weight",
    "satellite_sde_ratio",
    "SATELLITE_SDE_POOLS_2020",
    "county_sde_ratio",
    "sde_for",
    "display_sde",
    "sum_displayed",
    "cds_from_sde",
]

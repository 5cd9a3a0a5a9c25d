"""Allocation throughput (pytest-benchmark).

The project runs pytest with ``--benchmark-disable``: then each benchmark body
runs once, as a plain test.  Measure with::

    .venv/bin/pytest tests/caucus_math/test_bench_allocation.py --benchmark-enable

Target: at least 50,000 allocations per second on one core for a realistic
precinct (D = 8, T = 180, six groups).
"""

from __future__ import annotations

from ledger.caucus_math import get_rule_set

FIRST = {"Biden": 30, "Buttigieg": 40, "Klobuchar": 20, "Sanders": 45, "Warren": 35, "Yang": 10}
FINAL = {"Biden": 34, "Buttigieg": 48, "Klobuchar": 0, "Sanders": 50, "Warren": 38, "Yang": 0}


def test_bench_allocate_one_precinct(benchmark) -> None:
    rs = get_rule_set()

    def run():
        return rs.allocate(delegates=8, attendance=180, first=FIRST, final=FINAL)

    alloc = benchmark(run)
    assert alloc.delegates == {"Biden": 2, "Buttigieg": 2, "Klobuchar": 0, "Sanders": 2, "Warren": 2, "Yang": 0}


def test_bench_allocate_one_precinct_with_a_tie(benchmark) -> None:
    rs = get_rule_set()
    final = {"Warren": 15, "Sanders": 15, "Biden": 15, "Buttigieg": 15, "Klobuchar": 0, "Yang": 0}

    def run():
        return rs.allocate(delegates=18, attendance=60, first=final, final=final)

    alloc = benchmark(run)
    assert alloc.pending[0].seats == 2


def test_bench_recompute_all_units(benchmark, iowa) -> None:
    """All 1,765 units of the certified release (denominator: the larger alignment total)."""
    rs = get_rule_set()
    work = [
        (u.delegates, max(u.first_total, u.final_total), u.first, u.final) for u in iowa.units()
    ]

    def run():
        return [rs.allocate(delegates=d, attendance=t, first=f, final=g) for d, t, f, g in work]

    out = benchmark(run)
    assert len(out) == 1765


def test_bench_check_all_units(benchmark, iowa) -> None:
    """The §12 audit of all 1,765 units against their reported delegates."""
    rs = get_rule_set()
    work = [(u.delegates, u.first, u.final, u.reported_cds) for u in iowa.units()]

    def run():
        return sum(
            len(rs.check(delegates=d, attendance=None, first=f, final=g, reported=r)) for d, f, g, r in work
        )

    assert benchmark(run) > 0

"""Statewide recompute and as-of reads, the old way and the new way side by side in one run.

Why: a statewide figure is asked for on every read of the results (``caucus tally``, the read API) and
after every batch of the feed, and an as-of read ("the tally at 21:00") must not cost a replay of the
whole log. Each part times both ways in the same process, interleaved round by round, and prints
min / median / max and the ratio of the medians.

* statewide (``--units``, default 1,765 as in 2020 Iowa, every unit reporting, 14 candidates):
  - sums, old: ``AreaTally.add`` unit by unit (what ``aggregate`` did before); new: ``aggregate``;
  - counties, old and new the same way (``aggregate_counties``);
  - recompute, old: every unit's tally from its state, then the old sums; new: the same with ``aggregate``;
  - one unit changed: ``ElectionSums.change`` (the feed's incremental sums) and the state's copy.

    python scripts/bench_asof.py statewide --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_projection import events as bench_events  # noqa: E402  (the workload of the rebuild benchmark)

from ledger.journal import Journal  # noqa: E402
from ledger.log.memory import MemoryLog  # noqa: E402
from projections.area_sums import ElectionSums  # noqa: E402
from projections.asof import replay  # noqa: E402
from projections.tally import (  # noqa: E402
    AreaTally,
    ElectionContext,
    UnitTally,
    aggregate,
    aggregate_counties,
    compute_unit_tally,
    election_context,
)


def _old_sums(ctx: ElectionContext, tallies: Iterable[UnitTally], county_id: str | None = None) -> AreaTally:
    area = aggregate(ctx, (), county_id)
    for t in tallies:
        if t.unit_id in ctx.units and (county_id is None or ctx.units[t.unit_id].county_id == county_id):
            area.add(t)
    return area


def _old_counties(ctx: ElectionContext, tallies: Iterable[UnitTally]) -> dict[str, AreaTally]:
    out = aggregate_counties(ctx, ())
    for t in tallies:
        unit = ctx.units.get(t.unit_id)
        if unit is not None and unit.county_id in out:
            out[unit.county_id].add(t)
    return out


def timed(fn: Callable[[], Any]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def line(name: str, old: list[float], new: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    o, n = statistics.median(old), statistics.median(new)

    def fig(xs: list[float]) -> str:
        return f"{min(xs) * scale:8.2f} {statistics.median(xs) * scale:8.2f} {max(xs) * scale:8.2f}"

    return f"{name:<34} old {fig(old)} {unit} | new {fig(new)} {unit} | old/new {o / n:6.1f}x"


def statewide(args: argparse.Namespace) -> None:
    log = MemoryLog(f"bench-statewide-{uuid.uuid4()}", partitions=8)
    Journal(log).append_batch(list(bench_events(args.units + 1, args.units, 11)))
    folded = replay(log)
    (eid, election), = folded.elections.items()
    ctx = election_context(election, eid)
    states = list(folded.units.values())
    tallies = [compute_unit_tally(s, ctx) for s in states]
    assert _old_sums(ctx, tallies).to_json() == aggregate(ctx, tallies).to_json(), "old and new sums differ"
    sums = ElectionSums(ctx)
    sums.load({t.unit_id: t for t in tallies}, {})
    changed = tallies[len(tallies) // 2]

    def one_change() -> None:
        sums.change(changed.unit_id, changed, changed, 1, 1)
        sums.state()

    pairs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "state sums": (lambda: _old_sums(ctx, tallies), lambda: aggregate(ctx, tallies)),
        "99 county sums": (lambda: _old_counties(ctx, tallies), lambda: aggregate_counties(ctx, tallies)),
        "recompute (tallies + state sums)": (
            lambda: _old_sums(ctx, [compute_unit_tally(s, ctx) for s in states]),
            lambda: aggregate(ctx, [compute_unit_tally(s, ctx) for s in states])),
        "one unit changed (old: state sums)": (lambda: _old_sums(ctx, tallies), one_change),
    }
    got: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in pairs}
    for _ in range(args.rounds):
        for name, (old, new) in pairs.items():  # interleaved: old then new, every round
            got[name][0].append(timed(old))
            got[name][1].append(timed(new))
    print(f"statewide, {len(tallies)} units reporting, {len(ctx.candidates)} candidates, {args.rounds} rounds "
          "(min median max)")
    for name, (old_times, new_times) in got.items():
        print(line(name, old_times, new_times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="part", required=True)
    st = sub.add_parser("statewide", help="statewide and county sums over every unit, old and new")
    st.add_argument("--units", type=int, default=1765)
    st.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.part == "statewide":
        statewide(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

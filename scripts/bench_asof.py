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

* as-of (``--sizes``, default 100k and 1M events of ``bench_projection``'s workload over 1,765 units, on
  the embedded log, projected once into an embedded store by the runner in ``--batch`` record batches):
  old: ``tally_as_of`` (the replay of the log); new: ``history_tally`` (the unit history), each in a
  fresh process per round (its own peak RSS), for a time and for log positions halfway through the
  log; the two answers are checked equal first.

* build (``--count``): what keeping the history costs the runner: a rebuild into an empty embedded store
  with the history (new) and with its rows left out (old), interleaved, each in a fresh process; seconds
  and the store's size.

    python scripts/bench_asof.py statewide --rounds 5
    python scripts/bench_asof.py asof --sizes 100000 1000000 --rounds 3
    python scripts/bench_asof.py build --count 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_projection import T0, write  # noqa: E402  (the workload of the rebuild benchmark)
from bench_projection import events as bench_events  # noqa: E402

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


def _cuts(log: Any, count: int) -> dict[str, Any]:
    from projections.asof import Cut

    return {"time": Cut(at=T0 + timedelta(seconds=count // 2)),
            "positions": Cut(ends={p: m // 2 for p, m in log.high_watermarks().items()})}


def child(args: argparse.Namespace) -> None:
    """One as-of read in this process: prints seconds and peak RSS as JSON."""
    from ledger.log.sqlite import SqliteLog
    from projections.asof import tally_as_of
    from projections.asof_store import history_tally
    from projections.stores.sqlite import SqliteStore

    log = SqliteLog(Path(args.dir) / "log.sqlite3", read_only=True)
    cut = _cuts(log, args.count)[args.cut]
    began = time.perf_counter()
    if args.way == "old":
        got: Any = tally_as_of(log, cut)
    else:
        store = SqliteStore(Path(args.dir) / "store.sqlite3", read_only=True)
        got = history_tally(store, store.serving("tally"), log, cut)
        assert not isinstance(got, str), got
    seconds = time.perf_counter() - began
    digest = hashlib.sha256("".join(t.dumps() for _, t in sorted(got.units.items())).encode()).hexdigest()
    print(json.dumps({"seconds": seconds, "rss_mb": _peak_rss_mb(), "digest": digest}))


def _peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: ``ru_maxrss`` would carry the parent's peak across exec)."""
    for text in Path("/proc/self/status").read_text().splitlines():
        if text.startswith("VmHWM:"):
            return int(text.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _build(where: Path, count: int, batch: int) -> float:
    from ledger.log.sqlite import SqliteLog
    from projections.runner import ProjectionRunner
    from projections.sources import EmbeddedSource
    from projections.stores.sqlite import SqliteStore

    log = SqliteLog(where / "log.sqlite3", partitions=8)
    write(log, count, 1765, 11)
    store = SqliteStore(where / "store.sqlite3")
    info = store.ensure_serving("tally", source=f"log:{log.log_id}")
    began = time.perf_counter()
    ProjectionRunner(store, info.set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=batch, poll_timeout=0.01).run(
        until_caught_up=True)
    store.close()
    return time.perf_counter() - began


def build_child(args: argparse.Namespace) -> None:
    """One rebuild into a fresh store next to the log in ``--dir``; ``--way old`` leaves the history out."""
    from ledger.log.sqlite import SqliteLog
    from projections import batch_fold
    from projections.runner import ProjectionRunner
    from projections.sources import EmbeddedSource
    from projections.stores.sqlite import SqliteStore

    if args.way == "old":
        batch_fold.history_rows = lambda *_: []  # type: ignore[assignment]
    path = Path(args.dir) / f"store-{args.way}.sqlite3"
    log = SqliteLog(Path(args.dir) / "log.sqlite3", read_only=True)
    store = SqliteStore(path)
    info = store.ensure_serving("tally", source=f"log:{log.log_id}")
    began = time.perf_counter()
    ProjectionRunner(store, info.set_id, EmbeddedSource(log), batch_size=args.batch, poll_timeout=0.01).run(until_caught_up=True)
    seconds = time.perf_counter() - began
    store.close()
    size = sum(f.stat().st_size for f in Path(args.dir).glob(f"store-{args.way}.sqlite3*"))
    for f in Path(args.dir).glob(f"store-{args.way}.sqlite3*"):
        f.unlink()
    print(json.dumps({"seconds": seconds, "mb": size / 2**20}))


def build(args: argparse.Namespace) -> None:
    from ledger.log.sqlite import SqliteLog

    with tempfile.TemporaryDirectory(prefix="bench-asof-build-") as tmp:
        write(SqliteLog(Path(tmp) / "log.sqlite3", partitions=8), args.count, 1765, 11)
        got: dict[str, dict[str, list[float]]] = {w: {"seconds": [], "mb": []} for w in ("old", "new")}
        for _ in range(args.rounds):
            for way in ("old", "new"):
                out = subprocess.run([sys.executable, __file__, "build-child", "--dir", tmp, "--way", way, "--batch",
                                      str(args.batch)], capture_output=True, text=True, check=True)
                row = json.loads(out.stdout.strip().splitlines()[-1])
                for k in ("seconds", "mb"):
                    got[way][k].append(row[k])
        print(f"rebuild of {args.count:,} events in batches of {args.batch}, old: no history, new: with it; {args.rounds} rounds")
        print(line("  seconds", got["old"]["seconds"], got["new"]["seconds"], "s", 1.0))
        print(line("  store size", got["old"]["mb"], got["new"]["mb"], "MB", 1.0))


def asof(args: argparse.Namespace) -> None:
    for count in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-asof-") as tmp:
            where = Path(tmp)
            built = _build(where, count, args.batch)
            print(f"as-of, {count:,} events over 1,765 units, projected in {built:.0f} s (batches of {args.batch}); "
                  f"{args.rounds} rounds, a fresh process each (min median max)")
            for cut in ("time", "positions"):
                times: dict[str, list[float]] = {"old": [], "new": []}
                rss: dict[str, list[float]] = {"old": [], "new": []}
                digests = set()
                for _ in range(args.rounds):
                    for way in ("old", "new"):
                        out = subprocess.run([sys.executable, __file__, "child", "--dir", tmp, "--count", str(count),
                                              "--cut", cut, "--way", way], capture_output=True, text=True, check=True)
                        got = json.loads(out.stdout.strip().splitlines()[-1])
                        times[way].append(got["seconds"])
                        rss[way].append(got["rss_mb"])
                        digests.add(got["digest"])
                assert len(digests) == 1, "the history and the replay disagree"
                print(line(f"  {cut}: seconds", times["old"], times["new"], "s", 1.0))
                print(line(f"  {cut}: peak RSS", rss["old"], rss["new"], "MB", 1.0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="part", required=True)
    st = sub.add_parser("statewide", help="statewide and county sums over every unit, old and new")
    st.add_argument("--units", type=int, default=1765)
    st.add_argument("--rounds", type=int, default=5)
    ao = sub.add_parser("asof", help="as-of reads: the replay of the log and the unit history")
    ao.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ao.add_argument("--rounds", type=int, default=3)
    ao.add_argument("--batch", type=int, default=2000)
    bd = sub.add_parser("build", help="a rebuild with and without the history")
    bd.add_argument("--count", type=int, default=100_000)
    bd.add_argument("--rounds", type=int, default=3)
    bd.add_argument("--batch", type=int, default=2000)
    bc = sub.add_parser("build-child")
    bc.add_argument("--dir", required=True)
    bc.add_argument("--way", choices=("old", "new"), required=True)
    bc.add_argument("--batch", type=int, default=2000)
    ch = sub.add_parser("child")
    ch.add_argument("--dir", required=True)
    ch.add_argument("--count", type=int, required=True)
    ch.add_argument("--cut", choices=("time", "positions"), required=True)
    ch.add_argument("--way", choices=("old", "new"), required=True)
    args = parser.parse_args(argv)
    {"statewide": statewide, "asof": asof, "child": child, "build": build, "build-child": build_child}[args.part](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the results feed adds to a projection: ``caucus project`` with the feed against ``--no-feed``.

Why: the feed publishes what each batch changed, so its cost should follow the changes, not the
batches; the target is a first projection of a simulated night with the feed within 2x of the same
projection without it. Both run here side by side, in turns (feed, no feed, feed, ...), each in a
fresh process on a fresh copy of the same embedded log, so a machine whose speed drifts moves both.

Workload: ``caucus simulate write --units N`` (seed 1) into the embedded log, once; every round
copies that log into an empty data directory and runs ``caucus project --until-caught-up -q``. The
figures are the child process's wall time and CPU time (user + system); the ratios are taken pair
by pair. After the last feed run, ``caucus project`` runs again on the same data (nothing new) and
the script prints how many records that restart added to the feed (the target is none).

    python scripts/bench_feed.py                     # 20,000 units, 3 rounds
    python scripts/bench_feed.py --units 5000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CAUCUS = str(Path(sys.executable).parent / "caucus")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}


def _caucus(data: Path, *args: str) -> str:
    done = subprocess.run([CAUCUS, "--data-dir", str(data), *args], env=_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"caucus {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def make_log(data: Path, units: int) -> None:
    token = json.loads(_caucus(data, "credentials", "issue", "--official", "bench", "--json"))["token"]
    _caucus(data, "simulate", "write", "--units", str(units), "--seed", "1", "--token", token, "--json")


def run_project(source: Path, work: Path, feed: bool) -> tuple[float, float]:
    """Wall and CPU seconds of one ``caucus project`` over a fresh copy of the log."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copy(source / "log.sqlite3", work / "log.sqlite3")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    _caucus(work, "project", "--until-caught-up", "-q", *([] if feed else ["--no-feed"]))
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def feed_records(data: Path) -> int:
    conn = sqlite3.connect(f"file:{data / 'results.sqlite3'}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM log_records").fetchone()[0])
    finally:
        conn.close()


def _row(name: str, values: list[float], unit: str) -> str:
    return f"{name:<22} {min(values):>9.2f} {statistics.median(values):>9.2f} {max(values):>9.2f} {unit}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3")
    with tempfile.TemporaryDirectory(prefix="bench-feed-") as tmp:
        root = Path(tmp)
        source = root / "source"
        make_log(source, args.units)
        figures: dict[str, list[tuple[float, float]]] = {"feed": [], "no-feed": []}
        for r in range(args.rounds):
            for mode in ("feed", "no-feed") if r % 2 == 0 else ("no-feed", "feed"):
                figures[mode].append(run_project(source, root / mode, mode == "feed"))
                print(f"round {r + 1} {mode}: {figures[mode][-1][0]:.2f} s wall, {figures[mode][-1][1]:.2f} s cpu", file=sys.stderr)
        published = feed_records(root / "feed")
        _caucus(root / "feed", "project", "--until-caught-up", "-q")
        added = feed_records(root / "feed") - published
    print(f"caucus project --until-caught-up over {args.units:,} simulated units, {args.rounds} interleaved rounds")
    print(f"{'':<22} {'min':>9} {'median':>9} {'max':>9}")
    for mode in ("feed", "no-feed"):
        print(_row(f"{mode} wall", [w for w, _ in figures[mode]], "s"))
        print(_row(f"{mode} cpu", [c for _, c in figures[mode]], "s"))
    pairs = list(zip(figures["feed"], figures["no-feed"]))
    print(_row("feed/no-feed wall", [f[0] / n[0] for f, n in pairs], "x"))
    print(_row("feed/no-feed cpu", [f[1] / n[1] for f, n in pairs], "x"))
    print(f"feed records published: {published:,}; a restart with nothing new added {added:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

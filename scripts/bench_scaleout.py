"""Scale-out: one ``caucus project`` runner against two in one consumer group, same log, one PostgreSQL store.

Why: a consumer group is how projection throughput is meant to grow (issue target: two runners at
least 1.6x one). Both modes run here side by side, in turns (1, 2, 2, 1, ...), each into a fresh
database over the same Kafka topic, so a machine whose speed drifts moves both.

Workload: ``caucus simulate write --units N`` (seed 1) onto a topic of a Tansu broker this script
starts (or ``--kafka``), once. Every round creates a fresh database, starts the runners
(``caucus project --group <fresh> --no-feed -q``, following the log) and times from their start until
the positions stored in the database cover the whole topic; then they are stopped with SIGINT. The
figures are events/s over that wall time and the runners' CPU time (user + system, all processes of
the round); the ratio is taken pair by pair (round r of two runners against round r of one).

The broker and PostgreSQL share the machine's cores with the runners, so the machine's own busy time
(``/proc/stat``: every process, the broker's and the database's included) is measured per round too.
A round of one runner that keeps ``u`` cores busy on a machine of ``c`` bounds what two runners can
reach: the same work spread perfectly over every core takes ``u / c`` of the time, so ``c / u`` is the
most two runners can be faster, on this machine, however well they share the partitions.

    python scripts/bench_scaleout.py                 # 5,000 units, 3 rounds
    python scripts/bench_scaleout.py --units 20000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_log import kafka_bootstrap  # noqa: E402
from infra.postgres import ensure_running, temporary_database  # noqa: E402
from ledger.log.kafka import KafkaLog  # noqa: E402

CAUCUS = str(Path(sys.executable).parent / "caucus")
PARTITIONS = 8
SESSION_MS = 2000  # the test broker's group joins take about half of it (DESIGN.md)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}


def _caucus(data: Path, base: list[str], *args: str) -> str:
    done = subprocess.run([CAUCUS, "--data-dir", str(data), *base, *args], env=_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"caucus {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def make_log(data: Path, base: list[str], units: int) -> None:
    token = json.loads(_caucus(data, base, "credentials", "issue", "--official", "bench", "--json"))["token"]
    _caucus(data, base, "simulate", "write", "--units", str(units), "--seed", "1", "--token", token, "--json")


def applied(conn: psycopg.Connection[Any]) -> int:
    """Events the store's positions cover (0 before the first commit). One connection is kept for
    the round: a connection per poll would start a PostgreSQL backend each time, on the cores the
    runners are measured on."""
    try:
        row = conn.execute("SELECT COALESCE(SUM(next_offset), 0) FROM proj_positions").fetchone()
    except psycopg.errors.UndefinedTable:
        return 0
    return int(row[0]) if row else 0


def run_round(data: Path, base: list[str], server: str, runners: int, total: int, timeout: float) -> tuple[float, float, float]:
    """Wall and CPU seconds for ``runners`` processes in a fresh group to project the whole topic, and
    the machine's busy CPU seconds meanwhile (``machine_busy``)."""
    with temporary_database("bench_scale", server) as dsn:
        cmd = [CAUCUS, "--data-dir", str(data), *base, "--database", dsn, "project", "--group", f"bench-{uuid.uuid4().hex[:8]}",
               "--session-timeout-ms", str(SESSION_MS), "--no-feed", "-q"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy = machine_busy()
        began = time.perf_counter()
        poll = psycopg.connect(dsn, autocommit=True)
        procs = [subprocess.Popen(cmd, env=_env()) for _ in range(runners)]
        try:
            while (done := applied(poll)) < total:
                if any(p.poll() is not None for p in procs):
                    raise SystemExit(f"a runner ended early (exit {[p.poll() for p in procs]})")
                if time.perf_counter() - began > timeout:
                    raise SystemExit(f"{runners} runner(s) applied {done:,} of {total:,} events in {timeout:.0f} s")
                time.sleep(0.05)
            wall = time.perf_counter() - began
            busy = machine_busy() - busy
        finally:
            poll.close()
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for p in procs:
                p.wait(60)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), busy


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (every core, every process) since boot; 0 where
    ``/proc/stat`` is not there."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _row(name: str, values: list[float], unit: str) -> str:
    return f"{name:<24} {min(values):>10.2f} {statistics.median(values):>10.2f} {max(values):>10.2f} {unit}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kafka", help="bootstrap of a running broker (default: start a local Tansu)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one round may take")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3")
    server = ensure_running()
    with tempfile.TemporaryDirectory(prefix="bench-scaleout-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        bootstrap, where = stack.enter_context(kafka_bootstrap(args.kafka, root / "run"))
        topic = f"bench-scaleout-{uuid.uuid4().hex[:8]}"
        base = ["--kafka", bootstrap, "--topic", topic, "--partitions", str(PARTITIONS)]
        make_log(root / "data", base, args.units)
        log = KafkaLog(bootstrap, topic, partitions=PARTITIONS)
        total = sum(log.high_watermarks().values())
        log.close()
        figures: dict[int, list[tuple[float, float, float]]] = {1: [], 2: []}
        for r in range(args.rounds):
            for n in (1, 2) if r % 2 == 0 else (2, 1):
                figures[n].append(run_round(root / "data", base, server, n, total, args.timeout))
                wall, cpu, busy = figures[n][-1]
                print(f"round {r + 1}, {n} runner(s): {wall:.2f} s wall, {cpu:.2f} s cpu, machine busy {busy:.2f} s",
                      file=sys.stderr, flush=True)
    print(f"caucus project into PostgreSQL, {total:,} events ({args.units:,} simulated units) on {PARTITIONS} partitions, "
          f"{args.rounds} interleaved rounds, {os.cpu_count()} cores; kafka: {where}")
    print(f"{'':<24} {'min':>10} {'median':>10} {'max':>10}")
    for n in (1, 2):
        print(_row(f"{n} runner(s) events/s", [total / f[0] for f in figures[n]], "/s"))
        print(_row(f"{n} runner(s) wall", [f[0] for f in figures[n]], "s"))
        print(_row(f"{n} runner(s) cpu", [f[1] for f in figures[n]], "s"))
        print(_row(f"{n} runner(s) machine busy", [f[2] / f[0] for f in figures[n]], "cores (of the whole machine)"))
        print(_row(f"{n} runner(s) others' cpu", [f[2] - f[1] for f in figures[n]], "s (broker, PostgreSQL, this script)"))
    pairs = list(zip(figures[2], figures[1]))
    print(_row("2/1 throughput", [one[0] / two[0] for two, one in pairs], "x"))
    print(_row("2/1 cpu", [two[1] / one[1] for two, one in pairs], "x"))
    cores = os.cpu_count() or 1
    if all(f[2] > 0 for f in figures[1]):
        print(_row("2/1 bound on this machine", [cores * f[0] / f[2] for f in figures[1]],
                   f"x ({cores} cores / the cores one runner's round keeps busy)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The HTTP intake under load, and report -> tally latency, on Kafka and on the embedded log, side by side.

Why: the intake decides one command at a time, after reading the log up to its end, so its rate and its
answer times are what a caucus night waits on (1,765 precincts reporting within the hour); and a result
is only news once a projection runner has it in the tally. Each round runs every variant in turn
(interleaved, so the machine's noise falls on all of them) against a fresh topic, data directory and
database; one election of ``--units`` precincts is defined first. Per variant:

- ``accepted/s``: reports posted as fast as ``--threads`` client threads can, each to its own precinct;
- ``POST p50/p99``: reports paced at ``--per-minute`` (1,765/min by default) for ``--paced-seconds``;
- ``tally p50/p99`` (``--no-tally`` to skip): from sending a report to its precinct reading ``reported``
  in the projection store (PostgreSQL for Kafka, the embedded store otherwise), paced likewise, with a
  ``caucus project`` runner that was already running and caught up (``running``), then with one started
  just before the first report (``started``: its process answers /health, it has not joined yet).

``--compare DIR`` also runs every variant with the code of another checkout (its ``caucus`` service and
runner, via PYTHONPATH), to show before and after in one run. The script starts its own Tansu broker.

    python scripts/bench_intake.py --rounds 3
    python scripts/bench_intake.py --rounds 3 --compare ../main
"""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from infra.broker import LocalBroker
from infra.postgres import ensure_running, temporary_database
from producers.credentials import CredentialStore

CANDIDATES = ("Biden", "Buttigieg", "Sanders")


@dataclass(frozen=True)
class Variant:
    backend: str  # "kafka" or "embedded"
    code: str  # label
    root: str | None  # PYTHONPATH for the service and runner; None: this checkout

    @property
    def name(self) -> str:
        return f"{self.backend:8} {self.code}"


def election(units: int) -> dict[str, Any]:
    return {
        "election_id": "bench", "name": "Bench caucus", "rule_set": "idp-2020", "candidates": list(CANDIDATES),
        "counties": [{"county_id": "c1", "name": "County", "sde_ratio": "21/150"}],
        "units": [{"unit_id": f"P{i:04d}", "name": f"Precinct {i}", "county_id": "c1", "delegates": 5}
                  for i in range(units)],
        "idempotency_key": "define-bench",
    }


REPORT = {"first_alignment": {"Biden": 22, "Buttigieg": 18, "Sanders": 5},
          "final_alignment": {"Biden": 25, "Buttigieg": 20}, "attendance": 45}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Site:
    """One variant's service (and runners) over a fresh log, data directory and store."""

    variant: Variant
    env: dict[str, str]
    data_dir: Path
    dsn: str | None
    token: str = ""
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    next_unit: int = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def units(self, count: int) -> list[str]:
        first, self.next_unit = self.next_unit, self.next_unit + count
        return [f"P{i:04d}" for i in range(first, first + count)]


def _spawn(site: Site, args: list[str], name: str) -> subprocess.Popen[bytes]:
    out = open(site.data_dir / f"{name}.out", "wb")
    # cwd: not this checkout, whose directory ``-c`` would put before PYTHONPATH (``--compare``)
    return subprocess.Popen([sys.executable, "-c", "from ledger.cli import main; main()", *args],
                            env=site.env, stdout=out, stderr=subprocess.STDOUT, cwd=site.data_dir)


def _wait_up(url: str, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url, timeout=1).status_code in (200, 503):
                return
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not come up (exit {process.poll()})")
        time.sleep(0.02)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def site_for(variant: Variant, bootstrap: str, workdir: Path, units: int) -> Iterator[Site]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"{variant.backend}-", dir=workdir))
    env = {**os.environ, "CAUCUS_DATA_DIR": str(data_dir)}
    for name in ("CAUCUS_KAFKA", "CAUCUS_DATABASE", "CAUCUS_TOPIC", "CAUCUS_RESULTS_TOPIC"):
        env.pop(name, None)
    if variant.root is not None:
        env["PYTHONPATH"] = variant.root
    with _store(variant) as dsn:
        if variant.backend == "kafka":
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            env.update(CAUCUS_KAFKA=bootstrap, CAUCUS_TOPIC=topic, CAUCUS_RESULTS_TOPIC=f"{topic}-results")
            env["CAUCUS_DATABASE"] = str(dsn)
        _, token = CredentialStore(data_dir / "credentials.json").issue("official", name="Bench")
        site = Site(variant, env, data_dir, dsn, token, _free_port())
        site.process = _spawn(site, ["serve", "intake", "--port", str(site.port)], "intake")
        try:
            _wait_up(f"{site.base}/health", site.process, "the intake service")
            answer = httpx.post(f"{site.base}/elections", json=election(units), timeout=60,
                                headers={"Authorization": f"Bearer {token}"})
            if answer.status_code != 201:
                raise SystemExit(f"defining the election failed: {answer.status_code} {answer.text[:300]}")
            yield site
        finally:
            _stop(site.process)


@contextmanager
def _store(variant: Variant) -> Iterator[str | None]:
    if variant.backend != "kafka":
        yield None
        return
    with temporary_database("bench_intake") as dsn:
        yield dsn


def post(client: httpx.Client, site: Site, unit: str) -> tuple[int, float]:
    began = time.perf_counter()
    answer = client.post(f"/units/{unit}/results", json={**REPORT, "idempotency_key": f"r-{unit}"},
                         headers={"Authorization": f"Bearer {site.token}"})
    return answer.status_code, time.perf_counter() - began


def throughput(site: Site, count: int, threads: int) -> float:
    """Accepted reports per second, ``threads`` clients posting as fast as they can."""
    units = site.units(count)
    accepted = [0] * threads
    failures: list[str] = []

    def run(k: int) -> None:
        with httpx.Client(base_url=site.base, timeout=60) as client:
            for unit in units[k::threads]:
                status, _ = post(client, site, unit)
                accepted[k] += status == 201
                if status != 201 and not failures:
                    failures.append(f"{unit}: {status}")

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    began = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    took = time.perf_counter() - began
    if sum(accepted) != count:
        raise SystemExit(f"{site.variant.name}: {count - sum(accepted)} of {count} reports not accepted ({failures[:1]})")
    return count / took


def paced(site: Site, seconds: float, per_minute: float, sent: dict[str, float] | None = None) -> list[float]:
    """POST latencies of reports sent at ``per_minute``; ``sent`` gets each unit's send time."""
    count = max(1, int(seconds * per_minute / 60))
    units = site.units(count)
    gap = 60.0 / per_minute
    latencies: list[float] = []
    lock = threading.Lock()
    clients = threading.local()

    def one(unit: str) -> None:
        client = getattr(clients, "c", None)
        if client is None:
            client = clients.c = httpx.Client(base_url=site.base, timeout=60)
        if sent is not None:
            sent[unit] = time.monotonic()
        status, took = post(client, site, unit)
        if status != 201:
            raise SystemExit(f"{site.variant.name}: report for {unit} answered {status}")
        with lock:
            latencies.append(took)

    from concurrent.futures import ThreadPoolExecutor

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = []
        for i, unit in enumerate(units):
            delay = start + i * gap - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(one, unit))
        for f in futures:
            f.result()
    return latencies


def _reported(site: Site, units: list[str]) -> set[str]:
    query = "SELECT unit_id FROM proj_unit_tallies WHERE status = 'reported'"
    if site.dsn is not None:
        with psycopg.connect(site.dsn, autocommit=True) as conn:
            try:
                return {row[0] for row in conn.execute(query)}
            except psycopg.errors.UndefinedTable:
                return set()
    path = site.data_dir / "store.sqlite3"
    if not path.exists():
        return set()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {row[0] for row in conn.execute(query)}
    except sqlite3.OperationalError:
        return set()
    finally:
        conn.close()


def watch(site: Site, sent: dict[str, float], seen: dict[str, float], stop: threading.Event) -> None:
    """Note when each sent unit first reads ``reported`` in the store (polled every 5 ms)."""
    while not stop.is_set() or len(seen) < len(sent):
        reported = _reported(site, list(sent))
        now = time.monotonic()  # after the query: a unit sent while it ran may be in its answer
        for unit in reported - set(seen):
            if unit in sent:
                seen[unit] = now
        if stop.is_set() and time.monotonic() > stop_deadline[0]:
            return
        time.sleep(0.005)


stop_deadline = [0.0]


def tally_latency(site: Site, seconds: float, per_minute: float) -> list[float]:
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(site, sent, seen, stop))
    watcher.start()
    try:
        paced(site, seconds, per_minute, sent)
    finally:
        stop_deadline[0] = time.monotonic() + 30
        stop.set()
        watcher.join()
    missing = set(sent) - set(seen)
    if missing:
        raise SystemExit(f"{site.variant.name}: {len(missing)} reports never reached the tally")
    return [seen[u] - sent[u] for u in sent]


def start_runner(site: Site, name: str) -> subprocess.Popen[bytes]:
    port = _free_port()
    runner = _spawn(site, ["project", "--quiet", "--metrics-port", str(port)], name)
    _wait_up(f"http://127.0.0.1:{port}/health", runner, "the runner")
    return runner


def tallies(site: Site, seconds: float, per_minute: float) -> tuple[list[float], list[float]]:
    """(runner already running, runner started just before the reports)."""
    runner = start_runner(site, "runner-1")
    try:
        tally_latency(site, 2, per_minute)  # joined and caught up once this is through
        running = tally_latency(site, seconds, per_minute)
    finally:
        _stop(runner)
    runner = start_runner(site, "runner-2")
    try:
        started = tally_latency(site, seconds, per_minute)
    finally:
        _stop(runner)
    return running, started


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def one_round(variant: Variant, bootstrap: str, workdir: Path, args: argparse.Namespace) -> dict[str, float]:
    need = args.fast + 2 * int(args.paced_seconds * args.per_minute / 60) + 8 + (
        0 if args.no_tally else 2 * int((args.paced_seconds + 2) * args.per_minute / 60) + 8)
    with site_for(variant, bootstrap, workdir, max(args.units, need)) as site:
        row = {"accepted/s": throughput(site, args.fast, args.threads)}
        posts = paced(site, args.paced_seconds, args.per_minute)
        row.update({"POST p50 ms": pct(posts, 0.5), "POST p99 ms": pct(posts, 0.99)})
        if not args.no_tally:
            running, started = tallies(site, args.paced_seconds, args.per_minute)
            row.update({"tally p50 ms (running)": pct(running, 0.5), "tally p99 ms (running)": pct(running, 0.99),
                        "tally p50 ms (started)": pct(started, 0.5), "tally p99 ms (started)": pct(started, 0.99)})
        return row


def report(results: dict[Variant, list[dict[str, float]]], variants: list[Variant]) -> None:
    """min / median / max of each figure over the rounds, variants side by side, and ratios to the
    first ``--compare`` variant of the same backend."""
    figures = list(next(iter(results.values()))[0])
    for figure in figures:
        print(f"\n{figure}:  min / median / max")
        for v in variants:
            values = [r[figure] for r in results[v]]
            line = f"  {v.name:24} {min(values):9.1f} {statistics.median(values):9.1f} {max(values):9.1f}"
            base = next((b for b in variants if b.backend == v.backend and b.root is not None), None)
            if base is not None and base != v:
                ratio = statistics.median(values) / statistics.median([r[figure] for r in results[base]])
                line += f"   x{ratio:.2f} vs {base.code}"
            print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--units", type=int, default=1765, help="precincts in the election (more if the run needs them)")
    parser.add_argument("--fast", type=int, default=600, help="reports posted as fast as possible (default 600)")
    parser.add_argument("--threads", type=int, default=4, help="client threads for the fast posts (default 4)")
    parser.add_argument("--per-minute", type=float, default=1765.0, help="pace of the paced posts (default 1765)")
    parser.add_argument("--paced-seconds", type=float, default=20.0, help="length of each paced phase (default 20)")
    parser.add_argument("--no-tally", action="store_true", help="skip report -> tally (no runners, no PostgreSQL)")
    parser.add_argument("--backends", default="kafka,embedded")
    parser.add_argument("--compare", help="another checkout whose code runs as the 'before' variants")
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    variants = [Variant(b, "this", None) for b in backends]
    if args.compare:
        variants += [Variant(b, "compare", str(Path(args.compare).resolve())) for b in backends]
    if not args.no_tally:
        ensure_running()
    results: dict[Variant, list[dict[str, float]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="bench-intake-") as tmp, LocalBroker(run_dir=Path(tmp) / "run") as broker:
        for round_ in range(1, args.rounds + 1):  # variants interleaved, so a busy spell hits all alike
            for v in variants:
                print(f"round {round_}/{args.rounds}: {v.name} ...", flush=True)
                results[v].append(one_round(v, broker.bootstrap, Path(tmp), args))
                print("   " + ", ".join(f"{k} {x:.1f}" for k, x in results[v][-1].items()), flush=True)
    print(f"\n{args.rounds} rounds; {args.fast} fast reports from {args.threads} threads; paced at {args.per_minute:g}/min "
          f"for {args.paced_seconds:g} s; {os.cpu_count()} CPUs")
    report(results, variants)
    return 0


if __name__ == "__main__":
    sys.exit(main())

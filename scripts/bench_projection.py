"""Throughput and memory of a full projection rebuild, against the ceiling of only reading the log.

Why: a rebuild (``caucus project`` into an empty store, ``caucus replay``) is bounded by how fast the
log can be read and decoded; this measures how close the runner gets to that ceiling, on the same
events in the same run, and that its memory is bounded by the number of units, not of events.

Workload: one election shaped like 2020 Iowa (``--units`` precincts in 99 counties, 14 candidates,
apportioned delegates and county SDE ratios), then ``--events`` events round-robin over the units: a
ResultReported per unit, then repeated ResultCorrected (each superseding the previous one, stages
review / recanvass / recount) with an occasional TieBroken. Appended with ``append_batch``.

Per backend and size, each measurement runs in a fresh process (its peak RSS is its own):

* ceiling: read the whole log and decode every record (``EventLog.read`` + ``Codec.decode``, the compiled
  reader); in the same process, each chunk of records is also decoded by the generic path
  (``Codec.decode_generic``: fastavro and the dataclasses' constructors, the decoder before the compiled
  one) and the batch folder's (``decode_deferred``), in turn, so their ratio is measured side by side;
* rebuild: ``caucus project --until-caught-up --no-feed --catch-up-batch 200000`` into an empty store: Kafka into a
  temporary PostgreSQL database, the embedded SQLite log into an embedded SQLite store.

Rates are also given per CPU second of each process (``time.process_time``; the rebuild's from
``wait4``, its I/O thread and start-up included), since on a machine shared with other work a process's
wall time says how much CPU it was given more than how fast it is. Both wall rates count from the first record read, so process start-up and the Kafka group join are left
out of both, and the rebuild's reading of the log (its first catch-up batch included) is counted. The script starts its own Tansu broker (``infra.broker``) and uses
the local PostgreSQL (``infra.postgres``, a throwaway database per run).

    python scripts/bench_projection.py                       # 250k and 1M events, Kafka+PG and embedded
    python scripts/bench_projection.py --sizes 20000 --backends embedded
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

from ledger.codec import default_codec
from projections.batch_fold import DEFERRED
from ledger.events import (
    Channel,
    CorrectionStage,
    County,
    ElectionDefined,
    Event,
    Result,
    ResultCorrected,
    ResultReported,
    TieBroken,
    TieMethod,
    UnitDefinition,
    new_event,
)
from ledger.log.port import EventLog, PendingRecord

CANDIDATES = ("Bennet", "Biden", "Bloomberg", "Buttigieg", "Delaney", "Gabbard", "Klobuchar", "Other", "Patrick",
              "Sanders", "Steyer", "Uncommitted", "Warren", "Yang")
ELECTION = "bench-2020"
T0 = datetime(2020, 2, 3, 19, 0, tzinfo=UTC)
CAUCUS = str(Path(sys.executable).parent / "caucus")


# ------------------------------------------------------------------------------------------- workload
def definition(units: int, seed: int) -> ElectionDefined:
    rnd = random.Random(seed)
    counties = tuple(County(f"c{i:02d}", f"County {i}", Fraction(rnd.randint(20, 400), 1000)) for i in range(99))
    defs = tuple(UnitDefinition(f"p{i:05d}", f"Precinct {i}", counties[i % 99].county_id, rnd.choice((1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12)))
                 for i in range(units))
    return ElectionDefined(name="Bench caucus", rule_set="idp-2020", candidates=CANDIDATES, counties=counties, units=defs)


def _alignment(rnd: random.Random) -> tuple[dict[str, int], dict[str, int]]:
    """A first alignment over a few candidates, and a final one where the small groups realigned."""
    total = rnd.randint(20, 400)
    backed = rnd.sample(CANDIDATES, rnd.randint(3, 7))
    cuts = sorted(rnd.randint(0, total) for _ in range(len(backed) - 1))
    first = {c: b - a for c, a, b in zip(backed, [0, *cuts], [*cuts, total], strict=True) if b - a}
    viable = {c: n for c, n in first.items() if n * 100 >= 15 * total} or dict([max(first.items(), key=lambda kv: kv[1])])
    final = dict(viable)
    for c, n in first.items():
        if c not in viable:
            final[rnd.choice(list(viable))] += n
    return first, final


def events(count: int, units: int, seed: int) -> Iterator[Event[Any]]:
    """The definition, then ``count - 1`` unit events round-robin over the units (deterministic)."""
    rnd = random.Random(seed)
    defn = definition(units, seed)
    yield new_event(defn, election_id=ELECTION, actor="party", channel=Channel.IMPORT, occurred_at=T0, recorded_at=T0,
                    event_id=str(uuid.UUID(int=rnd.getrandbits(128))))
    last: dict[str, str] = {}
    stages = (CorrectionStage.REVIEW, CorrectionStage.RECANVASS, CorrectionStage.RECOUNT)
    for i in range(count - 1):
        unit = defn.units[i % units].unit_id
        at = T0 + timedelta(seconds=i)
        eid = str(uuid.UUID(int=rnd.getrandbits(128)))
        first, final = _alignment(rnd)
        if unit not in last:
            payload: Any = ResultReported(Result(first, final, attendance=sum(first.values())), reporter=f"chair:{unit}")
            last[unit] = eid
        elif rnd.random() < 0.05:
            a, b = rnd.sample(CANDIDATES, 2)
            payload = TieBroken(contenders=(a, b), seats=1, winners=(a,), method=TieMethod.COIN, caller=b)
        else:
            payload = ResultCorrected(Result(first, final, attendance=sum(first.values())), supersedes=last[unit],
                                      reason="worksheet recheck", authority="party", stage=stages[i % 3])
            last[unit] = eid
        yield new_event(payload, election_id=ELECTION, unit_id=unit, actor=f"chair:{unit}", channel=Channel.APP,
                        occurred_at=at, recorded_at=at, event_id=eid)


def write(log: EventLog, count: int, units: int, seed: int, batch: int = 5000) -> float:
    """Append the workload in batches; returns seconds spent appending (encoding excluded)."""
    encode = default_codec().encode
    pending: list[PendingRecord] = []
    spent = 0.0
    for ev in events(count, units, seed):
        pending.append(PendingRecord(ev.key, ev.event_id, encode(ev)))
        if len(pending) >= batch:
            began = time.perf_counter()
            log.append_batch(pending)
            spent += time.perf_counter() - began
            pending = []
    if pending:
        began = time.perf_counter()
        log.append_batch(pending)
        spent += time.perf_counter() - began
    return spent


# ------------------------------------------------------------------------------------------- children
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


DECODERS = ("generic", "compiled", "deferred")


def child_ceiling(args: argparse.Namespace) -> dict[str, Any]:
    """Read the whole log and decode every record, nothing else, with each decoder in turn on the same
    chunk of records (the order turning every chunk), so a busy spell on the machine hits them alike:
    per decoder, events/s = events / (time reading + time decoding with it)."""
    codec = default_codec()
    decoders = {"generic": codec.decode_generic, "compiled": codec.decode,
                "deferred": lambda data: codec.decode_deferred(data, DEFERRED)}
    log = _open_log(args)
    records = iter(log.read())
    read_s = read_cpu = 0.0
    spent = dict.fromkeys(DECODERS, 0.0)
    cpu = dict.fromkeys(DECODERS, 0.0)
    n = turn = 0
    while True:
        began, began_cpu = time.perf_counter(), time.process_time()
        chunk = [rec.value for rec in itertools.islice(records, 20_000)]
        read_s += time.perf_counter() - began
        read_cpu += time.process_time() - began_cpu
        if not chunk:
            break
        n += len(chunk)
        turn += 1
        for name in DECODERS[turn % 3:] + DECODERS[: turn % 3]:
            decode = decoders[name]
            began, began_cpu = time.perf_counter(), time.process_time()
            for value in chunk:
                decode(value)
            spent[name] += time.perf_counter() - began
            cpu[name] += time.process_time() - began_cpu
    log.close()
    rates = {name: n / (read_s + spent[name]) for name in DECODERS}
    cpu_rates = {name: n / (read_cpu + cpu[name]) for name in DECODERS}
    return {"events": n, "seconds": round(read_s + spent["compiled"], 3), "events_per_s": rates["compiled"],
            "rates": rates, "cpu_rates": cpu_rates, "peak_rss_mb": _peak_rss_mb()}


def _open_log(args: argparse.Namespace) -> EventLog:
    if args.kafka:
        from ledger.log.kafka import KafkaLog

        return KafkaLog(args.kafka, args.topic, partitions=args.partitions, timeout=30)
    from ledger.log.sqlite import SqliteLog

    return SqliteLog(args.log)


def run_child(kind: str, extra: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", kind, *extra], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_project(base: list[str], batch: int, extra: list[str]) -> dict[str, Any]:
    """``caucus project`` as a separate process; its own peak RSS from wait4."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}
    cmd = [CAUCUS, *base, "project", "--until-caught-up", "--json", "-q", "--no-feed", "--batch-size", str(batch), *extra]
    began = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"caucus project failed ({proc.returncode}):\n{err.read()}")
        summary = json.loads(out.read())
    cpu_s = usage.ru_utime + usage.ru_stime  # start-up included: this rate errs low
    return {"events": summary["applied"], "seconds": round(wall, 3), "events_per_s": summary["events_per_s"],
            "cpu_s": round(cpu_s, 3), "events_per_cpu_s": summary["applied"] / cpu_s if cpu_s else 0.0,
            "batches": summary["batches"], "peak_rss_mb": usage.ru_maxrss / 1024}


# ------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250000,1000000", help="event counts, comma separated (default 250000,1000000)")
    parser.add_argument("--units", type=int, default=1765)
    parser.add_argument("--batch", type=int, default=500, help="caucus project --batch-size (default 500, as caucus project)")
    parser.add_argument("--catch-up-batch", type=int, default=200_000, help="caucus project --catch-up-batch (default 200000, as caucus replay; 0: off)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--backends", default="kafka,embedded")
    parser.add_argument("--seed", type=int, default=2020)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of ceiling + rebuild per case; the best of each is reported")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--kafka", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "ceiling":
        print(json.dumps(child_ceiling(args)))
        return 0

    from infra.broker import LocalBroker
    from infra.postgres import ensure_running, temporary_database
    from ledger.log.kafka import KafkaLog
    from ledger.log.sqlite import SqliteLog

    sizes = [int(s) for s in args.sizes.split(",")]
    catch_up = ["--catch-up-batch", str(args.catch_up_batch)]
    backends = [b.strip() for b in args.backends.split(",")]
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-projection-")))
        broker = stack.enter_context(LocalBroker(run_dir=tmp / "broker")) if "kafka" in backends else None
        server = ensure_running() if "kafka" in backends else None
        for size in sizes:
            for backend in backends:
                print(f"{size:,} events, {backend}: writing ...", flush=True)
                if backend == "kafka":
                    assert broker is not None and server is not None
                    topic = f"bench-{uuid.uuid4().hex[:8]}"
                    log: EventLog = KafkaLog(broker.bootstrap, topic, partitions=args.partitions, timeout=60)
                    wrote = write(log, size, args.units, args.seed)
                    log.close()
                    print(f"  appended in {wrote:,.1f} s ({size / wrote:,.0f}/s)", flush=True)

                    def ceiling_run() -> dict[str, Any]:
                        return run_child("ceiling", ["--kafka", broker.bootstrap, "--topic", topic, "--partitions",
                                                     str(args.partitions)])

                    def rebuild_run() -> dict[str, Any]:
                        with temporary_database("bench", server) as dsn:
                            base = ["--data-dir", str(tmp / "kafka-data"), "--kafka", broker.bootstrap, "--topic", topic,
                                    "--database", dsn, "--partitions", str(args.partitions)]
                            group = f"bench-{topic}-{uuid.uuid4().hex[:6]}"
                            return run_project(base, args.batch, ["--group", group, "--session-timeout-ms", "2000", *catch_up])

                    label = "Kafka -> PostgreSQL"
                else:
                    data = tmp / f"embedded-{size}"
                    log = SqliteLog(data / "log.sqlite3", partitions=args.partitions)
                    wrote = write(log, size, args.units, args.seed)
                    log.close()
                    print(f"  appended in {wrote:,.1f} s ({size / wrote:,.0f}/s)", flush=True)

                    def ceiling_run() -> dict[str, Any]:
                        return run_child("ceiling", ["--log", str(data / "log.sqlite3")])

                    def rebuild_run() -> dict[str, Any]:
                        for suffix in ("", "-wal", "-shm"):
                            (data / f"store.sqlite3{suffix}").unlink(missing_ok=True)
                        return run_project(["--data-dir", str(data)], args.batch, catch_up)

                    label = "SQLite log -> SQLite store"
                ceilings, rebuilds = [], []
                for round_ in range(1, args.repeat + 1):
                    ceilings.append(ceiling_run())
                    rates = ceilings[-1]["rates"]
                    print(f"  round {round_}: ceiling {rates['compiled']:,.0f}/s (generic decode {rates['generic']:,.0f}/s, "
                          f"deferred {rates['deferred']:,.0f}/s); rebuild ...", flush=True)
                    rebuilds.append(rebuild_run())
                    print(f"  round {round_}: rebuild {rebuilds[-1]['events_per_s']:,.0f}/s", flush=True)
                ceiling = max(ceilings, key=lambda c: c["events_per_s"])
                rebuild = max(rebuilds, key=lambda r: r["events_per_s"])
                if not ceiling["events"] == rebuild["events"] == size:
                    raise SystemExit(f"{label}: wrote {size}, read {ceiling['events']}, projected {rebuild['events']}")
                ratio = rebuild["events_per_s"] / ceiling["events_per_s"]
                cpu_ratio = rebuild["events_per_cpu_s"] / ceiling["cpu_rates"]["compiled"]
                print(f"  rebuild {rebuild['events_per_s']:,.0f}/s = {ratio:.0%} of the ceiling; per CPU second "
                      f"{rebuild['events_per_cpu_s']:,.0f} = {cpu_ratio:.0%} of the ceiling's "
                      f"{ceiling['cpu_rates']['compiled']:,.0f}", flush=True)
                rows.append({"size": size, "backend": label, "ceiling": ceiling, "rebuild": rebuild, "ratio": ratio,
                             "cpu_ratio": cpu_ratio,
                             "speedup": ceiling["rates"]["compiled"] / ceiling["rates"]["generic"]})

    print()
    print(f"{args.units} units, batches of {args.batch}, {args.partitions} partitions; Python {platform.python_version()} "
          f"on {platform.machine()}, {os.cpu_count()} CPUs")
    print("ceiling: read + compiled decode; generic: read + fastavro decode (before); ratio: rebuild / ceiling "
          "(wall; cpu: per CPU second of each process, which a machine shared with other work does not skew)")
    head = (f"{'events':>10}  {'backend':<27}{'generic/s':>11}{'ceiling/s':>11}{'x':>6}{'rebuild/s':>11}{'ratio':>7}{'cpu':>6}"
            f"{'RSS read':>10}{'RSS proj':>10}{'wall s':>8}")
    print(head)
    for r in rows:
        print(f"{r['size']:>10,}  {r['backend']:<27}{r['ceiling']['rates']['generic']:>11,.0f}{r['ceiling']['events_per_s']:>11,.0f}"
              f"{r['speedup']:>6.2f}{r['rebuild']['events_per_s']:>11,.0f}{r['ratio']:>7.0%}{r['cpu_ratio']:>6.0%}{r['ceiling']['peak_rss_mb']:>8.0f}MB{r['rebuild']['peak_rss_mb']:>8.0f}MB{r['rebuild']['seconds']:>8.1f}")
    print(json.dumps(rows, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())

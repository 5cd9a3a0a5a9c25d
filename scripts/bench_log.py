"""Throughput of the two log adapters, side by side in one run, on the same events.

Why: choosing between the embedded log and Kafka (and tuning either) needs numbers measured together,
on one machine, with records shaped like the real ones. Every event is a ResultReported of a precinct
with six candidates (about 200 bytes encoded), keyed by one of ``--units`` precincts.

Adapters: the embedded log, Kafka through kafka-python and, when confluent-kafka is installed
(``pip install -e '.[confluent]'``), Kafka through confluent-kafka (librdkafka), each on a topic of its own.
Measured per adapter: append in batches (``append_batch``, records already encoded), read of the whole
log (``read``), and read plus decode, three ways: the generic path (``Codec.decode_generic``: fastavro and
the dataclasses' constructors), the compiled reader (``Codec.decode``), and what the batch folder does
(``Codec.decode_deferred``: records checked in full, payloads built when read). Encoding is measured once.
Without ``--kafka`` the script starts its own Tansu broker (``infra.broker``) and stops it afterwards.

    python scripts/bench_log.py --events 100000 --repeat 3
    python scripts/bench_log.py --events 100000 --kafka 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import kafka

from infra.broker import LocalBroker
from ledger.codec import default_codec
from ledger.events import Channel, Event, Result, ResultReported, new_event
from ledger.log.kafka import KafkaLog
from ledger.log.port import EventLog, PendingRecord
from ledger.log.sqlite import SqliteLog
from projections.batch_fold import DEFERRED

try:
    from ledger.log.kafka_confluent import ConfluentLog
except ImportError:  # the optional client: its column is left out, saying so
    ConfluentLog = None  # type: ignore[assignment,misc]

CANDIDATES = ("biden", "buttigieg", "klobuchar", "sanders", "warren", "yang")


def ordered_id(rng: random.Random, ms: int) -> str:
    """A UUIDv7 (RFC 9562) of the time ``ms`` with random bits from ``rng``: ordered by time as the ids
    ``new_event`` gives, but the same in every run of a seed."""
    rand = rng.getrandbits(74)
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))))


def make_events(count: int, units: int, seed: int) -> list[Event[ResultReported]]:
    """``count`` ResultReported events spread over ``units`` precincts (deterministic). Their ids are
    ordered by time, as the intake's are (``ledger.events.new_event_id``)."""
    rng = random.Random(seed)
    base_ms = 1_580_860_800_000  # caucus night, 2020-02-05T00:00Z
    events = []
    for i in range(count):
        unit = f"precinct-{i % units:04d}"
        first = {c: rng.randint(0, 120) for c in CANDIDATES}
        final = {c: n + rng.randint(0, 30) for c, n in first.items() if n >= 15}
        payload = ResultReported(Result(first, final, attendance=sum(first.values())), reporter=f"chair:{unit}")
        ev = new_event(payload, election_id="bench", unit_id=unit, actor=f"chair:{unit}", channel=Channel.APP,
                       event_id=ordered_id(rng, base_ms + i))
        events.append(ev)
    return events


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def measure(log: EventLog, records: list[PendingRecord], batch: int) -> dict[str, float]:
    """events/s for append (batched), read, read + decode (the generic path, the compiled one, and the
    batch folder's: payloads deferred); checks that everything came back. The three decodes run one
    after the other on the same log, so a busy spell on the machine hits them alike."""
    codec = default_codec()
    began = time.perf_counter()
    for i in range(0, len(records), batch):
        log.append_batch(records[i : i + batch])
    appended = time.perf_counter() - began

    began = time.perf_counter()
    read = sum(1 for _ in log.read())
    read_s = time.perf_counter() - began

    figures = {"append (batched)": rate(len(records), appended), "read": rate(read, read_s)}
    paths: dict[str, Callable[[bytes], object]] = {
        "read + decode (generic)": codec.decode_generic,
        "read + decode": codec.decode,
        "read + decode deferred": lambda data: codec.decode_deferred(data, DEFERRED),
    }
    for row, decode in paths.items():
        began = time.perf_counter()
        decoded = sum(1 for rec in log.read() if decode(rec.value) is not None)
        figures[row] = rate(decoded, time.perf_counter() - began)
        if not read == decoded == len(records):
            raise SystemExit(f"{type(log).__name__}: appended {len(records)} events but read {read}, decoded {decoded}")
    return figures


@contextmanager
def kafka_bootstrap(given: str | None, run_dir: Path) -> Iterator[tuple[str, str]]:
    if given:
        yield given, f"broker at {given}"
        return
    with LocalBroker(run_dir=run_dir) as broker:
        yield broker.bootstrap, f"Tansu started by this script at {broker.bootstrap}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", "-n", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="records per append_batch (default 1000)")
    parser.add_argument("--units", type=int, default=1700, help="distinct precinct keys (default 1700)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--kafka", help="bootstrap of a running broker (default: start a local Tansu)")
    parser.add_argument("--seed", type=int, default=2020)
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the best of each figure is shown (default 1)")
    args = parser.parse_args(argv)

    print(f"building {args.events} ResultReported events over {args.units} precincts ...", flush=True)
    events = make_events(args.events, args.units, args.seed)
    encode = default_codec().encode
    began = time.perf_counter()
    records = [PendingRecord(ev.key, ev.event_id, encode(ev)) for ev in events]
    encode_rate = rate(len(records), time.perf_counter() - began)
    mean_size = sum(len(r.value) for r in records) / len(records)

    results: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-log-")))
        bootstrap, where = stack.enter_context(kafka_bootstrap(args.kafka, tmp / "run"))
        adapters: dict[str, Callable[[], EventLog]] = {
            "sqlite": lambda: SqliteLog(tmp / f"log-{uuid.uuid4().hex[:8]}.sqlite3", partitions=args.partitions),
            "kafka": lambda: KafkaLog(bootstrap, f"bench-{uuid.uuid4().hex[:8]}", partitions=args.partitions, timeout=30),
        }
        if ConfluentLog is not None:
            adapters["confluent"] = lambda: ConfluentLog(bootstrap, f"bench-{uuid.uuid4().hex[:8]}",
                                                         partitions=args.partitions, timeout=30)
        else:
            print("confluent-kafka is not installed: no confluent column (pip install -e '.[confluent]')")
        for round_ in range(1, args.repeat + 1):  # adapters interleaved, so a busy spell hits both alike
            for name, open_log in adapters.items():
                print(f"round {round_}/{args.repeat}: {name} ...", flush=True)
                with open_log() as log:  # type: ignore[attr-defined]
                    got = measure(log, records, args.batch)
                best = results.setdefault(name, got)
                for row, value in got.items():
                    best[row] = max(best[row], value)

    print()
    print(f"{args.events} events, {mean_size:.0f} B mean, batches of {args.batch}, {args.partitions} partitions, "
          f"best of {args.repeat}; "
          f"Python {platform.python_version()}, kafka-python {kafka.__version__}; kafka: {where}")
    if ConfluentLog is not None:
        import confluent_kafka

        print(f"confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()[0]}")
    names = list(results)
    ratios = [("kafka", "sqlite")] + ([("confluent", "kafka")] if "confluent" in results else [])
    print(f"{'events/s':<26}" + "".join(f"{n:>12}" for n in names) + "".join(f"{a + '/' + b:>16}" for a, b in ratios))
    for row in results["sqlite"]:
        print(f"{row:<26}" + "".join(f"{results[n][row]:>12,.0f}" for n in names)
              + "".join(f"{results[a][row] / results[b][row]:>16.2f}" for a, b in ratios))
    print(f"{'encode (codec only)':<26}{encode_rate:>12,.0f}  (the same for every adapter: done once, before appending)")
    for name in names:
        got = results[name]
        print(f"{name}: read + decode {got['read + decode'] / got['read + decode (generic)']:.2f}x the generic path, "
              f"deferred {got['read + decode deferred'] / got['read + decode (generic)']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

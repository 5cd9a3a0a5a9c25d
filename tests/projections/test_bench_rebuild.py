"""A full rebuild against the ceiling of only reading and decoding the same log, side by side.

    pytest tests/projections/test_bench_rebuild.py --benchmark-enable --benchmark-columns=mean,rounds

The reduced form of ``scripts/bench_projection.py`` (which writes 250k and 1M events and measures
each step in a process of its own, with peak RSS): ``CAUCUS_BENCH_REBUILD_EVENTS`` events (default
20,000) of the script's workload (an Iowa-sized election, reports then repeated corrections and coin
tosses) on the embedded log and on Kafka, rebuilt into both stores the way ``caucus replay`` does
(large catch-up transactions). ``extra_info`` records events/s of the ceiling and of the rebuild and
their ratio. Without ``--benchmark-enable`` each case runs once, as a test that the rebuild applies
every event and ends with one tally per unit.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ledger.log.kafka import provision_topic
from ledger.codec import default_codec
from ledger.log.kafka import KafkaLog
from ledger.log.port import EventLog
from ledger.log.sqlite import SqliteLog
from projections.replay import CATCH_UP_BATCH
from projections.runner import ProjectionRunner
from projections.kafka_source import KafkaGroupSource
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore

pytestmark = pytest.mark.slow

EVENTS = int(os.environ.get("CAUCUS_BENCH_REBUILD_EVENTS", "20000"))
UNITS = 1765
BATCH = 500


def _script() -> ModuleType:
    name = "caucus_bench_projection_script"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "scripts" / "bench_projection.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _ceiling(open_log: Callable[[], EventLog]) -> float:
    decode = default_codec().decode
    log = open_log()
    try:
        began = time.perf_counter()
        n = sum(1 for rec in log.read() if decode(rec.value) is not None)
        return n / (time.perf_counter() - began)
    finally:
        log.close()


@pytest.mark.parametrize("log_kind", ["embedded", "kafka"])
def test_rebuild_against_the_read_ceiling(
    benchmark: Any, log_kind: str, store_kind: str, open_store: Callable[[], ProjectionStore], tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    script = _script()
    if log_kind == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        topic = request.getfixturevalue("unique_topic")
        provision_topic(bootstrap, topic, 8)

        def open_log() -> EventLog:
            return KafkaLog(bootstrap, topic, partitions=8, session_timeout_ms=2000, timeout=30)

        def source() -> Any:
            return KafkaGroupSource(open_log(), f"rebuild-{topic}-{time.monotonic_ns()}", max_poll_records=2000)
    else:
        path = tmp_path / "log.sqlite3"
        SqliteLog(path, partitions=8).close()

        def open_log() -> EventLog:
            return SqliteLog(path)

        def source() -> Any:
            return EmbeddedSource(open_log())

    log = open_log()
    script.write(log, EVENTS, UNITS, 2020)
    log.close()
    store = open_store()
    rates: list[float] = []
    ceilings: list[float] = []

    def measure_ceiling() -> None:  # before each round, outside the timed rebuild
        ceilings.append(_ceiling(open_log))

    def rebuild() -> int:
        sid = store.create_set("rebuild", source=log_kind).set_id
        runner = ProjectionRunner(store, sid, source(), batch_size=BATCH, poll_timeout=0.1, catch_up_batch=CATCH_UP_BATCH)
        progress = runner.run(until_caught_up=True)
        rates.append(progress.rate)
        with store.reader(sid) as r:
            assert len(r.tallies()) == min(UNITS, EVENTS - 1)
        return progress.applied

    applied = benchmark.pedantic(rebuild, setup=measure_ceiling, rounds=3 if benchmark.enabled else 1, iterations=1)
    assert applied == EVENTS
    benchmark.extra_info.update({
        "log": log_kind, "store": store_kind, "events": EVENTS, "units": UNITS,
        "ceiling_events_per_s": round(max(ceilings)), "rebuild_events_per_s": round(max(rates)),
        "ratio": round(max(rates) / max(ceilings), 3),
    })  # fmt: skip

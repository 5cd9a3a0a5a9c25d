"""Throughput of the projection runner, every backend side by side in one run.

    pytest tests/projections/test_bench_project.py --benchmark-enable --benchmark-columns=mean,rounds

Workloads: the real 2020 import (1,867 events, 14 candidates) and a synthetic election
(``CAUCUS_BENCH_UNITS`` units, 5 events each: open, report, a rejected submission, two corrections;
default 2,000 units = 10,000 events). Each round projects the whole log into a fresh projection set
of the same store, in-process, so interpreter start-up is not measured; Kafka rounds include a group
join. ``extra_info`` records events/s counted from the first records read (``Progress.rate``).
Without ``--benchmark-enable`` each case runs once, as a test that the numbers add up.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ledger.log.kafka import provision_topic
from ledger.journal import Journal
from ledger.log.kafka import KafkaLog
from ledger.log.sqlite import SqliteLog
from projections.runner import ProjectionRunner
from projections.kafka_source import KafkaGroupSource
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore
from tests.shared_data import IOWA2020

pytestmark = pytest.mark.slow

DATA = IOWA2020
UNITS = int(os.environ.get("CAUCUS_BENCH_UNITS", "2000"))
BATCH = 500


@pytest.fixture(scope="module", params=["iowa2020", "synthetic"])
def workload(request: pytest.FixtureRequest, support: ModuleType) -> tuple[str, list[Any]]:
    if request.param == "iowa2020":
        if not (DATA / "idp_apportionment.csv").is_file():
            pytest.skip(f"the 2020 Iowa data is not at {DATA}")
        from producers.importers.idp2020 import plan_import

        return "iowa2020", plan_import(DATA).events
    return "synthetic", support.election_log(UNITS, corrections=2, rejections=1)


@pytest.mark.parametrize("log_kind", ["embedded", "kafka"])
def test_project_throughput(
    benchmark: Any, workload: tuple[str, list[Any]], log_kind: str, store_kind: str, open_store: Callable[[], ProjectionStore],
    support: ModuleType, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    name, events = workload
    if log_kind == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        topic = request.getfixturevalue("unique_topic")
        provision_topic(bootstrap, topic, 8)
        support.produce(bootstrap, topic, events, 8)

        def source() -> Any:
            log = KafkaLog(bootstrap, topic, partitions=8, session_timeout_ms=2000)
            return KafkaGroupSource(log, f"bench-{topic}", max_poll_records=BATCH)
    else:
        log = SqliteLog(tmp_path / "log.sqlite3", partitions=8)
        Journal(log).append_batch(events)

        def source() -> Any:
            return EmbeddedSource(SqliteLog(log.path))

    store = open_store()
    rates: list[float] = []

    def project() -> int:
        sid = store.create_set("bench", source=log_kind).set_id
        runner = ProjectionRunner(store, sid, source(), batch_size=BATCH, poll_timeout=0.1)
        progress = runner.run(until_caught_up=True)
        rates.append(progress.rate)
        return progress.applied

    applied = benchmark.pedantic(project, rounds=3 if benchmark.enabled else 1, iterations=1)
    assert applied == len(events)
    benchmark.extra_info.update(
        {"workload": name, "log": log_kind, "store": store_kind, "events": len(events),
         "events_per_s": round(max(rates)), "batch_size": BATCH}
    )

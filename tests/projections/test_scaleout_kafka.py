"""Scale-out: several `caucus project` processes in one consumer group, one PostgreSQL store.

Why a test of its own: the exactly-once rules (``projections.exactly_once``) are argued per batch,
but a rebalance is where they meet each other. A runner killed with SIGKILL leaves its partitions to
the group mid-batch; a runner that joins reads every partition by hand until its first assignment
(static start), so for a while two processes read the same partitions; county and state sums span
partitions that different runners own, and every runner publishes the results feed. Whatever the interleaving, the store must end equal to one
runner's rebuild of the same log into a fresh database: every unit's tally, the state's and each
county's sums, and the event index (nothing lost, nothing counted twice); and the feed's latest state
record must be the newest version and carry the same sums.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from infra.postgres import temporary_database
from ledger.journal import Journal
from ledger.log.kafka import provision_topic
from ledger.log.sqlite import SqliteLog
from projections.queries import load_view
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore
from projections.stores.postgres import PostgresStore

PARTS = 8
_FED = ("first", "final", "cds", "cds_computed", "units_reporting", "units_pending_ties", "sde_display_sum")
SESSION_MS = 2000
UNITS = 700  # and a satellite: 701 units of five events (open, report, a refusal, two corrections), 3,506 events


def _areas(store: ProjectionStore, set_id: int) -> dict[str, Any]:
    """The state's sums and every county's, as the read side computes them from the unit rows."""
    view = load_view(store, set_id=set_id)
    return {"state": view.state().to_json(), "counties": {c: a.to_json() for c, a in sorted(view.counties().items())}}


def _count(store: ProjectionStore, name: str = "tally") -> int:
    info = store.serving(name)
    if info is None:
        return 0
    with store.reader(info.set_id) as r:
        return r.event_count()


def _reference(events: list[Any], dsn: str, tmp_path: Path) -> tuple[PostgresStore, int]:
    """One runner's rebuild of the same events (an embedded log) into a fresh database."""
    log = SqliteLog(tmp_path / "ref.sqlite3", partitions=PARTS)
    Journal(log).append_batch(events)
    store = PostgresStore(dsn)
    sid = store.create_set("reference", source="embedded").set_id
    ProjectionRunner(store, sid, EmbeddedSource(log), batch_size=1000).run(until_caught_up=True)
    return store, sid


def test_runners_killed_and_added_mid_run_equal_a_single_runner_rebuild(
    support: ModuleType, kafka_bootstrap: str, unique_topic: str, pg_dsn: str, pg_server: str, tmp_path: Path
) -> None:
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    events = support.election_log(UNITS, corrections=2, rejections=1)
    first, second = events[: len(events) // 2], events[len(events) // 2 :]
    support.produce(kafka_bootstrap, unique_topic, first, PARTS)
    base = [str(Path(sys.executable).parent / "caucus"), "--data-dir", str(tmp_path / "data"), "--kafka", kafka_bootstrap,
            "--topic", unique_topic, "--database", pg_dsn]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}
    # A results topic of its own: the latest view keeps the highest version per key, and other tests'
    # feeds (on the broker's default results topic) publish the same keys (state:e1) at other versions.
    env["CAUCUS_RESULTS_TOPIC"] = f"{unique_topic}-results"
    cmd = [*base, "project", "--batch-size", "40", "--session-timeout-ms", str(SESSION_MS),
           "--group", f"scale-{unique_topic}", "-q"]
    store = PostgresStore(pg_dsn)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["a"] = subprocess.Popen(cmd, env=env)
        procs["b"] = subprocess.Popen(cmd, env=env)
        support.wait_for(lambda: _count(store) >= len(first) // 3, 120, "the two runners to apply a third of the first half")
        os.kill(procs["a"].pid, signal.SIGKILL)  # mid-run: its partitions go back to the group mid-batch
        procs["a"].wait(10)
        assert _count(store) < len(first), "the kill must land while the first half is still being applied"
        procs["c"] = subprocess.Popen(cmd, env=env)  # a second rebalance, while the first half is still applied
        support.produce(kafka_bootstrap, unique_topic, second, PARTS)  # appended while the group moves
        support.wait_for(lambda: _count(store) == len(events), 300, "every event applied")
        for name in ("b", "c"):
            assert procs[name].poll() is None, f"runner {name} ended early: {procs[name].returncode}"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    sid = store.serving("tally").set_id  # type: ignore[union-attr]
    latest = subprocess.run([*base, "subscribe", "--latest", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert latest.returncode == 0, latest.stderr
    fed = [r for r in map(json.loads, latest.stdout.splitlines()) if r["kind"] == "state"]
    with temporary_database("ref", pg_server) as ref_dsn:
        ref_store, ref = _reference(events, ref_dsn, tmp_path)
        try:
            got, want = support.snapshot(store, sid), support.snapshot(ref_store, ref)
            assert got["events"] == want["events"] == len(events), "the event index: nothing lost, nothing doubled"
            assert got["units"] == want["units"]
            assert got["tallies"] == want["tallies"]
            assert got["elections"] == want["elections"]
            areas = _areas(store, sid)
            assert areas == _areas(ref_store, ref)
        finally:
            ref_store.close()
    store.close()
    assert len(fed) == 1, fed
    # Every runner of the group publishes, and a runner whose view lags can read an older state after
    # another read a newer one: the feed fence (``FeedFence``) keeps the older one out, so the latest
    # view ends at the newest version, never at a lagging publisher's.
    assert fed[0]["version"] == 10**9 + len(events) - 1, f"the latest state ended at version {fed[0]['version']}"
    assert {k: fed[0][k] for k in _FED} == {k: areas["state"][k] for k in _FED}


def test_a_runner_opens_the_store_while_another_is_mid_batch(pg_dsn: str) -> None:
    """A runner joining the group opens the store while another holds a batch transaction: opening
    must not wait on (or deadlock with) that batch's table locks (``CREATE INDEX IF NOT EXISTS`` on an
    existing table would take a SHARE lock and wait for the batch to commit)."""
    import threading

    import psycopg

    PostgresStore(pg_dsn).close()  # the schema exists
    with psycopg.connect(pg_dsn) as busy:  # a batch in flight: the locks its writes hold
        busy.execute("LOCK TABLE proj_events, proj_unit_tallies, proj_unit_history IN ROW EXCLUSIVE MODE")
        opened: list[PostgresStore] = []
        thread = threading.Thread(target=lambda: opened.append(PostgresStore(pg_dsn)), daemon=True)
        thread.start()
        thread.join(10)
        assert opened, "opening the store waited on another runner's open batch"
        busy.rollback()
    opened[0].close()

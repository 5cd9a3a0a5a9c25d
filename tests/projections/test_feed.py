"""The results feed: every unit's final tally reaches a subscriber, versions only grow per key,
republished copies are dropped, and a feed that fails never breaks the view. Both stores on the
embedded backend; Kafka with PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ledger.config import Settings
from ledger.journal import Journal
from ledger.log.port import LogUnavailableError, PendingRecord, Position
from ledger.log.sqlite import SqliteLog
from projections.feed import FeedPublisher, open_results_log
from projections.feed_events import FeedDeduper, feed_codec, feed_json, feed_key, tally_version
from projections.queries import load_view
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore
from projections.wiring import serving_set

CAUCUS = str(Path(sys.executable).parent / "caucus")
Open = Callable[[], ProjectionStore]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}


def _feed(log: Any) -> list[Any]:
    codec = feed_codec()
    return [codec.decode(rec.value) for rec in log.read()]


def _expected(store: ProjectionStore) -> dict[tuple[str, str, str], dict[str, Any]]:
    """What a subscriber must end with: each unit's, county's and the state's committed tally."""
    view = load_view(store)
    eid = view.context.election_id
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for uid, t in view.units.items():
        j = t.to_json()
        out[(eid, "unit", uid)] = {"cds": j["cds"], "sde_display": j["sde_display"], "final": j["final"], "status": j["status"]}
    for cid, a in view.counties().items():
        if a.units_reporting:
            j = a.to_json()
            out[(eid, "county", cid)] = {"cds": j["cds"], "sde_display_sum": j["sde_display_sum"], "final": j["final"]}
    j = view.state().to_json()
    out[(eid, "state", eid)] = {"cds": j["cds"], "sde_display_sum": j["sde_display_sum"], "final": j["final"]}
    return out


def _latest(lines: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The last line per key, cut down to the fields ``_expected`` compares; checks versions grow."""
    last: dict[tuple[str, str, str], dict[str, Any]] = {}
    versions: dict[tuple[str, str, str], int] = {}
    for line in lines:
        key = (line["election_id"], line["kind"], line["key"])
        assert line["version"] > versions.get(key, -1), f"{key}: version {line['version']} after {versions.get(key)}"
        versions[key] = line["version"]
        fields = ("cds", "sde_display", "final", "status") if line["kind"] == "unit" else ("cds", "sde_display_sum", "final")
        last[key] = {f: line[f] for f in fields}
    return last


def _subscribe(base: list[str], *args: str, timeout: float = 120) -> list[dict[str, Any]]:
    done = subprocess.run([CAUCUS, *base, "subscribe", *args], env=_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_every_final_tally_is_published_with_growing_versions(
    support: ModuleType, open_store: Open, database_url: str | None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    events = support.election_log(60, corrections=2, rejections=1)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(events)
    settings = Settings(data_dir=data, database=database_url)
    store = open_store()
    info = serving_set(store, settings)
    runner = ProjectionRunner(store, info.set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=25, poll_timeout=0.01)
    publisher = FeedPublisher(store, info, open_results_log(settings), catch_up_interval=0).attach(runner)
    runner.run(until_caught_up=True)
    publisher.flush()
    published = _feed(open_results_log(settings))
    assert publisher.stats.flushes >= 5 and publisher.stats.failures == 0
    # Per key, in log order within its partition (a unit's tallies share one), versions only grow.
    per_key: dict[tuple[str, str, str], list[int]] = {}
    for e in published:
        per_key.setdefault(feed_key(e), []).append(e.payload.stamp.version)
    assert all(v == sorted(set(v)) for v in per_key.values())
    # A subscriber that keeps the newest version per key ends with exactly the committed view.
    dedupe = FeedDeduper()
    fresh = [e for e in published if dedupe.fresh(e)]
    assert _latest([feed_json(e) for e in fresh]) == _expected(store)
    # The last state tally reflects the whole log: one election event (the definition), the rest
    # applied to units.
    state = [e for e in published if feed_key(e)[1] == "state"][-1]
    assert state.payload.stamp.version == tally_version(1, len(events) - 1)
    assert dict(state.payload.stamp.positions) == {p: m for p, m in log.high_watermarks().items() if m}
    # Publishing the whole view again writes copies at the same versions (same event ids: the
    # embedded log keeps none of them).
    before = sum(open_results_log(settings).high_watermarks().values())
    assert publisher.publish_all() > 0
    assert sum(open_results_log(settings).high_watermarks().values()) == before


def test_a_failing_feed_never_breaks_the_view_and_the_next_batch_republishes(
    support: ModuleType, open_store: Open, database_url: str | None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    events = support.election_log(40, corrections=2)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(events)
    settings = Settings(data_dir=data, database=database_url)
    store = open_store()
    info = serving_set(store, settings)

    class Flaky:
        """The results log, failing its first appends (a broker that is away)."""

        def __init__(self, inner: Any, failures: int) -> None:
            self.inner, self.failures, self.calls = inner, failures, 0

        def append_batch(self, records: Sequence[PendingRecord]) -> list[Position]:
            self.calls += 1
            if self.calls <= self.failures:
                raise LogUnavailableError("the results feed is away")
            return self.inner.append_batch(records)

        def close(self) -> None:
            self.inner.close()

    flaky = Flaky(open_results_log(settings), failures=4)
    errors: list[str] = []
    runner = ProjectionRunner(store, info.set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=20, poll_timeout=0.01)
    publisher = FeedPublisher(store, info, flaky, on_error=errors.append, catch_up_interval=0).attach(runner)  # type: ignore[arg-type]
    progress = runner.run(until_caught_up=True)
    assert progress.applied == len(events) and progress.caught_up, "the runner went on"
    assert len(errors) == 4 and publisher.stats.failures == 4 and "will retry" in errors[0]
    publisher.flush()
    ref = store.create_set("reference", source="ref").set_id
    ProjectionRunner(store, ref, EmbeddedSource(SqliteLog(log.path)), batch_size=1000).run(until_caught_up=True)
    assert support.snapshot(store, info.set_id) == support.snapshot(store, ref), "the view is right"
    dedupe = FeedDeduper()
    fresh = [feed_json(e) for e in _feed(open_results_log(settings)) if dedupe.fresh(e)]
    assert _latest(fresh) == _expected(store), "what failed to publish was published after a later batch"


def test_subscribe_prints_each_tally_once_and_drops_republished_copies(
    support: ModuleType, database_url: str | None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    events = support.election_log(30, corrections=2, rejections=1)
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(events)
    base = ["--data-dir", str(data), *(["--database", database_url] if database_url else [])]
    subprocess.run([CAUCUS, *base, "project", "--until-caught-up", "-q", "--batch-size", "20"], env=_env(), check=True, timeout=120)
    first = _subscribe(base, "--from-beginning", "--until-idle", "1")
    # Republish: the same records once more under fresh record ids (a producer retry that landed
    # twice); a restarted `caucus project` adds nothing.
    results = SqliteLog(data / "results.sqlite3")
    raw = list(results.read())
    results.append_batch([PendingRecord(r.key, f"retry-{i}", r.value) for i, r in enumerate(raw)])
    subprocess.run([CAUCUS, *base, "project", "--until-caught-up", "-q"], env=_env(), check=True, timeout=120)
    assert sum(results.high_watermarks().values()) == 2 * len(raw)
    again = _subscribe(base, "--from-beginning", "--until-idle", "1")
    assert again == first, "copies and republished versions are dropped"
    store = _cli_store(data, database_url)
    try:
        expected = _expected(store)
    finally:
        store.close()
    assert _latest(first) == expected
    assert {k for k in expected if k[1] == "unit"} == {(e.envelope.election_id, "unit", e.unit_id) for e in events if e.unit_id}
    one = _subscribe(base, "--from-beginning", "--until-idle", "1", "--unit", "u00003")
    assert {line["key"] for line in one} == {"u00003"} and one[-1]["cds"] == expected[("e1", "unit", "u00003")]["cds"]
    county = _subscribe(base, "--from-beginning", "--until-idle", "1", "--county", "c1")
    assert {line["kind"] for line in county} == {"unit", "county"}
    assert all(line["county_id"] == "c1" for line in county if line["kind"] == "unit")
    assert all(line["key"] == "c1" for line in county if line["kind"] == "county")
    assert len(_subscribe(base, "--from-beginning", "--max", "3")) == 3


def _sorted(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Partitions are read in no common order: compare lines per key."""
    return sorted(lines, key=lambda line: (line["kind"], line["key"], line["version"]))


def _cli_store(data: Path, database: str | None) -> ProjectionStore:
    if database:
        from projections.stores.postgres import PostgresStore

        return PostgresStore(database)
    from projections.stores.sqlite import SqliteStore

    return SqliteStore(data / "store.sqlite3")


def test_a_subscriber_following_live_sees_every_final_tally(support: ModuleType, tmp_path: Path) -> None:
    data = tmp_path / "data"
    events = support.election_log(50, corrections=2)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    base = ["--data-dir", str(data)]
    SqliteLog(data / "results.sqlite3", partitions=8).close()
    sub = subprocess.Popen([CAUCUS, *base, "subscribe", "--from-beginning", "--until-idle", "8"], env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        project = subprocess.Popen([CAUCUS, *base, "project", "-q", "--batch-size", "30"], env=_env())
        try:
            for chunk in support.chunked(events, 40):  # results come in while both run
                Journal(log).append_batch(chunk)
            store = _cli_store(data, None)
            support.wait_for(lambda: store.serving("tally") is not None and _applied(store) == len(events), 60, "the projection")
        finally:
            project.terminate()
            project.wait(30)
        out, err = sub.communicate(timeout=60)
    finally:
        if sub.poll() is None:
            sub.kill()
    assert sub.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert _latest(lines) == _expected(store)
    store.close()


def _applied(store: ProjectionStore) -> int:
    with store.reader(store.serving("tally").set_id) as r:  # type: ignore[union-attr]
        return r.event_count()


def test_feed_on_kafka_with_postgres(
    support: ModuleType, kafka_bootstrap: str, unique_topic: str, pg_dsn: str, tmp_path: Path
) -> None:
    from ledger.log.kafka import provision_topic, topic_partitions
    from ledger.log.kafka import KafkaLog
    from projections.stores.postgres import PostgresStore

    results_topic = f"{unique_topic}-results"
    provision_topic(kafka_bootstrap, unique_topic, 8)
    events = support.election_log(80, corrections=2, rejections=1)
    support.produce(kafka_bootstrap, unique_topic, events, 8)
    base = ["--data-dir", str(tmp_path), "--kafka", kafka_bootstrap, "--topic", unique_topic, "--database", pg_dsn]
    env = {**_env(), "CAUCUS_RESULTS_TOPIC": results_topic}
    project = [CAUCUS, *base, "project", "--until-caught-up", "-q", "--batch-size", "40", "--session-timeout-ms", "2000",
               "--group", f"feed-{unique_topic}"]
    subprocess.run(project, env=env, check=True, timeout=120)
    assert topic_partitions(kafka_bootstrap, results_topic) == 8, "provisioned like the event topic"

    def subscribe(*args: str) -> list[dict[str, Any]]:
        done = subprocess.run([CAUCUS, *base, "subscribe", "--from-beginning", "--until-idle", "3", *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    def records() -> int:
        feed = KafkaLog(kafka_bootstrap, results_topic, partitions=8)
        try:
            return sum(feed.high_watermarks().values())
        finally:
            feed.close()

    first = subscribe()
    before = records()
    subprocess.run(project, env=env, check=True, timeout=120)  # a restart with nothing new publishes nothing
    assert records() == before
    assert _sorted(subscribe()) == _sorted(first)
    store = PostgresStore(pg_dsn)
    try:
        expected = _expected(store)
    finally:
        store.close()
    assert _latest(first) == expected
    assert sum(1 for k in expected if k[1] == "unit") == len({e.unit_id for e in events if e.unit_id})


def test_the_feed_publishes_the_same_from_its_own_commits_as_from_the_store(
    support: ModuleType, tmp_path: Path, monkeypatch: Any
) -> None:
    """``feed_fresh``: the tallies the runner just committed stand in for reading them back from the
    store. Publishing from the store every time (the shortcut off) must give the very same records."""
    from projections.feed_fresh import FreshRows
    from projections.stores.sqlite import SqliteStore

    events = support.election_log(60, corrections=3, rejections=2)

    def published(name: str) -> list[dict[str, Any]]:
        data = tmp_path / name
        log = SqliteLog(data / "log.sqlite3", partitions=8)
        Journal(log).append_batch(events)
        settings = Settings(data_dir=data)
        store = SqliteStore(data / "store.sqlite3")
        info = serving_set(store, settings)
        runner = ProjectionRunner(store, info.set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=7, poll_timeout=0.01)
        publisher = FeedPublisher(store, info, open_results_log(settings), catch_up_interval=0).attach(runner)
        runner.run(until_caught_up=True)
        publisher.flush()
        assert publisher.stats.failures == 0
        lines = [feed_json(e) for e in _feed(open_results_log(settings))]
        return [{k: v for k, v in line.items() if k not in ("published_at", "event_id")} for line in lines]

    used: list[bool] = []
    covers = FreshRows.covers

    def counted(self: FreshRows, keys: Any) -> bool:
        used.append(covers(self, keys))
        return used[-1]

    monkeypatch.setattr(FreshRows, "covers", counted)
    shortcut = published("shortcut")
    assert sum(used) >= 5, "the runner's own commits were never used"
    monkeypatch.setattr(FreshRows, "covers", lambda self, keys: False)
    assert shortcut == published("from-store")

"""The results feed's latest view (one record per unit, county and state: ``ledger.log.latest``) and a
publisher that starts again: after corrections the view holds exactly the current tallies (the figures
of ``caucus tally --json``), a restart with nothing new publishes nothing, and a publisher that died
between commit and publish (or whose latest view failed) publishes what was missed on start. Embedded;
Kafka with PostgreSQL (where the latest topic must be compacted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ledger.backends import backends_for
from ledger.config import Settings
from ledger.journal import Journal
from ledger.log.latest import LatestSnapshot
from ledger.log.port import LogUnavailableError, PendingRecord, Position
from ledger.log.sqlite import SqliteLog
from projections.feed import FeedPublisher, open_results_log
from projections.feed_events import FeedDeduper, feed_codec, feed_json
from projections.queries import load_view
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore
from projections.stores.sqlite import SqliteStore
from projections.wiring import serving_set

CAUCUS = str(Path(sys.executable).parent / "caucus")
Key = tuple[str, str, str]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}


def _caucus(base: list[str], *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([CAUCUS, *base, *args], env=env or _env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _figures(line: dict[str, Any]) -> dict[str, Any]:
    fields = ("cds", "final", "sde_display", "sde", "status") if line["kind"] == "unit" else ("cds", "final", "sde_display_sum", "sde")
    return {f: line[f] for f in fields}


def _expected(store: ProjectionStore, elections: Sequence[str]) -> dict[Key, dict[str, Any]]:
    """Every unit's, reporting county's and the state's current figures, as the tallies compute them."""
    out: dict[Key, dict[str, Any]] = {}
    for election in elections:
        view = load_view(store, election_id=election)
        for uid, t in view.units.items():
            j = t.to_json()
            out[(election, "unit", uid)] = {"cds": j["cds"], "final": j["final"], "sde_display": j["sde_display"],
                                            "sde": j["sde"], "status": j["status"]}
        for cid, a in [*view.counties().items(), (election, view.state())]:
            if a.units_reporting or cid == election:
                j = a.to_json()
                kind = "state" if cid == election else "county"
                out[(election, kind, cid)] = {"cds": j["cds"], "final": j["final"], "sde_display_sum": j["sde_display_sum"],
                                              "sde": j["sde_exact"]}
    return out


def _one_per_key(lines: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    keys = [(line["election_id"], line["kind"], line["key"]) for line in lines]
    assert len(keys) == len(set(keys)), "one record per key"
    return {k: _figures(line) for k, line in zip(keys, lines)}


def _check_against_tally(base: list[str], lines: list[dict[str, Any]], election: str, env: dict[str, str] | None = None) -> None:
    """The state's and a county's latest figures are those `caucus tally --json` prints."""
    state = json.loads(_caucus(base, "tally", "--json", "--election", election, env=env))["state"]
    (mine,) = [line for line in lines if line["kind"] == "state" and line["election_id"] == election]
    assert (mine["cds"], mine["final"], mine["sde_display_sum"], mine["sde"]) == (
        state["cds"], state["final"], state["sde_display_sum"], state["sde_exact"])
    county = json.loads(_caucus(base, "tally", "--json", "--election", election, "--county", "c1", env=env))
    (mine,) = [line for line in lines if line["kind"] == "county" and line["key"] == "c1" and line["election_id"] == election]
    assert mine["cds"] == county["county"]["cds"] and mine["sde_display_sum"] == county["county"]["sde_display_sum"]


def test_latest_view_holds_the_current_tallies_and_a_restart_publishes_nothing(support: ModuleType, tmp_path: Path) -> None:
    data = tmp_path / "data"
    # Two elections with the same unit ids: the view keeps a unit of each.
    events = [*support.election_log(30, corrections=2, seed=3), *support.election_log(20, election_id="e2", corrections=1, seed=5)]
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(events[: len(events) // 2])
    base = ["--data-dir", str(data)]
    _caucus(base, "project", "--until-caught-up", "-q", "--batch-size", "15")
    Journal(log).append_batch(events[len(events) // 2 :])  # the rest, corrections included
    _caucus(base, "project", "--until-caught-up", "-q", "--batch-size", "15")
    lines = _lines(_caucus(base, "subscribe", "--latest"))
    store = SqliteStore(data / "store.sqlite3", read_only=True)
    try:
        expected = _expected(store, ["e1", "e2"])
    finally:
        store.close()
    assert _one_per_key(lines) == expected
    assert {("e1", "unit", "u00003"), ("e2", "unit", "u00003")} <= set(expected)
    for election in ("e1", "e2"):
        _check_against_tally(base, lines, election)
    # Restarted with nothing new: nothing is appended, and the view is the same.
    results = SqliteLog(data / "results.sqlite3", read_only=True)
    before = results.high_watermarks()
    _caucus(base, "project", "--until-caught-up", "-q")
    assert results.high_watermarks() == before
    assert _lines(_caucus(base, "subscribe", "--latest")) == lines
    # --follow goes on from where the view stands: nothing older than what it printed comes again.
    assert _lines(_caucus(base, "subscribe", "--latest", "--follow", "--until-idle", "1")) == lines
    results.close()


class _Failing:
    """A latest view whose puts fail (a compacted topic that is away), the change stream being fine."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.puts = inner, 0

    def put(self, records: Sequence[PendingRecord], positions: Sequence[Position], keys: Sequence[str],
            versions: Sequence[int] | None = None) -> None:
        self.puts += 1
        raise LogUnavailableError("the latest view is away")

    def snapshot(self) -> LatestSnapshot:
        return self.inner.snapshot()  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()


def test_a_publisher_that_missed_records_publishes_them_on_start(support: ModuleType, tmp_path: Path) -> None:
    data = tmp_path / "data"
    events = support.election_log(40, corrections=2, seed=11)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    settings = Settings(data_dir=data)
    store = SqliteStore(data / "store.sqlite3")
    info = serving_set(store, settings)
    latest = backends_for(settings).open_results_latest

    def runner() -> ProjectionRunner:
        return ProjectionRunner(store, info.set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=10, poll_timeout=0.01)

    third = len(events) // 3
    Journal(log).append_batch(events[:third])
    first = runner()
    publisher = FeedPublisher(store, info, open_results_log(settings), catch_up_interval=0, latest=latest()).attach(first)
    publisher.resume()
    first.run(until_caught_up=True)
    assert publisher.stats.published > 0 and publisher.stats.failures == 0
    # The change stream takes the next records but the latest view fails them, then the process dies.
    Journal(log).append_batch(events[third : 2 * third])
    second = runner()
    failing = _Failing(latest())
    publisher = FeedPublisher(store, info, open_results_log(settings), catch_up_interval=0, latest=failing).attach(second)  # type: ignore[arg-type]
    second.run(until_caught_up=True)
    assert failing.puts > 0 and publisher.stats.failures == failing.puts
    # The rest is projected with no publisher at all (killed between commit and publish).
    Journal(log).append_batch(events[2 * third :])
    runner().run(until_caught_up=True)
    expected = _expected(store, ["e1"])
    restarted = FeedPublisher(store, info, open_results_log(settings), latest=latest())
    assert restarted.resume() > 0, "what was missed is published on start"
    view = latest().snapshot()
    codec = feed_codec()
    assert _one_per_key([feed_json(codec.decode(r.value)) for r in view.records.values()]) == expected
    # A subscriber of the change stream alone ends with the same tallies: no gap there either.
    dedupe = FeedDeduper()
    newest: dict[Key, dict[str, Any]] = {}
    for rec in open_results_log(settings).read():
        event = codec.decode(rec.value)
        if dedupe.fresh(event):
            line = feed_json(event)
            newest[(line["election_id"], line["kind"], line["key"])] = _figures(line)
    assert newest == expected
    assert FeedPublisher(store, info, open_results_log(settings), latest=latest()).resume() == 0, "and then nothing"
    # Bootstrap: the view, then the change stream from where the view stands, while more is published.
    dedupe = FeedDeduper()
    newest = {}
    for rec in view.records.values():
        event = codec.decode(rec.value)
        if dedupe.fresh(event):
            line = feed_json(event)
            newest[(line["election_id"], line["kind"], line["key"])] = _figures(line)
    Journal(log).append_batch(support.election_log(12, election_id="e2", corrections=1, seed=5))
    last = runner()
    FeedPublisher(store, info, open_results_log(settings), catch_up_interval=0, latest=latest()).attach(last)
    last.run(until_caught_up=True)
    for rec in open_results_log(settings).read(view.follow_from):
        event = codec.decode(rec.value)
        if dedupe.fresh(event):
            line = feed_json(event)
            newest[(line["election_id"], line["kind"], line["key"])] = _figures(line)
    assert newest == _expected(store, ["e1", "e2"])
    store.close()


def test_latest_topic_is_compacted_and_a_restart_publishes_nothing_on_kafka(
    support: ModuleType, kafka_bootstrap: str, unique_topic: str, pg_dsn: str, tmp_path: Path
) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    from ledger.log.kafka import KafkaLog, provision_topic
    from projections.stores.postgres import PostgresStore

    results_topic = f"{unique_topic}-results"
    provision_topic(kafka_bootstrap, unique_topic, 8)
    events = support.election_log(50, corrections=2, rejections=1, seed=13)
    support.produce(kafka_bootstrap, unique_topic, events[: len(events) // 2], 8)
    base = ["--data-dir", str(tmp_path), "--kafka", kafka_bootstrap, "--topic", unique_topic, "--database", pg_dsn]
    env = {**_env(), "CAUCUS_RESULTS_TOPIC": results_topic}
    project = ["project", "--until-caught-up", "-q", "--batch-size", "20", "--session-timeout-ms", "2000", "--group", f"l-{unique_topic}"]
    _caucus(base, *project, env=env)
    support.produce(kafka_bootstrap, unique_topic, events[len(events) // 2 :], 8)  # the rest, corrections included
    _caucus(base, *project, env=env)

    def records() -> int:
        feed = KafkaLog(kafka_bootstrap, results_topic, partitions=8, read_only=True)
        try:
            return sum(feed.high_watermarks().values())
        finally:
            feed.close()

    before = records()
    _caucus(base, *project, env=env)
    assert records() == before, "a restart with no new events publishes nothing"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, f"{results_topic}.latest")], config_filter="all")
    finally:
        admin.close()
    assert configs["topic"][f"{results_topic}.latest"]["cleanup.policy"]["value"] == "compact"
    lines = _lines(_caucus(base, "subscribe", "--latest", env=env))
    store = PostgresStore(pg_dsn)
    try:
        expected = _expected(store, ["e1"])
    finally:
        store.close()
    assert _one_per_key(lines) == expected
    _check_against_tally(base, lines, "e1", env=env)


def test_a_group_starts_from_the_latest_view_and_then_prints_only_what_changed(support: ModuleType, tmp_path: Path) -> None:
    """``--latest --group``: a new subscriber starts from the view and keeps its position; started again,
    it prints only the keys whose latest tally it has not printed, and following on repeats nothing."""
    data = tmp_path / "data"
    events = support.election_log(30, corrections=3, seed=11)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    cut = len(events) * 2 // 3
    Journal(log).append_batch(events[:cut])
    base = ["--data-dir", str(data)]
    _caucus(base, "project", "--until-caught-up", "-q", "--batch-size", "15")
    first = _lines(_caucus(base, "subscribe", "--latest", "--group", "g"))
    assert first == _lines(_caucus(base, "subscribe", "--latest"))
    assert _lines(_caucus(base, "subscribe", "--latest", "--group", "g")) == [], "nothing new: nothing printed"
    assert _lines(_caucus(base, "subscribe", "--group", "g", "--until-idle", "1")) == [], "the group stands at the view"
    Journal(log).append_batch(events[cut:])
    _caucus(base, "project", "--until-caught-up", "-q", "--batch-size", "15")
    now = _lines(_caucus(base, "subscribe", "--latest"))
    changed = _lines(_caucus(base, "subscribe", "--latest", "--group", "g"))
    printed_before = {(x["election_id"], x["kind"], x["key"]): x["version"] for x in first}
    expected = [x for x in now if printed_before.get((x["election_id"], x["kind"], x["key"])) != x["version"]]
    assert changed and changed == expected
    assert _lines(_caucus(base, "subscribe", "--group", "g", "--until-idle", "1")) == []
    log.close()


def test_latest_stops_at_max_and_a_group_cut_short_prints_the_rest_next_time(support: ModuleType, tmp_path: Path) -> None:
    """``--latest --max N`` prints N lines of the view, not all of it; a group cut short by ``--max``
    keeps its place: its next ``--latest`` prints the rest, nothing twice, nothing missed."""
    data = tmp_path / "data"
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(support.election_log(12, corrections=0, seed=5))
    log.close()
    base = ["--data-dir", str(data)]
    _caucus(base, "project", "--until-caught-up", "-q")
    whole = _lines(_caucus(base, "subscribe", "--latest"))
    assert len(whole) > 5
    assert _lines(_caucus(base, "subscribe", "--latest", "--max", "3")) == whole[:3]
    head = _lines(_caucus(base, "subscribe", "--latest", "--group", "g", "--max", "4"))
    rest = _lines(_caucus(base, "subscribe", "--latest", "--group", "g"))
    assert head == whole[:4] and rest == whole[4:]
    assert _lines(_caucus(base, "subscribe", "--latest", "--group", "g")) == []


def test_a_new_group_cut_short_by_max_follows_as_a_new_group_does(support: ModuleType, tmp_path: Path) -> None:
    """A new group whose ``--latest`` was cut short holds no position: following, it starts where a new
    group starts (now), not at the feed's first record with every outdated version of the keys it has
    not printed."""
    data = tmp_path / "data"
    events = support.election_log(20, corrections=3, seed=3)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(events[: len(events) // 2])
    base = ["--data-dir", str(data)]
    _caucus(base, "project", "--until-caught-up", "-q")
    Journal(log).append_batch(events[len(events) // 2 :])
    log.close()
    _caucus(base, "project", "--until-caught-up", "-q")
    assert len(_lines(_caucus(base, "subscribe", "--latest", "--group", "g", "--max", "3"))) == 3
    assert _lines(_caucus(base, "subscribe", "--group", "g", "--until-idle", "1")) == []

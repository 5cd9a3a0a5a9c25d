"""Two publishers of one projection set (two runners of a consumer group), the one whose view lags
writing last: the feed's latest view and change stream must still end at the newest version of every
key (``projections.stores.port.FeedFence``). Embedded (SQLite store, ``SqliteLatest``) and Kafka with
PostgreSQL (``CopyLatest`` on a topic).

How the lag is staged, without threads or sleeping: publisher A reads the store's snapshot; as soon as
that read ends, the rest of the log is folded and publisher B (another store connection) publishes the
newer tallies; then A appends what it read. Without a fence A's older tallies land last."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from ledger.journal import Journal
from ledger.log.latest import CopyLatest, LatestView
from ledger.log.port import EventLog
from ledger.log.sqlite import SqliteLog
from ledger.log.sqlite_latest import SqliteLatest
from projections.feed import FeedPublisher
from projections.feed_events import feed_codec
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore
from projections.stores.postgres import PostgresStore
from projections.stores.sqlite import SqliteStore

class _LaggingReads:
    """A store whose first ``reader`` runs ``after`` once the read has ended (the lag staged)."""

    def __init__(self, store: ProjectionStore, after: Callable[[], None]) -> None:
        self._store = store
        self._after: Callable[[], None] | None = after

    @contextmanager
    def reader(self, set_id: int) -> Iterator[Any]:
        with self._store.reader(set_id) as r:
            yield r
        after, self._after = self._after, None
        if after is not None:
            after()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _versions(latest: LatestView) -> dict[str, int]:
    codec = feed_codec()
    return {key: codec.decode(rec.value).payload.stamp.version for key, rec in latest.snapshot().records.items()}


def _stream_versions(log: EventLog) -> dict[str, list[int]]:
    codec = feed_codec()
    out: dict[str, list[int]] = {}
    for rec in log.read():
        out.setdefault(rec.key, []).append(codec.decode(rec.value).payload.stamp.version)
    return out


def _stage(support: ModuleType, tmp_path: Path, stores: Callable[[], ProjectionStore],
           results: Callable[[], EventLog], latest: Callable[[], LatestView]) -> None:
    events = support.election_log(40, corrections=2, rejections=1, seed=29)
    cut = len(events) * 2 // 3
    def log() -> SqliteLog:  # a runner closes its source's log when it ends
        return SqliteLog(tmp_path / "events.sqlite3", partitions=4)

    Journal(log()).append_batch(events[:cut])
    store_a, store_b, folder = stores(), stores(), stores()
    info = store_a.ensure_serving("tally", source="test")
    ProjectionRunner(folder, info.set_id, EmbeddedSource(log()), batch_size=500).run(until_caught_up=True)

    b = FeedPublisher(store_b, info, results(), latest=latest(), catch_up_interval=0)

    def lag() -> None:
        """A has read its (older) snapshot; the rest is folded and B publishes it meanwhile."""
        Journal(log()).append_batch(events[cut:])
        ProjectionRunner(folder, info.set_id, EmbeddedSource(log()), batch_size=500).run(until_caught_up=True)
        assert b.flush() > 0

    a = FeedPublisher(_LaggingReads(store_a, lag), info, results(), latest=latest(),  # type: ignore[arg-type]
                      catch_up_interval=0)
    a.flush()
    assert b.stats.failures == a.stats.failures == 0, (a.stats.last_error, b.stats.last_error)

    newest = 10**9 + len(events) - 1  # every event but the definition is a unit's
    view = _versions(latest())
    state = [k for k in view if k.startswith("state:")]
    assert state and view[state[0]] == newest, f"the latest view's state is at {view.get(state[0])}, not {newest}"
    stream = _stream_versions(results())
    for key, versions in stream.items():
        assert versions == sorted(versions), f"the change stream of {key} goes backwards: {versions}"
    assert max(stream[state[0]]) == newest
    for s in (store_a, store_b, folder):
        s.close()


def test_an_older_publisher_writing_last_cannot_take_the_embedded_latest_view_back(
    support: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "results.sqlite3"
    _stage(support, tmp_path, lambda: SqliteStore(tmp_path / "store.sqlite3"),
           lambda: SqliteLog(path, partitions=4), lambda: SqliteLatest(path))


def test_an_older_publisher_writing_last_cannot_take_the_kafka_latest_view_back(
    support: ModuleType, tmp_path: Path, kafka_bootstrap: str, unique_topic: str, pg_dsn: str
) -> None:
    from ledger.log.kafka import KafkaLog, provision_topic

    provision_topic(kafka_bootstrap, unique_topic, 4)
    provision_topic(kafka_bootstrap, f"{unique_topic}.latest", 4)
    _stage(support, tmp_path, lambda: PostgresStore(pg_dsn),
           lambda: KafkaLog(kafka_bootstrap, unique_topic, partitions=4),
           lambda: CopyLatest(KafkaLog(kafka_bootstrap, f"{unique_topic}.latest", partitions=4)))


def test_a_batch_that_continues_another_runners_commits_republishes_what_that_runner_changed(
    support: ModuleType, tmp_path: Path
) -> None:
    """Runner B's batch continues a partition right where runner A's commits left it (a rebalance).
    B's publisher never read A's units, so it must re-read the set: its state's sums and version are
    those of everything applied, not of B's batches alone (with B's read positions taken for what it
    knows, the state came out short)."""
    events = support.election_log(30, corrections=2, rejections=1, seed=31)
    log = SqliteLog(tmp_path / "events.sqlite3", partitions=4)
    Journal(log).append_batch(events)
    records = list(log.read())
    store_path, results = tmp_path / "store.sqlite3", tmp_path / "results.sqlite3"
    info = SqliteStore(store_path).ensure_serving("tally", source="test")

    def runner(partitions: set[int]) -> ProjectionRunner:
        r = ProjectionRunner(SqliteStore(store_path), info.set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=10_000)
        r.assigned(partitions)
        return r

    b = runner({0, 1, 2, 3})
    publisher = FeedPublisher(b.store, info, SqliteLog(results, partitions=4), latest=SqliteLatest(results),
                              catch_up_interval=0).attach(b)
    defined = next(r.position.partition for r in records if r.key.startswith("election:"))
    busiest = max(set(range(4)) - {defined}, key=lambda p: sum(r.position.partition == p for r in records))
    mine = [r for r in records if r.position.partition != busiest]
    theirs = [r for r in records if r.position.partition == busiest]
    b.apply(mine)  # B publishes (the definition is in its batch)
    runner({busiest}).apply(theirs[:-1])  # A, on the partition B has not read yet
    b.apply(theirs[-1:])  # B continues from A's stored position: one unit of its own, the rest A's
    assert publisher.stats.failures == 0, publisher.stats.last_error
    view = _versions(SqliteLatest(results))
    assert view["state:e1"] == 10**9 + len(events) - 1, "the state's version counts every event applied"

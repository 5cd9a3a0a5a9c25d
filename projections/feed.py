"""The results feed: after a projection commits, publish the unit, county and state tallies it changed.

Where to: on Kafka, the results topic (``settings.results_topic``, provisioned like the event topic,
keyed by unit so a unit's tallies stay in order, county and state sums by area: ``feed_events.record_key``);
on the embedded backend, a second SQLite log next to the event log (``results.sqlite3``). Records are
the Avro events of ``projections.feed_events``.

Why publishing cannot break the view, and why a subscriber still sees every final tally once:

* **After the commit, never inside it.** The runner calls ``FeedPublisher.committed`` only once the
  batch's store transaction has committed (``ProjectionRunner.on_commit``); what is published is read
  back from the store, in one snapshot, with the positions that snapshot reflects. A feed that is down
  cannot roll back, slow down or corrupt the view.
* **At least once.** The keys a batch changed stay pending until an ``append_batch`` of their tallies
  has been acknowledged (acks=all on Kafka, a committed transaction on SQLite) and the same records
  are in the latest view (``projections.feed_latest``). If publishing fails the keys stay pending and
  are published, with whatever tally is current then, after the next batch (or the next progress
  tick). A process that dies between commit and publish loses its pending keys, so a publisher starts
  by comparing the whole serving view with the latest view (``resume``): what the view lacks, or holds
  at another version or from another projection set, is published; a restart with nothing new
  publishes nothing.
* **Latest view after the change stream.** Every record appended is then put in the latest view, a
  copy per key (a compacted topic on Kafka, a table on the embedded backend: ``ledger.log.latest``),
  so a subscriber can start from the current tallies and follow the change stream from there.
* **Versions, so duplicates cost nothing.** Every tally carries ``version``
  (``feed_events.tally_version``): the events applied to its election, weighted 10^9, plus the events
  applied to the units it covers. Both counts only grow, so a version grows whenever the tally can have
  changed and stays the same when nothing did: a republished copy carries the version of the original.
  A subscriber keeps, per unit / county / state, only versions above the last it saw
  (``feed_events.FeedDeduper``): copies are dropped and no tally ever goes backwards, in whatever order
  partitions are read. Each tally also carries the event-log positions of the snapshot it was read from.
* **Never backwards, whoever publishes.** Every runner of a consumer group publishes, and a runner
  whose view lags (it learns of the others' commits later) can read an older tally of a key after
  another runner read a newer one. The store's feed fence (``FeedFence``: per key the highest version
  published, checked and raised under a lock held until the change stream and the latest view have
  the records) refuses it, so within a set a key's versions never go down on the change stream or in
  the latest view. On PostgreSQL and in memory the fence has a lock of its own, so publishing never
  waits for a batch; an embedded SQLite store has one writer at a time, so there they take turns.
* **The serving view only.** A projection set that is not serving (a rebuild in progress, an as-of set,
  the set a replay just retired) publishes nothing, so subscribers follow one view. After a replay
  switches sets, the new serving set is published whole; where it reflects fewer events than the old
  one had reached, its (older) tallies carry lower versions and are dropped by subscribers until it
  catches up. (A rebuild under another rule set at the same events publishes the same versions, so
  subscribers keep the tallies they have until the units change; restart subscribers after such a
  switch.)

Cost: unit tallies are cached (one per unit) and refreshed from the store only for the units a batch
changed; the whole set is re-read only when another runner committed to it meanwhile. While the
runner is behind the log, changes are coalesced: published once ``catch_up_interval`` seconds have
passed (more when publishing takes long: ``CATCH_UP_SHARE``) and a quarter of the units are pending
(or ten intervals have passed), so a catch-up publishes each unit a few times whatever the machine's
speed, not once per interval it spans; once it has caught up, after every batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ledger.backends import RESULTS_LOG_FILE, backends_for
from ledger.config import Settings
from ledger.events import Event
from ledger.log.latest import LatestRecord, LatestView
from ledger.log.port import EventLog, LogError, PendingRecord
from ledger.record_headers import event_headers
from projections.area_sums import ElectionSums
from projections.feed_events import (FeedStamp, area_event, feed_codec, feed_event_id, latest_key, record_key, tally_key,
                                     tally_version, unit_event)
from projections.feed_fresh import FreshRows
from projections.reducers import ElectionState
from projections.stores.port import Changes, ProjectionStore, SetInfo, StoreError, UnitKey
from projections.tally import ElectionContext, UnitTally, election_context

__all__ = [
    "RESULTS_LOG_FILE", "open_results_log", "results_log_name", "FeedPublisher", "FeedStats", "FeedOfAnotherLog", "SOURCE_HEADER",
    "open_publisher", "publishing",
]

FEED_WRITER = "projections:results-feed"

SOURCE_HEADER = "caucus-source-log"
"""Header of every feed record: the event log the tally was projected from (the set's ``source``)."""


class FeedOfAnotherLog(RuntimeError):
    """The results feed holds tallies projected from an event log this store knows nothing of.

    Why refuse: two event logs publishing to one results topic (one topic name set, the results topic
    left at its default) would put two elections' tallies under the same keys, and subscribers would
    keep whichever version is higher. A log this store has projected before (the one a
    ``caucus replay --new-log`` replaced) is not another log."""

CATCH_UP_SHARE = 0.2
"""While the runner is behind, publishing waits until its last publish took at most this share of
the time since the one before, so the feed slows a catch-up by at most about a quarter."""


def open_results_log(settings: Settings, *, read_only: bool = False) -> EventLog:
    """The results feed's log: the results topic on Kafka, else ``results.sqlite3`` in the data dir.
    ``read_only`` for subscribers: nothing is created (``LogMissingError`` if nothing was published)."""
    return backends_for(settings).open_results_log(read_only=read_only)


def results_log_name(settings: Settings) -> str:
    return backends_for(settings).describe_results_log()


@dataclass
class FeedStats:
    published: int = 0
    flushes: int = 0
    failures: int = 0
    last_error: str | None = None
    last_version: int | None = None
    serving: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "flushes": self.flushes,
            "failures": self.failures,
            "last_error": self.last_error,
            "last_version": self.last_version,
            "serving": self.serving,
        }


@dataclass
class _Pending:
    units: set[UnitKey] = field(default_factory=set)  # (election id, unit id)
    everything: bool = False

    def __bool__(self) -> bool:
        return self.everything or bool(self.units)


class FeedPublisher:
    """Publishes a projection set's changed tallies to a results log (see module docstring).

    ``attach(runner)`` installs it as the runner's ``on_commit``. ``only_serving`` (default) publishes
    only while the set is the serving one of its name. ``on_error`` hears about failed publishes (they
    are retried; the runner is never stopped by the feed).
    """

    def __init__(
        self,
        store: ProjectionStore,
        info: SetInfo,
        log: EventLog,
        *,
        only_serving: bool = True,
        catch_up_interval: float = 5.0,
        on_error: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        latest: LatestView | None = None,
        name: str = "",
    ) -> None:
        self.store = store
        self.info = info
        self.name = name or "log"
        self._source = (SOURCE_HEADER, info.source.encode())
        self.log = log
        self.latest = latest
        self.only_serving = only_serving
        self.catch_up_interval = catch_up_interval
        self.on_error = on_error
        self.stats = FeedStats()
        self._codec = feed_codec()
        self._clock = clock
        self._runner: Any = None
        self._pending = _Pending(everything=True)
        self._last_flush = float("-inf")
        self._flush_took = 0.0  # seconds the last publish took
        self._retry = False  # the last publish failed
        self._tallies: dict[str, dict[str, UnitTally]] = {}  # election id -> unit id -> tally
        self._contexts: dict[str, ElectionContext] = {}
        self._revisions: dict[str, str] = {}
        self._election_events: dict[str, int] = {}
        self._unit_events: dict[str, dict[str, int]] = {}  # election id -> unit id -> events applied
        self._sums: dict[str, ElectionSums] = {}
        self._expected: dict[int, int] | None = None  # positions of the last snapshot, plus our own commits since
        self._fresh = FreshRows()  # what those commits wrote (``feed_fresh``)
        self._published: dict[str, str] = {}  # latest key -> event id of the record the latest view holds

    # -- hooks --------------------------------------------------------------------------------

    def attach(self, runner: Any) -> FeedPublisher:
        self._runner = runner
        runner.on_commit = self.committed
        return self

    def committed(self, changes: Changes, positions: dict[int, int]) -> None:
        """The runner's after-commit hook: note what changed; publish now if the runner is caught up."""
        # Units whose tally changed, and units whose state changed without changing the tally (their
        # version moves all the same: publishing them keeps a republished copy at the same version).
        self._pending.units.update((row.election_id, row.unit_id) for row in changes.tallies)
        self._pending.units.update((row.election_id, row.unit_id) for row in changes.units)
        self._fresh.note(changes)
        if changes.elections:
            self._pending.everything = True  # definition or certification: every area's sums may move
        if self._expected is not None:
            # What the store holds now is our snapshot plus this commit only if the batch found its
            # partitions where our snapshot (and our commits since) left them: a runner's read positions
            # also move to where another runner's commits left a partition (a re-seek), and a batch can
            # continue another runner's commits, whose units we never read. Else re-read everything.
            base = getattr(self._runner, "last_base", None) if self._runner is not None else None
            if base is None or any(self._expected.get(p, 0) != o for p, o in base.items()):
                self._expected = None
            else:
                self._expected.update({row.partition: row.next_offset for row in changes.positions if row.next_offset})
        if self._caught_up(positions) or self._behind_due():
            self.flush()

    def tick(self) -> None:
        """Between batches (a progress report): retry a failed publish after a second, publish what a
        runner behind the log coalesced every ``catch_up_interval`` (each publish re-sends every county
        its units touched, so publishing more often while far behind only repeats them)."""
        if self._retry:
            due = self._clock() - self._last_flush >= min(1.0, self.catch_up_interval)
        else:
            due = self._behind_due()
        if self._pending and due:
            self.flush()

    def _behind_due(self) -> bool:
        """While behind: publish once ``_coalesce`` has passed and a quarter of the units are pending
        (or ten times ``catch_up_interval`` has), so that a catch-up publishes each unit a few times,
        however slowly the machine runs, not once per interval it spans."""
        waited = self._clock() - self._last_flush
        if waited < self._coalesce():
            return False
        known = sum(len(t) for t in self._tallies.values())
        return (self._pending.everything or len(self._pending.units) * 4 >= known
                or waited >= 10 * self.catch_up_interval)

    def _coalesce(self) -> float:
        """How long to coalesce changes while behind: ``catch_up_interval``, longer after a slow publish
        (0: publish after every batch, however long it takes)."""
        if self.catch_up_interval <= 0:
            return 0.0
        return max(self.catch_up_interval, self._flush_took / CATCH_UP_SHARE)

    def publish_all(self) -> int:
        """Publish every tally of the set, whatever the latest view holds."""
        self._published.clear()
        self._pending.everything = True
        return self.flush()

    def resume(self) -> int:
        """On start: publish what the latest view lacks, or holds at another version or from another
        set (what a publisher that died between commit and publish missed); nothing when it is up to
        date. Without a readable latest view, everything."""
        self._published.clear()
        if self.latest is not None:
            try:
                records = self.latest.snapshot().records
            except (LogError, OSError) as exc:
                if self.on_error is not None:
                    self.on_error(f"cannot read the results feed's latest view, publishing the whole view: {exc}")
            else:
                self._check_sources(records.values())
                self._published = {k: r.event_id for k, r in records.items()}
        self._pending.everything = True
        return self.flush()

    def _check_sources(self, records: Iterable[LatestRecord]) -> None:
        """``FeedOfAnotherLog`` when the latest view holds tallies of a log this store never projected."""
        held = {value.decode("utf-8", "replace") for rec in records for name, value in rec.headers if name == SOURCE_HEADER}
        if not held or held <= {self.info.source}:
            return
        foreign = held - {info.source for info in self.store.sets()}
        if foreign:
            raise FeedOfAnotherLog(
                f"the results feed {self.name} holds tallies projected from another event log ({', '.join(sorted(foreign))}); "
                f"this projection is of {self.info.source}. Two event logs publishing to one results topic would mix their "
                "tallies under the same keys: give each event log its own results topic (CAUCUS_RESULTS_TOPIC, or "
                "results_topic under [kafka] in the configuration file), or run with --no-feed"
            )

    def _caught_up(self, positions: dict[int, int]) -> bool:
        runner = self._runner
        if runner is None:
            return True
        marks = runner.progress.high_watermarks
        return all(positions.get(p, 0) >= hw for p, hw in marks.items() if p in positions)

    # -- publishing ---------------------------------------------------------------------------

    def _record(self, event: Event[Any]) -> PendingRecord:
        """A feed record with the headers every record carries (``ledger.record_headers``)."""
        value = self._codec.encode(event)
        return PendingRecord(record_key(event), event.event_id, value, (*event_headers(event, value, FEED_WRITER), self._source))

    def flush(self) -> int:
        """Publish the pending keys' current tallies; returns how many records were appended.
        Failures leave the keys pending (and are reported to ``on_error``), never raised."""
        if not self._pending:
            return 0
        self._last_flush = began = self._clock()
        try:
            if self.only_serving:
                serving = self.store.serving(self.info.name)
                self.stats.serving = serving is not None and serving.set_id == self.info.set_id
                if not self.stats.serving:
                    self._pending = _Pending()
                    return 0
            records: list[PendingRecord] = []
            keys: list[str] = []
            versions: dict[str, int] = {}
            for event in self._events():  # encoded one by one: a catch-up's events are not all kept at once
                records.append(self._record(event))
                keys.append(latest_key(event))
                versions[keys[-1]] = event.payload.stamp.version
                self.stats.last_version = max(self.stats.last_version or 0, event.payload.stamp.version)
            if records:
                records, keys = self._append_fenced(records, keys, versions)
        except (LogError, StoreError, OSError) as exc:
            self.stats.failures += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            self._expected = None  # re-read everything next time
            self._retry = True
            if self.on_error is not None:
                self.on_error(f"publishing to the results feed failed (will retry after the next batch): {exc}")
            return 0
        self._pending = _Pending()
        self._retry = False
        self._flush_took = self._clock() - began
        self.stats.flushes += 1
        self.stats.published += len(records)
        return len(records)

    def _append_fenced(self, records: list[PendingRecord], keys: list[str],
                       versions: dict[str, int]) -> tuple[list[PendingRecord], list[str]]:
        """Append under the store's feed fence (``FeedFence``): a key whose version is below one
        already published (another runner's view was ahead of ours) is left out, and the fence is
        held until the change stream and the latest view have the rest, so no runner can append an
        older version of a key after a newer one. The fence is raised once the change stream has the
        records, even if the latest view's copy then fails (the key stays pending and its current
        tally, at that version or above, is published again). Returns what was appended."""
        failed: BaseException | None = None
        with self.store.feed_fence(self.info.set_id) as fence:
            admitted = fence.admit(versions)
            kept = [(rec, key) for rec, key in zip(records, keys, strict=True) if key in admitted]
            records, keys = [r for r, _ in kept], [k for _, k in kept]
            if records:
                positions = self.log.append_batch(records)
                try:
                    if self.latest is not None:
                        self.latest.put(records, positions, keys, [versions[k] for k in keys])
                except (LogError, OSError) as exc:
                    failed = exc
        if failed is not None:
            raise failed
        self._published.update(zip(keys, (r.event_id for r in records)))
        return records, keys

    def _events(self) -> Iterator[Event[Any]]:
        reload, before, positions = self._read_changes()
        changed = {key for key in before if key[1] in self._tallies.get(key[0], {})}
        at = datetime.now(UTC)  # each election's stamp names the rule set its tallies were computed under, as tally does
        stamps = {e: FeedStamp.of(self.info.name, self.info.version, c.rule_set_name or self.info.rule_set, positions)
                  for e, c in self._contexts.items()}
        for eid, uid in sorted(changed):
            ctx = self._contexts.get(eid)
            if ctx is None or not ctx.defined or uid not in ctx.units:
                continue  # a unit no definition lists (refusals naming an unknown unit): counted in no tally
            stamp = stamps[eid]
            version = tally_version(self._election_events.get(eid, 0), self._unit_events.get(eid, {}).get(uid, 0))
            if self._holds(tally_key(eid, "unit", uid), stamp.at(version), eid, f"unit:{uid}"):
                continue
            yield unit_event(self._tallies[eid][uid], stamp.at(version), at, ctx.candidates)
        touched = {e for e, _ in changed}
        for eid in sorted(self._tallies):
            ctx = self._contexts.get(eid)
            if ctx is None or not ctx.defined or (eid not in touched and not reload):
                continue
            mine = {uid: was for (e, uid), was in before.items() if e == eid}
            yield from self._area_events(eid, ctx, reload, mine, stamps[eid], at)

    def _read_changes(self) -> tuple[bool, dict[UnitKey, tuple[UnitTally | None, int]], dict[int, int]]:
        """Read what changed since the last publish (everything on a reload) into the kept tallies;
        returns, per changed unit, the tally and event count it had before."""
        pending = self._pending
        with self.store.reader(self.info.set_id) as r:
            positions = {p: row.next_offset for p, row in r.positions().items() if row.next_offset}
            revisions = r.election_revisions()
            reload = pending.everything or self._expected != positions or revisions != self._revisions
            if revisions != self._revisions:
                elections = {e: ElectionState.loads(row.state) for e, row in r.elections().items()}
                self._contexts = {e: election_context(s, e, rule_set=self.info.rule_set) for e, s in elections.items()}
                self._election_events = {e: s.events for e, s in elections.items()}
                self._revisions = revisions
            wanted = None if reload else pending.units
            fresh, self._fresh = self._fresh, FreshRows()
            if wanted is not None and fresh.covers(wanted):  # the store holds just what we committed
                rows = {key: fresh.tallies[key] for key in wanted if key in fresh.tallies}
                counts = {key: fresh.events[key] for key in wanted}
            else:
                rows = r.tallies() if wanted is None else r.tallies(keys=wanted)
                states = r.unit_states() if wanted is None else r.unit_states(wanted)
                counts = {key: int(json.loads(row.state).get("events", 0)) for key, row in states.items()}
        if reload:
            self._tallies, self._unit_events, self._sums = {}, {}, {}
        before = {(e, u): (self._tallies.get(e, {}).get(u), self._unit_events.get(e, {}).get(u, 0)) for e, u in {*rows, *counts}}
        for (eid, uid), row in rows.items():
            self._tallies.setdefault(eid, {})[uid] = row.parsed if row.parsed is not None else UnitTally.loads(row.tally)
        for (eid, uid), count in counts.items():
            self._unit_events.setdefault(eid, {})[uid] = count
        self._expected = dict(positions)
        return reload, before, positions

    def _area_events(self, eid: str, ctx: ElectionContext, reload: bool, before: dict[str, tuple[UnitTally | None, int]],
                     stamp: FeedStamp, at: datetime) -> list[Event[Any]]:
        """The sums of the counties whose units changed (every county on a reload) and the state's,
        followed unit by unit (``projections.area_sums``)."""
        tallies, events = self._tallies.get(eid, {}), self._unit_events.get(eid, {})
        sums = self._sums.get(eid)
        if reload or sums is None:
            sums = self._sums[eid] = ElectionSums(ctx)
            sums.load(tallies, events)
            moved = set(sums.counties())
        else:
            moved = {g for uid, (old, old_events) in before.items()
                     if (g := sums.change(uid, old, tallies.get(uid), old_events, events.get(uid, 0))) is not None}
        e_events = self._election_events.get(eid, 0)
        out: list[Event[Any]] = []
        for cid in [c for c in ctx.counties if c in moved]:
            version = tally_version(e_events, sums.events[cid])
            if not self._holds(tally_key(eid, "county", cid), stamp.at(version), eid, f"county:{cid}"):
                out.append(area_event(sums.areas[cid], stamp.at(version), at, election_id=eid, kind="county",
                                      certified=ctx.certified, ballot=ctx.candidates))
        version = tally_version(e_events, sums.state_events())
        if not self._holds(tally_key(eid, "state", eid), stamp.at(version), eid, f"state:{eid}"):
            out.append(area_event(sums.state(), stamp.at(version), at, election_id=eid, kind="state",
                                  certified=ctx.certified, ballot=ctx.candidates))
        return out

    def _holds(self, key: str, stamp: FeedStamp, election_id: str, id_key: str) -> bool:
        """Whether the latest view already holds this tally (same set, same version: the same id)."""
        held = self._published.get(key)
        return held is not None and held == feed_event_id(stamp, election_id, id_key)

    def close(self) -> None:
        try:
            self.log.close()
        finally:
            if self.latest is not None:
                self.latest.close()


def open_publisher(settings: Settings, store: ProjectionStore, info: SetInfo, *,
                   on_error: Callable[[str], None] | None = None) -> FeedPublisher | None:
    """A publisher to the configured results log and its latest view; None (reported) when the log
    cannot be opened. Without the latest view it still publishes, but a restart republishes all."""
    try:
        log = open_results_log(settings)
    except (LogError, OSError) as exc:
        if on_error is not None:
            on_error(f"the results feed at {results_log_name(settings)} is unavailable, nothing will be published: {exc}")
        return None
    latest: LatestView | None = None
    try:
        latest = backends_for(settings).open_results_latest()
    except (LogError, OSError) as exc:
        if on_error is not None:
            on_error(f"the results feed's latest view is unavailable, only changes will be published: {exc}")
    return FeedPublisher(store, info, log, on_error=on_error, latest=latest, name=results_log_name(settings))


@contextmanager
def publishing(
    runner: Any, settings: Settings, store: ProjectionStore, info: SetInfo, *, enabled: bool = True,
    on_error: Callable[[str], None] | None = None,
) -> Iterator[FeedPublisher | None]:
    """Attach a feed publisher to ``runner`` for the block: publish what the latest view lacks first
    (``resume``), flush what is pending at the end. A results log that cannot be opened is reported and
    the runner goes on."""
    publisher = open_publisher(settings, store, info, on_error=on_error) if enabled else None
    if publisher is None:
        yield None
        return
    publisher.attach(runner)
    try:
        runner.refresh_stale()  # what the store holds is current before any of it is published
        publisher.resume()
        yield publisher
        publisher.flush()
    finally:
        publisher.close()

"""The projection runner: consume the log, fold events into views, commit exactly once.

This module is the loop: which partitions this runner owns and where each is read from, polling (and
gathering a large batch while behind the log), retrying a batch while the store is unreachable, the
lost-log check and the progress it reports. What a batch writes is the batch folder's
(``projections.batch_fold``: decode, index, fold, tally); which records a batch may apply and what
commits with what are the rules named in ``projections.exactly_once``, cited here by name.

The cyclic garbage collector is paused while a batch is gathered and applied: a batch allocates
millions of objects that reference counting frees (events, rows and states hold no cycles), and with
a large batch's records alive every collection walks them all again (a third of a rebuild's time).
"""

from __future__ import annotations

import gc
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from ledger.codec import Codec, default_codec
from ledger.event_values import election_key
from ledger.log.port import LogLostError, LogUnavailableError, StoredRecord
from projections.log_continuity import LastApplied, SameLog
from projections.batch_fold import DEFAULT_CHUNK, BatchFolder, FoldedBatch, FoldError, tally_row
from projections.tally_revision import TALLIES_REVISION
from projections.early_fold import BaseMoved, EarlyFold, fold_early
from projections.exactly_once import Claim, claim, others_ahead, start_positions
from projections.progress import Progress
from projections.sources import Source
from projections.stores.port import Changes, ProjectionStore, Staged, StoreReader, StoreUnavailable
from projections.store_outage import LOG_RETRY_SECONDS, STORE_RETRY_SECONDS, StoreOutage
from projections.whole_log import OthersStalled, OthersWatch, behind
from projections.work_left import WorkLeft

log = logging.getLogger(__name__)
_T = TypeVar("_T")

__all__ = ["RunnerError", "Progress", "ProjectionRunner", "tally_row"]

_CHUNK = DEFAULT_CHUNK
"""Records decoded and folded at a time within a batch (the folder's chunk), and the most a poll
asks for while a catch-up batch is gathered."""


class RunnerError(RuntimeError):
    """The runner cannot go on (an undecodable record, a store that refuses a write)."""


class ProjectionRunner:
    """Runs one projection set from one source (see module docstring). Implements the source's
    ``AssignmentListener``."""

    def __init__(
        self,
        store: ProjectionStore,
        set_id: int,
        source: Source,
        *,
        batch_size: int = 500,
        rule_set: str | None = None,
        codec: Codec | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        progress_interval: float = 1.0,
        poll_timeout: float = 0.2,
        on_commit: Callable[[Changes, dict[int, int]], None] | None = None,
        catch_up_batch: int = 0,
        catch_up_seconds: float = 5.0,
        store_retry_seconds: float = STORE_RETRY_SECONDS,
        log_retry_seconds: float = LOG_RETRY_SECONDS,
        others_timeout: float = 60.0,
        early_fold: bool | None = None,
        built_from: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.store = store
        self.set_id = set_id
        self.source = source
        self.batch_size = batch_size
        self.rule_set = rule_set
        self.codec = codec or default_codec()
        self.on_progress = on_progress
        self.progress_interval = progress_interval
        self.poll_timeout = poll_timeout
        self.catch_up_batch = max(batch_size, catch_up_batch)
        """While behind the log (a poll came back full), polls are gathered into one transaction of up to this
        many records (or ``catch_up_seconds`` of polling): a rebuild then computes each unit's tally once per
        large batch, not once per poll. 0 (default): one poll per transaction. Memory grows with it (records;
        their events are folded ``_CHUNK`` at a time), never with the log (``caucus replay``: 200,000, ~100 MB)."""
        self.catch_up_seconds = catch_up_seconds
        self.store_retry_seconds = store_retry_seconds
        """How long a batch (or the wait on other members) is retried while the store is out of reach (a restart)."""
        self.early_fold = source.shares_partitions if early_fold is None else early_fold
        """Fold each batch on a snapshot before the set's lock (``projections.early_fold``): by default only where
        another runner can hold the lock meanwhile (a group); else only a cost (an embedded rebuild: 0.71x CPU without)."""
        self._others = OthersWatch(others_timeout)
        """``--until-caught-up``: how long partitions held by other members may stay still before the
        runner gives up waiting for them (``projections.whole_log``; 0: no bound)."""
        self._log_targets: dict[int, int] | None = None
        self._outage = StoreOutage(self.store_retry_seconds)
        self._log_outage = StoreOutage(log_retry_seconds)  # the same wait for the event log (_wait_for_log)
        self._sleep = sleep
        self.on_commit = on_commit
        """Called after each batch's transaction committed, with what it changed and the positions
        this runner now stands at (the results feed publishes from here; see projections.feed)."""
        self.progress = Progress()
        self.folder = BatchFolder(self.codec, rule_set=rule_set, chunk=_CHUNK)
        self._next: dict[int, int] = {}
        self._known: dict[int, int] = {}  # the highest stored position seen per partition, kept when revoked
        self.work_left = WorkLeft()  # a group's leader splits the partitions by it (projections.lag_assignor)
        self._attempted: dict[int, int] = {}  # the positions this runner's batches last wrote (committed or not)
        self._left_to_others: set[int] = set()  # of the last batch: partitions another runner is ahead in
        self._targets: dict[int, int] = {}
        self._checks: list[LastApplied] = []  # stored positions whose last records are still to be found applied
        self._same_log = SameLog(getattr(source, "log", None), built_from)
        """``built_from``: the set's source (``log:<id>``), checked after each group join and before a run
        says it is caught up (``projections.log_continuity.SameLog``)."""
        self._same_log_due = False
        self._last_report = 0.0
        self._last_said: tuple[Any, ...] | None = None  # what the last progress report said
        self.last_base: dict[int, int] = {}
        """Of the last batch committed, the stored position of each of its partitions as it found them
        under the lock: whoever follows the commits (the feed) can tell whether someone else's commits
        came in between its own (``on_commit``'s positions are this runner's read positions)."""

    # -- assignment ---------------------------------------------------------------------------

    def assigned(self, partitions: set[int]) -> dict[int, int]:
        stored = self._reading(lambda r: r.positions())
        stored_next = {p: row.next_offset for p, row in stored.items()}
        self.work_left.saw_stored(stored_next)
        start = start_positions(stored, partitions)  # POSITIONS_FROM_STORE
        self._same_log_due = True
        self._read_last_applied({p: start[p] for p in partitions if start[p] > 0}, stored_next)
        for p in partitions:
            row = stored.get(p)
            self._next[p] = start[p]
            self._known[p] = max(self._known.get(p, 0), start[p])
            self._targets.pop(p, None)
            self.folder.forget(p)
            if row and row.last_recorded_at:
                self._note_recorded(datetime.fromisoformat(row.last_recorded_at))
        return start

    def revoked(self, partitions: set[int]) -> None:
        for p in partitions:
            self._next.pop(p, None)
            self._targets.pop(p, None)
            self.folder.forget(p)

    def _note_recorded(self, at: datetime) -> None:
        if self.progress.newest_recorded_at is None or at > self.progress.newest_recorded_at:
            self.progress.newest_recorded_at = at

    # -- the loop -----------------------------------------------------------------------------

    def start(self) -> None:
        self.refresh_stale()
        self.source.start(self)

    def refresh_stale(self) -> int:
        """Compute again the tallies a change of the code made stale (``BatchFolder.stale_tallies``), before
        the first batch and before a feed publishes what the store holds (``projections.feed.publishing``),
        so neither serves them. The set keeps a mark of the revision (``TALLIES_REVISION``: the tally code and
        the rules' meanings) it was checked against, so a start with the same code does not scan the tallies.
        Returns how many were computed again."""
        with self.store.transaction(self.set_id) as tx:
            if tx.tally_mark() == TALLIES_REVISION:
                return 0
            rows = self.folder.stale_tallies(tx)
            if rows:
                tx.write(Changes(tallies=rows))
            tx.set_tally_mark(TALLIES_REVISION)
        if rows:
            log.warning("%d stored tallies were computed under another meaning of their rule set and were computed again",
                        len(rows))
        return len(rows)

    def run(self, *, until_caught_up: bool = False, stop: Callable[[], bool] | None = None) -> Progress:
        """Apply batches until ``stop()`` (or, with ``until_caught_up``, until every owned partition
        reached the high watermark first seen for it, and the store holds every other partition up to
        the high watermark seen once those were done: ``projections.whole_log``). Closes the source."""
        should_stop = stop or (lambda: False)
        try:
            self.start()
            while True:
                if should_stop():
                    self.progress.stopped = "signal"
                    break
                try:
                    records = self._read(should_stop)
                except LogUnavailableError as exc:
                    self._wait_for_log(exc, should_stop)
                    continue
                if should_stop():
                    self.progress.stopped = "signal"  # the polled batch is abandoned, not half-applied
                    break
                if records:
                    if not self._apply_retrying(records, should_stop):
                        self.progress.stopped = "signal"
                        break
                self._report()
                try:
                    done = until_caught_up and self._caught_up()
                    if done:
                        self._same_log.verify()
                except LogUnavailableError as exc:
                    self._wait_for_log(exc, should_stop)
                    continue
                self._log_outage.ended()  # over when a whole round reads, not when the log answers a probe
                if done:
                    self.progress.caught_up = True
                    self.progress.stopped = "caught up"
                    break
            self._report(force=True, final=True)
        finally:
            self.source.close()
        return self.progress

    def _read(self, should_stop: Callable[[], bool]) -> list[StoredRecord]:
        """The next batch from the source, with the checks that come before applying it."""
        records = self.source.poll(self.batch_size, self.poll_timeout)
        if records and self.progress.first_records_at is None:
            self.progress.first_records_at = time.monotonic()
        if len(records) >= self.batch_size and self.catch_up_batch > self.batch_size:
            records = self._gather(records, should_stop)
        self._check_marks()
        return records

    def _wait_for_log(self, exc: LogUnavailableError, should_stop: Callable[[], bool]) -> None:
        """The log is out of reach (a broker restarting, a failover): asked again (``log_high_watermarks``),
        backing off, until a whole round reads, for ``log_retry_seconds`` from the first failure at most
        (``projections.store_outage``), then the error. What was polled and not applied is read again."""
        if not self._log_outage.ongoing:  # one outage, however many waits it takes
            self.progress.log_outages += 1
        while not should_stop():
            wait = self._log_outage.failed()
            if wait is None:
                raise exc
            self.progress.waiting_for_log = str(exc)
            self._report(force=True)
            for _ in range(steps := max(1, round(wait / 0.5))):  # a stop is heard within half a second
                if should_stop():
                    return
                self._sleep(wait / steps)
            try:
                self.source.log_high_watermarks()
            except LogUnavailableError as again:
                exc = again
                continue
            break
        self.progress.waiting_for_log = ""
        for p in self.source.assigned() & self._next.keys():
            self.source.seek(p, self._next[p])

    def _apply_retrying(self, records: list[StoredRecord], should_stop: Callable[[], bool]) -> bool:
        """Apply a batch, retrying it while the store is unreachable; False if stopped meanwhile.

        A retry is safe: nothing of a failed transaction was committed and nothing in memory moved
        (``apply`` moves the view only after its commit). Should the commit itself have landed before
        the connection broke, the retry finds the stored positions ahead and skips those records."""
        while True:
            try:
                self.apply(records)
            except StoreUnavailable as exc:
                wait = self._store_failed(exc)
                self._report(force=True)
                if should_stop():
                    return False
                self._sleep(wait)
                continue
            self._store_back()
            return True

    def _reading(self, read: Callable[[StoreReader], _T]) -> _T:
        """A read of the set outside a batch (a group's hand-over, a check of what was applied), waiting
        for the store as a batch does (``_apply_retrying``): a hand-over runs inside a poll, where an
        outage would otherwise end the runner."""
        while True:
            try:
                with self.store.reader(self.set_id) as r:
                    value = read(r)
            except StoreUnavailable as exc:
                wait = self._store_failed(exc)
                self._report(force=True)
                self._sleep(wait)
                continue
            self._store_back()
            return value

    def _store_failed(self, exc: StoreUnavailable) -> float:
        """Count the outage once, and how long to wait before the next try (``projections.store_outage``);
        the error again once the outage has lasted past ``store_retry_seconds``."""
        if not self._outage.ongoing:
            self.progress.store_outages += 1
        wait = self._outage.failed()
        if wait is None:
            raise exc
        self.progress.waiting_for_store = str(exc)
        return wait

    def _store_back(self) -> None:
        self._outage.ended()
        self.progress.waiting_for_store = ""

    def _gather(self, records: list[StoredRecord], should_stop: Callable[[], bool]) -> list[StoredRecord]:
        """Behind the log: keep polling (briefly) until ``catch_up_batch`` records are in hand."""
        deadline = time.monotonic() + self.catch_up_seconds
        paused = gc.isenabled()
        gc.disable()  # see the module docstring
        try:
            return self._gather_more(records, should_stop, deadline)
        finally:
            if paused:
                gc.enable()

    def _gather_more(self, records: list[StoredRecord], should_stop: Callable[[], bool], deadline: float) -> list[StoredRecord]:
        while len(records) < self.catch_up_batch and time.monotonic() < deadline and not should_stop():
            more = self.source.poll(min(max(self.batch_size, _CHUNK), self.catch_up_batch - len(records)), min(self.poll_timeout, 0.05))
            if not more:
                break
            records.extend(more)
        return records

    def _check_marks(self) -> None:
        """Lost log: a high watermark below a position this runner knows was applied. Partitions it
        no longer owns count too: a broker that restarted empty also breaks the group, and a runner
        left without partitions must still say so rather than wait for an assignment."""
        if self._same_log_due:
            self._same_log.verify()  # first: a log out of reach is waited for, and checked again after
            self._same_log_due = False
        while self._checks:
            check = self._checks[0]
            self._reading(lambda r: check.verify(self.codec, r.indexed_at))
            self._checks.pop(0)
        marks = self.source.high_watermarks()
        known = {p: max(self._next.get(p, 0), self._known.get(p, 0)) for p in marks}
        if any(known[p] > hw for p, hw in marks.items()):
            # A source's marks can be older than positions another runner stored since (a fetch's answer):
            # only the log asked now can say it holds fewer records than were applied.
            fresh = self.source.log_high_watermarks()
            marks = {p: max(hw, fresh.get(p, hw)) for p, hw in marks.items()}
        self.progress.high_watermarks = dict(marks)
        self.work_left.saw_marks(marks)
        for p, hw in marks.items():
            if known[p] > hw:
                raise LogLostError(p, known[p], hw)
            if p not in self._targets and p in self.source.assigned():
                self._targets[p] = hw

    def _read_last_applied(self, positions: dict[int, int], stored: dict[int, int]) -> None:
        """A log rewound and written again past a stored position (``projections.log_continuity``): the
        records are read now, and judged by ``_check_marks`` before the first batch of the partitions is
        applied, not here: a consumer group calls ``assigned`` from its rebalance, where an error would be
        logged and dropped. A source without a log of its own (a cut of another) has nothing to check."""
        log = getattr(self.source, "log", None)
        if positions and log is not None:
            # an embedded log's high watermarks cost nothing, and let each partition be read on its own
            marks = None if self.source.shares_partitions else log.high_watermarks()
            self._checks.append(LastApplied(log, positions, marks, rest=stored))

    def _caught_up(self) -> bool:
        if not self.source.ready:
            return False
        owned = self.source.assigned()
        read = self.source.positions()  # past records the log skips over (none on the embedded log)
        done = all(p in self._targets and max(self._next.get(p, 0), read.get(p, 0)) >= self._targets[p] for p in owned)
        self.progress.others_behind = {}
        if done:
            try:
                lagging = self._others_behind(owned)
            except StoreUnavailable as exc:  # as a batch would: wait for the store, within the same bound
                self._sleep(self._store_failed(exc))
                self._others.restart()  # the wait on the others starts again after the outage
                self.progress.caught_up = False
                return False
            self._store_back()
            self.progress.others_behind = lagging
            if lagging:
                try:
                    self._others.observe(lagging, getattr(self.source, "group_id", ""))
                except OthersStalled as exc:
                    raise RunnerError(str(exc)) from exc
                done = False
        self.progress.caught_up = done
        return done

    def _others_behind(self, owned: set[int]) -> dict[int, tuple[int, int]]:
        """The partitions this runner does not own that are not yet applied up to the log's high
        watermarks, as taken the first time its own were done (``projections.whole_log``)."""
        if self._log_targets is None:
            self._log_targets = self.source.log_high_watermarks()
        targets = {p: t for p, t in self._log_targets.items() if p not in owned and t > self._known.get(p, 0)}
        if not targets:
            return {}
        with self.store.reader(self.set_id) as r:
            stored = r.positions()
        return behind(targets, {p: max(self._known.get(p, 0), stored[p].next_offset) for p in targets if p in stored})

    def _report(self, force: bool = False, *, final: bool = False) -> None:
        """Progress for ``on_progress``, at most every ``progress_interval``; ``final``: the last, left
        out when the one before said the same (a short run printed its only line twice)."""
        self.progress.positions = dict(self._next)
        self.progress.assigned = self.source.assigned()
        now = time.monotonic()
        p = self.progress
        said = (p.applied, p.skipped, tuple(sorted(p.positions.items())), tuple(sorted(p.assigned or ())), p.lag_events)
        if final and said == self._last_said:
            return
        if self.on_progress is not None and (force or now - self._last_report >= self.progress_interval):
            self._last_report, self._last_said = now, said
            self.on_progress(self.progress)

    # -- one batch ----------------------------------------------------------------------------

    def apply(self, records: list[StoredRecord]) -> None:
        """Apply one polled batch in one store transaction (``ONE_TRANSACTION``), with the cyclic
        garbage collector paused (see the module docstring)."""
        paused = gc.isenabled()
        gc.disable()
        try:
            self._apply(records)
        finally:
            if paused:
                gc.enable()

    def _apply(self, records: list[StoredRecord]) -> None:
        by_part: dict[int, list[StoredRecord]] = defaultdict(list)
        for rec in records:
            by_part[rec.position.partition].append(rec)
        try:
            early = fold_early(self.store, self.set_id, self.folder, by_part, self._next) if self.early_fold else None  # before the lock
        except FoldError as exc:
            raise RunnerError(str(exc)) from exc
        try:
            claimed, changes, folded = self._apply_locked(by_part, early)
        except BaseMoved:
            claimed, changes, folded = self._apply_locked(by_part, None)  # rolled back: fold under the lock
        self._commit_local(changes, folded, claimed.skipped)  # MOVE_AFTER_COMMIT
        self._ask_definitions(folded.undefined)
        for p, off in claimed.reseek.items():
            self._next[p] = off
            self.source.seek(p, off)
        if self._left_to_others:
            self.source.others_moved(self._left_to_others)
        if self.on_commit is not None and changes:
            self.on_commit(changes, dict(self._next))

    def _apply_locked(self, by_part: dict[int, list[StoredRecord]],
                      early: EarlyFold | None) -> tuple[Claim, Changes, FoldedBatch]:
        """The batch's transaction (``ONE_TRANSACTION``): an early fold whose base still holds
        (``SAME_BASE_UNDER_LOCK``), or the claim and the fold under the lock."""
        staged = Staged(early.changes, early.rows) if early is not None else None
        with self.store.transaction(self.set_id, staged) as tx:
            stored = tx.positions()
            if early is not None:
                early.settle(tx, stored, by_part, self._next)
                claimed, changes, folded = early.claimed, early.changes, early.folded
            else:
                claimed = claim(stored, by_part, self._next)  # CHECK_UNDER_LOCK, BELOW_STORED_POSITION
                for p in claimed.stale:
                    self.folder.forget(p)  # someone else moved this partition: cached states may be stale
                try:
                    changes, folded = self.folder.fold(tx, claimed.work)
                except FoldError as exc:
                    raise RunnerError(str(exc)) from exc
            tx.write(changes)
            found = {p: stored[p].next_offset if p in stored else 0 for p in by_part}
            self._left_to_others = others_ahead(claimed, found, self._attempted)
            self._attempted = {**self._attempted, **{r.partition: r.next_offset for r in changes.positions}}  # before the commit
        self.last_base = found
        self.work_left.saw_stored({**{p: row.next_offset for p, row in stored.items()}, **{r.partition: r.next_offset for r in changes.positions}})
        return claimed, changes, folded

    def _ask_definitions(self, elections: set[str]) -> None:
        """Units of an election not yet defined were folded: have the source read the definition's
        partition next (``Source.read_first``; asked again after each such batch, so it holds until
        the definition is read or that partition has nothing more), so that the definition's batch
        tallies again only the units read so far rather than everything read before its partition's
        turn came (measured on 20,000 units over 8 Kafka partitions: 2,400 to 13,500 units, up to
        1.5 s under the set's lock, where the other runners wait)."""
        if elections:
            self.source.read_first(election_key(e) for e in sorted(elections))

    def _commit_local(self, changes: Changes, folded: FoldedBatch, skipped: int) -> None:
        for row in changes.positions:
            self._next[row.partition] = row.next_offset
            self._known[row.partition] = max(self._known.get(row.partition, 0), row.next_offset)
        self.folder.committed(folded, self.source.assigned())
        self.progress.applied += folded.applied
        self.progress.duplicates += folded.duplicates
        self.progress.skipped += skipped
        self.progress.batches += 1
        if folded.newest is not None:
            self._note_recorded(folded.newest)

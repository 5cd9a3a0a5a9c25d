"""The projection runner: consume the log, fold events into views, commit exactly once.

Exactly once, in four rules:

1. **One transaction per batch.** A batch's unit states, tallies, election states, event-index rows
   (which double as the processed-id set) and the new log positions are written in one store
   transaction. A crash before the commit leaves the store as it was; after it, everything is there.
2. **Positions come from the store.** On start and on every (re)assignment a partition is read from
   the position stored with the view, never from a broker's committed offset.
3. **Check under the lock.** Inside the transaction, which holds the set's lock, the batch re-reads
   the stored position of each of its partitions. Records below it were applied by someone else
   (another runner after a rebalance) and are skipped; a gap above it means our read position is
   stale, so the partition is re-sought and its records wait for the next batch. If the stored
   position is not the one this runner last wrote, its cached unit states for that partition may be
   stale and are dropped (reloaded from the store).
4. **Dedupe by event id.** An event whose id the set already holds (a producer retry that landed at
   another offset) advances the position but changes nothing.

Identity: a unit is (election id, unit id); a log may hold elections whose unit ids overlap, so every
cache, fold and row here is keyed by both. An event that names no election (a submission refused
before it could be attributed) is indexed (dedupe, the audit's list) and folded into nothing.

Election-wide events (the definition, certification) sit in their own partition, in no order with
the units. A unit's tally is computed from the unit's state and the election state as committed
when the unit's batch commits (read under the lock); a batch that changes an election recomputes
every unit of that election from the stored unit states. Since commits are serialised, every
tally ends up computed against the latest election state, whichever runner saw what first.

Memory holds the unit states of the partitions this runner owns and one parsed definition per
election: bounded by the number of units, not by the number of events.
"""

from __future__ import annotations

import gc
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ledger.codec import Codec, CodecError, default_codec
from ledger.events import Event
from ledger.log.port import LogLostError, StoredRecord
from ledger.timestamps import iso_text
from projections.reducers import (
    ElectionState,
    UnitFold,
    UnitState,
    apply_election,
)
from projections.sources import Source
from projections.stores.port import (
    Changes,
    ElectionRow,
    EventRow,
    PositionRow,
    ProjectionStore,
    StoreReader,
    StoreTx,
    StoreUnavailable,
    TallyRow,
    UnitKey,
    UnitRow,
)
from projections.tally import ElectionContext, compute_unit_tally, context_key, election_context

__all__ = ["RunnerError", "Progress", "ProjectionRunner", "tally_row"]

_CHUNK = 2000
"""Records decoded and folded at a time within a batch."""


class RunnerError(RuntimeError):
    """The runner cannot go on (an undecodable record, a store that refuses a write)."""


@dataclass
class Progress:
    """What the runner has done in this session and how far behind the log it is."""

    applied: int = 0
    duplicates: int = 0
    skipped: int = 0
    batches: int = 0
    started: float = field(default_factory=time.monotonic)
    first_records_at: float | None = None
    positions: dict[int, int] = field(default_factory=dict)
    high_watermarks: dict[int, int] = field(default_factory=dict)
    assigned: set[int] = field(default_factory=set)
    newest_recorded_at: datetime | None = None
    caught_up: bool = False
    stopped: str = ""
    store_outages: int = 0
    waiting_for_store: str = ""

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def rate(self) -> float:
        """Events applied per second since the first records arrived: start-up and a group join are
        left out, reading the log is not (it is part of the work, as in the read-only ceiling)."""
        if self.first_records_at is None:
            return 0.0
        span = time.monotonic() - self.first_records_at
        return self.applied / span if span > 0 else 0.0

    @property
    def lag_events(self) -> int | None:
        if not self.assigned:
            return 0
        if any(p not in self.high_watermarks for p in self.assigned):
            return None
        return sum(max(0, self.high_watermarks[p] - self.positions.get(p, 0)) for p in self.assigned)

    def lag_seconds(self, now: datetime | None = None) -> float | None:
        if self.newest_recorded_at is None:
            return None
        return ((now or datetime.now(UTC)) - self.newest_recorded_at).total_seconds()

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "duplicates_dropped": self.duplicates,
            "skipped_already_applied": self.skipped,
            "batches": self.batches,
            "elapsed_s": round(self.elapsed, 3),
            "events_per_s": round(self.rate, 1),
            "positions": {str(p): o for p, o in sorted(self.positions.items())},
            "high_watermarks": {str(p): o for p, o in sorted(self.high_watermarks.items())},
            "assigned": sorted(self.assigned),
            "lag_events": self.lag_events,
            "lag_seconds": None if self.lag_seconds() is None else round(self.lag_seconds() or 0.0, 3),
            "newest_recorded_at": None if self.newest_recorded_at is None else self.newest_recorded_at.isoformat(),
            "caught_up": self.caught_up,
            "stopped": self.stopped,
            "store_outages": self.store_outages,
            "waiting_for_store": self.waiting_for_store,
        }


def tally_row(state: UnitState, ctx: ElectionContext) -> TallyRow:
    t = compute_unit_tally(state, ctx)
    return TallyRow(state.unit_id, state.election_id, t.county_id, t.status, ctx.key, t.dumps())


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
        store_retry_seconds: float = 300.0,
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
        """While behind the log (a poll came back full), polls are gathered into one transaction of up
        to this many records (or ``catch_up_seconds`` of polling): a rebuild then computes each unit's
        tally once per large batch instead of once per poll. 0 (default): one poll per transaction.
        Memory grows with this bound (the records, not their decoded events: those are folded
        ``_CHUNK`` at a time), never with the log. ``caucus replay`` uses 200,000 (about 100 MB of records at
        the 2020 Iowa event size)."""
        self.catch_up_seconds = catch_up_seconds
        self.store_retry_seconds = store_retry_seconds
        """How long a batch is retried while the store is unreachable (a database restart) before the
        runner gives up with the store's error."""
        self._sleep = sleep
        self.on_commit = on_commit
        """Called after each batch's transaction committed, with what it changed and the positions
        this runner now stands at (the results feed publishes from here; see projections.feed)."""
        self.progress = Progress()
        self._next: dict[int, int] = {}
        self._known: dict[int, int] = {}  # the highest stored position seen per partition, kept when revoked
        self._targets: dict[int, int] = {}
        self._units: dict[UnitKey, UnitState] = {}
        self._tally_hashes: dict[UnitKey, int] = {}  # of the stored tally text, to skip unchanged writes
        self._units_of: dict[int, set[UnitKey]] = defaultdict(set)
        self._contexts: dict[str, ElectionContext] = {}
        self._elections: dict[str, ElectionState] = {}
        self._last_report = 0.0

    # -- assignment ---------------------------------------------------------------------------

    def assigned(self, partitions: set[int]) -> dict[int, int]:
        with self.store.reader(self.set_id) as r:
            stored = r.positions()
        start: dict[int, int] = {}
        for p in partitions:
            row = stored.get(p)
            start[p] = row.next_offset if row else 0
            self._next[p] = start[p]
            self._known[p] = max(self._known.get(p, 0), start[p])
            self._targets.pop(p, None)
            self._forget(p)
            if row and row.last_recorded_at:
                self._note_recorded(datetime.fromisoformat(row.last_recorded_at))
        return start

    def revoked(self, partitions: set[int]) -> None:
        for p in partitions:
            self._next.pop(p, None)
            self._targets.pop(p, None)
            self._forget(p)

    def _forget(self, partition: int) -> None:
        for key in self._units_of.pop(partition, set()):
            self._units.pop(key, None)
            self._tally_hashes.pop(key, None)

    def _note_recorded(self, at: datetime) -> None:
        if self.progress.newest_recorded_at is None or at > self.progress.newest_recorded_at:
            self.progress.newest_recorded_at = at

    # -- the loop -----------------------------------------------------------------------------

    def start(self) -> None:
        self.source.start(self)

    def run(self, *, until_caught_up: bool = False, stop: Callable[[], bool] | None = None) -> Progress:
        """Apply batches until ``stop()`` (or, with ``until_caught_up``, until every owned partition
        reached the high watermark first seen for it). Always closes the source."""
        should_stop = stop or (lambda: False)
        try:
            self.start()
            while True:
                if should_stop():
                    self.progress.stopped = "signal"
                    break
                records = self.source.poll(self.batch_size, self.poll_timeout)
                if records and self.progress.first_records_at is None:
                    self.progress.first_records_at = time.monotonic()
                if len(records) >= self.batch_size and self.catch_up_batch > self.batch_size:
                    records = self._gather(records, should_stop)
                self._check_marks()
                if should_stop():
                    self.progress.stopped = "signal"  # the polled batch is abandoned, not half-applied
                    break
                if records:
                    if not self._apply_retrying(records, should_stop):
                        self.progress.stopped = "signal"
                        break
                self._report()
                if until_caught_up and self._caught_up():
                    self.progress.caught_up = True
                    self.progress.stopped = "caught up"
                    break
            self._report(force=True)
        finally:
            self.source.close()
        return self.progress

    def _apply_retrying(self, records: list[StoredRecord], should_stop: Callable[[], bool]) -> bool:
        """Apply a batch, retrying it while the store is unreachable; False if stopped meanwhile.

        A retry is safe: nothing of a failed transaction was committed and nothing in memory moved
        (``apply`` moves the view only after its commit). Should the commit itself have landed before
        the connection broke, the retry finds the stored positions ahead and skips those records."""
        delay = 0.2
        deadline: float | None = None
        while True:
            try:
                self.apply(records)
            except StoreUnavailable as exc:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.store_retry_seconds
                    self.progress.store_outages += 1
                if now >= deadline:
                    raise
                self.progress.waiting_for_store = str(exc)
                self._report(force=True)
                if should_stop():
                    return False
                self._sleep(min(delay, max(0.0, deadline - now)))
                delay = min(delay * 2, 5.0)
                continue
            self.progress.waiting_for_store = ""
            return True

    def _gather(self, records: list[StoredRecord], should_stop: Callable[[], bool]) -> list[StoredRecord]:
        """Behind the log: keep polling (briefly) until ``catch_up_batch`` records are in hand."""
        deadline = time.monotonic() + self.catch_up_seconds
        paused = gc.isenabled()
        gc.disable()  # see ``apply``
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
        marks = self.source.high_watermarks()
        self.progress.high_watermarks = dict(marks)
        for p, hw in marks.items():
            known = max(self._next.get(p, 0), self._known.get(p, 0))
            if known > hw:
                raise LogLostError(p, known, hw)
            if p not in self._targets and p in self.source.assigned():
                self._targets[p] = hw

    def _caught_up(self) -> bool:
        if not self.source.ready:
            return False
        owned = self.source.assigned()
        read = self.source.positions()  # past records the log skips over (none on the embedded log)
        done = all(p in self._targets and max(self._next.get(p, 0), read.get(p, 0)) >= self._targets[p] for p in owned)
        self.progress.caught_up = done
        return done

    def _report(self, force: bool = False) -> None:
        self.progress.positions = dict(self._next)
        self.progress.assigned = self.source.assigned()
        now = time.monotonic()
        if self.on_progress is not None and (force or now - self._last_report >= self.progress_interval):
            self._last_report = now
            self.on_progress(self.progress)

    # -- one batch ----------------------------------------------------------------------------

    def apply(self, records: list[StoredRecord]) -> None:
        """Apply one polled batch in one store transaction (see module docstring).

        The cyclic garbage collector is paused for the batch: a batch allocates millions of objects
        that reference counting frees (events, rows and states hold no cycles), and with a large
        batch's records alive every collection walks them all again (a third of a rebuild's time)."""
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
        reseek: dict[int, int] = {}
        with self.store.transaction(self.set_id) as tx:
            stored = tx.positions()
            work: list[StoredRecord] = []
            skipped = 0
            for p, recs in by_part.items():
                start = stored[p].next_offset if p in stored else 0
                ours = self._next.get(p) == start
                if not ours:
                    self._forget(p)  # someone else moved this partition: cached states may be stale
                keep = [r for r in recs if r.position.offset >= start]
                skipped += len(recs) - len(keep)
                if not keep or (not ours and keep[0].position.offset != start):
                    # All applied elsewhere, or our read position is not where the store says the
                    # view stands: read again from the stored position. (When we wrote the stored
                    # position ourselves, a gap is the log's own, e.g. a transaction marker.)
                    reseek[p] = start
                    continue
                work.extend(keep)
            changes, stats = self._fold(tx, work)
            tx.write(changes)
        # Committed: now (and only now) the in-memory view moves.
        self._commit_local(changes, stats, skipped)
        for p, off in reseek.items():
            self._next[p] = off
            self.source.seek(p, off)
        if self.on_commit is not None and changes:
            self.on_commit(changes, dict(self._next))

    def _election_state(self, tx: StoreReader, election_id: str, revisions: dict[str, str]) -> ElectionState | None:
        """The committed state of an election, parsed once per revision."""
        rev = revisions.get(election_id)
        if rev is None:
            return None
        cached = self._elections.get(election_id)
        if cached is not None and cached.revision == rev:
            return cached
        row = tx.elections().get(election_id)
        state = ElectionState.loads(row.state) if row else None
        if state is not None:
            self._elections[election_id] = state
        return state

    def _context(self, state: ElectionState | None, election_id: str) -> ElectionContext:
        ctx = self._contexts.get(election_id)
        if ctx is None or ctx.state.revision != (state.revision if state else None):
            ctx = election_context(state, election_id, rule_set=self.rule_set)
            self._contexts[election_id] = ctx
        return ctx

    def _fold(self, tx: StoreTx, records: list[StoredRecord]) -> tuple[Changes, _Folded]:
        """Fold a batch's records into changed rows. Records are decoded, entered in the event index
        (which answers which were applied before) and folded ``_CHUNK`` at a time, all inside the
        batch's transaction: a large catch-up batch never holds its decoded events, only the states
        of the units it touched. Each unit's events are folded into one ``UnitFold`` for the whole
        batch, whose state is built once, after the last chunk."""
        changes = Changes()
        folded = _Folded()
        if not records:
            return changes, folded
        revisions = tx.election_revisions()
        units = folded.units
        elections = folded.elections
        last: dict[int, tuple[int, datetime]] = {}
        waiting: tuple[_Chunk, Callable[[], set[str]]] | None = None
        for at in range(0, len(records), _CHUNK):
            chunk = self._decode_chunk(records[at : at + _CHUNK], last, folded)
            # The previous chunk's index answer has been computed while this chunk was decoded.
            if waiting is not None:
                self._fold_chunk(tx, *waiting, folded, revisions)
            waiting = (chunk, tx.index_begin(chunk.rows))
        if waiting is not None:
            self._fold_chunk(tx, *waiting, folded, revisions)
        units.update((key, (p, fold.state())) for key, (p, fold) in folded.folds.items())
        folded.folds.clear()
        positions = {p: PositionRow(p, off + 1, at.isoformat()) for p, (off, at) in last.items()}
        changes.positions = list(positions.values())
        changes.elections = [ElectionRow(e, s.revision or "", s.dumps()) for e, s in elections.items()]
        changes.units = [UnitRow(st.unit_id, st.election_id, p, st.dumps()) for p, st in units.values()]

        def context(eid: str) -> ElectionContext:
            state = elections[eid] if eid in elections else self._election_state(tx, eid, revisions)
            return self._context(state, eid)

        tallies: dict[UnitKey, TallyRow] = {}
        for key, (_, st) in units.items():
            row = tally_row(st, context(st.election_id))
            digest = hash((row.context, row.tally))
            folded.tally_hashes[key] = digest
            if self._tally_hashes.get(key) != digest:  # e.g. a toss for a tie this result does not have
                tallies[key] = row
        for eid in elections:
            before_key = context_key(self._election_state(tx, eid, revisions), self.rule_set)
            ctx = context(eid)
            if ctx.key != before_key:  # the definition, certification or rule set changed
                tallies.update(self._recompute_election(tx, ctx, skip=units))
        changes.tallies = list(tallies.values())
        return changes, folded

    def _decode_chunk(self, records: list[StoredRecord], last: dict[int, tuple[int, datetime]], folded: _Folded) -> _Chunk:
        """Decode a chunk and group it as the fold wants it, in the same pass: its index rows, each
        unit's run of events, the election-wide events. ``last`` (each partition's last offset and
        time) carries over between chunks. This loop runs once per event of a rebuild, so it binds
        what it calls to local names.

        An event id met twice within the chunk (a retry the log holds twice) is dropped here: the
        index takes no repeated id in one call. A repeat in a later chunk of the batch needs no
        memory of ours: every earlier chunk's rows are in the index, in this transaction, before
        that chunk's rows are looked up, so the index reports it as held."""
        rows: list[EventRow] = []
        runs: dict[UnitKey, tuple[int, list[Event[Any]]]] = {}
        elections: list[Event[Any]] = []
        newest: datetime | None = None
        done: set[str] = set()
        decode, seen, add_row, add_election = self.codec.decode, done.add, rows.append, elections.append
        new_row = tuple.__new__  # an EventRow without its Python-level __new__ (NamedTuple)
        duplicates = 0
        rec: StoredRecord | None = None
        try:
            for rec in records:
                ev = decode(rec.value)
                env = ev.envelope
                event_id, at = env.event_id, env.recorded_at
                pos = rec.position
                p = pos.partition
                last[p] = (pos.offset, at)
                if event_id in done:
                    duplicates += 1
                    continue
                seen(event_id)
                eid, uid = env.election_id, env.unit_id
                add_row(new_row(EventRow, (event_id, uid or f"election:{eid}", eid, p, pos.offset, ev.payload.TYPE, iso_text(at))))
                if newest is None or at > newest:
                    newest = at
                if not uid:  # an election-wide event (``is_election_event``)
                    if eid:
                        add_election(ev)
                elif not eid:
                    pass  # attributed to no election (``is_unattributed``): indexed and shown, never folded
                elif (eid, uid) in runs:
                    runs[eid, uid][1].append(ev)
                else:
                    runs[eid, uid] = (p, [ev])
        except CodecError as exc:
            assert rec is not None
            raise RunnerError(f"the record at {rec.position} (key {rec.key!r}) cannot be decoded: {exc}") from exc
        folded.duplicates += duplicates
        return _Chunk(rows, runs, elections, newest)

    def _fold_chunk(self, tx: StoreTx, chunk: _Chunk, held_of: Callable[[], set[str]], folded: _Folded,
                    revisions: dict[str, str]) -> None:
        """Fold a chunk's events, less those the index already held (applied by an earlier batch: a
        producer retry at another offset). A unit's events in the chunk go into its fold in one step."""
        held = held_of()
        folded.indexed += len(chunk.rows) - len(held)
        if held:
            chunk = chunk.without(held)
            folded.duplicates += len(held)
        folds, elections, cached = folded.folds, folded.elections, self._units
        for ev in chunk.elections:
            eid = ev.envelope.election_id
            before = elections[eid] if eid in elections else self._election_state(tx, eid, revisions)
            elections[eid] = apply_election(before, ev)
        runs = chunk.runs
        missing = runs.keys() - cached.keys() - folds.keys()
        loaded = {key: UnitState.loads(row.state) for key, row in tx.unit_states(missing).items()} if missing else {}
        for key, (p, run) in runs.items():
            if key in folds:
                folds[key][1].add(run)
            else:
                folds[key] = (p, UnitFold(cached.get(key) or loaded.get(key)).add(run))
        folded.applied += len(chunk.rows)
        if chunk.newest is not None and (folded.newest is None or chunk.newest > folded.newest):
            folded.newest = chunk.newest

    def _recompute_election(self, tx: StoreReader, ctx: ElectionContext, skip: dict[UnitKey, Any]) -> dict[UnitKey, TallyRow]:
        """Every stored unit of the election against its new context; only changed tallies."""
        existing = tx.tallies(election_id=ctx.election_id)
        out: dict[UnitKey, TallyRow] = {}
        for key, row in tx.unit_states(election_id=ctx.election_id).items():
            if key in skip:
                continue
            new = tally_row(UnitState.loads(row.state), ctx)
            old = existing.get(key)
            if old is None or old.tally != new.tally or old.context != new.context:
                out[key] = new
        return out

    def _commit_local(self, changes: Changes, folded: _Folded, skipped: int) -> None:
        for row in changes.positions:
            self._next[row.partition] = row.next_offset
            self._known[row.partition] = max(self._known.get(row.partition, 0), row.next_offset)
        owned = self.source.assigned()
        for key, (p, st) in folded.units.items():
            if p in owned:
                self._units[key] = st
                self._units_of[p].add(key)
                self._tally_hashes[key] = folded.tally_hashes[key]
        self._elections.update(folded.elections)
        self.progress.applied += folded.applied
        self.progress.duplicates += folded.duplicates
        self.progress.skipped += skipped
        self.progress.batches += 1
        if folded.newest is not None:
            self._note_recorded(folded.newest)


@dataclass(slots=True)
class _Chunk:
    """A decoded chunk as the fold takes it (see ``ProjectionRunner._decode_chunk``)."""

    rows: list[EventRow]
    runs: dict[UnitKey, tuple[int, list[Event[Any]]]]
    elections: list[Event[Any]]
    newest: datetime | None

    def without(self, held: set[str]) -> _Chunk:
        """The chunk less the events the index already held. Rare (a producer retry that landed at
        another offset), so the grouping is simply redone."""
        runs: dict[UnitKey, tuple[int, list[Event[Any]]]] = {}
        for key, (p, run) in self.runs.items():
            keep = [ev for ev in run if ev.event_id not in held]
            if keep:
                runs[key] = (p, keep)
        elections = [ev for ev in self.elections if ev.event_id not in held]
        times = [ev.recorded_at for ev in elections] + [ev.recorded_at for _, run in runs.values() for ev in run]
        return _Chunk([r for r in self.rows if r.event_id not in held], runs, elections, max(times, default=None))


@dataclass
class _Folded:
    """What one batch did, kept apart until its transaction commits."""

    applied: int = 0
    duplicates: int = 0
    indexed: int = 0
    newest: datetime | None = None
    folds: dict[UnitKey, tuple[int, UnitFold]] = field(default_factory=dict)  # while the batch's chunks are folded
    units: dict[UnitKey, tuple[int, UnitState]] = field(default_factory=dict)  # then the states they built
    elections: dict[str, ElectionState] = field(default_factory=dict)
    tally_hashes: dict[UnitKey, int] = field(default_factory=dict)

"""The batch folder: a batch's records turned into the rows its store transaction writes (decode, index,
fold, tally), apart from the loop that polls, retries and reports (``projections.runner``), so the fold
can be tested alone on any store, the in-memory one included.

Identity: a unit is (election id, unit id); a log may hold elections whose unit ids overlap, so every
cache, fold and row here is keyed by both. An event that names no election (a submission refused
before it could be attributed) is indexed (dedupe, the audit's list) and folded into nothing.

Election-wide events (the definition, certification) sit in their own partition, in no order with
the units. A unit's tally is computed from the unit's state and the election state as committed
when the unit's batch commits (read under the lock); a batch that changes an election recomputes
every unit of that election from the stored unit states. Since commits are serialised, every
tally ends up computed against the latest election state, whichever runner saw what first.

Memory holds the unit states of the partitions the runner owns and one parsed definition per
election: bounded by the number of units, not by the number of events. The caches move only when the
runner says a batch committed (``committed``; ``exactly_once.MOVE_AFTER_COMMIT``) and are dropped per
partition when it is reassigned or someone else moved it (``forget``).

Speed (a rebuild runs the decode loop once per event): results are decoded with their payload
deferred (``DEFERRED``; only a unit's standing result is built), the event index is written while the next
chunk is decoded (``FoldTx.index_begin``: the adapters overlap the I/O on a thread of their own), index
rows are built with ``tuple.__new__``, and a unit's events of the whole batch go into one ``UnitFold``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ledger.codec import Codec, CodecError
from ledger.events import Event, ResultCorrected, ResultReported
from ledger.log.port import StoredRecord
from ledger.timestamps import iso_texts
from projections.reducers import ElectionState, UnitFold, UnitState, apply_election
from projections.stores.port import (
    Changes,
    ElectionRow,
    EventRow,
    PositionRow,
    TallyRow,
    UnitKey,
    UnitRow,
)
from projections.tally import ElectionContext, compute_unit_tally, context_key, election_context
from projections.unit_history import RunBounds, history_rows

__all__ = ["FoldError", "ElectionInBatch", "FoldTx", "BatchFolder", "FoldedBatch", "Chunk", "tally_row", "DEFAULT_CHUNK"]

DEFAULT_CHUNK = 2000
"""Records decoded and folded at a time within a batch."""

DEFERRED = frozenset({ResultReported.TYPE, ResultCorrected.TYPE})
"""The events decoded with their payload deferred (``Codec.decode_deferred``): a unit's fold reads the
payload of the last of them only, and a rebuild is mostly these."""


class FoldError(RuntimeError):
    """A record cannot be folded (it does not decode)."""


class ElectionInBatch(Exception):
    """A fold asked to leave elections alone met an election's event (its id is the argument)."""


class FoldTx(Protocol):
    """What the fold needs of a store transaction: the committed state it folds onto, and the index
    (``StoreTx`` provides it; see ``projections.stores.port`` for each call's promise)."""

    def election_revisions(self) -> dict[str, str]: ...

    def elections(self) -> dict[str, ElectionRow]: ...

    def unit_states(self, keys: Iterable[UnitKey] | None = None, *, election_id: str | None = None) -> dict[UnitKey, UnitRow]: ...

    def tallies(
        self, *, election_id: str | None = None, county_id: str | None = None, keys: Iterable[UnitKey] | None = None
    ) -> dict[UnitKey, TallyRow]: ...

    def index_begin(self, rows: Sequence[EventRow]) -> Callable[[], set[str]]: ...


def tally_row(state: UnitState, ctx: ElectionContext) -> TallyRow:
    t = compute_unit_tally(state, ctx)
    return TallyRow(state.unit_id, state.election_id, t.county_id, t.status, ctx.key, t.dumps(), t)


@dataclass(slots=True)
class Chunk:
    """A decoded chunk as the fold takes it (see ``BatchFolder.decode_chunk``)."""

    rows: list[EventRow]
    runs: dict[UnitKey, tuple[int, list[Event[Any]]]]
    elections: list[Event[Any]]
    newest: datetime | None

    def without(self, held: set[str]) -> Chunk:
        """``exactly_once.HELD_BY_INDEX``: the chunk less the events the index already held. Rare (a
        producer retry that landed at another offset), so the grouping is simply redone."""
        runs: dict[UnitKey, tuple[int, list[Event[Any]]]] = {}
        for key, (p, run) in self.runs.items():
            keep = [ev for ev in run if ev.event_id not in held]
            if keep:
                runs[key] = (p, keep)
        elections = [ev for ev in self.elections if ev.event_id not in held]
        times = [ev.recorded_at for ev in elections] + [ev.recorded_at for _, run in runs.values() for ev in run]
        return Chunk([r for r in self.rows if r.event_id not in held], runs, elections, max(times, default=None))


@dataclass
class FoldedBatch:
    """What one batch did, kept apart until its transaction commits."""

    applied: int = 0
    duplicates: int = 0
    indexed: int = 0
    newest: datetime | None = None
    folds: dict[UnitKey, tuple[int, UnitFold]] = field(default_factory=dict)  # while the batch's chunks are folded
    units: dict[UnitKey, tuple[int, UnitState]] = field(default_factory=dict)  # then the states they built
    elections: dict[str, ElectionState] = field(default_factory=dict)
    tally_hashes: dict[UnitKey, int] = field(default_factory=dict)
    bounds: RunBounds = field(default_factory=RunBounds)  # where its events of each unit lie (the history)
    undefined: set[str] = field(default_factory=set)
    """Elections whose units the batch folded while neither the store nor the batch held their
    definition: when it comes, every such unit is tallied again (``ProjectionRunner`` then asks the
    source to read the definition's partition first)."""


class BatchFolder:
    """Folds batches of one projection set (see module docstring). ``rule_set``: the set's rule set
    (None: each election's own); ``chunk``: records decoded and folded at a time."""

    def __init__(self, codec: Codec, *, rule_set: str | None = None, chunk: int = DEFAULT_CHUNK) -> None:
        self.codec = codec
        self.rule_set = rule_set
        self.chunk = chunk
        self._units: dict[UnitKey, UnitState] = {}
        self._tally_hashes: dict[UnitKey, int] = {}  # of the stored tally text, to skip unchanged writes
        self._units_of: dict[int, set[UnitKey]] = defaultdict(set)
        self._contexts: dict[str, ElectionContext] = {}
        self._elections: dict[str, ElectionState] = {}

    # -- the caches ---------------------------------------------------------------------------

    def forget(self, partition: int) -> None:
        """Drop what is cached of a partition's units (reassigned, or moved by someone else)."""
        for key in self._units_of.pop(partition, set()):
            self._units.pop(key, None)
            self._tally_hashes.pop(key, None)

    def committed(self, folded: FoldedBatch, owned: set[int]) -> None:
        """The batch's transaction committed: keep the states it built, for the partitions still owned."""
        for key, (p, st) in folded.units.items():
            if p in owned:
                self._units[key] = st
                self._units_of[p].add(key)
                self._tally_hashes[key] = folded.tally_hashes[key]
        self._elections.update(folded.elections)

    # -- one batch ----------------------------------------------------------------------------

    def fold(self, tx: FoldTx, records: list[StoredRecord], *, elections: bool = True) -> tuple[Changes, FoldedBatch]:
        """Fold a batch's records into changed rows. Records are decoded, entered in the event index
        (which answers which were applied before) and folded ``chunk`` at a time, inside the batch's
        transaction or on a snapshot before it (``projections.early_fold``): a large catch-up batch
        never holds its decoded events, only the states of the units it touched. Each unit's events
        are folded into one ``UnitFold`` for the whole batch, whose state is built once, after the
        last chunk. ``elections=False``: raise ``ElectionInBatch`` at the first chunk holding an
        election's event (an early fold is thrown away for those: stop before folding the rest)."""
        changes = Changes()
        folded = FoldedBatch()
        if not records:
            return changes, folded
        revisions = tx.election_revisions()
        units = folded.units
        changed = folded.elections
        last: dict[int, tuple[int, datetime]] = {}
        waiting: tuple[Chunk, Callable[[], set[str]]] | None = None
        for at in range(0, len(records), self.chunk):
            chunk = self.decode_chunk(records[at : at + self.chunk], last, folded)
            if chunk.elections and not elections:
                raise ElectionInBatch(chunk.elections[0].event_id)
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
        changes.elections = [ElectionRow(e, s.revision or "", s.dumps()) for e, s in changed.items()]
        changes.units = [UnitRow(st.unit_id, st.election_id, p, st.dumps(), st.events) for p, st in units.values()]
        changes.history = history_rows(folded.bounds, changes.units, changes.elections)

        def context(eid: str) -> ElectionContext:
            state = changed[eid] if eid in changed else self._election_state(tx, eid, revisions)
            return self._context(state, eid)

        tallies: dict[UnitKey, TallyRow] = {}
        for key, (_, st) in units.items():
            row = tally_row(st, context(st.election_id))
            digest = hash((row.context, row.tally))
            folded.tally_hashes[key] = digest
            if self._tally_hashes.get(key) != digest:  # e.g. a toss for a tie this result does not have
                tallies[key] = row
        for eid in changed:
            before_key = context_key(self._election_state(tx, eid, revisions), self.rule_set)
            ctx = context(eid)
            if ctx.key != before_key:  # the definition, certification or rule set changed
                tallies.update(self._recompute_election(tx, ctx, skip=units))
        changes.tallies = list(tallies.values())
        folded.undefined = {e for e in {st.election_id for _, st in units.values()} if context(e).state.definition is None}
        return changes, folded

    def _election_state(self, tx: FoldTx, election_id: str, revisions: dict[str, str]) -> ElectionState | None:
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

    def decode_chunk(self, records: list[StoredRecord], last: dict[int, tuple[int, datetime]], folded: FoldedBatch) -> Chunk:
        """Decode a chunk and group it as the fold wants it: its index rows, each unit's run of
        events, the election-wide events. ``last`` (each partition's last offset and time) carries
        over between chunks. This loop runs once per event of a rebuild, so it binds what it calls to
        local names, decodes the chunk in one call (``Codec.decode_deferred_all``) and formats the
        index rows' times in one (``iso_texts``).

        ``exactly_once.REPEAT_IN_CHUNK``: an event id met twice within the chunk is dropped here. A
        repeat in a later chunk of the batch needs no memory of ours (``HELD_BY_INDEX``)."""
        events = self._decode_all(records)
        runs: dict[UnitKey, tuple[int, list[Event[Any]]]] = {}
        elections: list[Event[Any]] = []
        heads: list[tuple[str, str, str, int, int, str]] = []  # the index rows but their times
        ats: list[datetime] = []
        done: set[str] = set()
        seen, add_head, add_at, add_election = done.add, heads.append, ats.append, elections.append
        duplicates = 0
        for rec, ev in zip(records, events):
            env = ev.envelope
            event_id = env.event_id
            if event_id in done:
                duplicates += 1
                continue
            seen(event_id)
            pos = rec.position
            p = pos.partition
            eid, uid = env.election_id, env.unit_id
            add_head((event_id, uid or f"election:{eid}", eid, p, pos.offset, ev.type))
            add_at(env.recorded_at)
            if not uid:  # an election-wide event (``is_election_event``)
                if eid:
                    add_election(ev)
            elif not eid:
                pass  # attributed to no election (``is_unattributed``): indexed and shown, never folded
            else:
                run = runs.get((eid, uid))
                if run is None:
                    runs[eid, uid] = (p, [ev])
                else:
                    run[1].append(ev)
        for p, i in {rec.position.partition: i for i, rec in enumerate(records)}.items():
            last[p] = (records[i].position.offset, events[i].envelope.recorded_at)
        new_row = tuple.__new__  # an EventRow without its Python-level __new__ (NamedTuple)
        rows = [new_row(EventRow, head + (text,)) for head, text in zip(heads, iso_texts(ats))]
        folded.duplicates += duplicates
        return Chunk(rows, runs, elections, max(ats) if ats else None)

    def _decode_all(self, records: list[StoredRecord]) -> list[Event[Any]]:
        """The chunk's events, payloads deferred (``DEFERRED``); a record that does not decode is
        named by its position (found again one by one: the chunk is refused anyway)."""
        decode = self.codec.decode_deferred
        try:
            return self.codec.decode_deferred_all([rec.value for rec in records], DEFERRED)
        except CodecError:
            for rec in records:
                try:
                    decode(rec.value, DEFERRED)
                except CodecError as exc:
                    raise FoldError(f"the record at {rec.position} (key {rec.key!r}) cannot be decoded: {exc}") from exc
            raise

    def _fold_chunk(self, tx: FoldTx, chunk: Chunk, held_of: Callable[[], set[str]], folded: FoldedBatch,
                    revisions: dict[str, str]) -> None:
        """Fold a chunk's events, less those the index already held (``HELD_BY_INDEX``). A unit's
        events in the chunk go into its fold in one step."""
        held = held_of()
        folded.indexed += len(chunk.rows) - len(held)
        if held:
            chunk = chunk.without(held)
            folded.duplicates += len(held)
        folded.bounds.note(chunk.rows)
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

    def stale_tallies(self, tx: FoldTx) -> list[TallyRow]:
        """Every stored tally computed again, keeping only the rows that differ. A fold recomputes an
        election when its context changes within the log; this catches what a change of the code made
        stale, which no event announces (a rule set's name that came to mean another reading, or tally
        code that computes another tally, ``TALLY_CODE``). The runner calls it once per revision of the
        code (``ProjectionRunner.refresh_stale``)."""
        out: list[TallyRow] = []
        for eid, row in tx.elections().items():
            ctx = self._context(ElectionState.loads(row.state), eid)
            out.extend(self._recompute_election(tx, ctx, skip={}).values())
        return out

    def _recompute_election(self, tx: FoldTx, ctx: ElectionContext, skip: dict[UnitKey, Any]) -> dict[UnitKey, TallyRow]:
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

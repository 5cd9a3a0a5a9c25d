"""What a projection store must do, independent of the database behind it.

Why this shape:

* **Exactly once.** A runner commits a batch's view changes, its log positions and the ids of the
  events it processed in one transaction (``ProjectionStore.transaction``). Inside that transaction
  it reads the stored positions and processed ids under a lock, so two runners (a Kafka rebalance,
  an operator starting a second one by mistake) can never both apply the same record.
* **Versioned sets.** Every row belongs to a *projection set* (``set_id``). A set has a name
  (``tally``), a version, a state (``building``, ``serving``, ``retired``) and the parameters it was
  built with (log, rule set). Readers resolve the serving set of a name through one row
  (``serving``); ``promote`` switches that row in one transaction. So a rebuild (``caucus replay``)
  builds version N+1 while version N serves, then switches atomically, and the old set can be
  dropped later.
* **Only what changed.** ``Changes`` carries the rows a batch changed, nothing else; adapters write
  them in bulk.

The processed-event ids and the event index are one table: a row per processed event (its id,
the unit it touched, where it sits in the log, its type and time). The id is its primary key,
which is the dedupe; the (election, unit, position) index finds a unit's paper trail. Units are
identified by (election id, unit id) everywhere: one log may hold elections whose unit ids overlap.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

__all__ = [
    "finished_params",
    "not_building",
    "StoreError",
    "StoreUnavailable",
    "SetNotFound",
    "StoreMissing",
    "SetInfo",
    "UnitKey",
    "UnitRow",
    "TallyRow",
    "ElectionRow",
    "EventRow",
    "PositionRow",
    "HistoryRow",
    "Changes",
    "StoreReader",
    "StoreTx",
    "ProjectionStore",
    "FeedFence",
    "admitted",
    "SET_STATES",
]

SET_STATES = ("building", "serving", "retired")


class StoreError(RuntimeError):
    """The store cannot do what was asked (with the reason spelled out)."""


class StoreUnavailable(StoreError):
    """The database could not be reached (a restart, a network cut). Nothing of the interrupted
    transaction was committed, so the caller may retry it; the store reconnects on the next call."""


class StoreMissing(StoreError):
    """A reader asked for a projection store that does not exist; nothing was created."""


class SetNotFound(StoreError):
    """No projection set with that id or name."""


@dataclass(frozen=True, slots=True)
class SetInfo:
    set_id: int
    name: str
    version: int
    state: str
    source: str
    rule_set: str | None
    params: str
    created_at: str
    promoted_at: str | None


UnitKey = tuple[str, str]
"""(election id, unit id): a unit's identity. Elections in one log may share unit ids."""


@dataclass(frozen=True, slots=True)
class UnitRow:
    unit_id: str
    election_id: str
    partition: int
    state: str
    events: int | None = field(default=None, compare=False)
    """The state's event count, when the runner that wrote the row still knows it: the results feed
    needs only that number of a state it would otherwise parse back whole (not stored: it is in ``state``)."""


@dataclass(frozen=True, slots=True)
class TallyRow:
    unit_id: str
    election_id: str
    county_id: str | None
    status: str
    context: str
    tally: str
    parsed: Any = field(default=None, compare=False, repr=False)
    """The ``UnitTally`` that ``tally`` is the JSON of, when the runner that computed it still holds it:
    the results feed publishes it without parsing it back (not stored)."""


@dataclass(frozen=True, slots=True)
class ElectionRow:
    election_id: str
    revision: str
    state: str


class EventRow(NamedTuple):
    """A processed event in the index (a tuple: a rebuild makes one per event and writes them as is)."""

    event_id: str
    unit_key: str
    election_id: str
    partition: int
    offset: int
    type: str
    recorded_at: str


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """A unit's state (an election's: ``unit_id`` '') after a batch, and where the batch's events of it
    lie in its partition: offsets ``first_offset``..``last_offset``, recorded between ``low_at`` and
    ``high_at`` (``sorted``: in that order). As-of reads pick, per unit, the last state inside a cut."""

    election_id: str
    unit_id: str
    partition: int
    first_offset: int
    last_offset: int
    low_at: str
    high_at: str
    sorted: bool
    state: str


@dataclass(frozen=True, slots=True)
class PositionRow:
    partition: int
    next_offset: int
    last_recorded_at: str | None


@dataclass
class Changes:
    """Everything one batch changed, written in one transaction."""

    units: list[UnitRow] = field(default_factory=list)
    tallies: list[TallyRow] = field(default_factory=list)
    elections: list[ElectionRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    positions: list[PositionRow] = field(default_factory=list)
    history: list[HistoryRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.units or self.tallies or self.elections or self.events or self.positions)


@dataclass(frozen=True)
class Staged:
    """A batch's writes folded before the set's lock (``early_fold``): its changes and its event index
    rows. Why: runners of one set take its lock in turn, and the time one holds it bounds what another
    can add; loading the rows is the part of the writes that needs no lock."""

    changes: Changes
    index_rows: Sequence[EventRow]


class StoreReader(Protocol):
    """Reads within one projection set, from one consistent snapshot."""

    set_id: int

    def positions(self) -> dict[int, PositionRow]: ...

    def elections(self) -> dict[str, ElectionRow]:
        """Every election of the set (state JSON included)."""
        ...

    def election_revisions(self) -> dict[str, str]:
        """election id -> revision, without the (large) definitions."""
        ...

    def unit_states(self, keys: Iterable[UnitKey] | None = None, *, election_id: str | None = None) -> dict[UnitKey, UnitRow]:
        """Unit states by (election id, unit id): all, those of ``keys``, or one election's."""
        ...

    def tallies(
        self, *, election_id: str | None = None, county_id: str | None = None, keys: Iterable[UnitKey] | None = None
    ) -> dict[UnitKey, TallyRow]: ...

    def tally_mark(self) -> str | None:
        """The revision (``projections.tally.TALLIES_REVISION``) every tally of this set was last checked
        against; None before the first check."""
        ...

    def processed(self, event_ids: Sequence[str]) -> set[str]:
        """Those of ``event_ids`` already applied to this set."""
        ...

    def indexed_at(self, event_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Where each of ``event_ids`` that was applied sat in the log when it was (partition, offset;
        a repeat is indexed under its first position)."""
        ...

    def events_for(self, election_id: str, unit_key: str) -> list[EventRow]:
        """Index rows of the events of one election that touched ``unit_key``, in log order
        (``election_id`` "" finds the refusals that named no election)."""
        ...

    def unattributed(self, undefined: Collection[str] = ()) -> list[EventRow]:
        """Index rows of the events that name no election (submissions refused before they could be
        attributed), and of those naming one of ``undefined`` (elections the log names but does not
        define: a refusal for a mistyped election id), in log order: kept and shown, counted by no tally."""
        ...

    def event_count(self) -> int: ...


class StoreTx(StoreReader, Protocol):
    """A write transaction on one set; its reads see everything committed before the lock."""

    def set_tally_mark(self, revision: str) -> None:
        """Record that every tally of this set is current under the rules' ``revision``."""
        ...

    def write(self, changes: Changes) -> None: ...

    def index_new(self, rows: Sequence[EventRow]) -> set[str]:
        """Add events to the index (the processed ids) and return the ids of those it already held.

        The dedupe and the index write in one step: the ids already held were applied by an earlier
        batch and must not be folded again; the rest are now recorded. ``rows`` must not repeat an id
        (the caller drops repeats within one call; an id added by an earlier call of the same
        transaction is reported as held)."""
        ...

    def index_begin(self, rows: Sequence[EventRow]) -> Callable[[], set[str]]:
        """``index_new`` begun: the returned call gives its answer. Until that call the transaction
        must not be used otherwise; meanwhile the caller can decode the next records while the
        database works (an adapter with nothing to overlap simply answers at once)."""
        ...


class FeedFence(Protocol):
    """The results feed's published-version fence of one set, held while a publisher appends.

    Why: every runner of a consumer group publishes the feed, and a runner whose view lags can read an
    older tally of a key after another runner read a newer one. Checked and raised under one lock that
    the publisher holds until its records are on the change stream and in the latest view, the fence
    makes sure that an older version of a key is never appended after a newer one, so neither the
    change stream nor the latest view ever goes backwards (``projections.feed``)."""

    def admit(self, versions: Mapping[str, int]) -> set[str]:
        """Of ``versions`` (feed key -> version offered), the keys whose version is at least the
        highest one published for that key; the fence is raised to those. An equal version is the same
        tally (a republish after a failure) and passes."""
        ...


def admitted(held: Mapping[str, int], offered: Mapping[str, int]) -> set[str]:
    """The rule every fence keeps (``FeedFence.admit``): nothing below what was published."""
    return {key for key, version in offered.items() if version >= held.get(key, -1)}


class ProjectionStore(Protocol):
    """The port every store adapter implements (``sqlite.py``, ``postgres.py``)."""

    def describe(self) -> str: ...

    def sets(self, name: str | None = None) -> list[SetInfo]: ...

    def get_set(self, set_id: int) -> SetInfo: ...

    def create_set(self, name: str, *, source: str, rule_set: str | None = None, params: str = "{}") -> SetInfo:
        """A new, empty set in state ``building``, numbered one above the name's highest version."""
        ...

    def serving(self, name: str) -> SetInfo | None: ...

    def ensure_serving(self, name: str, *, source: str, rule_set: str | None = None) -> SetInfo:
        """The serving set of ``name``; if there is none, a new one created and promoted in the same
        transaction (two runners starting on an empty store get the same set)."""
        ...

    def promote(self, set_id: int) -> SetInfo:
        """Make ``set_id`` the serving set of its name, atomically; the previous one is retired."""
        ...

    def drop_set(self, set_id: int) -> None:
        """Delete a set's rows. Refuses the serving set."""
        ...

    def finish_set(self, set_id: int) -> SetInfo:
        """Record that a set that is not to serve (a ``--no-promote`` rebuild, an as-of set) was built
        to its end: ``built_at`` in its params (``finished_params``). Its state stays ``building``, the
        only one a set that never served has; it is shown ``built`` (``set_builders.shown_state``).
        Refuses a set that is not building."""
        ...

    def transaction(self, set_id: int, staged: Staged | None = None) -> AbstractContextManager[StoreTx]:
        """A write transaction holding the set's lock until commit (or rollback on error). ``staged``:
        what the block will write (``write``, ``index_begin``: the same objects), known before the lock
        is taken, so a store may load it meanwhile; one that cannot takes it as a hint and does nothing."""
        ...

    def reader(self, set_id: int) -> AbstractContextManager[StoreReader]:
        """A read-only snapshot of one set."""
        ...

    def feed_fence(self, set_id: int) -> AbstractContextManager[FeedFence]:
        """The set's feed fence, locked until the block ends; what it raised is kept when the block
        ends without an error. A lock of its own where the store has one (PostgreSQL, memory), so
        publishing never waits on a batch there."""
        ...

    def close(self) -> None: ...


def chunks(items: Sequence[str], size: int = 500) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def as_mapping(rows: Iterable[tuple[int, int, str | None]]) -> Mapping[int, PositionRow]:
    return {p: PositionRow(p, o, r) for p, o, r in rows}


def finished_params(params: str, at: str) -> str:
    """A set's params text with ``built_at`` set to ``at`` (``ProjectionStore.finish_set``); params that are
    not a JSON object are kept under ``params``."""
    try:
        doc = json.loads(params or "{}")
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        doc = {"params": params}
    doc["built_at"] = at
    return json.dumps(doc, sort_keys=True)


def not_building(info: SetInfo) -> StoreError:
    return StoreError(f"projection set {info.set_id} ({info.name} v{info.version}) is {info.state}, not building: "
                      "only a set being built can be marked built")

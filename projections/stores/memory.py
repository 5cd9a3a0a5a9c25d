"""A projection store held in this process's memory: the store port without a database, for fast tests
of the runner and the fold (the same contract suite runs against it as against SQLite and PostgreSQL).

How it keeps the port's promises:

* **One transaction per batch.** A transaction works on copies of the set's tables, taken when it
  first touches each, and puts them in place when it commits; an exception leaves the set as it was.
* **Serialised writers, consistent readers.** One lock per store name serialises every writer (the
  set lock the runner's exactly-once argument needs); readers do not wait for it. Committed tables
  are replaced, never changed in place, so a reader keeps the tables of the moment it began for as
  long as it reads.
* **Shared by name.** Every ``MemoryStore`` opened with one name in a process sees the same sets, as
  two connections to one database do; ``forget(name)`` drops them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from projections.stores.port import (
    Changes,
    ElectionRow,
    EventRow,
    PositionRow,
    SetInfo,
    SetNotFound,
    Staged,
    StoreError,
    StoreMissing,
    TallyRow,
    UnitKey,
    UnitRow,
    admitted,
    finished_params,
    not_building,
)

__all__ = ["MemoryStore", "forget"]


@dataclass
class _Tables:
    """One set's rows. Committed tables are never changed in place (see module docstring)."""

    positions: dict[int, PositionRow] = field(default_factory=dict)
    elections: dict[str, ElectionRow] = field(default_factory=dict)
    units: dict[UnitKey, UnitRow] = field(default_factory=dict)
    tallies: dict[UnitKey, TallyRow] = field(default_factory=dict)
    events: dict[str, EventRow] = field(default_factory=dict)
    marks: dict[str, str] = field(default_factory=dict)


@dataclass
class _Database:
    sets: dict[int, SetInfo] = field(default_factory=dict)
    serving: dict[str, int] = field(default_factory=dict)
    tables: dict[int, _Tables] = field(default_factory=dict)
    next_set_id: int = 1
    top_versions: dict[str, int] = field(default_factory=dict)
    """The highest version given per name, dropped sets' included (``_sql.TOP_VERSION``)."""
    writer: threading.RLock = field(default_factory=threading.RLock)
    """Held by a write for its whole length: writers wait for each other, readers never do."""
    lock: threading.RLock = field(default_factory=threading.RLock)
    """Held for a moment, whenever the dictionaries above are read or changed."""
    fences: dict[int, dict[str, int]] = field(default_factory=dict)
    """set id -> feed key -> highest version published (``port.FeedFence``)."""
    feed_lock: threading.RLock = field(default_factory=threading.RLock)
    """Held by a publisher for its whole publish, apart from ``writer``: batches go on meanwhile."""


_DATABASES: dict[str, _Database] = {}
_DATABASES_LOCK = threading.Lock()


def forget(name: str) -> None:
    """Drop the named store (the next open finds none)."""
    with _DATABASES_LOCK:
        _DATABASES.pop(name, None)


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class _Fence:
    """``port.FeedFence`` on a working copy, kept by ``feed_fence`` when the block succeeds."""

    held: dict[str, int]

    def admit(self, versions: Mapping[str, int]) -> set[str]:
        keys = admitted(self.held, versions)
        self.held.update((key, max(versions[key], self.held.get(key, -1))) for key in keys)
        return keys


class _Reader:
    """Reads of one set from the tables it was given (a snapshot, or a transaction's working copy)."""

    def __init__(self, set_id: int, tables: _Tables) -> None:
        self.set_id = set_id
        self._t = tables

    def positions(self) -> dict[int, PositionRow]:
        return dict(self._t.positions)

    def elections(self) -> dict[str, ElectionRow]:
        return dict(self._t.elections)

    def election_revisions(self) -> dict[str, str]:
        return {e: row.revision for e, row in self._t.elections.items()}

    def unit_states(self, keys: Iterable[UnitKey] | None = None, *, election_id: str | None = None) -> dict[UnitKey, UnitRow]:
        units = self._t.units
        picked = units.items() if keys is None else ((k, units[k]) for k in set(keys) if k in units)
        return {k: row for k, row in picked if election_id is None or k[0] == election_id}

    def tallies(
        self, *, election_id: str | None = None, county_id: str | None = None, keys: Iterable[UnitKey] | None = None
    ) -> dict[UnitKey, TallyRow]:
        tallies = self._t.tallies
        picked = tallies.items() if keys is None else ((k, tallies[k]) for k in set(keys) if k in tallies)
        return {k: row for k, row in picked
                if (election_id is None or k[0] == election_id) and (county_id is None or row.county_id == county_id)}

    def tally_mark(self) -> str | None:
        return self._t.marks.get("tally_rules")

    def processed(self, event_ids: Sequence[str]) -> set[str]:
        events = self._t.events
        return {e for e in event_ids if e in events}

    def indexed_at(self, event_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        events = self._t.events
        return {e: (events[e].partition, events[e].offset) for e in event_ids if e in events}

    def events_for(self, election_id: str, unit_key: str) -> list[EventRow]:
        rows = [r for r in self._t.events.values() if r.election_id == election_id and r.unit_key == unit_key]
        return sorted(rows, key=lambda r: (r.partition, r.offset))

    def unattributed(self, undefined: Collection[str] = ()) -> list[EventRow]:
        named = {"", *undefined}
        return sorted((r for r in self._t.events.values() if r.election_id in named), key=lambda r: (r.partition, r.offset))

    def event_count(self) -> int:
        return len(self._t.events)


class _Tx(_Reader):
    """A write transaction: tables copied on first write, put in place by ``MemoryStore.transaction``."""

    def __init__(self, set_id: int, committed: _Tables) -> None:
        super().__init__(set_id, replace(committed))
        self._copied: set[str] = set()

    def _own(self, table: str) -> dict[Any, Any]:
        if table not in self._copied:
            setattr(self._t, table, dict(getattr(self._t, table)))
            self._copied.add(table)
        rows: dict[Any, Any] = getattr(self._t, table)
        return rows

    @property
    def tables(self) -> _Tables:
        return self._t

    def set_tally_mark(self, revision: str) -> None:
        self._own("marks")["tally_rules"] = revision

    def write(self, changes: Changes) -> None:
        if changes.events:
            events = self._own("events")
            for row in changes.events:
                if row.event_id in events:
                    raise StoreError(f"event {row.event_id} is already in the index of set {self.set_id}")
                events[row.event_id] = row
        if changes.elections:
            self._own("elections").update((row.election_id, row) for row in changes.elections)
        if changes.units:
            self._own("units").update(((row.election_id, row.unit_id), row) for row in changes.units)
        if changes.tallies:
            self._own("tallies").update(((row.election_id, row.unit_id), row) for row in changes.tallies)
        if changes.positions:
            self._own("positions").update((row.partition, row) for row in changes.positions)

    def index_new(self, rows: Sequence[EventRow]) -> set[str]:
        if not rows:
            return set()
        events = self._own("events")
        held = {row.event_id for row in rows if row.event_id in events}
        events.update((row.event_id, row) for row in rows if row.event_id not in held)
        return held

    def index_begin(self, rows: Sequence[EventRow]) -> Callable[[], set[str]]:
        """Nothing to overlap in memory: the answer is computed at once."""
        held = self.index_new(rows)
        return lambda: held


class MemoryStore:
    """A ProjectionStore in memory (see module docstring). ``read_only`` opens an existing store
    only (``StoreMissing`` if there is none) and refuses writes."""

    def __init__(self, name: str, *, read_only: bool = False) -> None:
        self.name = name
        self.read_only = read_only
        with _DATABASES_LOCK:
            db = _DATABASES.get(name)
            if db is None:
                if read_only:
                    raise StoreMissing(f"no projection store named {name!r} in memory: nothing was projected into it in this process")
                db = _DATABASES[name] = _Database()
        self._db = db

    def describe(self) -> str:
        return f"memory:{self.name}"

    # -- sets ---------------------------------------------------------------------------------

    def sets(self, name: str | None = None) -> list[SetInfo]:
        with self._db.lock:
            found = [s for s in self._db.sets.values() if name is None or s.name == name]
        return sorted(found, key=lambda s: (s.name, s.version))

    def get_set(self, set_id: int) -> SetInfo:
        with self._db.lock:
            info = self._db.sets.get(set_id)
        if info is None:
            raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
        return info

    def create_set(self, name: str, *, source: str, rule_set: str | None = None, params: str = "{}") -> SetInfo:
        with self._write():
            return self._create(name, source, rule_set, params)

    def _create(self, name: str, source: str, rule_set: str | None, params: str) -> SetInfo:
        db = self._db
        with db.lock:
            return self._insert(name, source, rule_set, params)

    def _insert(self, name: str, source: str, rule_set: str | None, params: str) -> SetInfo:
        db = self._db
        held = [s.version for s in db.sets.values() if s.name == name]
        top = db.top_versions[name] = max(held + [db.top_versions.get(name, 0)]) + 1
        info = SetInfo(db.next_set_id, name, top, "building", source, rule_set, params, _now(), None)
        db.next_set_id += 1
        db.sets[info.set_id] = info
        db.tables[info.set_id] = _Tables()
        return info

    def serving(self, name: str) -> SetInfo | None:
        with self._db.lock:
            set_id = self._db.serving.get(name)
            return None if set_id is None else self._db.sets[set_id]

    def ensure_serving(self, name: str, *, source: str, rule_set: str | None = None) -> SetInfo:
        with self._write():
            current = self.serving(name)
            if current is not None:
                return current
            return self._promote(self._create(name, source, rule_set, "{}").set_id)

    def promote(self, set_id: int) -> SetInfo:
        with self._write():
            return self._promote(set_id)

    def _promote(self, set_id: int) -> SetInfo:
        db = self._db
        info = self.get_set(set_id)
        with db.lock:
            return self._switch(info)

    def _switch(self, info: SetInfo) -> SetInfo:
        db, set_id = self._db, info.set_id
        for other in list(db.sets.values()):
            if other.name == info.name and other.state == "serving" and other.set_id != set_id:
                db.sets[other.set_id] = replace(other, state="retired")
        db.sets[set_id] = promoted = replace(info, state="serving", promoted_at=_now())
        db.serving[info.name] = set_id
        return promoted

    def finish_set(self, set_id: int) -> SetInfo:
        with self._write():
            info = self.get_set(set_id)
            if info.state != "building":
                raise not_building(info)
            with self._db.lock:
                self._db.sets[set_id] = finished = replace(info, params=finished_params(info.params, _now()))
            return finished

    def drop_set(self, set_id: int) -> None:
        with self._write():
            with self._db.lock:
                if set_id in self._db.serving.values():
                    raise StoreError(f"projection set {set_id} is serving; promote another set before dropping it")
                self._db.sets.pop(set_id, None)
                self._db.tables.pop(set_id, None)
                self._db.fences.pop(set_id, None)

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[None]:
        if self.read_only:
            raise StoreError(f"the projection store {self.describe()} was opened read-only")
        with self._db.writer:
            yield

    @contextmanager
    def transaction(self, set_id: int, staged: Staged | None = None) -> Iterator[_Tx]:
        """``staged`` is not used: nothing here is loaded apart from the writes."""
        with self._write():
            with self._db.lock:
                committed = self._db.tables.get(set_id)
            if committed is None:
                raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
            tx = _Tx(set_id, committed)
            yield tx
            with self._db.lock:  # only reached when the block raised nothing
                if set_id in self._db.tables:
                    self._db.tables[set_id] = tx.tables

    @contextmanager
    def feed_fence(self, set_id: int) -> Iterator[_Fence]:
        with self._db.feed_lock:
            fence = _Fence(dict(self._db.fences.get(set_id, {})))
            yield fence
            self._db.fences[set_id] = fence.held  # only reached when the block raised nothing

    @contextmanager
    def reader(self, set_id: int) -> Iterator[_Reader]:
        with self._db.lock:
            tables = self._db.tables.get(set_id) or _Tables()
        yield _Reader(set_id, tables)

    def close(self) -> None:
        """Nothing to release: the sets stay for the next open of this name."""

"""Answers of the read API, each with the validator (ETag) a CDN or a client revalidates with.

Why validators come first: a tally is a function of what it was built from, the serving projection
set and the log positions it reflects (or, for ``as_of``, the cut and the log it replays). That
token is one cheap query, so ``If-None-Match`` is answered without loading a view, and an answer
built once is kept (``_Cache``) and served again to every client until the projection moves.

What each token is made of:

* live: the serving set's id and its stored positions;
* ``as_of`` log positions: the cut alone (records at given offsets never change: the answer is
  immutable, unless the log is lost, which readers report elsewhere);
* ``as_of`` a time: the cut and the log's high watermarks (an event recorded before that time may
  still arrive late, from a spool).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import orjson

from ledger.config import Settings
from ledger.log.port import EventLog, LogError, LogFileReplacedError
from projections.asof import AsOfError, Cut, parse_cut
from projections.tally_revision import TALLIES_REVISION
from projections.queries import DEFAULT_SET, QueryError, TallyView, load_view, resolve_set
from projections.reducers import ElectionState
from projections.stores.port import ProjectionStore, StoreError, StoreMissing
from projections.tally import AreaTally
from projections.wiring import open_existing_log

__all__ = ["ReadError", "Answer", "ResultsReader", "area_extras", "last_updated", "percent_text"]


class ReadError(LookupError):
    """What was asked cannot be answered; ``status`` is the HTTP status that says why."""

    def __init__(self, message: str, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


ANSWER_CACHE_BYTES = 64 << 20
"""What the built answers kept for readers may hold in all (an answer over 16 MiB is built each time)."""


@dataclass(frozen=True)
class Answer:
    """A JSON body (None: the client's copy is current) with its ETag; ``immutable`` never changes."""

    body: bytes | None
    etag: str
    immutable: bool = False


class _Cache:
    """A small LRU of built answers and views, keyed by their tokens, bounded by count and, where the
    items say how large they are (``weight``: an answer's bytes), by their total: a count alone let
    readers asking one large answer at many times (``?as_of=``) hold gigabytes. An item heavier than a
    quarter of the budget is not kept at all."""

    def __init__(self, size: int, budget: int | None = None) -> None:
        self.size = size
        self.budget = budget
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Any, value: Any, weight: int = 0) -> None:
        if self.budget is not None and weight * 4 > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self._weight += weight - (old[1] if old is not None else 0)
            self._items[key] = (value, weight)
            while len(self._items) > self.size or (self.budget is not None and self._weight > self.budget):
                _, (_, dropped) = self._items.popitem(last=False)
                self._weight -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._weight = 0


def percent_text(part: int, whole: int) -> str:
    """A share as a percentage with two decimals, rounded half up from the exact fraction."""
    if not whole:
        return "0.00"
    hundredths = Fraction(part * 10_000, whole)
    rounded = (2 * hundredths.numerator + hundredths.denominator) // (2 * hundredths.denominator)
    return f"{rounded // 100}.{rounded % 100:02d}"


def area_extras(area: AreaTally, last_updated: str | None) -> dict[str, Any]:
    """What a reader of an area needs besides its sums: the share of units reporting (exact and as a
    percentage) and when the newest result counted in it was recorded by the ledger."""
    return {
        "reporting": {
            "units_reporting": area.units_reporting,
            "units_defined": area.units_defined,
            "share": f"{area.units_reporting}/{area.units_defined}",
            "percent": percent_text(area.units_reporting, area.units_defined),
        },
        "last_updated": last_updated,
    }


def last_updated(view: TallyView) -> dict[str | None, str]:
    """When the newest result counted in each county (key: its id) and the state (key None) was recorded."""
    out: dict[str | None, str] = {}
    for t in view.units.values():
        unit = view.context.units.get(t.unit_id)
        if not t.reporting or not t.result_recorded_at or unit is None:
            continue
        for key in (None, unit.county_id):
            if t.result_recorded_at > out.get(key, ""):
                out[key] = t.result_recorded_at
    return out


def _by_position(as_of: str) -> bool:
    try:
        return parse_cut(as_of).at is None
    except AsOfError:
        return True  # refused at once, as a 400, without a worker thread


def _etag(*parts: object) -> str:
    """The answer's validator. The rules' revision is part of it: the same log positions give another
    answer once a rule set's name means another reading, and a cached copy must not pass for it."""
    return 'W/"' + hashlib.blake2b(repr((TALLIES_REVISION, *parts)).encode(), digest_size=12).hexdigest() + '"'


def dumps(data: Any) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS, default=str)


class ResultsReader:
    """The read side of one projection name over one log, shared by every request of a server.

    The store and the log are opened once (read-only) and used under a lock: both adapters serialise
    their connection anyway, and the cache answers the repeated questions."""

    def __init__(self, settings: Settings, *, projection: str = DEFAULT_SET,
                 open_store: Callable[[], ProjectionStore] | None = None) -> None:
        self.settings = settings
        self.projection = projection
        self._open_store = open_store or self._default_store
        self._store: ProjectionStore | None = None
        self._log: EventLog | None = None
        self._results: EventLog | None = None
        self._token_store: ProjectionStore | None = None
        self._token_lock = threading.Lock()
        self._lock = threading.RLock()
        self._answers = _Cache(256, budget=ANSWER_CACHE_BYTES)
        self._views = _Cache(4)  # a view holds every unit's tally: a few, not many
        self._marks: dict[int, int] | None = None  # the log's high watermarks, as last asked (``_log_holds``)
        self._marks_at = float("-inf")

    def _default_store(self) -> ProjectionStore:
        from projections.stores import open_store

        return open_store(self.settings, read_only=True)

    @contextmanager
    def store(self) -> Iterator[ProjectionStore]:
        with self._lock:
            if self._store is None:
                try:
                    self._store = self._open_store()
                except StoreMissing as exc:
                    raise ReadError(f"no projection yet: {exc}", 503) from exc
                except StoreError as exc:
                    raise ReadError(str(exc), 503) from exc
            yield self._store

    @contextmanager
    def log(self) -> Iterator[EventLog]:
        with self._lock:
            if self._log is None:
                try:
                    self._log = open_existing_log(self.settings)
                except LogError as exc:
                    raise ReadError(f"the log cannot be read: {exc}", 503) from exc
            try:
                yield self._log
            except LogFileReplacedError as exc:  # a restore put a file in its place: the next request opens it,
                self._log.close()  # and builds every answer again (a restore by `log append` keeps the positions)
                self._log = None
                self._views.clear()
                self._answers.clear()
                raise ReadError(f"the log cannot be read: {exc}; ask again", 503) from exc

    def feed_positions(self) -> str | None:
        """Where the results feed stands now ("0:12,1:40,..."), None if nothing was published yet. A page
        reads it before its tallies and subscribes from there, so it misses no change made after."""
        from projections.feed import open_results_log

        with self._lock:
            try:
                if self._results is None:
                    self._results = open_results_log(self.settings, read_only=True)
                marks = self._results.high_watermarks()
            except LogError:
                return None
        return ",".join(f"{p}:{o}" for p, o in sorted(marks.items()))

    def close(self) -> None:
        with self._lock:
            for thing in (self._store, self._log, self._results, self._token_store):
                if thing is not None:
                    thing.close()
            self._store = self._log = self._results = self._token_store = None

    # -- tokens ------------------------------------------------------------------------------------

    def live_token(self) -> tuple[Any, ...]:
        """The serving set and the positions it reflects: what every live answer is a function of.

        Asked on a connection of its own, never held for long, so a request that only revalidates
        does not wait for one that is loading a view."""
        try:
            with self._token_lock:
                if self._token_store is None:
                    try:
                        self._token_store = self._open_store()
                    except StoreMissing as exc:
                        raise ReadError(f"no projection yet: {exc}", 503) from exc
                store = self._token_store
                info = resolve_set(store, self.projection)
                with store.reader(info.set_id) as r:
                    positions = tuple(sorted((p, row.next_offset) for p, row in r.positions().items()))
                self._log_holds(positions)
        except QueryError as exc:
            raise ReadError(str(exc), 503) from exc
        except StoreError as exc:
            raise ReadError(str(exc), 503) from exc
        return ("live", info.set_id, positions)

    def _log_holds(self, positions: tuple[tuple[int, int], ...]) -> None:
        """ReadError 503 when the log holds fewer records than the projection reflects (lost, or restored
        from an older copy), as ``caucus tally`` exits 3: its answers would show results the log no longer
        holds. The log is asked at most once a second and never waited for (a view being built holds it);
        unreachable, it says nothing (the store's answers stand); a position past stale marks asks again
        (the runner may have gone on since)."""
        marks = self._recent_marks(1.0)
        if marks is not None and any(o > marks.get(p, 0) for p, o in positions):
            marks = self._recent_marks(0.0)
        short = "; ".join(f"partition {p} {o} (the log {marks.get(p, 0)})" for p, o in positions if o > marks.get(p, 0)) if marks else ""
        if short:
            raise ReadError(f"the projection reflects more records than the log holds ({short}): the log was lost or restored "
                            "from an older copy; restore it, or rebuild the projection from it (`caucus replay --new-log`)", 503)

    def _recent_marks(self, max_age: float) -> dict[int, int] | None:
        now = time.monotonic()
        if now - self._marks_at > max_age and self._lock.acquire(blocking=False):
            try:
                self._marks_at = now
                with self.log() as log:
                    self._marks = log.high_watermarks()
            except (ReadError, LogError):
                self._marks = None
            finally:
                self._lock.release()
        return self._marks

    def log_marks(self) -> tuple[tuple[object, object], ...]:
        try:
            with self.log() as log:
                return (("log", log.log_id or ""), *sorted(log.high_watermarks().items()))  # another log: other tags
        except LogError as exc:
            raise ReadError(f"the log cannot be read: {exc}", 503) from exc

    def token(self, as_of: str | None) -> tuple[tuple[Any, ...], Cut | None, bool]:
        """(token, cut, immutable) for a live answer (``as_of`` None) or one as of a time or positions."""
        if as_of is None:
            return self.live_token(), None, False
        try:
            cut = parse_cut(as_of)
        except AsOfError as exc:
            raise ReadError(f"as_of: {exc}", 400) from exc
        if cut.at is None:
            return ("cut", orjson.dumps(cut.to_json(), option=orjson.OPT_SORT_KEYS)), cut, True
        return ("cut", orjson.dumps(cut.to_json(), option=orjson.OPT_SORT_KEYS), self.log_marks()), cut, False

    # -- views and answers -----------------------------------------------------------------------

    def view(self, election: str | None, as_of: str | None = None, *, token: tuple[Any, ...] | None = None,
             cut: Cut | None = None) -> TallyView:
        """The tally view the answers are built from (kept while its token stands)."""
        if token is None:
            token, cut, _ = self.token(as_of)
        key = (token, election)
        view: TallyView | None = self._views.get(key)
        if view is not None:
            return view
        try:
            with self.store() as store:
                if cut is None:
                    view = load_view(store, set_name=self.projection, election_id=election)
                else:
                    with self.log() as log:
                        view = load_view(store, set_name=self.projection, election_id=election, as_of=cut, log=log)
        except QueryError as exc:
            raise ReadError(str(exc), 404) from exc
        except (StoreError, LogError) as exc:
            raise ReadError(str(exc), 503) from exc
        self._views.put(key, view)
        return view

    def ready(self, route: str, election: str | None, as_of: str | None, if_none_match: str | None,
              *params: object) -> Answer | None:
        """The answer if it needs no work: a 304, or one already built. None when it must be built (or
        its token needs the log or a database): then ``answer`` in a worker thread. Cheap enough for the
        event loop on the embedded store (one indexed read of a local file); PostgreSQL is never asked
        from the event loop (a database that is away would stall every stream)."""
        if self.settings.database or (as_of is not None and not _by_position(as_of)):
            return None
        token, _cut, immutable = self.token(as_of)
        etag = _etag(route, election, params, token)
        if client_has(if_none_match, etag):
            return Answer(None, etag, immutable)
        cached: Answer | None = self._answers.get(etag)
        return cached

    def answer(self, route: str, election: str | None, as_of: str | None, if_none_match: str | None,
               build: Callable[[TallyView], Any], *params: object, encode: Callable[[Any], bytes] | None = None) -> Answer:
        """A tally answer: 304-able by its ETag, built (from the cached view) only when not cached."""
        token, cut, immutable = self.token(as_of)
        etag = _etag(route, election, params, token)
        if client_has(if_none_match, etag):
            return Answer(None, etag, immutable)
        cached: Answer | None = self._answers.get(etag)
        if cached is not None:
            return cached
        body = (encode or dumps)(build(self.view(election, token=token, cut=cut)))
        made = Answer(body, etag, immutable)
        self._answers.put(etag, made, len(made.body or b""))
        return made

    def plain(self, route: str, if_none_match: str | None, build: Callable[[], Any], *,
              encode: Callable[[Any], bytes] | None = None) -> Answer:
        """An answer about the serving set as a whole (the elections), with no election's view."""
        etag = _etag(route, self.live_token())
        if client_has(if_none_match, etag):
            return Answer(None, etag)
        cached: Answer | None = self._answers.get(etag)
        if cached is not None:
            return cached
        made = Answer((encode or dumps)(build()), etag)
        self._answers.put(etag, made, len(made.body or b""))
        return made

    def with_log(self, route: str, election: str | None, if_none_match: str | None,
                 build: Callable[[TallyView], Any], *params: object, encode: Callable[[Any], bytes] | None = None) -> Answer:
        """An answer that also reads the log (a trail, a diff): its token adds the log's high watermarks."""
        token = (self.live_token(), self.log_marks())
        etag = _etag(route, election, params, token)
        if client_has(if_none_match, etag):
            return Answer(None, etag)
        cached: Answer | None = self._answers.get(etag)
        if cached is not None:
            return cached
        made = Answer((encode or dumps)(build(self.view(election, token=token[0]))), etag)
        self._answers.put(etag, made, len(made.body or b""))
        return made

    def elections(self) -> list[dict[str, Any]]:
        """Every election the serving projection holds a definition of, with what a reader needs to choose
        one. Refusals keep the election id they named, a refused definition too, and anyone can send one
        (no token needed): listing those would let anybody add elections to the public results site."""
        try:
            with self.store() as store:
                info = resolve_set(store, self.projection)
                with store.reader(info.set_id) as r:
                    states = {e: ElectionState.loads(row.state) for e, row in r.elections().items()}
        except QueryError as exc:
            raise ReadError(str(exc), 503) from exc
        except StoreError as exc:
            raise ReadError(str(exc), 503) from exc
        out = []
        for eid, st in sorted(states.items()):
            d = st.definition
            if d is None:
                continue
            out.append({
                "election_id": eid, "name": d.name if d else None, "rule_set": d.rule_set if d else None,
                "defined": d is not None, "certified": st.certified_by is not None,
                "candidates": list(d.candidates) if d else [], "counties": len(d.counties) if d else 0,
                "units": len(d.units) if d else 0,
            })  # fmt: skip
        return out


def client_has(if_none_match: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` says the client holds this version (RFC 9110 §13.1.2: ``*`` for any,
    weak comparison, so a ``W/`` prefix a proxy added still matches)."""
    if if_none_match is None:
        return False
    tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return "*" in tags or etag.removeprefix("W/") in tags


def now_text() -> str:
    return datetime.now(UTC).isoformat()

"""Rebuilding a projection from the start of the log, beside the one that serves, then switching.

Why beside it: a rebuild of a large log takes minutes, and readers (``caucus tally``, the results
feed, the read API) must keep answering meanwhile. So the rebuild writes a new version of the
projection set (``ProjectionStore.create_set``: state ``building``), with the same runner and the
same exactly-once rules as ``caucus project``, while the serving set stays untouched. When the new
set has caught up with the log, ``ProjectionStore.promote`` flips the one row readers resolve the
serving set through, in one store transaction: a reader sees the old set or the new one, never a
mix. The old set is kept (state ``retired``, listed by ``caucus projections``) until dropped.

After the switch, a ``caucus project`` that was keeping the old set current notices (``ServingWatch``)
and carries on with the new one from the positions stored with it; records that arrived during the
rebuild are applied to the new set then.

As of a moment (``build_as_of``): the same rebuild, but only the records inside a cut
(``projections.asof.Cut``: recorded at or before a time, and/or before log positions) are applied,
into a set named ``<name>-as-of`` that is never promoted. The serving projection is not touched; the
set can be compared with others (``caucus diff set:tally-as-of live``) and dropped later.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ledger.codec import Codec, CodecError, default_codec
from ledger.config import Settings
from ledger.log.port import EventLog, StoredRecord
from projections.asof import AsOfError, Cut
from projections.queries import DEFAULT_SET
from projections.runner import Progress, ProjectionRunner, RunnerError
from projections.set_builders import builder_gone, builder_of, builder_params, describe_builder, shown_state
from projections.sources import AssignmentListener, Source
from projections.store_outage import STORE_RETRY_SECONDS, StoreOutage
from projections.stores.port import Changes, ProjectionStore, SetInfo, StoreUnavailable
from projections.wiring import DEFAULT_GROUP, check_source, log_identity, serving_set, source_for

__all__ = [
    "AS_OF_SUFFIX",
    "ReplayBusy",
    "ReplayOutcome",
    "CutSource",
    "ServingWatch",
    "follow_serving",
    "rebuild",
    "build_as_of",
    "replay_group",
]

log = logging.getLogger(__name__)

AS_OF_SUFFIX = "-as-of"
CATCH_UP_BATCH = 200_000
"""A rebuild reads the whole log: its transactions gather up to this many events (``ProjectionRunner.catch_up_batch``)."""

SourceFactory = Callable[[], Source]
OnCommit = Callable[[Changes, dict[int, int]], None]


@dataclass
class ReplayOutcome:
    """What a rebuild did: the set that served before, the new set, and whether it now serves."""

    previous: SetInfo | None
    built: SetInfo
    progress: Progress
    promoted: bool
    cut: Cut | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        def brief(s: SetInfo | None) -> dict[str, Any] | None:
            if s is None:
                return None
            return {"set_id": s.set_id, "name": s.name, "version": s.version, "state": shown_state(s), "rule_set": s.rule_set}

        return {
            "previous": brief(self.previous),
            "built": brief(self.built),
            "promoted": self.promoted,
            "as_of": None if self.cut is None else self.cut.to_json(),
            "seconds": round(self.seconds, 3),
            "progress": self.progress.to_json(),
            "notes": list(self.notes),
        }


def replay_group(settings: Settings, set_id: int) -> str:
    """A consumer group of the rebuild's own, so that it never takes partitions from the runners
    keeping the serving set current (they are in ``caucus-projections``)."""
    return f"{DEFAULT_GROUP}-replay-{set_id}-{uuid.uuid4().hex[:6]}"


class CutSource:
    """A source that passes on only the records inside a cut (``projections.asof`` semantics: by
    position, the records before the given offset; by time, events recorded at or before it, each
    record judged by the ``recorded_at`` it carries). Records outside are read and dropped, so the
    runner's catch-up test (the source's read positions) still sees the whole log read."""

    def __init__(self, inner: Source, cut: Cut, *, codec: Codec | None = None) -> None:
        self.inner = inner
        self.cut = cut
        self.codec = codec or default_codec()
        self.description = f"{inner.description}, {cut.describe()}"
        self.outside = 0

    def start(self, listener: AssignmentListener) -> None:
        self.inner.start(listener)

    def _inside(self, rec: StoredRecord) -> bool:
        end = self.cut.end_of(rec.position.partition)
        if end is not None and rec.position.offset >= end:
            return False
        if self.cut.at is not None:
            try:
                event = self.codec.decode(rec.value)
            except CodecError:
                return True  # let the runner report it, with its position
            return event.recorded_at <= self.cut.at
        return True

    def poll(self, max_records: int, timeout: float) -> list[StoredRecord]:
        records = self.inner.poll(max_records, timeout)
        kept = [r for r in records if self._inside(r)]
        self.outside += len(records) - len(kept)
        return kept

    def seek(self, partition: int, offset: int) -> None:
        self.inner.seek(partition, offset)

    def read_first(self, keys: Iterable[str]) -> None:
        self.inner.read_first(keys)

    def others_moved(self, partitions: Iterable[int]) -> None:
        self.inner.others_moved(partitions)

    def assigned(self) -> set[int]:
        return self.inner.assigned()

    @property
    def ready(self) -> bool:
        return self.inner.ready

    def high_watermarks(self) -> dict[int, int]:
        return self.inner.high_watermarks()

    def positions(self) -> dict[int, int]:
        return self.inner.positions()

    def log_high_watermarks(self) -> dict[int, int]:
        return self.inner.log_high_watermarks()

    @property
    def shares_partitions(self) -> bool:
        return self.inner.shares_partitions

    def close(self) -> None:
        self.inner.close()


def check_cut(cut: Cut, log: EventLog) -> None:
    """A position cut must lie inside the log (DESIGN.md: a position beyond the log is a lost log)."""
    if cut.ends is None:
        return
    marks = log.high_watermarks()
    for p, end in sorted(cut.ends.items()):
        if not 0 <= p < log.partitions:
            raise AsOfError(f"log position {p}:{end}: the log has partitions 0..{log.partitions - 1}")
        if end > marks.get(p, 0):
            raise AsOfError(
                f"log position {p}:{end} lies beyond partition {p}, which holds {marks.get(p, 0)} records: "
                "past its end: a mistyped position, or one of another (or a lost) log"
            )
    if cut.rest is not None:
        for p in range(log.partitions):
            if p not in cut.ends and cut.rest > marks.get(p, 0):
                raise AsOfError(f"log position *:{cut.rest} lies beyond partition {p}, which holds {marks.get(p, 0)} records")


class ServingWatch:
    """``watch()`` is True once another set serves ``name`` than ``set_id`` (a replay switched sets).
    Asks the store at most every ``every`` seconds; a runner polls it between batches."""

    def __init__(self, store: ProjectionStore, name: str, set_id: int, *, every: float = 2.0) -> None:
        self.store = store
        self.name = name
        self.set_id = set_id
        self.every = every
        self.switched_to: SetInfo | None = None
        self._asked = time.monotonic()

    def __call__(self) -> bool:
        if self.switched_to is not None:
            return True
        now = time.monotonic()
        if now - self._asked < self.every:
            return False
        self._asked = now
        try:
            serving = self.store.serving(self.name)
        except StoreUnavailable:
            return False  # the runner's next batch waits for the store and says so

        if serving is not None and serving.set_id != self.set_id:
            self.switched_to = serving
            return True
        return False


def follow_serving(store: ProjectionStore, settings: Settings, *, name: str, set_id: int | None, identity: str,
                   run: Callable[[SetInfo, ServingWatch | None], Progress], stopped: Callable[[], bool],
                   on_switch: Callable[[SetInfo, SetInfo], None]) -> Progress:
    """Keep a projection current (``caucus project``): the set ``set_id``, or else the serving set of
    ``name``, created on first use. When a replay promotes another set, ``run`` (one runner on one set,
    stopping between batches once ``ServingWatch`` says so) returns and the next run goes on with the
    new set, from the positions stored with it. ``StoreError``/``LogError`` when the set cannot be had
    (``SourceMismatch``: it was built from another log)."""
    while True:
        if set_id is not None:
            info = store.get_set(set_id)
            check_source(info, store, settings, identity)
        else:
            info = serving_set(store, settings, name, identity=identity)
        watch = ServingWatch(store, info.name, info.set_id) if set_id is None else None
        progress = run(info, watch)
        if stopped() or watch is None or watch.switched_to is None:
            return progress
        on_switch(info, watch.switched_to)


def _run(
    store: ProjectionStore,
    info: SetInfo,
    source: Source,
    *,
    batch_size: int,
    on_commit: OnCommit | None,
    on_progress: Callable[[Progress], None] | None,
    stop: Callable[[], bool] | None,
    poll_timeout: float,
    catch_up_batch: int,
) -> Progress:
    runner = ProjectionRunner(
        store, info.set_id, source, batch_size=batch_size, rule_set=info.rule_set, on_progress=on_progress,
        on_commit=on_commit, poll_timeout=poll_timeout, catch_up_batch=catch_up_batch, built_from=info.source,
    )
    return runner.run(until_caught_up=True, stop=stop)


def _waiting_out(step: Callable[[], SetInfo], retry_seconds: float = STORE_RETRY_SECONDS,
                 sleep: Callable[[float], None] = time.sleep) -> SetInfo:
    """A replay's last step (promote, finish_set, reading the set back), retried through a store
    outage within the bound a batch has (``projections.store_outage``). A connection lost just then
    would otherwise end a replay that had built its whole set, leaving it ``building`` with no
    builder: not promoted, and never marked built. Each step may be run again: promoting a set
    that serves, or marking a built set built, changes nothing a reader relies on."""
    outage = StoreOutage(retry_seconds)
    while True:
        try:
            return step()
        except StoreUnavailable:
            wait = outage.failed()
            if wait is None:
                raise
            log.warning("projection store unreachable at the replay's last step; retrying in %.1f s", wait)
            sleep(wait)


class ReplayBusy(RunnerError):
    """Another replay of the projection is building a set now: two at once would each retire the
    set the other promoted."""


def _clear_the_way(store: ProjectionStore, name: str, *, mine: int | None = None) -> list[str]:
    """Drop the sets of ``name`` that a replay left building and whose builder is gone (notes saying
    so); raise ``ReplayBusy`` for one whose builder may be alive (with ``mine``: one with a lower set
    id than ours). Sets without a recorded builder (``--no-promote`` rebuilds, which stay building
    when done, and sets older than builders) are left alone."""
    notes: list[str] = []
    for info in store.sets(name):
        if info.state != "building" or info.set_id == mine or builder_of(info) is None:
            continue
        if builder_gone(info):
            store.drop_set(info.set_id)
            notes.append(f"set {info.set_id} ({info.name} v{info.version}) was left building by a replay that is gone "
                         f"({describe_builder(info)}): dropped")
        elif mine is None or info.set_id < mine:
            raise ReplayBusy(f"another replay ({describe_builder(info)}) is building {info.name} v{info.version} "
                             f"(set {info.set_id}); wait for it to finish (`caucus projections` shows it as abandoned "
                             "if it stopped without finishing)")
    return notes


def rebuild(
    store: ProjectionStore,
    settings: Settings,
    *,
    name: str = DEFAULT_SET,
    rule_set: str | None = None,
    batch_size: int = 2000,
    promote: bool = True,
    source: SourceFactory | None = None,
    on_commit: OnCommit | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    stop: Callable[[], bool] | None = None,
    session_timeout_ms: int = 10_000,
    poll_timeout: float = 0.2,
    catch_up_batch: int = CATCH_UP_BATCH,
    new_log: bool = False,
) -> ReplayOutcome:
    """Build a new version of projection ``name`` from the start of the log, then (``promote``)
    make it the serving one in one store transaction. The previous set is kept, retired.
    ``new_log``: the serving set may have been built from another log (``wiring.check_source``); the
    new version is built from the configured one all the same.

    The rule set is the serving set's unless ``rule_set`` is given. ``on_commit`` hears about every
    batch committed to the new set (tests query the serving set there). A rebuild stopped before it
    caught up (``stop``) is left in state ``building`` and not promoted.
    """
    began = time.monotonic()
    previous = store.serving(name)
    identity = log_identity(settings)
    if previous is not None and not new_log:
        check_source(previous, store, settings, identity)
    chosen_rules = rule_set if rule_set is not None else (previous.rule_set if previous else None)
    notes = _clear_the_way(store, name)
    params: dict[str, Any] = {"kind": "rebuild", "replaces": None if previous is None else previous.set_id}
    if promote:  # a set that is to serve: left building, its replay stopped (a --no-promote set is done when built)
        params["builder"] = builder_params()
    built = store.create_set(name, source=identity, rule_set=chosen_rules, params=json.dumps(params, sort_keys=True))
    try:
        _clear_the_way(store, name, mine=built.set_id)
    except ReplayBusy:
        store.drop_set(built.set_id)  # started at the same moment as another: the lower set id goes on
        raise
    src = source() if source is not None else source_for(
        settings, group=replay_group(settings, built.set_id), batch_size=batch_size, session_timeout_ms=session_timeout_ms
    )
    progress = _run(store, built, src, batch_size=batch_size, on_commit=on_commit, on_progress=on_progress, stop=stop,
                    poll_timeout=poll_timeout, catch_up_batch=catch_up_batch)
    outcome = ReplayOutcome(previous, built, progress, promoted=False, notes=notes)
    if not progress.caught_up:
        outcome.notes.append(f"stopped ({progress.stopped}) before catching up: set {built.set_id} left building, not promoted")
        outcome.built = _waiting_out(lambda: store.get_set(built.set_id))
    elif not promote:
        outcome.built = _waiting_out(lambda: store.finish_set(built.set_id))
    else:
        outcome.built = _waiting_out(lambda: store.promote(built.set_id))
        outcome.promoted = True
        log.info("projection %s v%d (set %d) now serves, built from %s", name, built.version, built.set_id, identity)
        if previous is not None:
            outcome.previous = _waiting_out(lambda: store.get_set(previous.set_id))
    outcome.seconds = time.monotonic() - began
    return outcome


def build_as_of(
    store: ProjectionStore,
    settings: Settings,
    cut: Cut,
    *,
    name: str = DEFAULT_SET,
    rule_set: str | None = None,
    batch_size: int = 2000,
    log: EventLog | None = None,
    source: SourceFactory | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    stop: Callable[[], bool] | None = None,
    session_timeout_ms: int = 10_000,
    poll_timeout: float = 0.2,
    catch_up_batch: int = CATCH_UP_BATCH,
) -> ReplayOutcome:
    """Build projection ``name`` as it stood at ``cut`` into a new set ``<name>-as-of`` that is never
    promoted. ``log`` (optional) is used to check a position cut against the log first."""
    began = time.monotonic()
    if log is not None:
        check_cut(cut, log)
    serving = store.serving(name)
    chosen_rules = rule_set if rule_set is not None else (serving.rule_set if serving else None)
    params = {"kind": "as-of", "of": name, "cut": cut.to_json()}
    built = store.create_set(name + AS_OF_SUFFIX, source=log_identity(settings), rule_set=chosen_rules,
                             params=json.dumps(params, sort_keys=True))
    inner = source() if source is not None else source_for(
        settings, group=replay_group(settings, built.set_id), batch_size=batch_size, session_timeout_ms=session_timeout_ms
    )
    cut_source = CutSource(inner, cut)
    progress = _run(store, built, cut_source, batch_size=batch_size, on_commit=None, on_progress=on_progress, stop=stop,
                    poll_timeout=poll_timeout, catch_up_batch=catch_up_batch)
    outcome = ReplayOutcome(serving, built, progress, promoted=False, cut=cut)
    outcome.notes.append(f"{cut_source.outside} records outside the cut were read and left out")
    if not progress.caught_up:
        outcome.notes.append(f"stopped ({progress.stopped}) before the whole log was read: set {built.set_id} is incomplete")
        outcome.built = _waiting_out(lambda: store.get_set(built.set_id))
    else:
        outcome.built = _waiting_out(lambda: store.finish_set(built.set_id))
    outcome.seconds = time.monotonic() - began
    return outcome

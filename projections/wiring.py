"""Putting a runner together from settings: which source, which store, which projection set.

Kept apart from the CLI so that ``caucus replay`` (which builds a new set and promotes it) and tests
assemble runners the same way ``caucus project`` does.
"""

from __future__ import annotations

from collections.abc import Mapping

from ledger.backends import backends_for
from ledger.config import Settings
from ledger.log.port import EventLog, LogError, LogLostError, LogMissingError, LogReplacedError, LogVanishedError
from projections.backends import group_source
from projections.queries import DEFAULT_SET
from projections.sources import Source
from projections.stores.port import ProjectionStore, SetInfo, StoreError

__all__ = ["DEFAULT_GROUP", "source_for", "serving_set", "log_identity", "open_existing_log", "SourceMismatch",
           "check_source", "read_identity", "NEW_LOG_HINT", "open_log_of", "unread_records", "existing_log_identity"]

NEW_LOG_HINT = (
    "To project this log into this store, run `caucus replay --new-log` (it builds a new version of the projection "
    "from this log beside the old one, which is kept, and switches readers to it); or give another store "
    "with --data-dir / --database."
)

DEFAULT_GROUP = "caucus-projections"


class SourceMismatch(StoreError, LogReplacedError):
    """The projection set was built from another log than the one configured."""


def source_for(settings: Settings, *, group: str = DEFAULT_GROUP, batch_size: int = 500, session_timeout_ms: int = 10_000,
               no_partition_timeout: float = 0.0, static_start: bool = True) -> Source:
    """``no_partition_timeout``: on Kafka, how long a runner may hold no partition before it rejoins
    the group with a new consumer, and then gives up (0: wait as long as it takes). ``static_start``:
    read at once while the group joins (``KafkaGroupSource``); a run that stops once caught up asks
    for the group first, so its positions reach the group (its lag tools) before it leaves."""
    return group_source(settings, group, batch_size=batch_size, session_timeout_ms=session_timeout_ms,
                        no_partition_timeout=no_partition_timeout, static_start=static_start)


def open_existing_log(settings: Settings, *, for_runner: bool = False) -> EventLog:
    """The configured log, which must exist, for reading. An embedded log is opened with the partition
    count it was created with, and read-only (nothing is created or changed), except for a runner: it
    opens it for writing when it can, so a log from before log ids gets its id (``log_identity``)."""
    return backends_for(settings).open_existing_log(for_runner=for_runner)


def log_identity(settings: Settings, log: EventLog | None = None) -> str:
    """What a projection set records as its source: ``log:<id>``, the log's own id (``EventLog.log_id``),
    the same wherever the log's file was copied or moved and whichever address of a cluster is used.
    A Kafka topic from before log ids is given one here."""
    own = log is None
    log = log if log is not None else open_existing_log(settings, for_runner=True)
    try:
        log_id = log.log_id
        if log_id is None and hasattr(log, "ensure_log_id"):
            log_id = log.ensure_log_id()
    finally:
        if own:
            log.close()
    if log_id is None:
        raise SourceMismatch(
            f"the log {settings.describe_log()} has no id yet and was opened read-only, so a projection cannot "
            "record which log it was built from; open it once with write access (e.g. `caucus project` as its owner)"
        )
    return f"log:{log_id}"


def read_identity(log_id: str | None) -> str:
    """The source a reader checks a projection against (``check_source``) for a log it opened read-only,
    and so cannot give an id: ``log:<id>``, or words no projection recorded, so one built from a log
    with an id is refused."""
    return f"log:{log_id}" if log_id is not None else "a log with no id"


def _legacy_identity(settings: Settings) -> str:
    """What sets recorded as their source before logs had ids: a path or an address."""
    return backends_for(settings).legacy_log_identity()


def check_source(info: SetInfo, store: ProjectionStore, settings: Settings, identity: str) -> None:
    """Refuse to go on with a set built from another log than the configured one (SourceMismatch,
    with the one instruction that works). A set from before log ids is accepted if it names this
    log's path or address, as it always was."""
    if info.source == identity or (not info.source.startswith("log:") and info.source == _legacy_identity(settings)):
        return
    raise SourceMismatch(
        f"projection {info.name!r} v{info.version} in {store.describe()} was built from {_describe_source(info.source)}, "
        f"but the configured log {settings.describe_log()} is {_describe_source(identity)}: another log, whose "
        f"positions and events are not the ones this projection reflects. {NEW_LOG_HINT}"
    )


def _describe_source(source: str) -> str:
    return f"log {source[4:]}" if source.startswith("log:") else source


def serving_set(store: ProjectionStore, settings: Settings, name: str = DEFAULT_SET, *, identity: str | None = None) -> SetInfo:
    """The set ``caucus project`` keeps current: the serving one, created (and promoted) on first use.

    A set remembers the log it was built from (its id); projecting another log into it would mix two
    histories, so that is refused (``check_source``).
    """
    source = identity or log_identity(settings)
    info = store.ensure_serving(name, source=source)
    check_source(info, store, settings, source)
    return info


def open_log_of(settings: Settings, info: SetInfo, store: ProjectionStore) -> EventLog:
    """The configured log, for a command that reads it beside the projection ``info`` (a trail, an
    audit): that projection's own log, or an error. A log that is not there, while the projection names
    the log it was built from, is ``LogVanishedError``; another log is ``SourceMismatch``. Both are exit 3."""
    try:
        log = open_existing_log(settings)
    except LogMissingError as exc:
        if not info.source.startswith("log:"):
            raise
        raise _log_gone(settings, info, store.describe()) from exc
    try:
        check_source(info, store, settings, read_identity(log.log_id))
    except BaseException:
        log.close()
        raise
    return log


def unread_records(marks: Mapping[int, int], positions: Mapping[int, int]) -> int:
    """How many records the log holds beyond a projection's positions. A partition that ends before
    the projection's position there is a log lost or rewound (``LogLostError``, exit 3): what the
    projection applied from it is gone, and "nothing unread" would hide that."""
    for part, position in sorted(positions.items()):
        if marks.get(part, 0) < position:
            raise LogLostError(part, position, marks.get(part, 0))
    return sum(max(0, mark - positions.get(part, 0)) for part, mark in marks.items())


UNREAD_LOOKED_AT = 1000
"""How many unread records ``unread_events`` decodes to leave out the checkpoints; beyond that it counts all."""


def unread_events(log: EventLog, positions: Mapping[int, int], marks: Mapping[int, int] | None = None) -> int:
    """``unread_records`` less the signed checkpoints among them: a checkpoint is a statement about the
    log that changes no tally, and ``caucus checkpoint`` right after ``caucus project`` would otherwise
    leave every reader saying one record is not in what it shows. Only a short tail is decoded."""
    from ledger.codec import CodecError, default_codec
    from ledger.events import CheckpointSigned

    marks = log.high_watermarks() if marks is None else marks
    behind = unread_records(marks, positions)
    if not behind or behind > UNREAD_LOOKED_AT:
        return behind
    codec, checkpoints = default_codec(), 0
    try:
        for record in log.read({p: positions.get(p, 0) for p in marks}, max_records=behind):
            if record.position.offset < marks.get(record.position.partition, 0):
                try:
                    checkpoints += codec.decode(record.value).type == CheckpointSigned.TYPE
                except CodecError:
                    pass  # not a checkpoint: counted as unread
    except LogError:
        return behind  # the tail cannot be read now: every record of it is counted
    return behind - checkpoints


def existing_log_identity(settings: Settings, name: str = DEFAULT_SET) -> str:
    """``log_identity`` for a command that projects the log into the set ``name`` (``project``,
    ``replay``): a log that is not there, while that set is serving from a log, is ``LogVanishedError``
    (exit 3), as ``open_log_of`` says it to the readers, not "nothing has been recorded yet". Other sets
    in the store (of other logs sharing it) say nothing about this one."""
    try:
        return log_identity(settings)
    except LogMissingError as exc:
        built = _built_from_a_log(settings, name)
        if built is None:
            raise
        raise _log_gone(settings, *built) from exc


def _built_from_a_log(settings: Settings, name: str) -> tuple[SetInfo, str] | None:
    """The serving set ``name`` in the configured store (if there is one) and where it is, when it names
    the log it was built from."""
    from projections.stores import open_store

    try:
        store = open_store(settings, read_only=True)
    except (StoreError, OSError):
        return None
    try:
        info = store.serving(name)
        return (info, store.describe()) if info is not None and info.source.startswith("log:") else None
    finally:
        store.close()


def _log_gone(settings: Settings, info: SetInfo, where: str) -> LogVanishedError:
    return LogVanishedError(
        f"the log {settings.describe_log()} is not there, but projection {info.name!r} v{info.version} in {where} was "
        f"built from {_describe_source(info.source)}: that log was lost (a broker that keeps its topics in memory "
        "restarted, a log file removed), or the settings name another place than the one it was built from. "
        "Restore it from a copy, or give the place it is in; a new log is projected beside this projection with "
        "`caucus replay --new-log`."
    )

"""Putting a runner together from settings: which source, which store, which projection set.

Kept apart from the CLI so that ``caucus replay`` (which builds a new set and promotes it) and tests
assemble runners the same way ``caucus project`` does.
"""

from __future__ import annotations

from ledger.config import Settings, open_log
from ledger.log.port import EventLog
from projections.queries import DEFAULT_SET
from projections.sources import EmbeddedSource, KafkaGroupSource, Source
from projections.stores.port import ProjectionStore, SetInfo, StoreError

__all__ = ["DEFAULT_GROUP", "source_for", "serving_set", "log_identity", "open_existing_log", "SourceMismatch"]

DEFAULT_GROUP = "caucus-projections"


class SourceMismatch(StoreError):
    """The projection set was built from another log than the one configured."""


def source_for(settings: Settings, *, group: str = DEFAULT_GROUP, batch_size: int = 500, session_timeout_ms: int = 10_000) -> Source:
    if settings.kafka:
        # Polls return up to ``batch_size`` records; the consumer may hand out more at once when the
        # runner gathers a catch-up batch (``ProjectionRunner.catch_up_batch``).
        return KafkaGroupSource(open_log(settings), group, session_timeout_ms=session_timeout_ms, max_poll_records=max(batch_size, 2000))
    return EmbeddedSource(open_existing_log(settings), description=settings.describe_log())


def open_existing_log(settings: Settings) -> EventLog:
    """The configured log for reading: an existing embedded log is opened with the partition count
    it was created with (``open_log`` would insist on ``settings.partitions``)."""
    if settings.kafka:
        return open_log(settings)
    from ledger.log.sqlite import SqliteLog

    return SqliteLog(settings.log_path)


def log_identity(settings: Settings) -> str:
    """What a projection set records as its source: the topic, or the embedded log's absolute path
    (so the same log opened from another working directory is still recognised)."""
    if settings.kafka:
        return settings.describe_log()
    return f"sqlite:{settings.log_path.resolve()}"


def serving_set(store: ProjectionStore, settings: Settings, name: str = DEFAULT_SET) -> SetInfo:
    """The set ``caucus project`` keeps current: the serving one, created (and promoted) on first use.

    A set remembers the log it was built from; projecting another log into it would mix two
    histories, so that is refused with both names.
    """
    source = log_identity(settings)
    info = store.ensure_serving(name, source=source)
    if info.source != source:
        raise SourceMismatch(
            f"projection {name!r} (v{info.version}) in {store.describe()} was built from {info.source}, "
            f"not {source}; use another store (--database / --data-dir) or rebuild with `caucus replay`"
        )
    return info

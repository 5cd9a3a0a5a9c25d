"""The backends the ledger's core may not open: projection stores and consumer-group sources.

``ledger.backends`` chooses the kinds from the settings (``store_kind``, ``log_kind``); this module
holds what opens each kind, because the adapters live in ``projections`` and the core of ``ledger``
does not import it. A log kind with consumer groups (Kafka) has a group source here; every other log
is read by a runner through ``EmbeddedSource``, which needs only the ``EventLog`` port.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ledger.backends import backends_for
from ledger.config import Settings
from projections.kafka_source import KafkaGroupSource
from projections.sources import EmbeddedSource, Source
from projections.stores.port import ProjectionStore

__all__ = ["STORES", "GROUP_SOURCES", "open_store", "group_source", "has_groups"]


def _sqlite(settings: Settings, read_only: bool) -> ProjectionStore:
    from projections.stores.port import StoreMissing
    from projections.stores.sqlite import SqliteStore

    try:
        return SqliteStore(settings.store_path, read_only=read_only)
    except StoreMissing as exc:
        if backends_for(settings).log_kind != "sqlite" or settings.log_path.exists():
            raise
        # neither a log nor a store: "run `caucus project`" would only meet "no event log" next
        raise StoreMissing(
            f"nothing has been recorded in {settings.data_dir} yet (no event log, no projection store): record events "
            "first (`caucus demo`, `caucus import idp2020 --data DIR`, `caucus report`, or the intake), then `caucus "
            "project --until-caught-up` builds the tally; or --data-dir / CAUCUS_DATA_DIR points elsewhere"
        ) from exc


def _postgres(settings: Settings, read_only: bool) -> ProjectionStore:
    from projections.stores.postgres import PostgresStore

    assert settings.database is not None
    return PostgresStore(settings.database)


def _memory(settings: Settings, read_only: bool) -> ProjectionStore:
    from projections.stores.memory import MemoryStore

    return MemoryStore(str(settings.data_dir), read_only=read_only)


STORES: dict[str, Callable[[Settings, bool], ProjectionStore]] = {"sqlite": _sqlite, "postgres": _postgres, "memory": _memory}
"""Projection store openers by ``Backends.store_kind``."""

GroupSource = Callable[[Settings, str, int, int, float, bool], Source]
"""(settings, group, batch size, session timeout in ms, no-partition timeout, static start) -> a source."""


def _kafka_group(settings: Settings, group: str, batch_size: int, session_timeout_ms: int, no_partition_timeout: float,
                 static_start: bool) -> Source:
    # Polls return up to ``batch_size`` records; the consumer may hand out more at once when the
    # runner gathers a catch-up batch (``ProjectionRunner.catch_up_batch``). Consumer groups are
    # kafka-python's whatever ``kafka_library`` says: the confluent adapter reads and appends only.
    kafka_python = replace(settings, kafka_library="kafka-python")
    return KafkaGroupSource(backends_for(kafka_python).open_log(), group, session_timeout_ms=session_timeout_ms,
                            max_poll_records=max(batch_size, 2000), no_partition_timeout=no_partition_timeout,
                            static_start=static_start)


GROUP_SOURCES: dict[str, GroupSource] = {"kafka": _kafka_group}
"""Consumer-group sources by ``Backends.log_kind``."""


def open_store(settings: Settings, *, read_only: bool = False) -> ProjectionStore:
    """``read_only``: for commands that only read; an embedded store is then neither created nor
    changed (``StoreMissing`` if there is none)."""
    return STORES[backends_for(settings).store_kind](settings, read_only)


def has_groups(settings: Settings) -> bool:
    """Whether runners of this log share its partitions through a consumer group."""
    return backends_for(settings).log_kind in GROUP_SOURCES


def group_source(settings: Settings, group: str, *, batch_size: int, session_timeout_ms: int, no_partition_timeout: float,
                 static_start: bool = True) -> Source:
    """A runner's source: the log's consumer group where it has one, else the whole log, read from
    the positions the store gives (``no_partition_timeout``, ``static_start``: see ``KafkaGroupSource``)."""
    backends = backends_for(settings)
    make = GROUP_SOURCES.get(backends.log_kind)
    if make is not None:
        return make(settings, group, batch_size, session_timeout_ms, no_partition_timeout, static_start)
    return EmbeddedSource(backends.open_existing_log(for_runner=True), description=backends.describe_log())

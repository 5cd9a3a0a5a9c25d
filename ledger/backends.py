"""Which backend holds what: the one place that reads the backend settings.

The log (with the results feed's log and the intake's state directory, which follow it) and the
stores (the projection store and the checkpoint store) are chosen independently (except with
``backend = "memory"``, which keeps both the log and the projection store in this process's memory), so an operator can,
say, replay a Kafka log into a local SQLite store for an audit. Every module that opens one asks
``backends_for(settings)``; none tests ``settings.kafka`` or ``settings.database`` itself, so adding a
backend means one entry here (or in ``projections.backends`` for what the ledger's core may not open:
projection stores and consumer-group sources) and its adapter.

Adapters are imported only when asked for: the embedded default must not pay for (or fail on) a
broker client or a database driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ledger.log.port import EventLog, LogError, LogUnavailableError

if TYPE_CHECKING:
    from ledger.config import Settings
    from ledger.log.latest import LatestView
    from ledger.integrity.store import CheckpointStore

__all__ = ["Backends", "LogBackend", "backends_for", "LOG_BACKENDS", "RESULTS_LOG_FILE", "LATEST_SUFFIX"]

RESULTS_LOG_FILE = "results.sqlite3"
"""The embedded results feed: a second SQLite log next to the event log."""
LATEST_SUFFIX = ".latest"
"""The results feed's latest view on Kafka: the topic ``<results topic>.latest``, compacted."""



_RESULTS_ROLE = ("results feed", "; the file may be truncated or damaged: it holds only what `caucus project` and "
                 "`caucus checkpoint` publish, so move it aside: `caucus project` publishes every current tally "
                 "again, and the next `caucus checkpoint` its checkpoint")

class LogBackend(Protocol):
    """Where the event log and the results feed's log live, and what follows from it."""

    def open(self, settings: Settings, *, read_only: bool, topic: str | None) -> EventLog: ...

    def open_existing(self, settings: Settings, *, for_runner: bool) -> EventLog: ...

    def open_results(self, settings: Settings, *, read_only: bool) -> EventLog: ...

    def open_results_latest(self, settings: Settings, *, read_only: bool) -> LatestView:
        """The results feed's latest record per key (``ledger.log.latest``)."""
        ...

    def describe(self, settings: Settings) -> str: ...

    def describe_results(self, settings: Settings) -> str: ...

    def legacy_identity(self, settings: Settings) -> str:
        """What projection sets recorded as their source before logs had ids: a path or an address."""
        ...

    def intake_dir(self, settings: Settings) -> Path:
        """One directory per log target, so a spool is never forwarded to a log it was not meant for."""
        ...

    def intake_name(self, settings: Settings) -> str: ...


class _SqliteLogs:
    """The embedded log: ``log.sqlite3`` and ``results.sqlite3`` in the data directory."""

    def open(self, settings: Settings, *, read_only: bool, topic: str | None) -> EventLog:
        from ledger.log.sqlite import SqliteLog

        if read_only:
            return SqliteLog(settings.log_path, read_only=True)
        return SqliteLog(settings.log_path, partitions=settings.partitions if settings.partitions_chosen else None)

    def open_existing(self, settings: Settings, *, for_runner: bool) -> EventLog:
        """A runner opens it for writing when it can, so a log from before log ids gets its id."""
        from ledger.log.sqlite import SqliteLog

        if for_runner:
            try:
                return SqliteLog(settings.log_path, create=False)
            except LogUnavailableError:
                pass  # e.g. a log in a directory this user may not write: reading is all a runner does
        return SqliteLog(settings.log_path, read_only=True)

    def open_results(self, settings: Settings, *, read_only: bool) -> EventLog:
        from ledger.log.sqlite import SqliteLog

        path = settings.data_dir / RESULTS_LOG_FILE
        if read_only:
            return SqliteLog(path, read_only=True, role=_RESULTS_ROLE)
        return SqliteLog(path, partitions=None if path.exists() or not settings.partitions_chosen else settings.partitions,
                         role=_RESULTS_ROLE)

    def open_results_latest(self, settings: Settings, *, read_only: bool) -> LatestView:
        from ledger.log.sqlite_latest import SqliteLatest

        return SqliteLatest(settings.data_dir / RESULTS_LOG_FILE, read_only=read_only)

    def describe(self, settings: Settings) -> str:
        return f"sqlite:{settings.log_path}"

    def describe_results(self, settings: Settings) -> str:
        return f"sqlite:{settings.data_dir / RESULTS_LOG_FILE}"

    def legacy_identity(self, settings: Settings) -> str:
        return f"sqlite:{settings.log_path.resolve()}"

    def intake_dir(self, settings: Settings) -> Path:
        return settings.data_dir / "intake" / "embedded"

    def intake_name(self, settings: Settings) -> str:
        return "embedded"


class _KafkaLogs:
    """A Kafka topic (``settings.topic``) and the results topic beside it."""

    def open(self, settings: Settings, *, read_only: bool, topic: str | None,
             topic_configs: dict[str, str] | None = None) -> EventLog:
        assert settings.kafka is not None
        if settings.kafka_library == "confluent":
            return _confluent_log(settings, read_only=read_only, topic=topic, topic_configs=topic_configs)
        from ledger.log.kafka import KafkaLog

        return KafkaLog(settings.kafka, topic or settings.topic, partitions=settings.partitions,
                        client_options=settings.kafka_options, read_only=read_only,
                        replication=settings.kafka_replication, topic_configs=topic_configs)

    def open_existing(self, settings: Settings, *, for_runner: bool) -> EventLog:
        return self.open(settings, read_only=not for_runner, topic=None)

    def open_results(self, settings: Settings, *, read_only: bool) -> EventLog:
        """Opened to publish, the feed gets an id of its own if it has none (a topic from before, or one
        made again by a broker that restarted empty), as the event log does: a subscriber that resumes
        from its positions can then tell the feed it followed from another."""
        log = self.open(settings, read_only=read_only, topic=settings.results_topic)
        ensure = getattr(log, "ensure_log_id", None)
        if not read_only and ensure is not None and log.log_id is None:
            try:
                ensure()
            except BaseException:
                log.close()
                raise
        return log

    def open_results_latest(self, settings: Settings, *, read_only: bool) -> LatestView:
        """A topic of its own, created compacted: the broker keeps the newest copy of each key."""
        from ledger.log.latest import CopyLatest

        return CopyLatest(self.open(settings, read_only=read_only, topic=settings.results_topic + LATEST_SUFFIX,
                                    topic_configs={"cleanup.policy": "compact"}))

    def describe(self, settings: Settings) -> str:
        return f"kafka://{settings.kafka}/{settings.topic}"

    def describe_results(self, settings: Settings) -> str:
        return f"kafka://{settings.kafka}/{settings.results_topic}"

    def legacy_identity(self, settings: Settings) -> str:
        return self.describe(settings)

    def intake_dir(self, settings: Settings) -> Path:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"kafka-{settings.kafka}-{settings.topic}")[:80]
        return settings.data_dir / "intake" / slug

    def intake_name(self, settings: Settings) -> str:
        return self.describe(settings)


def _confluent_log(settings: Settings, *, read_only: bool, topic: str | None,
                   topic_configs: dict[str, str] | None = None) -> EventLog:
    """The same topic through confluent-kafka (optional: its absence is a user's error, named)."""
    try:
        from ledger.log.kafka_confluent import ConfluentLog
    except ImportError as exc:
        raise LogError(f"kafka_library = \"confluent\" needs confluent-kafka, which is not installed "
                       f"(pip install 'caucus-ledger[confluent]'): {exc}") from exc
    assert settings.kafka is not None
    return ConfluentLog(settings.kafka, topic or settings.topic, partitions=settings.partitions,
                        client_options=settings.kafka_options, read_only=read_only,
                        replication=settings.kafka_replication, topic_configs=topic_configs)


class _MemoryLogs:
    """Logs in this process's memory (``ledger.log.memory``), named after the data directory and the
    topic: for tests, and for a whole run in one process (``caucus demo``)."""

    def _name(self, settings: Settings, topic: str) -> str:
        return f"{settings.data_dir}/{topic}"

    def open(self, settings: Settings, *, read_only: bool, topic: str | None) -> EventLog:
        from ledger.log.memory import MemoryLog

        name = self._name(settings, topic or settings.topic)
        if read_only:
            return MemoryLog(name, read_only=True)
        return MemoryLog(name, partitions=settings.partitions)

    def open_existing(self, settings: Settings, *, for_runner: bool) -> EventLog:
        from ledger.log.memory import MemoryLog

        return MemoryLog(self._name(settings, settings.topic), read_only=not for_runner, create=False)

    def open_results(self, settings: Settings, *, read_only: bool) -> EventLog:
        from ledger.log.memory import MemoryLog

        name = self._name(settings, settings.results_topic)
        return MemoryLog(name, read_only=True) if read_only else MemoryLog(name)

    def open_results_latest(self, settings: Settings, *, read_only: bool) -> LatestView:
        from ledger.log.latest import CopyLatest

        return CopyLatest(self.open(settings, read_only=read_only, topic=settings.results_topic + LATEST_SUFFIX))

    def describe(self, settings: Settings) -> str:
        return f"memory:{self._name(settings, settings.topic)}"

    def describe_results(self, settings: Settings) -> str:
        return f"memory:{self._name(settings, settings.results_topic)}"

    def legacy_identity(self, settings: Settings) -> str:
        return self.describe(settings)

    def intake_dir(self, settings: Settings) -> Path:
        return settings.data_dir / "intake" / "memory"

    def intake_name(self, settings: Settings) -> str:
        """With the log's id: each process has a new log, and the intake's snapshot (on disk) of an
        earlier one must be ignored, not taken for a lost log."""
        return f"{self.describe(settings)} ({self.open(settings, read_only=False, topic=None).log_id})"


LOG_BACKENDS: dict[str, LogBackend] = {"sqlite": _SqliteLogs(), "kafka": _KafkaLogs(), "memory": _MemoryLogs()}
"""Log backends by kind; ``Backends.log_kind`` says which one the settings choose."""


def _sqlite_checkpoints(settings: Settings, create: bool) -> CheckpointStore | None:
    from ledger.integrity.store import STORE_FILE, SqliteCheckpointStore

    path = Path(settings.data_dir) / STORE_FILE
    if not create and not path.exists():
        return None
    return SqliteCheckpointStore(path, read_only=not create)


def _postgres_checkpoints(settings: Settings, create: bool) -> CheckpointStore | None:
    from ledger.integrity.store import PostgresCheckpointStore

    assert settings.database is not None
    return PostgresCheckpointStore(settings.database)


def _memory_checkpoints(settings: Settings, create: bool) -> CheckpointStore | None:
    from ledger.integrity.memory_store import MemoryCheckpointStore

    name = str(settings.data_dir)
    if not create and not MemoryCheckpointStore.exists(name):
        return None
    return MemoryCheckpointStore(name)


CHECKPOINT_STORES = {"sqlite": _sqlite_checkpoints, "postgres": _postgres_checkpoints, "memory": _memory_checkpoints}
"""Checkpoint stores by store kind: they live where the projection store does."""


@dataclass(frozen=True, slots=True)
class Backends:
    """The backends one ``Settings`` chooses, and how to open each."""

    settings: Settings

    @property
    def log_kind(self) -> str:
        if self.settings.backend == "memory":
            return "memory"
        return "kafka" if self.settings.kafka else "sqlite"

    @property
    def store_kind(self) -> str:
        if self.settings.backend == "memory":
            return "memory"
        return "postgres" if self.settings.database else "sqlite"

    @property
    def _logs(self) -> LogBackend:
        return LOG_BACKENDS[self.log_kind]

    def open_log(self, *, read_only: bool = False, topic: str | None = None) -> EventLog:
        """``read_only``: for commands that only read. An embedded log is opened with the partition
        count it was created with, nothing is created (``LogMissingError`` if it is not there) and
        nothing written."""
        return self._logs.open(self.settings, read_only=read_only, topic=topic)

    def open_existing_log(self, *, for_runner: bool = False) -> EventLog:
        """The log, which must exist, for reading; a runner's may also write the log's id."""
        return self._logs.open_existing(self.settings, for_runner=for_runner)

    def open_results_log(self, *, read_only: bool = False) -> EventLog:
        """The results feed's log; ``read_only`` for subscribers (nothing is created)."""
        return self._logs.open_results(self.settings, read_only=read_only)

    def open_results_latest(self, *, read_only: bool = False) -> LatestView:
        """The results feed's latest record per key; ``read_only`` for subscribers (on Kafka a missing
        topic is ``LogMissingError``; an embedded view that is not there reads as empty)."""
        return self._logs.open_results_latest(self.settings, read_only=read_only)

    def describe_log(self) -> str:
        return self._logs.describe(self.settings)

    def describe_results_log(self) -> str:
        return self._logs.describe_results(self.settings)

    def legacy_log_identity(self) -> str:
        return self._logs.legacy_identity(self.settings)

    def intake_dir(self) -> Path:
        return self._logs.intake_dir(self.settings)

    def intake_name(self) -> str:
        return self._logs.intake_name(self.settings)

    def describe_store(self) -> str:
        if self.store_kind == "memory":
            return f"memory:{self.settings.data_dir}"
        return self.settings.database or str(self.settings.store_path)

    def open_checkpoint_store(self, *, create: bool) -> CheckpointStore | None:
        """With ``create`` false a store that does not exist is None: verifying must not create files."""
        return CHECKPOINT_STORES[self.store_kind](self.settings, create)


def backends_for(settings: Settings) -> Backends:
    return Backends(settings)

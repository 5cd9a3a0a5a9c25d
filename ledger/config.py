"""Where the ledger keeps its log and its views.

With nothing configured everything is embedded: a SQLite log and store under ``./caucus-data``. Naming
a Kafka bootstrap server (``--kafka`` or ``CAUCUS_KAFKA``) moves the log to a topic, and naming a
PostgreSQL URL (``--database`` or ``CAUCUS_DATABASE``) moves the views there. The two choices are
independent so an operator can, say, replay a Kafka log into a local SQLite store for an audit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ledger.log.port import EventLog

__all__ = ["Settings", "open_log"]

DEFAULT_DATA_DIR = Path("caucus-data")
DEFAULT_TOPIC = "caucus.events"
DEFAULT_RESULTS_TOPIC = "caucus.results"


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path = DEFAULT_DATA_DIR
    kafka: str | None = None
    topic: str = DEFAULT_TOPIC
    results_topic: str = DEFAULT_RESULTS_TOPIC
    database: str | None = None
    partitions: int = 8

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        return cls(
            data_dir=Path(e.get("CAUCUS_DATA_DIR", str(DEFAULT_DATA_DIR))),
            kafka=e.get("CAUCUS_KAFKA") or None,
            topic=e.get("CAUCUS_TOPIC", DEFAULT_TOPIC),
            results_topic=e.get("CAUCUS_RESULTS_TOPIC", DEFAULT_RESULTS_TOPIC),
            database=e.get("CAUCUS_DATABASE") or None,
            partitions=int(e.get("CAUCUS_PARTITIONS", "8")),
        )

    def with_overrides(self, **changes: object) -> Settings:
        """Apply CLI options over the environment; None means "not given"."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @property
    def log_path(self) -> Path:
        return self.data_dir / "log.sqlite3"

    @property
    def store_path(self) -> Path:
        return self.data_dir / "store.sqlite3"

    def describe_log(self) -> str:
        return f"kafka://{self.kafka}/{self.topic}" if self.kafka else f"sqlite:{self.log_path}"


def open_log(settings: Settings) -> EventLog:
    """The configured log adapter. Kafka is imported only when asked for: the embedded default
    must not pay for (or fail on) a broker client."""
    if settings.kafka:
        from ledger.log.kafka import KafkaLog

        return KafkaLog(settings.kafka, settings.topic, partitions=settings.partitions)
    from ledger.log.sqlite import SqliteLog

    return SqliteLog(settings.log_path, partitions=settings.partitions)

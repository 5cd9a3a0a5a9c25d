"""Where the ledger keeps its log and its views.

With nothing configured everything is embedded: a SQLite log and store under ``./caucus-data``. Naming
a Kafka bootstrap server (``--kafka`` or ``CAUCUS_KAFKA``) moves the log to a topic, and naming a
PostgreSQL URL (``--database`` or ``CAUCUS_DATABASE``) moves the views there. ``ledger.backends``
turns these settings into the adapters; nothing else reads them to choose one.

``Settings`` is the effective configuration the code works with; ``ledger.settings`` builds and
validates it from a TOML file, ``CAUCUS_*`` variables and command-line options, and says where each
value came from. Readers open the log with ``read_only=True``: nothing is created or written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ledger.backends import backends_for
from ledger.files import DEFAULT_FILE_MODE
from ledger.log.port import EventLog

__all__ = ["Settings", "open_log", "results_topic_for"]

DEFAULT_DATA_DIR = Path("caucus-data")
DEFAULT_TOPIC = "caucus.events"
DEFAULT_RESULTS_TOPIC = "caucus.results"


def results_topic_for(topic: str) -> str:
    """The results topic of an event topic when none is set: ``caucus.results`` beside the default
    event topic, else ``<topic>.results``. Why follow the event topic: two ledgers on one cluster that
    set only their event topics would otherwise publish into one results topic and mix their tallies."""
    return DEFAULT_RESULTS_TOPIC if topic == DEFAULT_TOPIC else f"{topic}.results"


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path = DEFAULT_DATA_DIR
    kafka: str | None = None
    topic: str = DEFAULT_TOPIC
    results_topic: str = ""
    """"": ``results_topic_for(topic)``."""
    database: str | None = None
    backend: str | None = None
    """``memory``: the log and the projection store in this process's memory (``ledger.backends``)."""
    partitions: int = 8
    partitions_chosen: bool = True
    """``partitions`` was given (flag, variable or file; settings built in code always give it). When it
    was not, an existing embedded log keeps the count it was created with, so a log made with
    ``--partitions`` needs no repeat of it."""
    kafka_options: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """kafka-python client properties for every client (security, SASL, TLS, pass-through ones)."""
    kafka_replication: int = 1
    """Replication factor of the topics the ledger creates."""
    kafka_library: str = "kafka-python"
    """The log's Kafka client: ``kafka-python`` or ``confluent`` (``ledger.backends``)."""
    file_mode: int = DEFAULT_FILE_MODE
    credentials: Path | None = None
    token: str | None = field(default=None, repr=False)
    intake_token: str | None = field(default=None, repr=False)
    checkpoint_key: Path | None = None
    checkpoint_public_key: str | None = None

    def __post_init__(self) -> None:
        if not self.results_topic:
            object.__setattr__(self, "results_topic", results_topic_for(self.topic))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings from ``caucus.toml`` (or ``CAUCUS_CONFIG``) and ``CAUCUS_*`` variables, without
        command-line options; ``ledger.settings.SettingsError`` if a value breaks a rule."""
        from ledger.settings import load_settings

        return load_settings(env=env).settings

    def with_overrides(self, **changes: object) -> Settings:
        """Apply CLI options over the environment; None means "not given"."""
        given: dict[str, Any] = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **given)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "log.sqlite3"

    @property
    def store_path(self) -> Path:
        return self.data_dir / "store.sqlite3"

    def describe_log(self) -> str:
        return backends_for(self).describe_log()


def open_log(settings: Settings, *, read_only: bool = False, topic: str | None = None) -> EventLog:
    """The configured log (``ledger.backends`` chooses the adapter). ``read_only``: for commands
    that only read; nothing is created (``LogMissingError`` if it is not there) and nothing written."""
    return backends_for(settings).open_log(read_only=read_only, topic=topic)

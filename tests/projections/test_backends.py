"""The backend factory: which adapters a Settings chooses, and a whole projection run on the in-memory
backend assembled the way ``caucus project`` assembles it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from ledger.backends import backends_for
from ledger.config import Settings, open_log
from ledger.journal import Journal
from ledger.log.memory import MemoryLog
from ledger.log.memory import forget as forget_log
from ledger.log.port import LogMissingError
from ledger.settings import SettingsError, load_settings
from projections.backends import has_groups
from projections.feed import open_results_log, results_log_name
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores import open_store
from projections.stores.memory import MemoryStore
from projections.stores.memory import forget as forget_store
from projections.stores.port import StoreMissing
from projections.wiring import serving_set, source_for


def test_kinds_follow_the_settings(tmp_path: Path) -> None:
    embedded = backends_for(Settings(data_dir=tmp_path))
    assert (embedded.log_kind, embedded.store_kind) == ("sqlite", "sqlite")
    assert embedded.describe_log() == f"sqlite:{tmp_path / 'log.sqlite3'}"
    assert embedded.intake_dir() == tmp_path / "intake" / "embedded"
    remote = backends_for(Settings(data_dir=tmp_path, kafka="broker:9092", database="postgresql://u@db/x"))
    assert (remote.log_kind, remote.store_kind) == ("kafka", "postgres")
    assert remote.describe_results_log() == "kafka://broker:9092/caucus.results"
    assert remote.intake_dir() == tmp_path / "intake" / "kafka-broker_9092-caucus.events"
    assert has_groups(Settings(kafka="broker:9092")) and not has_groups(Settings())
    memory = backends_for(Settings(data_dir=tmp_path, kafka="broker:9092", backend="memory"))
    assert (memory.log_kind, memory.store_kind) == ("memory", "memory"), "memory keeps both in the process"


def test_a_load_given_an_environment_reads_only_that_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A load that names its environment (tests, the model) must not pick up the process's variables."""
    monkeypatch.setenv("CAUCUS_TOPIC", "from-the-process")
    monkeypatch.setenv("CAUCUS_PARTITIONS", "0")
    assert load_settings(env={}).settings.topic == "caucus.events"
    assert load_settings(env={"caucus_topic": "given"}).settings.topic == "given"
    with pytest.raises(SettingsError, match="partitions"):
        load_settings()


def test_the_memory_backend_is_a_setting(tmp_path: Path) -> None:
    assert load_settings(env={"CAUCUS_BACKEND": "memory"}).settings.backend == "memory"
    with pytest.raises(SettingsError, match="backend"):
        load_settings(env={"CAUCUS_BACKEND": "floppy"})


def test_a_projection_on_the_memory_backend_equals_one_on_the_embedded_one(support: ModuleType, tmp_path: Path) -> None:
    events = support.election_log(30, corrections=2, rejections=1)
    results: list[dict[str, object]] = []
    for settings in (Settings(data_dir=tmp_path / "sqlite"), Settings(data_dir=tmp_path / "memory", backend="memory")):
        with pytest.raises((LogMissingError, StoreMissing)):
            open_store(settings, read_only=True) if settings.backend else open_log(settings, read_only=True)
        Journal(open_log(settings)).append_batch(events)
        store = open_store(settings)
        info = serving_set(store, settings)
        source = source_for(settings)
        assert isinstance(source, EmbeddedSource)
        runner = ProjectionRunner(store, info.set_id, source, poll_timeout=0.01)
        assert runner.run(until_caught_up=True).applied == len(events)
        results.append(support.snapshot(open_store(settings, read_only=True), info.set_id))
        store.close()
    assert results[0] == results[1]
    name = str(tmp_path / "memory")
    assert isinstance(open_store(Settings(data_dir=tmp_path / "memory", backend="memory")), MemoryStore)
    memory = Settings(data_dir=tmp_path / "memory", backend="memory")
    assert isinstance(open_results_log(memory), MemoryLog)
    assert results_log_name(memory) == f"memory:{name}/caucus.results"
    forget_store(name)
    forget_log(f"{name}/caucus.events")
    forget_log(f"{name}/caucus.results")


def test_an_intake_on_the_memory_backend_ignores_the_snapshot_of_an_earlier_process(support: ModuleType, tmp_path: Path) -> None:
    from producers.intake import Intake

    settings = Settings(data_dir=tmp_path, backend="memory")
    name = f"{tmp_path}/caucus.events"
    Journal(open_log(settings)).append_batch(support.election_log(5))
    with Intake.for_settings(settings) as first:
        assert first.state.applied > 0
        first.save_snapshot(force=True)
    forget_log(name)  # the process ends: its log is gone, the snapshot on disk stays
    try:
        with Intake.for_settings(settings) as second:
            assert second.snapshot_path == first.snapshot_path and second.snapshot_path.exists()
            assert second.state.applied == 0 and second.log_lost is None
    finally:
        forget_log(name)

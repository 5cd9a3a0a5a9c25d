"""``caucus replay``: a rebuild beside the serving set, the atomic switch, the old set kept, and
``--as-of`` builds that never touch the live projection. Both stores; the embedded log and Kafka."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from ledger.config import Settings
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from projections.asof import Cut, tally_as_of
from projections.queries import load_view
from projections.replay import build_as_of, rebuild
from projections.set_builders import built_at, shown_state
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore
from projections.wiring import serving_set

CAUCUS = str(Path(sys.executable).parent / "caucus")
Open = Callable[[], ProjectionStore]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}


def _cli(data: Path, database: str | None, *args: str) -> list[str]:
    return [CAUCUS, "--data-dir", str(data), *(["--database", database] if database else []), *args]


def _cli_store(data: Path, database: str | None) -> ProjectionStore:
    """The store the command line uses (the data dir's SQLite file, or the database)."""
    if database:
        from projections.stores.postgres import PostgresStore

        return PostgresStore(database)
    from projections.stores.sqlite import SqliteStore

    return SqliteStore(data / "store.sqlite3")


def _project(store: ProjectionStore, set_id: int, path: Path, batch: int = 200) -> None:
    ProjectionRunner(store, set_id, EmbeddedSource(SqliteLog(path)), batch_size=batch, poll_timeout=0.01).run(until_caught_up=True)


def _reference(support: ModuleType, store: ProjectionStore, events: list[Any], tmp_path: Path) -> int:
    """A fresh projection of ``events`` from a log of its own, in a set that never serves."""
    log = SqliteLog(tmp_path / "reference.sqlite3", partitions=8)
    Journal(log).append_batch(events)
    sid = store.create_set("reference", source="reference").set_id
    _project(store, sid, log.path, batch=1000)
    return sid


def _state_tallies(store: ProjectionStore, set_id: int | None = None) -> dict[str, str]:
    view = load_view(store, set_id=set_id)
    return {u: t.dumps() for u, t in sorted(view.units.items())}


def test_the_serving_set_answers_during_a_rebuild_then_the_switch_is_atomic(
    support: ModuleType, open_store: Open, database_url: str | None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    events = support.election_log(60, corrections=2, rejections=1)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(events)
    settings = Settings(data_dir=data, database=database_url)
    store, reader = open_store(), open_store()
    old = serving_set(store, settings)
    _project(store, old.set_id, log.path)
    before = _state_tallies(reader)
    state_before = load_view(reader).state().to_json()
    seen: list[int] = []

    def between_batches(changes: Any, positions: dict[int, int]) -> None:
        view = load_view(reader)  # another connection, as `caucus tally` would be
        assert view.set.set_id == old.set_id and view.set.state == "serving"
        assert {u: t.dumps() for u, t in sorted(view.units.items())} == before
        assert view.state().to_json() == state_before
        seen.append(sum(positions.values()))

    outcome = rebuild(store, settings, batch_size=25, source=lambda: EmbeddedSource(SqliteLog(log.path)),
                      on_commit=between_batches, poll_timeout=0.01, catch_up_batch=0)
    assert len(seen) >= 5 and seen == sorted(seen), "the serving set was queried between the rebuild's batches"
    assert outcome.promoted and outcome.progress.applied == len(events)
    assert outcome.built.state == "serving" and outcome.built.version == old.version + 1
    assert outcome.previous is not None and outcome.previous.state == "retired"
    served = reader.serving("tally")
    assert served is not None and served.set_id == outcome.built.set_id
    assert {s.set_id: s.state for s in reader.sets("tally")} == {old.set_id: "retired", outcome.built.set_id: "serving"}
    ref = _reference(support, store, events, tmp_path)
    assert support.snapshot(reader, served.set_id) == support.snapshot(reader, ref)
    assert _state_tallies(reader) == _state_tallies(reader, ref) == before
    assert support.snapshot(reader, old.set_id) == support.snapshot(reader, ref), "the old set is kept as it was"


def test_records_appended_during_a_rebuild_reach_the_new_set_after_the_switch(
    support: ModuleType, open_store: Open, database_url: str | None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    events = support.election_log(50, corrections=2)
    first, later = events[: len(events) // 2], events[len(events) // 2 :]
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(first)
    settings = Settings(data_dir=data, database=database_url)
    store = open_store()
    old = serving_set(store, settings)
    _project(store, old.set_id, log.path)
    appended: list[bool] = []

    def live_traffic(changes: Any, positions: dict[int, int]) -> None:
        if not appended:
            Journal(SqliteLog(log.path)).append_batch(later)
            appended.append(True)

    outcome = rebuild(store, settings, batch_size=20, source=lambda: EmbeddedSource(SqliteLog(log.path)),
                      on_commit=live_traffic, poll_timeout=0.01, catch_up_batch=0)
    assert outcome.promoted
    # What `caucus project` does after the switch: carry on with the serving set from its positions.
    _project(store, serving_set(store, settings).set_id, log.path)
    ref = _reference(support, store, events, tmp_path)
    assert support.snapshot(store, outcome.built.set_id) == support.snapshot(store, ref)


def _served(support: ModuleType, open_store: Open, tmp_path: Path, units: int) -> tuple[SqliteLog, Settings, Any, Any]:
    """An embedded log of ``units`` units and the store's serving set projected from it."""
    data = tmp_path / "data"
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(support.election_log(units))
    settings = Settings(data_dir=data)
    store = open_store()
    old = serving_set(store, settings)
    _project(store, old.set_id, log.path)
    return log, settings, store, old


def test_a_stopped_rebuild_is_not_promoted(support: ModuleType, open_store: Open, tmp_path: Path) -> None:
    log, settings, store, old = _served(support, open_store, tmp_path, 40)
    batches: list[int] = []
    outcome = rebuild(store, settings, batch_size=10, source=lambda: EmbeddedSource(SqliteLog(log.path)),
                      on_commit=lambda c, p: batches.append(1), stop=lambda: len(batches) >= 2, poll_timeout=0.01,
                      catch_up_batch=0)
    assert not outcome.promoted and outcome.built.state == "building"
    assert shown_state(store.get_set(outcome.built.set_id)) != "built", "stopped: not built to its end"
    assert store.serving("tally").set_id == old.set_id  # type: ignore[union-attr]
    assert any("not promoted" in n for n in outcome.notes)


def test_a_rebuild_not_to_be_promoted_is_marked_built_when_done(support: ModuleType, open_store: Open, tmp_path: Path) -> None:
    """It stayed ``building`` for good, which read as a replay still at work (or one that died)."""
    log, settings, store, old = _served(support, open_store, tmp_path, 20)
    outcome = rebuild(store, settings, batch_size=10, source=lambda: EmbeddedSource(SqliteLog(log.path)), poll_timeout=0.01,
                      promote=False)
    assert not outcome.promoted and outcome.progress.caught_up
    assert shown_state(outcome.built) == shown_state(store.get_set(outcome.built.set_id)) == "built"
    assert outcome.to_json()["built"]["state"] == "built"
    assert built_at(outcome.built) is not None and built_at(store.get_set(old.set_id)) is None
    assert load_view(store, set_id=outcome.built.set_id).meta()["projection_set"]["state"] == "built", "tally --json, diff"
    assert store.serving("tally").set_id == old.set_id  # type: ignore[union-attr]


def test_as_of_builds_a_set_that_never_serves(
    support: ModuleType, open_store: Open, database_url: str | None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    events = support.election_log(40, corrections=2)
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(events)
    settings = Settings(data_dir=data, database=database_url)
    store = open_store()
    live = serving_set(store, settings)
    _project(store, live.set_id, log.path)
    live_before = support.snapshot(store, live.set_id)
    night = support.T0 + timedelta(hours=2)  # reports in, no correction yet
    outcome = build_as_of(store, settings, Cut(at=night), batch_size=30, log=log,
                          source=lambda: EmbeddedSource(SqliteLog(log.path)), poll_timeout=0.01)
    assert outcome.built.name == "tally-as-of" and outcome.built.state == "building" and not outcome.promoted
    assert shown_state(store.get_set(outcome.built.set_id)) == "built"
    assert store.serving("tally").set_id == live.set_id  # type: ignore[union-attr]
    assert support.snapshot(store, live.set_id) == live_before
    expected = tally_as_of(SqliteLog(log.path), Cut(at=night))
    got = load_view(store, set_id=outcome.built.set_id)
    assert {u: t.dumps() for u, t in got.units.items()} == {u: t.dumps() for u, t in expected.units.items()}
    assert got.positions == expected.positions
    assert all(t.status == "reported" for t in got.units.values())
    assert json.loads(outcome.built.params)["cut"]["at"] == night.isoformat()
    # By position: the first records of each partition.
    marks = log.high_watermarks()
    cut = Cut(ends={p: (m + 1) // 2 for p, m in marks.items()})
    by_pos = build_as_of(store, settings, cut, log=log, source=lambda: EmbeddedSource(SqliteLog(log.path)), poll_timeout=0.01)
    expected = tally_as_of(SqliteLog(log.path), cut)
    got = load_view(store, set_id=by_pos.built.set_id)
    assert by_pos.built.version == 2
    assert {u: t.dumps() for u, t in got.units.items()} == {u: t.dumps() for u, t in expected.units.items()}


def test_replay_command_switches_and_a_running_project_follows(
    support: ModuleType, open_store: Open, database_url: str | None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    events = support.election_log(80, corrections=2, rejections=1)
    first, later = events[:200], events[200:]
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(first)
    store = _cli_store(data, database_url)
    proc = subprocess.Popen(_cli(data, database_url, "project", "--batch-size", "50"), env=_env(),
                            stderr=subprocess.PIPE, text=True)
    try:
        support.wait_for(lambda: store.serving("tally") is not None and _count(store) == len(first), 60, "the first events")
        old = store.serving("tally")
        done = subprocess.run(_cli(data, database_url, "replay", "--json", "-q", "--batch-size", "40"), env=_env(),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["promoted"] and out["previous"]["set_id"] == old.set_id and out["previous"]["state"] == "retired"
        assert out["built"]["version"] == 2 and out["progress"]["applied"] == len(first)
        Journal(SqliteLog(log.path)).append_batch(later)
        # The running `caucus project` moves to the new set and applies what arrived after the switch.
        support.wait_for(lambda: _count(store) == len(events), 60, "the running project to follow the new set")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "now serves (a replay switched over)" in err
    listing = json.loads(subprocess.run(_cli(data, database_url, "projections", "--json"), env=_env(),
                                        capture_output=True, text=True, timeout=60, check=True).stdout)
    assert [(s["version"], s["state"]) for s in listing if s["name"] == "tally"] == [(1, "retired"), (2, "serving")]
    ref = _reference(support, store, events, tmp_path)
    assert support.snapshot(store, store.serving("tally").set_id) == support.snapshot(store, ref)  # type: ignore[union-attr]
    store.close()


def _count(store: ProjectionStore, set_id: int | None = None) -> int:
    sid = set_id if set_id is not None else store.serving("tally").set_id  # type: ignore[union-attr]
    with store.reader(sid) as r:
        return r.event_count()


def test_replay_as_of_command_prints_and_leaves_the_live_projection(
    support: ModuleType, open_store: Open, database_url: str | None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    events = support.election_log(30, corrections=1)
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(events)
    subprocess.run(_cli(data, database_url, "project", "--until-caught-up", "-q"), env=_env(), check=True, timeout=120)
    at = (support.T0 + timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    stored = json.loads(subprocess.run(_cli(data, database_url, "replay", "--as-of", at, "--json", "-q"), env=_env(),
                                       capture_output=True, text=True, check=True, timeout=120).stdout)
    printed = json.loads(subprocess.run(_cli(data, database_url, "replay", "--as-of", at, "--print-only", "--json"),
                                        env=_env(), capture_output=True, text=True, check=True, timeout=120).stdout)
    tallied = json.loads(subprocess.run(_cli(data, database_url, "tally", "--as-of", at, "--json"), env=_env(),
                                        capture_output=True, text=True, check=True, timeout=120).stdout)
    assert stored["built"]["name"] == "tally-as-of" and not stored["promoted"]
    assert stored["state"] == printed["state"] == tallied["state"]
    assert stored["log_positions"] == printed["log_positions"] == tallied["log_positions"]
    live = json.loads(subprocess.run(_cli(data, database_url, "tally", "--json"), env=_env(),
                                     capture_output=True, text=True, check=True, timeout=60).stdout)
    assert live["projection_set"]["version"] == 1 and live["state"] != tallied["state"]
    store = _cli_store(data, database_url)
    try:
        assert store.serving("tally").version == 1  # type: ignore[union-attr]
        assert [s.name for s in store.sets()] == ["tally", "tally-as-of"]
    finally:
        store.close()


def test_replay_on_kafka_into_postgres(
    support: ModuleType, kafka_bootstrap: str, unique_topic: str, pg_dsn: str, tmp_path: Path
) -> None:
    from ledger.log.kafka import provision_topic
    from projections.stores.postgres import PostgresStore

    provision_topic(kafka_bootstrap, unique_topic, 8)
    events = support.election_log(120, corrections=2, rejections=1)
    support.produce(kafka_bootstrap, unique_topic, events, 8)
    base = ["--data-dir", str(tmp_path), "--kafka", kafka_bootstrap, "--topic", unique_topic, "--database", pg_dsn]
    timeout = ["--session-timeout-ms", "2000"]
    subprocess.run([CAUCUS, *base, "project", "--until-caught-up", "-q", "--group", f"p-{unique_topic}", *timeout],
                   env=_env(), check=True, timeout=120)
    done = subprocess.run([CAUCUS, *base, "replay", "--json", "-q", *timeout], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["promoted"] and out["progress"]["applied"] == len(events) and out["built"]["version"] == 2
    store = PostgresStore(pg_dsn)
    try:
        served = store.serving("tally")
        assert served is not None and served.set_id == out["built"]["set_id"]
        ref = _reference(support, store, events, tmp_path)
        assert support.snapshot(store, served.set_id) == support.snapshot(store, ref)
        assert support.snapshot(store, out["previous"]["set_id"]) == support.snapshot(store, ref)
    finally:
        store.close()

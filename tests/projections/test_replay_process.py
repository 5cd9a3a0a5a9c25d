"""``caucus replay`` as a process: one killed with SIGKILL leaves its set building, which ``caucus
projections`` shows as abandoned and the next replay drops; a replay started beside a running one
refuses (two at once each retired the set the other had promoted, both reporting the same set retired)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog

CAUCUS = str(Path(sys.executable).parent / "caucus")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}


def _run(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CAUCUS, "--data-dir", str(data), *args], env=_env(), capture_output=True, text=True, timeout=300)


def _sets(data: Path) -> list[dict[str, Any]]:
    done = _run(data, "projections", "--json")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def _building(data: Path) -> list[dict[str, Any]]:
    return [s for s in _sets(data) if s["state"] in ("building", "abandoned") and s["events"] > 0]


def test_a_killed_replay_is_abandoned_and_a_second_replay_waits(support: ModuleType, tmp_path: Path) -> None:
    data = tmp_path / "data"
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(support.election_log(1500, corrections=2))
    assert _run(data, "project", "--until-caught-up", "-q").returncode == 0
    slow = [CAUCUS, "--data-dir", str(data), "replay", "--batch-size", "5", "--catch-up-batch", "5", "-q", "--no-feed"]
    proc = subprocess.Popen(slow, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        support.wait_for(lambda: bool(_building(data)), 120, "the replay to build a set")
        (running,) = _building(data)
        assert running["state"] == "building"  # its builder is alive
        beside = _run(data, "replay", "--json", "-q", "--no-feed")
        assert beside.returncode != 0 and "another replay" in beside.stderr, (beside.returncode, beside.stderr)
        assert [s for s in _sets(data) if s["state"] == "serving"][0]["version"] == 1  # the refused one promoted nothing
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    (left,) = [s for s in _sets(data) if s["set_id"] == running["set_id"]]
    assert left["state"] == "abandoned", left
    done = _run(data, "replay", "--json", "-q", "--no-feed")
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["promoted"] and outcome["previous"]["version"] == 1 and outcome["previous"]["state"] == "retired"
    assert any(f"set {running['set_id']}" in note and "dropped" in note for note in outcome["notes"]), outcome["notes"]
    assert sorted(s["state"] for s in _sets(data)) == ["retired", "serving"]  # the abandoned set is gone
    # A replay short enough to be done in one batch says its progress once, not its only line twice.
    said = _run(data, "replay", "--no-feed")
    lines = [line for line in said.stderr.splitlines() if line.startswith("replayed ")]
    assert said.returncode == 0 and len(lines) == 1, said.stderr


def test_a_log_edited_under_its_checkpoints_is_not_replayed_into_service(support: ModuleType, tmp_path: Path) -> None:
    """A record changed in the embedded file after a checkpoint signed it: `caucus verify` finds it, and a
    replay must not make the changed numbers the served ones (exit 0, no word) while the audit blames
    the chair. It is refused, the serving set unchanged, unless the operator says to go on."""
    import sqlite3

    data = tmp_path / "data"
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(support.election_log(6))
    assert _run(data, "project", "--until-caught-up", "-q").returncode == 0
    signed = _run(data, "checkpoint")
    assert signed.returncode == 0, signed.stderr
    clean = _run(data, "replay", "-q")  # the log as checkpointed: replayed as before
    assert clean.returncode == 0, clean.stderr
    db = sqlite3.connect(data / "log.sqlite3")
    (first, value), (second, _) = db.execute("SELECT seq, value FROM log_records ORDER BY seq DESC LIMIT 2 OFFSET 1").fetchall()
    db.execute("DROP TRIGGER log_records_no_update")
    db.execute("UPDATE log_records SET value = (SELECT value FROM log_records WHERE seq = ?) WHERE seq = ?", (first, second))
    db.commit()
    db.close()
    serving = [s["version"] for s in _sets(data) if s["state"] == "serving"]
    found = _run(data, "verify")
    assert found.returncode == 1 and "TAMPERING FOUND" in found.stdout, (found.stdout, found.stderr)
    # The checkpoint's signature is good, its records are not: the summary line must not say "verified"
    # of a checkpoint whose records fail it.
    (summary,) = [line for line in found.stdout.splitlines() if line.startswith("checkpoints:")]
    assert "1 with a signature that verifies (the records do not all match them" in summary, summary
    refused = _run(data, "replay", "-q")
    assert refused.returncode == 1, refused.stderr
    assert "does not match its signed checkpoints" in refused.stderr and "--despite-checkpoints" in refused.stderr
    assert [s["version"] for s in _sets(data) if s["state"] == "serving"] == serving
    forced = _run(data, "replay", "-q", "--despite-checkpoints")
    assert forced.returncode == 0, forced.stderr
    assert [s["version"] for s in _sets(data) if s["state"] == "serving"] != serving


def test_a_builder_that_exited_but_was_not_collected_is_gone(support: ModuleType) -> None:
    """A killed replay is a zombie until its parent collects it; ``kill(pid, 0)`` still finds it, so the
    next replay was refused ("another replay is building"), for good where nobody collects."""
    import socket

    from projections.set_builders import _start_ticks, builder_gone
    from projections.stores.port import SetInfo

    def building(pid: int) -> SetInfo:
        builder = {"host": socket.gethostname(), "pid": pid, "start": _start_ticks(pid)}
        return SetInfo(2, "tally", 2, "building", "log:x", None, json.dumps({"builder": builder}), "", None)

    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        info = building(exited.pid)
        support.wait_for(lambda: Path(f"/proc/{exited.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z", 30,
                         "the child to exit")
        assert builder_gone(info), "exited, not collected"
        assert not builder_gone(building(alive.pid))
    finally:
        alive.kill()
        alive.wait(10)
        exited.wait(10)


def test_a_damaged_store_is_named_with_what_to_do(support: ModuleType, tmp_path: Path) -> None:
    """``project`` and ``replay`` said only "database disk image is malformed"; the readers named the file."""
    data = tmp_path / "data"
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(support.election_log(40))
    assert _run(data, "project", "--until-caught-up", "-q").returncode == 0
    store = data / "store.sqlite3"
    os.truncate(store, store.stat().st_size // 2)
    for command in (["project", "--until-caught-up"], ["replay"]):
        done = _run(data, *command)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (command, done.stderr)
        assert str(store) in done.stderr and f"`caucus --data-dir {data} project" in done.stderr, (command, done.stderr)
    store.rename(data / "damaged.sqlite3")
    assert _run(data, "project", "--until-caught-up", "-q").returncode == 0, "built again from the log"


def test_a_locked_store_is_not_called_damaged(tmp_path: Path) -> None:
    """Only a file SQLite cannot read is damaged: a store another writer holds is busy, and moving it aside
    (the advice for a damaged one) would take a healthy store from under that writer."""
    import sqlite3

    import pytest

    from projections.stores.sqlite import SqliteStore

    path = tmp_path / "store.sqlite3"
    SqliteStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            SqliteStore(path, timeout=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_damaged_results_feed_is_called_the_feed_with_what_to_do(support: ModuleType, tmp_path: Path) -> None:
    """It was called "the embedded log", with the advice to check a copy with `caucus verify`, which
    checks the event log, not the feed; the feed is published again by `caucus project`."""
    data = tmp_path / "data"
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(support.election_log(40))
    assert _run(data, "project", "--until-caught-up", "-q").returncode == 0
    feed = data / "results.sqlite3"
    with feed.open("r+b") as fh:
        fh.write(b"garbage" * 10)
    done = _run(data, "subscribe", "--latest")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "results feed" in done.stderr and "embedded log" not in done.stderr and "verify" not in done.stderr, done.stderr
    assert f"`caucus --data-dir {data} project" in done.stderr, done.stderr
    feed.rename(data / "damaged.sqlite3")
    assert _run(data, "project", "--until-caught-up", "-q").returncode == 0
    assert _run(data, "subscribe", "--latest").stdout.count("\n") > 0, "published again"


def test_a_replay_under_another_key_home_names_the_published_key_to_trust(tmp_path: Path) -> None:
    """A log written under one key home and replayed under another is refused (its seals are by a key
    this command does not trust); the refusal said only FORGED_WRITER, where the data directory's
    published key is the likely answer, named with how to trust it."""
    data = tmp_path / "data"
    first = {**_env(), "CAUCUS_KEY_HOME": str(tmp_path / "first-home")}
    done = subprocess.run([CAUCUS, "--data-dir", str(data), "demo", "--units", "4"], env=first, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    other = {**_env(), "CAUCUS_KEY_HOME": str(tmp_path / "other-home")}
    from ledger.integrity.keys import load_or_create_signing_key

    load_or_create_signing_key(tmp_path / "other-home")  # the other operator's key home holds a key of its own
    refused = subprocess.run([CAUCUS, "--data-dir", str(data), "replay", "-q"], env=other, capture_output=True, text=True,
                             timeout=300)
    published = data / "checkpoint-key.pub"
    assert refused.returncode == 1 and "FORGED_WRITER" in refused.stderr, refused.stderr
    assert f"CAUCUS_CHECKPOINT_PUBLIC_KEY={published}" in refused.stderr, refused.stderr
    trusting = subprocess.run([CAUCUS, "--data-dir", str(data), "replay", "-q"], capture_output=True, text=True, timeout=300,
                              env={**other, "CAUCUS_CHECKPOINT_PUBLIC_KEY": str(published)})
    assert trusting.returncode == 0, trusting.stderr

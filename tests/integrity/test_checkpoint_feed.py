"""Signed checkpoints go out on the results feed, so a subscriber downstream keeps the log's
commitments without access to the log: on the embedded backend (``results.sqlite3``) and on Kafka
(the results topic, with the checkpoint store in PostgreSQL). Each line ``caucus subscribe`` prints
for one verifies with the signer's public key alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger.codec import Codec, CodecError, load_catalogue
from ledger.config import Settings, open_log
from ledger.integrity.checkpoints import Checkpoint
from ledger.integrity.columns import columns_message
from ledger.integrity.keys import load_trusted_key
from ledger.log.sqlite import SqliteLog
from projections.feed_events import AreaTallyPublished, UnitTallyPublished

CAUCUS = str(Path(sys.executable).parent / "caucus")


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}
    env.update(CAUCUS_DATA_DIR=str(root / "data"), CAUCUS_KEY_HOME=str(root / "keys"), **extra)
    return env


def _caucus(env: dict[str, str], *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([CAUCUS, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == code, f"caucus {' '.join(args)}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    return done


def _checkpoint(env: dict[str, str]) -> dict[str, Any]:
    return dict(json.loads(_caucus(env, "checkpoint", "--json").stdout))


def _kept(env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    out = _caucus(env, "subscribe", "--from-beginning", "--until-idle", "2", *args).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _check_lines(lines: list[dict[str, Any]], issued: list[dict[str, Any]], public_key: Path) -> None:
    """The subscriber kept exactly the issued checkpoints, in order, and each verifies by itself."""
    assert [line["checkpoint_event_id"] for line in lines] == [c["event_id"] for c in issued]
    trusted = load_trusted_key(public_key)
    for line, c in zip(lines, issued):
        signed = bytes.fromhex(line["signed_bytes"])
        assert trusted.verifies(signed, bytes.fromhex(line["signature"]))
        checkpoint = Checkpoint.from_bytes(signed)
        assert checkpoint.root_hash.hex() == c["root_hash"] == line["root_hash"]
        assert list(checkpoint.partition_sizes) == c["partition_sizes"] and line["position"] == c["position"]
        roots = [bytes.fromhex(r) for r in line["column_roots"]]
        assert len(roots) == checkpoint.partitions
        assert trusted.verifies(columns_message(checkpoint.root_hash, roots), bytes.fromhex(line["column_signature"]))
        forged = bytearray(signed)
        forged[-1] ^= 1
        assert not trusted.verifies(bytes(forged), bytes.fromhex(line["signature"]))


def test_checkpoints_go_out_on_the_embedded_feed_and_one_missed_goes_out_with_the_next(tmp_path: Path) -> None:
    env = _env(tmp_path)
    _caucus(env, "demo")  # records a night, projects it (publishing tallies) and signs a checkpoint
    issued: list[dict[str, Any]] = []
    lines = _kept(env, "--checkpoints")
    assert len(lines) == 1 and lines[0]["kind"] == "checkpoint"
    issued.append({"event_id": lines[0]["checkpoint_event_id"], "root_hash": lines[0]["root_hash"],
                   "partition_sizes": lines[0]["partition_sizes"], "position": lines[0]["position"]})
    everything = _kept(env)
    assert {line["kind"] for line in everything} >= {"unit", "county", "state", "checkpoint"}
    assert not [line for line in _kept(env, "--unit", everything[0]["key"]) if line["kind"] == "checkpoint"]

    feed = tmp_path / "data" / "results.sqlite3"
    feed.rename(tmp_path / "feed-away")
    feed.mkdir()  # the feed cannot be opened: the checkpoint is still signed and recorded
    away = _caucus(env, "checkpoint", "--json")
    assert "not published on the results feed" in away.stderr
    missed = json.loads(away.stdout)
    assert missed["feed"]["published"] == 0 and missed["feed"]["error"]
    feed.rmdir()
    (tmp_path / "feed-away").rename(feed)
    latest = _checkpoint(env)
    assert latest["feed"] == {"published": 2, "feed": f"sqlite:{feed}", "error": None}
    assert _checkpoint(env)["feed"]["published"] == 1, "what the feed holds is not published again"
    issued += [missed, latest]
    kept = _kept(env, "--checkpoints")
    _check_lines(kept[:3], issued, tmp_path / "keys" / "checkpoint-key.pub")
    assert len(kept) == 4

    # A subscriber that predates the checkpoint record reads the tallies as before and refuses only it.
    old_types: dict[str, Any] = {t.TYPE: t for t in (UnitTallyPublished, AreaTallyPublished)}
    old = Codec(load_catalogue(old_types), payload_types=old_types)
    refused = 0
    for rec in SqliteLog(feed, read_only=True).read():
        try:
            old.decode(rec.value)
        except CodecError:
            refused += 1
    assert refused == 4


def test_checkpoints_go_out_on_the_kafka_results_topic(
    kafka_bootstrap: str, unique_topic: str, pg_dsn: str, tmp_path: Path,
    events_factory: Callable[..., list[Any]], append: Callable[..., None],
) -> None:
    results = f"{unique_topic}-results"
    env = _env(tmp_path, CAUCUS_KAFKA=kafka_bootstrap, CAUCUS_TOPIC=unique_topic, CAUCUS_RESULTS_TOPIC=results,
               CAUCUS_DATABASE=pg_dsn)
    settings = Settings(data_dir=tmp_path / "data", kafka=kafka_bootstrap, topic=unique_topic, results_topic=results,
                        database=pg_dsn)
    log = open_log(settings)
    try:
        append(log, events_factory(40))
        first = _checkpoint(env)
        append(log, events_factory(20, start=40))
        second = _checkpoint(env)
        # The broker keeps each record's time, so verify holds Kafka logs to the checkpoints' times too.
        times = [rec.timestamp_ms for rec in log.read()]
        assert len(times) == 62 and min(times) > 0
    finally:
        log.close()
    assert first["feed"]["published"] == 1 and second["feed"]["published"] == 1
    assert second["feed"]["feed"] == f"kafka://{kafka_bootstrap}/{results}"
    _check_lines(_kept(env, "--checkpoints"), [first, second], tmp_path / "keys" / "checkpoint-key.pub")

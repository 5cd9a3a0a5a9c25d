"""``caucus subscribe --group NAME`` and ``--from POSITION``: a downstream system that stops and starts
again goes on where it stopped, missing nothing and repeating nothing, republished copies included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ledger.journal import Journal
from ledger.log.port import PendingRecord
from ledger.log.sqlite import SqliteLog
from projections.feed_subscribers import CHECKPOINT_FILE, SubscriberCheckpoint, feed_position_text

CAUCUS = str(Path(sys.executable).parent / "caucus")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}


def _caucus(base: list[str], *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([CAUCUS, *base, *args], env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    return done


def _lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _keys(lines: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return sorted((line["kind"], line["key"], line["version"]) for line in lines)


def test_a_subscriber_group_resumes_where_it_stopped(support: ModuleType, tmp_path: Path) -> None:
    data = tmp_path / "data"
    events = support.election_log(24, corrections=2, rejections=1)
    half = len(events) // 2
    log = SqliteLog(data / "log.sqlite3", partitions=8)
    Journal(log).append_batch(events[:half])
    base = ["--data-dir", str(data)]
    _caucus(base, "project", "--until-caught-up", "-q", "--batch-size", "10")

    a = _lines(_caucus(base, "subscribe", "--group", "desk", "--from-beginning", "--max", "5"))
    assert len(a) == 5
    checkpoint = SubscriberCheckpoint(data / CHECKPOINT_FILE, "desk")
    feed = SqliteLog(data / "results.sqlite3", read_only=True)
    after_a, seen = checkpoint.load(feed.log_id)  # the feed the group followed
    feed.close()
    checkpoint.close()
    assert after_a is not None and len(seen) == 5
    b = _lines(_caucus(base, "subscribe", "--group", "desk", "--until-idle", "1"))
    assert b, "the rest of what was published"
    # Copies of everything published so far (a producer retry that landed twice), then more results.
    results = SqliteLog(data / "results.sqlite3")
    results.append_batch([PendingRecord(r.key, f"retry-{i}", r.value) for i, r in enumerate(results.read())])
    Journal(log).append_batch(events[half:])
    _caucus(base, "project", "--until-caught-up", "-q", "--batch-size", "10")
    c = _lines(_caucus(base, "subscribe", "--group", "desk", "--until-idle", "1"))
    assert c
    nothing = _lines(_caucus(base, "subscribe", "--group", "desk", "--until-idle", "1"))
    assert nothing == [], "a restart with nothing new prints nothing"
    now = _caucus(base, "subscribe", "--until-idle", "1")  # no group, no start: what comes from now, and it says so
    assert _lines(now) == [] and "following the results feed from now" in now.stderr and "--from-beginning" in now.stderr
    same_flags = _caucus(base, "subscribe", "--group", "desk", "--from-beginning", "--until-idle", "1")
    assert _lines(same_flags) == [], "a restart that repeats its first flags goes on where it stopped"
    assert "note: group 'desk' goes on from where it stopped; --from-beginning applies to a new group only" in same_flags.stderr

    everything = _lines(_caucus(base, "subscribe", "--from-beginning", "--until-idle", "1"))
    # each tally names the rule set it was computed under, as `caucus tally` does (not null for "the election's own")
    assert {line["rule_set"] for line in everything if line["kind"] != "checkpoint"} == {"idp-2020"}
    resumed = a + b + c
    assert len(set(_keys(resumed))) == len(resumed), "nothing repeated"
    assert _keys(resumed) == _keys(everything), "nothing missed"

    from_there = _lines(_caucus(base, "subscribe", "--from", feed_position_text(after_a), "--max", "1"))
    assert from_there == b[:1], "--from starts at a position, as the group did"
    bad = _caucus(base, "subscribe", "--from", "yesterday", code=2)
    assert "feed position" in bad.stderr
    past = _caucus(base, "subscribe", "--from", "0:99999", "--max", "1", code=2)  # mistyped, not a feed lost (exit 3)
    assert "--from: position 0:99999 lies beyond partition 0" in past.stderr, past.stderr
    nowhere = _caucus(base, "subscribe", "--from", "99:0", "--max", "1", code=2)
    assert "--from: partition 99 does not exist" in nowhere.stderr, nowhere.stderr

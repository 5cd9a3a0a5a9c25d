"""``caucus check-feed``: the results feed's latest view against the projection, key by key.

The feed is what downstream systems read; it is published incrementally, so a copy that says something
else than the projection at the same version must be found (FEED_DIFFERS), and a feed that simply has
not published yet (``caucus project --no-feed``) must be told apart from one that lost a tally."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ledger.backends import RESULTS_LOG_FILE
from projections.feed_events import UnitTallyPublished, feed_codec
from tests.cli_invoke import Caucus, caucus_cli


def _cli(data_dir: Path, monkeypatch: pytest.MonkeyPatch, *backend: str) -> Caucus:
    monkeypatch.delenv("CAUCUS_CONFIG", raising=False)
    return caucus_cli(data_dir, monkeypatch, *backend)


def _simulated(caucus: Caucus, seed: int, units: int, *project: str) -> None:
    code, cred = caucus("credentials", "issue", "--official", f"Pat {seed}", "--json")
    assert code == 0
    code, out = caucus("simulate", "write", "--seed", str(seed), "--units", str(units), "--ties", "0.2",
                       "--corrections", "0.3", "--token", cred["token"])
    assert code == 0, out
    assert caucus("project", "--until-caught-up", "--quiet", *project)[0] == 0


def _check(caucus: Caucus) -> tuple[int, dict[str, Any]]:
    code, found = caucus("check-feed", "--json")
    assert isinstance(found, dict), found
    return code, found


def _tampered(data_dir: Path) -> str:
    """Change one unit's published delegates in the latest view, keeping its version: what a slip in
    publishing (or a hand on the file) would leave subscribers with."""
    codec = feed_codec()
    with sqlite3.connect(data_dir / RESULTS_LOG_FILE) as conn:
        key, value = next(row for row in conn.execute("SELECT key, value FROM latest_records ORDER BY key")
                          if row[0].startswith("unit:") and codec.decode(row[1]).payload.tally["cds"])
        event = codec.decode(value)
        tally = dict(event.payload.tally)
        tally["cds"] = {name: n + 1 for name, n in tally["cds"].items()}
        forged = replace(event, payload=UnitTallyPublished(event.payload.stamp, tally))
        conn.execute("UPDATE latest_records SET value = ? WHERE key = ?", (codec.encode(forged), key))
    return str(key)


def test_the_feed_agrees_with_the_projection_and_a_changed_copy_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    caucus = _cli(tmp_path / "data", monkeypatch)
    _simulated(caucus, 1, 60)
    _simulated(caucus, 2, 30)  # two elections, their unit ids shared
    code, found = _check(caucus)
    assert code == 0 and found["findings"] == [] and found["agree"] == found["compared"], found
    for election in ("sim-1", "sim-2"):
        code, tally = caucus("tally", "--election", election, "--json")
        assert code == 0
    # every unit with a result, every county and the state, of both elections
    assert found["compared"] >= 60 + 30 + 2, found
    key = _tampered(tmp_path / "data")
    code, found = _check(caucus)
    assert code == 1, found
    assert [(f["key"], f["code"], f["severity"]) for f in found["findings"]] == [(key, "FEED_DIFFERS", "error")], found
    assert "cds" in found["findings"][0]["fields"], found
    code, text = caucus("check-feed")
    assert code == 1 and "FEED_DIFFERS" in text and key in text, text


def test_a_feed_not_published_yet_is_behind_not_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    caucus = _cli(tmp_path / "data", monkeypatch)
    _simulated(caucus, 1, 40)
    _simulated(caucus, 3, 20, "--no-feed")  # a new election and nothing of it published
    code, found = _check(caucus)
    assert code == 0 and found["findings"], found
    assert {f["code"] for f in found["findings"]} == {"FEED_BEHIND"}, found
    assert all(f["key"].endswith(":sim-3") or ":sim-3:" in f["key"] for f in found["findings"]), found
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0  # publishes what the feed lacks
    code, found = _check(caucus)
    assert code == 0 and found["findings"] == [], found


def test_no_feed_yet_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, said = _cli(tmp_path / "empty", monkeypatch)("check-feed")
    assert code == 2 and "nothing has been recorded" in said, said
    caucus = _cli(tmp_path / "unpublished", monkeypatch)
    _simulated(caucus, 1, 5, "--no-feed")
    code, found = _check(caucus)
    assert code == 0 and found["agree"] == 0 and {f["code"] for f in found["findings"]} == {"FEED_BEHIND"}, found


@pytest.fixture
def kafka_pg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kafka_bootstrap: str, pg_dsn: str) -> Iterator[Caucus]:
    import psycopg

    db = f"feedcheck_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    topic = f"feedcheck-{uuid.uuid4().hex[:8]}"
    try:
        yield _cli(tmp_path / "kafka", monkeypatch, "--kafka", kafka_bootstrap, "--topic", topic,
                   "--database", pg_dsn.rsplit("/", 1)[0] + f"/{db}")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


@pytest.mark.kafka
@pytest.mark.postgres
def test_the_feed_check_on_kafka_and_postgres(kafka_pg: Caucus) -> None:
    _simulated(kafka_pg, 1, 30)
    code, found = _check(kafka_pg)
    assert code == 0 and found["findings"] == [] and found["compared"] >= 31, found
    _simulated(kafka_pg, 3, 10, "--no-feed")
    code, found = _check(kafka_pg)
    assert code == 0 and {f["code"] for f in found["findings"]} == {"FEED_BEHIND"}, found

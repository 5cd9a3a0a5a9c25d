"""The PostgreSQL views a BI tool reads (``projections.stores.bi_views``), on the real 2020 history.

A BI user queries ``caucus.state_tallies`` and friends with plain SQL: no ``::jsonb`` casts, no join on
``proj_serving``; the views follow the serving set through a rebuild.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import ledger.cli
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from tests.shared_data import IOWA2020, WHERE

DATA = IOWA2020


def _caucus(data_dir: Path, dsn: str, *args: str) -> Any:
    ledger.cli._register_commands()
    result = CliRunner().invoke(ledger.cli.app, ["--data-dir", str(data_dir), "--database", dsn, *args],
                                env={"CAUCUS_KAFKA": "", "CAUCUS_TOKEN": ""})
    assert result.exit_code == 0, result.output[-2000:]
    return result


@pytest.fixture
def projected(tmp_path: Path, pg_dsn: str) -> str:
    if not (DATA / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {DATA}")
    importer = pytest.importorskip("producers.importers.idp2020")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    journal = Journal(SqliteLog(data_dir / "log.sqlite3", partitions=8))
    try:
        assert importer.import_idp2020(DATA, journal).ok
    finally:
        journal.close()
    _caucus(data_dir, pg_dsn, "project", "--until-caught-up", "--quiet", "--no-feed")
    (tmp_path / "data_dir").write_text(str(data_dir))
    return pg_dsn


def test_state_and_county_tallies_are_plain_sql(projected: str, tmp_path: Path) -> None:
    query = """
        SELECT candidate, final_alignment, county_delegates, sde, units_reporting
        FROM caucus.state_tallies
        WHERE election_id = 'iowa-2020-dem-caucus'
        ORDER BY sde DESC
        LIMIT 3"""
    with psycopg.connect(projected) as conn:
        top = conn.execute(query).fetchall()
        assert [(name, sde) for name, _, _, sde, _ in top[:2]] == [
            ("Buttigieg", Decimal("562.9538")), ("Sanders", Decimal("562.0214"))]
        assert all(units == 1765 for *_, units in top)
        polk = conn.execute(
            "SELECT sum(county_delegates) FROM caucus.county_tallies WHERE county_id = 'Polk'").fetchone()
        assert polk is not None and polk[0] > 0
        types = dict(conn.execute(
            "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'caucus'").fetchall())
        assert types["unit_results.tally"] == "jsonb" and types["unit_results.county_delegates"] == "jsonb"
        assert types["unit_results.result_recorded_at"] == "timestamp with time zone"
        assert types["events.recorded_at"] == "timestamp with time zone"
        biden = conn.execute(
            "SELECT county_delegates ->> 'Biden' FROM caucus.unit_results WHERE unit_id = '946620'").fetchone()
        assert biden is not None and int(biden[0]) >= 0
        trail = conn.execute("SELECT count(*) FROM caucus.events WHERE unit_id = '946620'").fetchone()
        assert trail is not None and trail[0] >= 1
        first_night = conn.execute(
            "SELECT count(*) FROM caucus.events WHERE type = 'ResultReported' AND recorded_at < '2020-02-08T00:00:00Z'").fetchone()
        assert first_night is not None and first_night[0] > 0


def test_the_views_follow_the_serving_set_through_a_rebuild(projected: str, tmp_path: Path) -> None:
    data_dir = Path((tmp_path / "data_dir").read_text())
    with psycopg.connect(projected) as conn:
        before = conn.execute("SELECT count(*), sum(sde) FROM caucus.unit_candidate_results").fetchone()
    _caucus(data_dir, projected, "replay", "--quiet", "--no-feed")
    sets = json.loads(_caucus(data_dir, projected, "projections", "--json").stdout)
    assert any(s.get("version") == 2 and s.get("state") == "serving" for s in (sets if isinstance(sets, list) else sets["sets"]))
    with psycopg.connect(projected) as conn:
        after = conn.execute("SELECT count(*), sum(sde) FROM caucus.unit_candidate_results").fetchone()
    assert after == before and before is not None and before[0] > 0

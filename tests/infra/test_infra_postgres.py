"""The local PostgreSQL helpers: throwaway databases appear, and disappear even with sessions still open."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from infra.postgres import PostgresError, create_database, find_cluster_version, temporary_database


def _databases(server_dsn: str) -> set[str]:
    with psycopg.connect(server_dsn) as conn:
        return {name for (name,) in conn.execute("SELECT datname FROM pg_database")}


def test_temporary_database_is_created_and_dropped(pg_server: str) -> None:
    with temporary_database("infra", pg_server) as dsn:
        leaked = psycopg.connect(dsn)  # left open on purpose: the drop must end it
        name = leaked.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        assert name.startswith("infra_")
        leaked.execute("CREATE TABLE t (x int)")
        leaked.commit()
        assert name in _databases(pg_server)
    assert name not in _databases(pg_server)
    with pytest.raises(psycopg.OperationalError):
        leaked.execute("SELECT 1")  # its session was terminated by the drop
    leaked.close()


def test_pg_dsn_is_a_fresh_empty_database(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0]  # type: ignore[index]
    assert name.startswith("test_")
    assert tables == 0


def test_unsafe_database_names_are_refused() -> None:
    with pytest.raises(PostgresError, match="must match"):
        create_database("x; DROP DATABASE test")


def test_cluster_version_is_found_by_port(tmp_path: Path) -> None:
    for version, port in (("13", 5433), ("15", 5432)):
        (tmp_path / version / "main").mkdir(parents=True)
        (tmp_path / version / "main" / "postgresql.conf").write_text(f"port = {port}\t\t# comment\n")
    (tmp_path / "16").mkdir()  # no cluster inside
    assert find_cluster_version(5432, tmp_path) == "15"
    assert find_cluster_version(5433, tmp_path) == "13"
    assert find_cluster_version(6000, tmp_path) == "15", "no match: the highest version with a cluster"
    with pytest.raises(PostgresError, match="no PostgreSQL cluster"):
        find_cluster_version(5432, tmp_path / "missing")

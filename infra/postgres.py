"""The local PostgreSQL for development and tests: make sure it runs, hand out throwaway databases.

Why: the PostgreSQL store's tests need a real server, and each test gets a database of its own so tests
cannot see each other's rows and need no cleanup logic. The cluster is the Debian one under
/etc/postgresql/<version>/main, started with ``pg_ctlcluster`` when nothing answers (there is no systemd).

Command line (used by CI): ``python -m infra.postgres ensure [DSN]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow

__all__ = [
    "PostgresError",
    "DEFAULT_DSN",
    "default_dsn",
    "ensure_running",
    "create_database",
    "drop_database",
    "temporary_database",
    "find_cluster_version",
    "PrivateCluster",
]

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
START_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 2
_LOCAL_HOSTS = ("", "127.0.0.1", "localhost", "::1")
_DB_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresError(RuntimeError):
    """PostgreSQL could not be reached or started, or a database name is unusable."""


def default_dsn() -> str:
    """``$CAUCUS_PG_DSN`` if set (another server, e.g. in someone else's CI), else :data:`DEFAULT_DSN`."""
    return os.environ.get("CAUCUS_PG_DSN") or DEFAULT_DSN


def _with_dbname(dsn: str, dbname: str) -> str:
    """The same server and user, another database; keeps URL DSNs as URLs so they stay readable."""
    parts = urlsplit(dsn)
    if parts.scheme in ("postgresql", "postgres"):
        return urlunsplit(parts._replace(path="/" + dbname))
    return make_conninfo(dsn, dbname=dbname)


def _connect(dsn: str, autocommit: bool = False) -> psycopg.Connection[TupleRow]:
    return psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=autocommit)


def _check_name(name: str) -> None:
    if not _DB_NAME.fullmatch(name):
        raise PostgresError(f"database name {name!r} must match {_DB_NAME.pattern} (lower case, at most 63 characters)")


def find_cluster_version(port: int = 5432, etc_dir: Path = Path("/etc/postgresql")) -> str:
    """The version directory (e.g. "15") of the ``main`` cluster for ``port``.

    Prefers the cluster whose postgresql.conf sets that port; otherwise the highest version that has one.
    """
    try:
        versions = sorted(
            (d.name for d in etc_dir.iterdir() if (d / "main" / "postgresql.conf").is_file()),
            key=lambda v: [int(x) if x.isdigit() else 0 for x in v.split(".")],
        )
    except FileNotFoundError:
        versions = []
    if not versions:
        raise PostgresError(f"no PostgreSQL cluster under {etc_dir}/<version>/main: is PostgreSQL installed?")
    for version in reversed(versions):
        conf = (etc_dir / version / "main" / "postgresql.conf").read_text(errors="replace")
        match = re.search(r"^\s*port\s*=\s*(\d+)", conf, re.MULTILINE)
        conf_port = int(match.group(1)) if match else 5432
        if conf_port == port:
            return version
    return versions[-1]


def _server_up(dsn: str) -> tuple[bool, str]:
    """(True, "") if the server accepts connections for this user; otherwise (False, why)."""
    try:
        with _connect(_with_dbname(dsn, "postgres")):
            return True, ""
    except psycopg.OperationalError as exc:
        return False, str(exc).strip()


def ensure_running(dsn: str | None = None, timeout: float = START_TIMEOUT_S) -> str:
    """Make sure the server for ``dsn`` answers, starting the local cluster if it does not; return ``dsn``.

    The database named in ``dsn`` is created if it is missing, so callers can connect to it straight away.
    """
    dsn = dsn or default_dsn()
    up, why = _server_up(dsn)
    if not up:
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "")
        if host not in _LOCAL_HOSTS and not host.startswith("/"):
            raise PostgresError(f"cannot connect to PostgreSQL at {host} (not local, so not starting it): {why}")
        version = find_cluster_version(int(params.get("port") or 5432))
        cmd = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"]
        try:
            started = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError as exc:
            raise PostgresError(f"cannot connect ({why}) and pg_ctlcluster is not installed") from exc
        # A non-zero status may only mean "already running" (a race): the connection attempts below decide.
        deadline = time.monotonic() + timeout
        while not up and time.monotonic() < deadline:
            time.sleep(0.2)
            up, why = _server_up(dsn)
        if not up:
            raise PostgresError(
                f"PostgreSQL for {dsn} is not reachable after `{' '.join(cmd)}` and {timeout:g} s: {why}\n"
                f"pg_ctlcluster said (status {started.returncode}): {(started.stdout + started.stderr).strip()}"
            )
    dbname = conninfo_to_dict(dsn).get("dbname")
    if dbname and dbname != "postgres":
        with _connect(_with_dbname(dsn, "postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
            if not exists:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):  # someone else was quicker
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(dbname))))
    return dsn


def create_database(name: str, server_dsn: str | None = None) -> str:
    """Create an empty database ``name`` on the server of ``server_dsn`` and return its DSN."""
    _check_name(name)
    server_dsn = server_dsn or default_dsn()
    with _connect(_with_dbname(server_dsn, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return _with_dbname(server_dsn, name)


def drop_database(name: str, server_dsn: str | None = None) -> None:
    """Drop database ``name`` if it exists, first ending any sessions still connected to it.

    A test that leaks a connection (or a crashed one) would otherwise make DROP DATABASE fail.
    """
    _check_name(name)
    server_dsn = server_dsn or default_dsn()
    with _connect(_with_dbname(server_dsn, "postgres"), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        drop = sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name))
        if conn.info.server_version >= 130000:  # FORCE also ends sessions that connected after the terminate
            drop = drop + sql.SQL(" WITH (FORCE)")
        conn.execute(drop)


@contextlib.contextmanager
def temporary_database(prefix: str = "test", server_dsn: str | None = None) -> Iterator[str]:
    """A fresh database named ``<prefix>_<8 hex>`` for the ``with`` block; yields its DSN, drops it after."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}".lower()
    dsn = create_database(name, server_dsn)
    try:
        yield dsn
    finally:
        drop_database(name, server_dsn)


class PrivateCluster:
    """A throwaway PostgreSQL cluster of its own: ``initdb`` in a temporary directory, a free port.

    Why: a test that restarts or stops the server must not take the shared one away from every
    other test. Uses the server binaries of the installed cluster; as root, runs them as the
    ``postgres`` user (``initdb`` refuses root). Trust authentication, listening on 127.0.0.1 only.
    """

    def __init__(self, version: str | None = None) -> None:
        self.bindir = Path("/usr/lib/postgresql") / (version or find_cluster_version()) / "bin"
        if not (self.bindir / "pg_ctl").exists():
            raise PostgresError(f"no PostgreSQL server binaries in {self.bindir}")
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="caucus-pg-"))
        self.data = self.dir / "data"
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        out = subprocess.run([*prefix, *args], capture_output=True, text=True, check=False, timeout=START_TIMEOUT_S * 2)
        if out.returncode != 0:
            raise PostgresError(f"{Path(args[0]).name} failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")

    def _pg_ctl(self, action: str) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"), "-o", opts,
                  "-m", "fast", "-w", "-t", str(int(START_TIMEOUT_S)), action)

    def start(self) -> PrivateCluster:
        if not self.data.exists():
            if os.geteuid() == 0:
                shutil.chown(self.dir, "postgres", "postgres")
            self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                      "--no-sync")
        self._pg_ctl("start")
        return self

    def stop(self) -> None:
        self._pg_ctl("stop")

    def restart(self) -> None:
        """Stop (fast: open connections are cut) and start again on the same port and data."""
        self._pg_ctl("restart")

    def close(self) -> None:
        with contextlib.suppress(PostgresError, subprocess.TimeoutExpired):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrivateCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.postgres", description="Local PostgreSQL for development.")
    parser.add_argument("command", choices=["ensure"])
    parser.add_argument("dsn", nargs="?", default=None, help=f"default $CAUCUS_PG_DSN or {DEFAULT_DSN}")
    args = parser.parse_args(argv)
    try:
        dsn = ensure_running(args.dsn)
    except (PostgresError, psycopg.Error) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"PostgreSQL is up: {dsn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

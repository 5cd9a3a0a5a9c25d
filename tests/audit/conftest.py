"""Fixtures of the auditor tests: the synthetic election of ``support.py`` in an embedded log, the
``caucus`` commands run through their packages' ``register`` functions, and the real 2020 history
imported once per session (skipped when the data or the importer is missing).

``support`` is loaded by path because the suite runs with ``--import-mode=importlib``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from tests.shared_data import WHERE

_HERE = Path(__file__).resolve().parent


def _load_support() -> ModuleType:
    name = "caucus_audit_tests_support"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _HERE / "support.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def aud() -> ModuleType:
    """The helper module: synthetic election, times, CSV readers."""
    return _load_support()


@pytest.fixture
def ledger(tmp_path: Path, aud: ModuleType) -> Any:
    """A data directory whose embedded log holds the synthetic election."""
    led = aud.Ledger(tmp_path / "data", aud.election_events())
    led.data_dir.mkdir()
    led.append(led.events)
    return led


def make_app() -> typer.Typer:
    """The commands under test, each added by its package's ``register`` (as ``ledger.cli`` does)."""
    from projections import cli as projections_cli
    from projections.audit import audit_cli, diff_cli
    from projections.audit import cli as integrity_cli

    app = typer.Typer()
    for module in (projections_cli, diff_cli, audit_cli, integrity_cli):
        module.register(app)
    return app


def _runner(data_dir: Path, partitions: int) -> Callable[..., Any]:
    app = make_app()
    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None) -> Any:
        environment = {
            "CAUCUS_DATA_DIR": str(data_dir),
            "CAUCUS_PARTITIONS": str(partitions),
            "CAUCUS_CHECKPOINT_KEY": "",
            "CAUCUS_CHECKPOINT_PUBLIC_KEY": "",
            "CAUCUS_KAFKA": "",
            "CAUCUS_DATABASE": "",
        }
        environment.update(env or {})
        return runner.invoke(app, list(args), env=environment)

    return run


@pytest.fixture
def caucus(ledger: Any, aud: ModuleType) -> Callable[..., Any]:
    """``caucus(*args, env=...)`` on the synthetic ledger's data directory."""
    return _runner(ledger.data_dir, aud.PARTITIONS)


@pytest.fixture
def caucus_at() -> Callable[[Path, int], Callable[..., Any]]:
    """A ``caucus`` runner on another data directory: ``caucus_at(data_dir, partitions)``."""
    return _runner


# -- the real 2020 history -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def iowa_dir(aud: ModuleType) -> Path:
    if not (aud.IOWA_DIR / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {aud.IOWA_DIR} ({WHERE})")
    return Path(aud.IOWA_DIR)


@pytest.fixture(scope="session")
def iowa_ledger(iowa_dir: Path, aud: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real 2020 history, imported once into an embedded log (8 partitions, the default)."""
    importer = pytest.importorskip("producers.importers.idp2020", reason="the 2020 importer is not in this checkout yet")
    data_dir = tmp_path_factory.mktemp("iowa") / "data"
    data_dir.mkdir()
    journal = Journal(SqliteLog(data_dir / "log.sqlite3", partitions=8))
    try:
        summary = importer.import_idp2020(iowa_dir, journal)
    finally:
        journal.close()
    assert summary.ok, [str(i) for i in summary.issues if i.severity == "error"]
    return aud.Ledger(data_dir, [])


@pytest.fixture(scope="session")
def certified(iowa_dir: Path, aud: ModuleType) -> list[Any]:
    return aud.read_certified(iowa_dir)


@pytest.fixture
def iowa_caucus(iowa_ledger: Any) -> Callable[..., Any]:
    return _runner(iowa_ledger.data_dir, 8)

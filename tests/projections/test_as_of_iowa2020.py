"""``caucus tally --as-of`` on real history: the 2020 Iowa releases imported with ``caucus import
idp2020``, and each published statewide figure read back as the log stood at its release time.

The command line a person would type, on the embedded log (with either store) and on Kafka with
PostgreSQL. No projection is run first: an as-of tally is replayed from the log. A release's events
are recorded at the release time itself, so the cut is inclusive: at 06:28:00 the second release
counts, one second earlier it does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from tests.shared_data import IOWA2020

pytestmark = pytest.mark.slow

DATA = IOWA2020
CAUCUS = str(Path(sys.executable).parent / "caucus")

# as of (inclusive) -> (Buttigieg, Sanders): sums of the displayed SDEs, as the party published them
FIGURES = {
    "2020-02-07T01:13:00Z": (Decimal("550.3388"), Decimal("546.9120")),
    "2020-02-08T06:27:59Z": (Decimal("550.3388"), Decimal("546.9120")),
    "2020-02-08T06:28:00Z": (Decimal("564.0124"), Decimal("562.4973")),
    "2020-04-06T23:45:00Z": (Decimal("562.9538"), Decimal("562.0214")),  # certified
}


@pytest.fixture(scope="module", autouse=True)
def _data() -> None:
    if not (DATA / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {DATA}")


def _run(base: list[str], *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}
    done = subprocess.run([CAUCUS, *base, *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _sde(out: dict[str, Any]) -> tuple[Decimal, Decimal]:
    shown = out["state"]["sde_display_sum"]
    return Decimal(shown["Buttigieg"]), Decimal(shown["Sanders"])


def _check_releases(base: list[str]) -> None:
    imported = _run(base, "import", "idp2020", "--data", str(DATA), "--json")
    assert imported["appended"] > 0
    for at, figures in FIGURES.items():
        out = _run(base, "tally", "--as-of", at, "--json")
        assert _sde(out) == figures, at
        assert out["as_of_cut"]["at"] is not None and out["projection_set"]["state"] == "as-of"
    certified = _run(base, "tally", "--as-of", "2020-04-06T23:45:00Z", "--json")["state"]
    assert (certified["units_reporting"], certified["units_defined"]) == (1765, 1765)
    assert Decimal(certified["sde_display_sum"]["Buttigieg"]) - Decimal(certified["sde_display_sum"]["Sanders"]) == Decimal("0.9324")
    # The same moment named by log positions (the import appends release by release).
    night = _run(base, "tally", "--as-of", "2020-02-08T06:28:00Z", "--json")
    positions = ",".join(f"{p}:{n}" for p, n in night["log_positions"].items())
    by_position = _run(base, "tally", "--as-of", positions, "--json")
    assert by_position["state"] == night["state"] and by_position["log_positions"] == night["log_positions"]
    # One county as of the night release sums its own units.
    county = _run(base, "tally", "--as-of", "2020-02-08T06:28:00Z", "--county", "Polk", "--json")
    assert county["county"]["units_defined"] == len(county["units"]) > 100


def test_as_of_releases_on_the_embedded_log(tmp_path: Path, database_url: str | None) -> None:
    _check_releases(["--data-dir", str(tmp_path / "data"), *(["--database", database_url] if database_url else [])])


def test_as_of_releases_on_kafka_and_postgres(kafka_bootstrap: str, unique_topic: str, pg_dsn: str, tmp_path: Path) -> None:
    _check_releases(["--data-dir", str(tmp_path), "--kafka", kafka_bootstrap, "--topic", unique_topic, "--database", pg_dsn])

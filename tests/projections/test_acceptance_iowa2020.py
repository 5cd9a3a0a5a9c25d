"""Acceptance on real history: the three 2020 Iowa releases imported, projected, and the published
statewide figures reproduced (data README: "the facts a replay must reproduce").

Runs the commands a person would (``caucus project``, ``caucus tally --json``) on the embedded log
with either store, and on Kafka with PostgreSQL. The release-by-release figures are checked by
projecting the log as it stood at each release (events recorded up to the release time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from tests.shared_data import IOWA2020

pytestmark = pytest.mark.slow

DATA = IOWA2020
CAUCUS = str(Path(sys.executable).parent / "caucus")

CERTIFIED_SDE = {"Buttigieg": Decimal("562.9538"), "Sanders": Decimal("562.0214")}
CERTIFIED_ALIGNMENTS = {  # candidate: (first, final)
    "Buttigieg": (37_572, 43_209),
    "Sanders": (43_581, 45_652),
    "Warren": (32_589, 34_909),
    "Biden": (26_291, 23_605),
    "Klobuchar": (22_454, 21_100),
    "Yang": (8_914, 1_758),
}
RELEASES = [  # (recorded up to, Buttigieg, Sanders): sums of displayed SDEs as published
    (datetime(2020, 2, 7, 1, 13, tzinfo=UTC), Decimal("550.3388"), Decimal("546.9120")),
    (datetime(2020, 2, 8, 6, 28, tzinfo=UTC), Decimal("564.0124"), Decimal("562.4973")),
]


@pytest.fixture(scope="module")
def history() -> list[Any]:
    if not (DATA / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {DATA}")
    from producers.importers.idp2020 import plan_import

    plan = plan_import(DATA)
    assert plan.events, [str(i) for i in plan.issues]
    return plan.events


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}


def _caucus(base: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([CAUCUS, *base, *args], env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


def _check_certified(state: dict[str, Any]) -> None:
    sde = {c: Decimal(v) for c, v in state["sde_display_sum"].items()}
    assert {c: sde[c] for c in CERTIFIED_SDE} == CERTIFIED_SDE
    assert sde["Buttigieg"] - sde["Sanders"] == Decimal("0.9324")
    for cand, (first, final) in CERTIFIED_ALIGNMENTS.items():
        assert (state["first"][cand], state["final"][cand]) == (first, final), cand
    assert (sum(state["first"].values()), sum(state["final"].values())) == (176_352, 172_300)
    assert (state["units_reporting"], state["units_defined"]) == (1765, 1765)
    assert Decimal(state["sde_exact_decimal"]["Buttigieg"]) != sde["Buttigieg"], "exact and displayed-sum differ"


def test_certified_state_on_the_embedded_log(history: list[Any], tmp_path: Path, database_url: str | None) -> None:
    data = tmp_path / "data"
    Journal(SqliteLog(data / "log.sqlite3", partitions=8)).append_batch(history)
    base = ["--data-dir", str(data)] + (["--database", database_url] if database_url else [])
    summary = json.loads(_caucus(base, "project", "--until-caught-up", "--json", "-q").stdout)
    assert summary["applied"] == len(history) and summary["caught_up"]
    out = json.loads(_caucus(base, "tally", "--json").stdout)
    _check_certified(out["state"])
    lee = json.loads(_caucus(base, "tally", "--county", "Lee", "--json").stdout)
    assert lee["county"]["units_defined"] == len(lee["units"]) > 0
    unit = json.loads(_caucus(base, "tally", "--unit", "947310", "--json").stdout)["unit"]  # Lee FM5 (RULES §13 E06)
    assert {c: n for c, n in unit["cds"].items() if n} == {"Biden": 3, "Buttigieg": 5, "Sanders": 4}
    assert unit["sde_display"]["Buttigieg"] == "0.7000"


def test_certified_state_on_kafka_and_postgres(
    history: list[Any], support: ModuleType, kafka_bootstrap: str, unique_topic: str, pg_dsn: str, tmp_path: Path
) -> None:
    from ledger.log.kafka import provision_topic

    provision_topic(kafka_bootstrap, unique_topic, 8)
    support.produce(kafka_bootstrap, unique_topic, history, 8)
    base = ["--data-dir", str(tmp_path), "--kafka", kafka_bootstrap, "--topic", unique_topic, "--database", pg_dsn]
    summary = json.loads(_caucus(base, "project", "--until-caught-up", "--json", "-q", "--session-timeout-ms", "2000",
                                 "--group", f"acceptance-{unique_topic}").stdout)
    assert summary["applied"] == len(history)
    out = json.loads(_caucus(base, "tally", "--json").stdout)
    _check_certified(out["state"])


@pytest.mark.parametrize(("until", "buttigieg", "sanders"), RELEASES, ids=["2020-02-07T0113Z", "2020-02-08T0628Z"])
def test_earlier_releases_from_the_log_as_it_stood(
    history: list[Any], tmp_path: Path, until: datetime, buttigieg: Decimal, sanders: Decimal
) -> None:
    from projections.queries import load_view
    from projections.runner import ProjectionRunner
    from projections.sources import EmbeddedSource
    from projections.stores.sqlite import SqliteStore

    log = SqliteLog(tmp_path / "log.sqlite3", partitions=8)
    Journal(log).append_batch([e for e in history if e.recorded_at <= until])
    store = SqliteStore(tmp_path / "store.sqlite3")
    sid = store.ensure_serving("tally", source="t").set_id
    ProjectionRunner(store, sid, EmbeddedSource(log), batch_size=500).run(until_caught_up=True)
    state = load_view(store).state()
    store.close()
    assert (state.sde_display_sum["Buttigieg"], state.sde_display_sum["Sanders"]) == (buttigieg, sanders)

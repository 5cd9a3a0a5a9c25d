"""A satellite whose SDE weight cannot be computed drops out of every SDE total: the audit says so
(``SDE_UNWEIGHED``), where it used to say "no findings" (``projections.audit.sde_checks``)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import ledger.cli


def _election(group: dict[str, Any]) -> dict[str, Any]:
    return {
        "election_id": "sat", "name": "Satellites", "rule_set": "idp-2020", "candidates": ["A", "B"],
        "counties": [{"county_id": "k", "name": "K", "sde_ratio": "1/3"}],
        "satellite_groups": [{"group_id": "g", "name": "G", "sde_pool": "6", **group}],
        "units": [{"unit_id": "s", "name": "S", "county_id": "k", "satellite_group": "g"},
                  {"unit_id": "p", "name": "P", "county_id": "k", "delegates": 4}],
    }  # fmt: skip


@pytest.mark.parametrize("group, weighed", [
    ({"attendance_base": 100}, True),  # 50 of 100 attendees: half the pool
    ({"attendance_base": 10}, False),  # more attendees than the whole group
    ({"attendance_base": 0}, False),
    ({}, False),  # no base at all
])  # fmt: skip
def test_delegates_without_sdes_are_a_finding(group: dict[str, Any], weighed: bool, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CAUCUS_TOKEN", "CAUCUS_KAFKA", "CAUCUS_DATABASE", "CAUCUS_TOPIC", "CAUCUS_RESULTS_TOPIC"):
        monkeypatch.delenv(name, raising=False)
    ledger.cli._register_commands()
    runner = CliRunner()

    def caucus(*args: str) -> tuple[int, Any]:
        done = runner.invoke(ledger.cli.app, ["--data-dir", str(tmp_path / "data"), *args])
        assert "Traceback" not in done.output, done.output
        return done.exit_code, json.loads(done.stdout) if done.stdout.strip().startswith("{") else done.output

    token = caucus("credentials", "issue", "--official", "Pat", "--json")[1]["token"]
    (tmp_path / "e.json").write_text(json.dumps(_election(group)))
    assert caucus("define", str(tmp_path / "e.json"), "--token", token)[0] == 0
    for unit in ("s", "p"):
        code, answer = caucus("report", "--unit", unit, "--first", "A=30,B=20", "--final", "A=30,B=20", "--token", token,
                              "--json")
        assert code == 0, answer
        warned = [w["field"] for w in answer["warnings"] if w["code"] == "SATELLITE_OVER_BASE"]
        assert warned == ([] if weighed or unit == "p" else ["attendance"]), answer  # the chair hears it at once
    assert caucus("project", "--until-caught-up", "--quiet")[0] == 0
    code, audit = caucus("audit", "--json")
    found = [(f["unit_id"], f["severity"]) for f in audit["findings"] if f["code"] == "SDE_UNWEIGHED"]
    sde = caucus("tally", "--json")[1]["state"]["sde_exact"]
    if weighed:
        assert found == [] and code == 0
        assert sum(Fraction(v) for v in sde.values()) == Fraction(4, 3) + 3  # P's 4 x 1/3, S's half of 6
    else:
        assert found == [("s", "error")] and code == 1
        assert sum(Fraction(v) for v in sde.values()) == Fraction(4, 3)  # what the finding is about
        shown = " ".join(caucus("tally", "--unit", "s")[1].split())
        assert "SDE weight not computed (see the problems below)" in shown and "None" not in shown, shown

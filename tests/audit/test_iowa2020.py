"""The auditor's commands on the real 2020 history (imported by the 2020 importer), checked against
figures derived here from the published files with plain ``csv`` code that shares nothing with the
importer, the ledger or the projections.

Printed (run with ``-s``): the diff between the 2020-02-08 release and the certified results, the §12
audit counts of the certified release, and the idp-2020 vs idp-2016 rule-set diff.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ledger.caucus_math import CaucusMathError, get_rule_set

pytestmark = pytest.mark.slow

Run = Callable[..., Any]
RELEASE_0208 = "idp_results_2020-02-08T0628Z.csv"
RELEASE_CERTIFIED = "idp_results_2020-04-06T2345Z_certified.csv"
SATELLITE_GROUPS = ("CD1 Satellite", "CD2 Satellite", "CD3 Satellite", "CD4 Satellite", "Out of State Satellite")


def _doc(result: Any, code: int) -> dict[str, Any]:
    assert result.exit_code == code, result.output[-2000:]
    return json.loads(result.stdout)


def _sums(release: dict[Any, dict[tuple[str, str], Decimal]], measure: str, county: str | None = None) -> Counter[str]:
    out: Counter[str] = Counter()
    for (c, _), values in release.items():
        if county is None or c == county:
            for (cand, m), v in values.items():
                if m == measure:
                    out[cand] += v  # type: ignore[assignment]
    return out


def test_diff_of_the_2020_02_08_release_and_the_certified_results(iowa_caucus: Run, iowa_dir: Path, aud: ModuleType,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    doc = _doc(iowa_caucus("diff", "as-of:2020-02-08T06:28:00Z", "log", "--json"), 1)
    before = aud.read_release(iowa_dir / RELEASE_0208)
    after = aud.read_release(iowa_dir / RELEASE_CERTIFIED)
    assert len(before) == len(after) == 1765
    changed = {k for k in before if before[k] != after[k]}
    # Satellites whose first and final alignments did not change but whose SDEs did: the CD1 pool was
    # shared over a new attendance base after one site's headcount was corrected (RULES §8). The import
    # records each release's satellite weights as a new ElectionDefined, so the diff shows these too.
    weight_only = {
        k for k in changed
        if k[0] in SATELLITE_GROUPS and all(before[k][x] == after[k][x] for x in before[k] if x[1] != "sde")
    }
    expected = changed
    units = doc["units"]
    by_county = Counter(u["county"] for u in units)
    with capsys.disabled():
        state = {c["candidate"]: c for c in doc["state"]["candidates"]}
        print(f"\ndiff 2020-02-08 release -> certified: {len(units)} units changed in {len(doc['counties'])} counties "
              f"(published files: {len(changed)} units differ, {len(weight_only)} of them CD1 satellites whose SDE weight "
              f"alone changed)")  # fmt: skip
        for cand in ("Buttigieg", "Sanders", "Warren", "Biden", "Klobuchar"):
            c = state[cand]
            print(f"  {cand:<10} SDE (sum of displayed) {c['sde_display_sum']['a']} -> {c['sde_display_sum']['b']} "
                  f"({c['sde_display_sum']['delta']}); exact {c['sde']['a']} -> {c['sde']['b']}; "
                  f"CDs {c['cds']['a']} -> {c['cds']['b']}; first {c['first']['delta']:+}, final {c['final']['delta']:+}")  # fmt: skip
    assert len(units) == len(expected) == 101 and len(weight_only) == 9
    assert by_county == Counter(k[0] for k in expected)
    assert all(u["status"]["b"] == "corrected (recanvass)" for u in units)
    # First and final alignment: statewide changes equal the published files' exactly.
    state = {c["candidate"]: c for c in doc["state"]["candidates"]}
    for measure, key in (("expression_1", "first"), ("expression_2", "final")):
        published = _sums(after, measure)
        published.subtract(_sums(before, measure))
        got = {cand: state[cand][key]["delta"] for cand in state}
        assert {c: int(v) for c, v in published.items() if v} == {c: v for c, v in got.items() if v}
    # SDEs: every county's change (sum of displayed values) equals the published one.
    counties = {c["name"]: c for c in doc["counties"]}
    for county in {k[0] for k in changed}:
        published = _sums(after, "sde", county)
        published.subtract(_sums(before, "sde", county))
        shown = {c["candidate"]: Decimal(c["sde_display_sum"]["delta"]) for c in counties.get(county, {"candidates": []})["candidates"]}
        mine = {c: v for c, v in shown.items() if v}
        theirs = {c: v for c, v in published.items() if v}
        assert mine == theirs, county
    # The certified side reproduces the published statewide SDEs (README: 562.9538 / 562.0214).
    assert state["Buttigieg"]["sde_display_sum"]["b"] == "562.9538"
    assert state["Sanders"]["sde_display_sum"]["b"] == "562.0214"
    assert doc["summary"]["units_compared"] == 1765


def _threshold(t: int, d: int) -> int:
    """RULES §3 with integers."""
    if d == 1:
        return (t + 1) // 2
    if d == 2:
        return (t + 3) // 4
    if d == 3:
        return (t + 5) // 6
    return (15 * t + 99) // 100


def test_audit_of_the_certified_release(iowa_caucus: Run, certified: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc(iowa_caucus("audit", "--log", "--json"), 1)
    assert doc["units_checked"] == 1765 and doc["not_checked"] == []
    counts = {(c["code"], c["severity"]): (c["findings"], c["units"]) for c in doc["counts"]}
    with capsys.disabled():
        print(f"\n§12 audit of the certified release ({doc['rule_set']}): {doc['units_with_findings']} units with findings")
        for (code, sev), (n, u) in counts.items():
            print(f"  {code:<24}{sev:<10}{n:>5} findings {u:>5} units")
    units_with: dict[str, set[str]] = defaultdict(set)
    for f in doc["findings"]:
        units_with[f["code"]].add(f["unit_id"])

    # Plain arithmetic on the normalised certified file.
    assert len(certified) == 1765
    over = {u.van_id for u in certified if sum(u.final.values()) > sum(u.first.values())}
    off_total = {u.van_id for u in certified if sum(u.reported.values()) != u.delegates}
    nonviable = set()
    for u in certified:
        if u.delegates < 2:
            continue
        thr = _threshold(sum(u.first.values()), u.delegates)  # RULES §1, §12: T is the first-alignment total
        if any(u.reported[c] and not (u.final[c] and u.final[c] >= thr) for c in u.reported):
            nonviable.add(u.van_id)
    assert units_with["FINAL_GT_FIRST"] == over and len(over) == 80
    assert units_with["DELEGATE_TOTAL"] == off_total and len(off_total) == 16
    assert "946620" in off_total  # Black Hawk WL 2-4: 17 delegates for 14 (RULES §13 E08)
    assert units_with["NONVIABLE_AWARDED"] == nonviable and len(nonviable) == 11
    # RULES §17.4: the satellite whose headcount (67) exceeds its first alignment (50), the CD1 site
    # whose headcount was corrected to 43 after its weight was fixed at 116, and the two that reported
    # one delegate more than the table gives (Wesley Acres 8 of 7, Washington DC IBEW 9 of 8).
    assert units_with["SATELLITE_DELEGATES"] == {"1117", "1143", "1158", "1184"}

    # The same checks over inputs read straight from the file (not from the log) give the same counts.
    rules = get_rule_set("idp-2020")
    independent: Counter[tuple[str, str]] = Counter()
    for u in certified:
        for f in rules.check(delegates=u.delegates, attendance=None, first=u.first, final=u.final, reported=u.reported):
            independent[(f.code, f.severity.value)] += 1
    mine = Counter({k: n for k, (n, _) in counts.items() if k[0] != "SATELLITE_DELEGATES"})
    assert mine == independent
    for kind in (("DELEGATE_TOTAL", "error"), ("NONVIABLE_AWARDED", "error"), ("LOCKED_GROUP_SHRANK", "error"),
                 ("FINAL_GT_FIRST", "error"), ("ALLOCATION", "error")):  # fmt: skip
        assert counts[kind][0] > 0, kind


def test_rule_set_diff_on_2020(iowa_caucus: Run, certified: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc(iowa_caucus("diff", "log", "rules:idp-2016", "--json"), 1)
    found = {u["unit_id"] for u in doc["units"]}
    expected = set()
    for u in certified:
        got = []
        for name in ("idp-2020", "idp-2016"):
            try:
                a = get_rule_set(name).allocate(delegates=u.delegates, attendance=None, first=u.first, final=u.final)
            except CaucusMathError:
                got.append(None)
                continue
            got.append(({k: v for k, v in a.delegates.items() if v}, {(p.contenders, p.seats) for p in a.pending}))
        if got[0] != got[1]:
            expected.add(u.van_id)
    with capsys.disabled():
        state = {c["candidate"]: c for c in doc["state"]["candidates"]}
        moved = ", ".join(f"{c} {state[c]['cds']['a']}->{state[c]['cds']['b']}" for c in state if state[c]["cds"]["delta"])
        print(f"\nrule sets idp-2020 -> idp-2016 over the certified results (computed delegates, settled seats): "
              f"{len(found)} units differ; statewide CDs {moved}")  # fmt: skip
    assert found == expected and found


def test_recount_package_of_real_units(iowa_ledger: Any, caucus_at: Callable[..., Run], tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(iowa_ledger.data_dir, data)  # a checkpoint appends to the log: keep the session's log as it is
    run = caucus_at(data, 8)
    assert run("checkpoint").exit_code == 0
    # Each package holds the unit's own events plus the election-wide ones (two definitions, a checkpoint).
    for unit, events in (("946620", 3), ("1158", 4)):  # Black Hawk WL 2-4; a CD1 satellite corrected on recanvass
        made = run("recount-package", unit, "--out", str(tmp_path / unit), "--json")
        assert made.exit_code == 0, made.output
        assert json.loads(made.stdout)["events"] == events
        done = subprocess.run([sys.executable, str(tmp_path / unit / "verify.py")], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout
    trail = json.loads((tmp_path / "946620" / "units" / "946620" / "trail.json").read_text())
    assert trail["final_tally"]["cds_reported"] == {**dict.fromkeys(trail["final_tally"]["cds_reported"], 0),
                                                    "Biden": 3, "Buttigieg": 4, "Klobuchar": 3, "Sanders": 4, "Warren": 3}  # fmt: skip

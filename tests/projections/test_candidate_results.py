"""Published tallies list their candidates in ballot order with vote shares (issue: results desks read
a list, not maps): shares exact then rounded half up; old (v1) feed records still decode."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from fastavro import parse_schema, schemaless_writer

from ledger.codec import load_catalogue
from projections.candidate_results import candidate_results, percent_text
from projections.feed_events import FEED_TYPES, UnitTallyPublished, feed_codec

CAUCUS = str(Path(sys.executable).parent / "caucus")


def test_percentages_are_exact_shares_rounded_half_up_once() -> None:
    assert percent_text(1, 8) == "12.50"
    assert percent_text(1, 3) == "33.33"
    assert percent_text(2, 3) == "66.67"
    assert percent_text(1, 16) == "6.25"
    assert percent_text(1, 800) == "0.13"  # 0.125 -> half up
    assert percent_text(0, 0) == "0.00"


def test_candidates_follow_the_ballot_then_other_groups_by_name() -> None:
    rows = candidate_results(["Zed", "Amy"], {"Amy": 3, "Zed": 1, "Uncommitted": 4}, {"Amy": 4, "Zed": 0}, {"Amy": 2},
                             {"Amy": "0.2800"})
    assert [(r["name"], r["ballot_order"]) for r in rows] == [("Zed", 1), ("Amy", 2), ("Uncommitted", 3)]
    amy = rows[1]
    assert (amy["first_votes"], amy["first_pct"], amy["final_votes"], amy["final_pct"]) == (3, "37.50", 4, "100.00")
    assert (amy["cds"], amy["sde_display"]) == (2, "0.2800")
    assert rows[0]["final_pct"] == "0.00" and rows[0]["sde_display"] == "0.0000"


def test_a_v1_feed_record_still_decodes_with_no_candidates() -> None:
    v1 = load_catalogue(FEED_TYPES)[("UnitTallyPublished", 1)]
    codec = feed_codec()
    info = next(i for i in codec.schemas() if (i.type, i.version) == ("UnitTallyPublished", 1))
    record = {
        "envelope": {"event_id": "e", "type": "UnitTallyPublished", "schema_version": 1, "election_id": "x", "unit_id": "u",
                     "occurred_at": 0, "recorded_at": 0, "actor": "a", "channel": "system", "idempotency_key": "k"},
        "projection": "tally", "projection_version": 1, "rule_set": None, "version": 5, "positions": [],
        "name": "U", "county_id": "c", "defined": True, "status": "reported", "stage": None, "reporting": True,
        "delegates": 2, "attendance": 10, "threshold": 3, "first": {"A": 10}, "final": {"A": 10}, "cds": {"A": 2},
        "cds_reported": None, "cds_computed": {"A": 2}, "cds_source": "computed", "pending": [], "sde_weight": None,
        "sde": {"A": "1/1"}, "sde_display": {"A": "1.0000"}, "rejected": 0, "problems": [], "result_event_id": "r",
    }
    parsed = parse_schema(v1)
    envelope = next(f for f in v1["fields"] if f["name"] == "envelope")["type"]
    record["envelope"] = {f["name"]: record["envelope"].get(f["name"]) for f in envelope["fields"]}
    buf = io.BytesIO()
    schemaless_writer(buf, parsed, record)
    event = codec.decode(b"\xc3\x01" + info.fingerprint + buf.getvalue())
    assert isinstance(event.payload, UnitTallyPublished)
    assert event.payload.tally["candidates"] == [] and event.payload.tally["result_recorded_at"] is None
    assert event.payload.tally["cds"] == {"A": 2}


def test_the_feed_lists_candidates_in_ballot_order_with_the_sums(tmp_path: Path) -> None:
    done = subprocess.run([CAUCUS, "--data-dir", str(tmp_path), "demo"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = subprocess.run([CAUCUS, "--data-dir", str(tmp_path), "subscribe", "--from-beginning", "--until-idle", "2"],
                           capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()
    tallies = [json.loads(line) for line in lines]
    state = [t for t in tallies if t.get("kind") == "state"][-1]
    names = [c["name"] for c in state["candidates"]]
    assert set(names) >= set(state["final"]) and [c["ballot_order"] for c in state["candidates"]] == list(range(1, len(names) + 1))
    total = sum(state["final"].values())
    for c in state["candidates"]:
        assert c["final_votes"] == state["final"].get(c["name"], 0)
        assert c["final_pct"] == percent_text(c["final_votes"], total)
        assert c["sde_display"] == state["sde_display_sum"].get(c["name"], "0.0000")
    unit = next(t for t in tallies if t.get("kind") == "unit" and t["reporting"])
    assert unit["result_recorded_at"] and [c["name"] for c in unit["candidates"]][: len(names)] == names

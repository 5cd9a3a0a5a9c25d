"""The results feed as Server-Sent Events, on both backends: what ``caucus subscribe`` prints, and a
client that reconnects with ``Last-Event-ID`` goes on exactly where it stopped."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

ELECTION = "iowa-2020-dem-caucus"


def _frames(iowa: Any, count: int, *, headers: dict[str, str] | None = None, **params: str) -> list[dict[str, Any]]:
    """The first ``count`` events of a stream (``ready`` included), each as {event, id, data}."""
    out: list[dict[str, Any]] = []
    with httpx.stream("GET", iowa.url + "/api/feed", params=params, headers=headers or {}, timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        frame: dict[str, Any] = {}
        for line in response.iter_lines():
            if not line:
                if "event" in frame:
                    out.append(frame)
                    if len(out) >= count:
                        break
                frame = {}
            elif not line.startswith(":") and ": " in line:
                field, value = line.split(": ", 1)
                frame[field] = json.loads(value) if field == "data" else value
    return out


def _start(iowa: Any) -> str:
    """The feed's first position: every partition at 0 (the ids name every partition)."""
    ready = _frames(iowa, 1)[0]
    assert ready["event"] == "ready"
    return ",".join(f"{p.split(':')[0]}:0" for p in ready["id"].split(","))


def test_the_stream_resumes_from_last_event_id(iowa: Any) -> None:
    start = _start(iowa)
    first = _frames(iowa, 8, election=ELECTION, **{"from": start})
    assert first[0]["event"] == "ready" and first[0]["id"] == start
    tallies = [f for f in first if f["event"] == "tally"]
    assert len(tallies) == 7 and all(t["data"]["election_id"] == ELECTION for t in tallies)
    assert {t["data"]["kind"] for t in tallies} <= {"unit", "county", "state"}
    resumed = _frames(iowa, 4, headers={"Last-Event-ID": tallies[3]["id"]}, election=ELECTION, **{"from": start})
    assert resumed[0]["event"] == "ready" and resumed[0]["id"] == tallies[3]["id"], "Last-Event-ID wins over ?from"
    assert [f["data"] for f in resumed[1:]] == [t["data"] for t in tallies[4:7]], "nothing missed, nothing repeated"


def test_the_stream_carries_what_caucus_subscribe_prints(iowa: Any) -> None:
    start = _start(iowa)
    unit = _frames(iowa, 2, unit="947310", **{"from": start})[1]["data"]
    lines = iowa.run("subscribe", "--from-beginning", "--unit", "947310", "--max", "1").stdout.splitlines()
    assert unit == json.loads(lines[0])
    assert unit["kind"] == "unit" and unit["key"] == "947310"
    bad = httpx.get(iowa.url + "/api/feed", headers={"Last-Event-ID": "not a position"}, timeout=30)
    assert bad.status_code == 400 and "feed position" in bad.json()["error"]["message"]

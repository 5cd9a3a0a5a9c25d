"""Whether the results feed says what the projection holds: its latest view, key by key, against the
serving projection's tallies.

Why: downstream systems read the feed, not the store, and the feed is published incrementally (only
what a batch changed, the county and state sums followed unit by unit, copies fenced by version), so
a slip in any of that would leave subscribers with numbers the ledger does not hold, and nothing would
say so. Here every unit, county and state tally is computed afresh from the store (the county and
state sums by summing the units again, not by following them) and compared with the copy the feed
holds, at the version each tally has (``feed_events.tally_version``):

* the same version, other content: ``FEED_DIFFERS`` (error, the fields named);
* an older version: ``FEED_BEHIND`` (info: the projection has moved on and `caucus project` publishes it);
* a newer version: ``FEED_AHEAD`` (error: the feed claims what the projection never held);
* none at all for a tally the projection holds: ``FEED_MISSING`` (error) once the feed has published up to
  where the projection stands (its newest copies' log positions), else ``FEED_BEHIND`` (not published yet);
* a copy of another projection set (before a `caucus replay` switched over): ``FEED_OTHER_SET`` (info);
* a tally the projection no longer holds (a unit a redefinition removed): ``FEED_EXTRA`` (warn).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.events import Event
from projections.feed_events import AreaTallyPublished, FeedStamp, UnitTallyPublished, feed_key, tally_key, tally_version
from projections.queries import TallyView, load_view
from projections.stores.port import ProjectionStore, SetInfo

__all__ = ["FeedCheck", "FeedFinding", "check_feed", "FEED_CODES"]

FEED_CODES = {"FEED_DIFFERS": "error", "FEED_AHEAD": "error", "FEED_MISSING": "error", "FEED_EXTRA": "warn",
              "FEED_BEHIND": "info", "FEED_OTHER_SET": "info"}
_NO_STAMP = FeedStamp("", 0, None, (), 0)


@dataclass(frozen=True, slots=True)
class FeedFinding:
    key: str
    """``unit:<election>:<unit>``, ``county:<election>:<county>`` or ``state:<election>``."""
    code: str
    published: int | None
    expected: int | None
    fields: tuple[str, ...] = ()

    @property
    def severity(self) -> str:
        return FEED_CODES[self.code]

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "code": self.code, "severity": self.severity, "published_version": self.published,
                "expected_version": self.expected, "fields": list(self.fields)}


@dataclass
class FeedCheck:
    projection: str
    compared: int = 0
    agree: int = 0
    findings: list[FeedFinding] = field(default_factory=list)

    @property
    def has_errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.code] = counts.get(f.code, 0) + 1
        return {"projection": self.projection, "compared": self.compared, "agree": self.agree, "counts": counts,
                "findings": [f.to_json() for f in self.findings]}


def check_feed(store: ProjectionStore, info: SetInfo, published: Iterable[Event[Any]]) -> FeedCheck:
    """Compare the feed's latest copies (``published``: decoded records of the latest view) with the
    tallies of the projection set ``info``, every election it defines."""
    held: dict[str, Event[Any]] = {}
    through: dict[int, int] = {}  # how far in the event log the feed's copies reach
    for event in published:
        election_id, kind, key = feed_key(event)
        if kind != "checkpoint":
            held[tally_key(election_id, kind, key)] = event
            for part, offset in event.payload.stamp.positions:
                through[part] = max(through.get(part, 0), offset)
    out = FeedCheck(f"{info.name} v{info.version}")
    with store.reader(info.set_id) as reader:
        elections = [e for e, row in reader.elections().items() if json.loads(row.state).get("definition") is not None]
        events = {key: int(json.loads(row.state).get("events", 0)) for key, row in reader.unit_states().items()}
        behind = any(row.next_offset > through.get(p, 0) for p, row in reader.positions().items())
    for election_id in sorted(elections):
        view = load_view(store, set_id=info.set_id, election_id=election_id)
        for key, (version, content) in _expected(view, events).items():
            out.compared += 1
            finding = _compare(key, held.pop(key, None), version, content, info, behind)
            if finding is None:
                out.agree += 1
            else:
                out.findings.append(finding)
    out.findings += [FeedFinding(key, "FEED_EXTRA", _version(event), None) for key, event in sorted(held.items())]
    return out


def _expected(view: TallyView, events: Mapping[tuple[str, str], int]) -> dict[str, tuple[int, dict[str, Any]]]:
    """Each tally the projection holds for the view's election: its version and what a copy of it says."""
    ctx = view.context
    eid, ballot = ctx.election_id, ctx.candidates
    election_events = ctx.state.events
    counted = {uid: events.get((eid, uid), 0) for uid in ctx.units}
    out: dict[str, tuple[int, dict[str, Any]]] = {}
    for uid, tally in view.units.items():
        if uid in ctx.units:
            out[tally_key(eid, "unit", uid)] = (tally_version(election_events, counted[uid]),
                                           dict(UnitTallyPublished.of(tally, _NO_STAMP, ballot).tally))
    for cid in ctx.counties:
        in_county = sum(n for uid, n in counted.items() if ctx.units[uid].county_id == cid)
        sums = AreaTallyPublished.of(view.county(cid), _NO_STAMP, kind="county", area=cid, certified=ctx.certified, ballot=ballot)
        out[tally_key(eid, "county", cid)] = (tally_version(election_events, in_county), dict(sums.sums))
    state = AreaTallyPublished.of(view.state(), _NO_STAMP, kind="state", area=eid, certified=ctx.certified, ballot=ballot)
    out[tally_key(eid, "state", eid)] = (tally_version(election_events, sum(counted.values())), dict(state.sums))
    return out


def _compare(key: str, event: Event[Any] | None, version: int, content: dict[str, Any], info: SetInfo,
             behind: bool) -> FeedFinding | None:
    if event is None:
        return FeedFinding(key, "FEED_BEHIND" if behind else "FEED_MISSING", None, version)
    stamp = event.payload.stamp
    if (stamp.projection, stamp.projection_version) != (info.name, info.version):
        return FeedFinding(key, "FEED_OTHER_SET", stamp.version, version)
    if stamp.version < version:
        return FeedFinding(key, "FEED_BEHIND", stamp.version, version)
    if stamp.version > version:
        return FeedFinding(key, "FEED_AHEAD", stamp.version, version)
    said = _content(event)
    differ = tuple(sorted(name for name in content.keys() | said.keys() if _plain(content.get(name)) != _plain(said.get(name))))
    return FeedFinding(key, "FEED_DIFFERS", stamp.version, version, differ) if differ else None


def _content(event: Event[Any]) -> dict[str, Any]:
    p = event.payload
    return dict(p.tally) if isinstance(p, UnitTallyPublished) else dict(p.sums)


def _plain(value: Any) -> Any:
    """A value as JSON has it: the copy went through Avro (tuples come back lists, maps plain dicts)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _version(event: Event[Any]) -> int | None:
    return int(event.payload.stamp.version)

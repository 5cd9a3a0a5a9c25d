"""The ledger as it stood at a moment: unit and election states, then tallies, rebuilt from the log.

Why from the log and in memory: "what did the tally say at 21:00 on caucus night?" must be answerable
without a projection store built for that moment, and without touching the one that serves. The log is
the source of truth, so the answer is the same pure reducers (``projections.reducers``) and tally code
(``projections.tally``) the runner uses, folded over the events inside a *cut*.

A cut says which records count:

* **by time** (``2020-02-08T06:28:00Z``): every event whose ``recorded_at`` (when the ledger accepted
  it, carried in the event itself) is at or before that instant, *inclusive*. The broker's own record
  timestamps and time index are never used (DESIGN.md: the test broker answers ``offsets_for_times``
  wrongly). Every record is read and filtered one by one, so a partition whose ``recorded_at`` values
  are not monotonic (a spool replayed late) is still cut correctly.
* **by position** (``3:120,5:88``): per partition, the records *before* the given offset; ``3:120``
  means offsets 0..119 of partition 3, i.e. its first 120 records, the same number a projection stores
  as its position, ``caucus log info`` prints as a high watermark and a checkpoint signs as a partition
  size. ``3:..120`` says the same explicitly; ``3:..=119`` is the inclusive form (up to and including
  offset 119, as ``caucus log tail`` prints an event's position). A partition that is not named
  contributes nothing, unless ``*:end`` (every unnamed partition in full) or ``*:N`` is given.
  Naming an offset beyond what a partition holds is an error, not a silent cap: such a position
  describes a log this one is not (DESIGN.md: a lost log must be reported).
* both at once: a record must pass both.

Duplicates (a producer retry that landed twice) are dropped by event id, as the runner drops them.
Memory holds one state per unit and per election and, for dedupe, the ids of each unit's events; never
event bodies. ``units`` narrows the fold to some units (a recount package, one trail). Units are
keyed by (election id, unit id); an event that names no election is counted, never folded.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ledger.codec import Codec, CodecError, default_codec
from ledger.events import SubmissionRejected
from ledger.log.port import EventLog
from ledger.timestamps import iso_text
from projections.reducers import (
    ElectionState,
    UnitState,
    apply_election,
    apply_unit,
    elections_defining,
    is_election_event,
    is_unattributed,
)
from projections.stores.port import EventRow
from projections.tally import (
    AreaTally,
    ElectionContext,
    UnitTally,
    aggregate,
    aggregate_counties,
    compute_unit_tally,
    election_context,
)

__all__ = [
    "AsOfError",
    "NoElectionDefined",
    "check_cut",
    "Cut",
    "parse_time",
    "parse_positions",
    "parse_cut",
    "AsOfState",
    "replay",
    "AsOfTally",
    "tally_as_of",
    "select_election",
    "inside",
]


class AsOfError(ValueError):
    """A cut that cannot be read, or that the log cannot answer; the message names what and why."""


class NoElectionDefined(AsOfError):
    """No election is defined where one was looked for, and none was asked for by id. Apart from the other
    errors because a log may still hold submissions refused before any election was defined, and the
    paper trail and the audit list those rather than answer nothing."""


_MOST_DIGITS = 18  # every number of up to 18 digits fits a signed 64-bit offset, as the stores keep them
_POSITION_ITEM = re.compile(r"^\s*(?P<part>\*|\d+)\s*:\s*(?P<op>\.\.=?)?\s*(?P<end>\d+|end)\s*$")


@dataclass(frozen=True)
class Cut:
    """Which records of the log count (see module docstring). ``ends[p]`` is the exclusive end
    offset of partition ``p``; ``rest`` the end for partitions not named (None: no limit)."""

    at: datetime | None = None
    ends: Mapping[int, int] | None = None
    rest: int | None = 0

    def __post_init__(self) -> None:
        if self.at is not None and self.at.tzinfo is None:
            raise AsOfError("as-of time: a time without a time zone is ambiguous; add Z for UTC")

    @property
    def everything(self) -> bool:
        return self.at is None and self.ends is None

    def end_of(self, partition: int) -> int | None:
        """Exclusive end offset of ``partition`` (None: no limit by position)."""
        if self.ends is None:
            return None
        return self.ends.get(partition, self.rest)

    def describe(self) -> str:
        parts = []
        if self.at is not None:
            parts.append(f"events recorded at or before {self.at.astimezone(UTC).isoformat()}")
        if self.ends is not None:
            named = ", ".join(f"{p}:{n}" for p, n in sorted(self.ends.items()))
            rest = "all of every other partition" if self.rest is None else (
                "nothing from other partitions" if self.rest == 0 else f"the first {self.rest} records of every other partition"
            )
            parts.append(f"records before {named or '(none named)'} ({rest})")
        return " and ".join(parts) if parts else "the whole log"

    def to_json(self) -> dict[str, Any]:
        return {
            "at": None if self.at is None else self.at.astimezone(UTC).isoformat(),
            "ends": None if self.ends is None else {str(p): n for p, n in sorted(self.ends.items())},
            "rest": "end" if self.rest is None else self.rest,
            "description": self.describe(),
        }


def parse_time(text: str) -> datetime:
    """An ISO 8601 instant with its time zone (``2020-02-08T06:28:00Z``, ``...+01:00``)."""
    raw = text.strip()
    midnight = re.match(r"(\d{4}-\d{2}-\d{2})[T ]24:00(?::00(?:\.0+)?)?(?=$|[Z+-])", raw)  # ISO 8601's end of a day
    try:
        at = datetime.fromisoformat(f"{midnight[1]}T00:00:00{raw[midnight.end():]}" if midnight else raw)
    except ValueError as exc:
        why = f" ({exc})" if "out of range" in str(exc) or "must be in" in str(exc) else ""  # a day or hour no calendar has
        raise AsOfError(f"{text!r} is neither an ISO 8601 time such as 2020-02-08T06:28:00Z{why} nor log positions "
                        "such as 3:120,5:88") from None
    if midnight:
        try:
            at += timedelta(days=1)
        except OverflowError:
            raise AsOfError(f"as-of time {text!r} is outside the instants the log can record (UTC years 1 to 9999)") from None
    if at.tzinfo is None:
        # The suggestion must itself be accepted: a date alone gets a time of day as well as the zone.
        example = f"{raw}Z" if "T" in raw or " " in raw else f"{raw}T23:59:59Z (the end of that day, UTC)"
        raise AsOfError(f"as-of time {text!r} has no time zone, so it is ambiguous; add one, e.g. {example}")
    try:
        return at.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-12:00 lies past the last instant Python (and the log) can hold
        raise AsOfError(f"as-of time {text!r} is outside the instants the log can record (UTC years 1 to 9999)") from None


def parse_positions(text: str) -> Cut:
    """``P:N`` / ``P:..N`` (exclusive: the first N records), ``P:..=O`` (inclusive: up to offset O),
    ``*:end`` or ``*:N`` for partitions not named; comma separated."""
    ends: dict[int, int] = {}
    rest: int | None = 0
    items = [i for i in text.split(",") if i.strip()]
    if not items:
        raise AsOfError("log positions: none given; write PARTITION:OFFSET pairs such as 3:120,5:88")
    for item in items:
        m = _POSITION_ITEM.match(item)
        if m is None:
            raise AsOfError(
                f"log position {item.strip()!r} is not PARTITION:OFFSET (exclusive, e.g. 3:120), "
                "PARTITION:..=OFFSET (inclusive) or *:end"
            )
        part, op, end_text = m["part"], m["op"] or "..", m["end"]
        if max(len(part), len(end_text)) > _MOST_DIGITS:  # beyond a 64-bit offset: no log has such a position
            raise AsOfError(f"log position {item.strip()!r}: a partition or offset of more than {_MOST_DIGITS} digits "
                            "is beyond any log")
        if end_text == "end":
            if op != "..":
                raise AsOfError(f"log position {item.strip()!r}: 'end' cannot be inclusive")
            end: int | None = None
        else:
            end = int(end_text) + (1 if op == "..=" else 0)
        if part == "*":
            rest = end
        elif end is None:
            raise AsOfError(f"log position {item.strip()!r}: a named partition needs an offset ('end' is for '*')")
        else:
            p = int(part)
            if p in ends:
                raise AsOfError(f"log positions name partition {p} twice")
            ends[p] = end
    return Cut(ends=ends, rest=rest)


def parse_cut(text: str) -> Cut:
    """A time, or log positions (anything of the form ``P:N,...``)."""
    first = text.split(",")[0]
    if _POSITION_ITEM.match(first):
        return parse_positions(text)
    return Cut(at=parse_time(text))


@dataclass
class AsOfState:
    """Reducer states as of a cut. ``positions[p]`` is the offset after the last record of partition
    ``p`` that was read inside the cut (what a projection at this moment would store)."""

    cut: Cut
    units: dict[tuple[str, str], UnitState] = field(default_factory=dict)  # by (election id, unit id)
    elections: dict[str, ElectionState] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)
    high_watermarks: dict[int, int] = field(default_factory=dict)
    applied: int = 0
    duplicates: int = 0
    outside: int = 0
    unattributed: list[EventRow] = field(default_factory=list)  # events that name no election
    undefined: dict[str, list[EventRow]] = field(default_factory=dict)
    """The refusals of each election not defined (yet) where they were read: a definition read later
    (another partition) drops its election's list; what is left names elections the cut does not define.
    Refusals only: nothing else of an election is accepted before its definition, and keeping every event
    read ahead of a definition would make the memory grow with the log."""
    newest_recorded_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "cut": self.cut.to_json(),
            "applied": self.applied,
            "duplicates_dropped": self.duplicates,
            "records_outside_cut": self.outside,
            "unattributed": len(self.unattributed),
            "positions": {str(p): o for p, o in sorted(self.positions.items())},
            "high_watermarks": {str(p): o for p, o in sorted(self.high_watermarks.items())},
            "newest_recorded_at": None if self.newest_recorded_at is None else self.newest_recorded_at.isoformat(),
            "units": len(self.units),
        }

    def unaccounted(self) -> list[EventRow]:
        """What an audit lists apart, as counted by no tally: the events naming no election, and those of
        elections the cut names but does not define, in log order."""
        rows = [*self.unattributed, *(row for eid, kept in self.undefined.items() if eid for row in kept)]
        return sorted(rows, key=lambda r: (r.partition, r.offset))


def check_cut(cut: Cut, marks: Mapping[int, int], partitions: int) -> None:
    """Raise ``AsOfError`` for positions the log does not hold, as ``replay`` does."""
    _start_offsets(cut, marks, partitions)


def _start_offsets(cut: Cut, marks: Mapping[int, int], partitions: int) -> dict[int, int]:
    """Where to begin each partition: nothing to read from partitions whose end is 0."""
    if cut.ends is not None:
        for p, end in cut.ends.items():
            if not 0 <= p < partitions:
                raise AsOfError(f"log position {p}:{end}: the log has partitions 0..{partitions - 1}")
            if end > marks.get(p, 0):
                raise AsOfError(
                    f"log position {p}:{end} lies beyond partition {p}, which holds {marks.get(p, 0)} records: "
                    "past its end: a mistyped position, or one of another (or a lost) log"
                )
        if cut.rest is not None:
            for p in range(partitions):
                if p not in cut.ends and cut.rest > marks.get(p, 0):
                    raise AsOfError(
                        f"log position *:{cut.rest} lies beyond partition {p}, which holds {marks.get(p, 0)} records"
                    )
    start: dict[int, int] = {}
    for p in range(partitions):
        if cut.end_of(p) == 0:
            start[p] = marks.get(p, 0)  # skip the partition entirely
    return start


def replay(
    log: EventLog,
    cut: Cut | None = None,
    *,
    units: Collection[tuple[str, str]] | None = None,
    codec: Codec | None = None,
) -> AsOfState:
    """Fold the log's records inside ``cut`` (default: all) into unit and election states.

    Reads up to the high watermarks as they stand when the call begins. ``unit_ids`` keeps only those
    units, named by (election id, unit id) (election-wide events are always folded). Raises ``AsOfError`` for a cut the log cannot
    answer and for a record that cannot be decoded (named by position).
    """
    cut = cut or Cut(rest=None)
    codec = codec or default_codec()
    marks = log.high_watermarks()
    out = AsOfState(cut=cut, high_watermarks=dict(marks))
    start = _start_offsets(cut, marks, log.partitions)
    seen: dict[tuple[str, str], set[str]] = {}
    wanted = None if units is None else set(units)
    for rec in log.read(start):
        p, off = rec.position.partition, rec.position.offset
        if off >= marks.get(p, 0):
            continue  # appended after the read began
        end = cut.end_of(p)
        if end is not None and off >= end:
            out.outside += 1
            continue
        try:
            event = codec.decode(rec.value)
        except CodecError as exc:
            raise AsOfError(f"the record at {rec.position} cannot be decoded: {exc}") from exc
        if cut.at is not None and event.recorded_at > cut.at:
            out.outside += 1
            continue
        out.positions[p] = off + 1
        if is_unattributed(event):
            # names no election: part of no state (see ``is_unattributed``), listed for the audit
            out.unattributed.append(EventRow(event.event_id, event.unit_id, "", p, off, event.type, iso_text(event.recorded_at)))
            continue
        election = is_election_event(event)
        key = (event.envelope.election_id, event.unit_id)
        if not election and wanted is not None and key not in wanted:
            continue
        ids = seen.setdefault(key, set())
        if event.event_id in ids:
            out.duplicates += 1
            continue
        ids.add(event.event_id)
        eid = event.envelope.election_id
        if isinstance(event.payload, SubmissionRejected) and ((state := out.elections.get(eid)) is None or state.definition is None):
            out.undefined.setdefault(eid, []).append(
                EventRow(event.event_id, event.unit_id or f"election:{eid}", eid, p, off, event.type, iso_text(event.recorded_at)))
        out.applied += 1
        if out.newest_recorded_at is None or event.recorded_at > out.newest_recorded_at:
            out.newest_recorded_at = event.recorded_at
        if election:
            out.elections[eid] = apply_election(out.elections.get(eid), event)
            if out.elections[eid].definition is not None:
                out.undefined.pop(eid, None)
        else:
            out.units[key] = apply_unit(out.units.get(key), event)
    return out


def inside(cut: Cut | None) -> str:
    """Where a cut's events lie, for a message that says what was not found there."""
    return "in the whole log" if cut is None else f"inside the cut ({cut.describe()})"


def select_election(elections: Mapping[str, ElectionState], wanted: str | None, *, unit: str | None = None,
                    where: str = "inside the cut") -> str:
    """The election to tally: the one asked for, else the only one defined, else (when a unit is
    named) the only one that defines that unit. Raises ``AsOfError`` naming the choices."""
    defined = sorted(e for e, s in elections.items() if s.definition is not None)
    if wanted is not None:
        if wanted not in elections:
            refused = sum(1 for e, s in elections.items() if e and s.definition is None)
            others = f"; {refused} other id(s) are named only by refused submissions" if refused else ""
            raise AsOfError(f"election {wanted!r} is unknown: it has no events {where} (defined: "
                            f"{', '.join(map(repr, defined)) or 'none'}{others})")
        if elections[wanted].definition is None:  # only refusals (a refused definition among them) name it
            raise AsOfError(f"election {wanted!r} is not defined {where}: events name it, but no ElectionDefined "
                            f"event was accepted for it (defined: {', '.join(defined) or 'none'})")
        return wanted
    if len(defined) == 1:
        return defined[0]
    if not defined:
        raise NoElectionDefined(f"no election is defined {where} (no ElectionDefined event; a cut must come after the "
                        "election's definition was recorded)")
    if unit is not None:
        holding = elections_defining(elections, unit)
        if len(holding) == 1:
            return holding[0]
        if holding:
            raise AsOfError(f"unit {unit!r} is defined in several elections ({', '.join(holding)}); choose one with --election")
        raise AsOfError(f"no election {where} defines a unit {unit!r} (elections: {', '.join(defined)}): check the id or "
                        "name, or choose the election with --election")
    raise AsOfError(f"the log holds several elections ({', '.join(defined)}); choose one with --election")


@dataclass
class AsOfTally:
    """The tallies of one election as of a cut (the same objects ``caucus tally`` shows)."""

    state: AsOfState
    context: ElectionContext
    units: dict[str, UnitTally]

    @property
    def positions(self) -> dict[int, int]:
        return self.state.positions

    @property
    def as_of(self) -> datetime | None:
        return self.state.cut.at

    def state_tally(self) -> AreaTally:
        return aggregate(self.context, self.units.values())

    def counties(self) -> dict[str, AreaTally]:
        return aggregate_counties(self.context, self.units.values())


def tally_as_of(
    log: EventLog,
    cut: Cut | None = None,
    *,
    election_id: str | None = None,
    rule_set: str | None = None,
    codec: Codec | None = None,
    unit: str | None = None,
    none_defined_ok: bool = False,
) -> AsOfTally:
    """Every unit tally of one election as it stood at ``cut``, under the election's rule set or
    ``rule_set``. Units without events inside the cut have no tally (they were not reporting).
    ``none_defined_ok``: with no election defined (and none asked for), no tallies under an empty
    context (election id ""), whose state still lists the refusals that named no election."""
    state = replay(log, cut, codec=codec)
    try:
        chosen = select_election(state.elections, election_id, unit=unit, where=inside(cut))
    except NoElectionDefined:
        if not none_defined_ok:
            raise
        return AsOfTally(state, election_context(None, "", rule_set=rule_set), {})
    ctx = election_context(state.elections[chosen], chosen, rule_set=rule_set)
    if ctx.rules_error:
        raise AsOfError(ctx.rules_error)
    units = {uid: compute_unit_tally(s, ctx) for (eid, uid), s in state.units.items() if eid == chosen}
    return AsOfTally(state, ctx, units)

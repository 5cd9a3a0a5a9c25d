"""A unit's paper trail inside a recount package: every event in log order, what it changed, the tally after it.

Written three ways for three readers: ``trail.json`` for programs, ``trail.md`` for people and
``tallies.csv`` (one row per candidate after each event) for a spreadsheet. The tallies use the caucus
math under the election definition the log holds when the package is made.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from projections.reducers import UnitState, apply_unit, is_unattributed
from projections.tally import ElectionContext, UnitTally, compute_unit_tally, fraction_text
from projections.trail import describe_changes, event_details

if TYPE_CHECKING:
    from projections.audit.recount import PackagedEvent

__all__ = ["unit_trail"]


# -- the paper trail -----------------------------------------------------------------------------------


def _tally_rows(seq: int, pe: PackagedEvent, t: UnitTally) -> list[dict[str, Any]]:
    rows = []
    for c in t.first:
        exact = t.sde.get(c)
        rows.append({
            "step": seq, "position": str(pe.position), "event_id": pe.event.event_id, "type": pe.event.type,
            "recorded_at": pe.event.recorded_at.isoformat(), "status": t.status, "stage": t.stage or "",
            "candidate": c, "first": t.first.get(c, 0), "final": t.final.get(c, 0),
            "cds_reported": "" if t.cds_reported is None else t.cds_reported.get(c, 0),
            "cds_computed": "" if t.cds_computed is None else t.cds_computed.get(c, 0),
            "cds": t.cds.get(c, 0), "sde": str(t.sde_display.get(c, Decimal("0.0000"))),
            "sde_exact": "" if exact is None else fraction_text(exact),
        })
    return rows


_TALLY_FIELDS = ("step", "position", "event_id", "type", "recorded_at", "status", "stage", "candidate", "first",
                 "final", "cds_reported", "cds_computed", "cds", "sde", "sde_exact")


def unit_trail(unit_id: str, events: Sequence[PackagedEvent], ctx: ElectionContext) -> tuple[dict[str, Any], str, str]:
    """The unit's trail as JSON, Markdown and the CSV of tallies after each event."""
    state: UnitState | None = None
    prev: UnitTally | None = None
    steps: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    md: list[str] = []
    unit = ctx.units.get(unit_id)
    county = ctx.counties.get(unit.county_id) if unit else None
    title = f"{unit.name} ({unit_id}), {county.name if county else unit.county_id}" if unit else unit_id
    md.append(f"# Paper trail of {title}\n")
    md.append(f"Election {ctx.election_id}, rule set {ctx.rule_set_name}; tallies use the election definition "
              "as the log holds it when the package was made.\n")  # fmt: skip
    seen: set[str] = set()
    for pe in events:
        env = pe.event.envelope
        entry: dict[str, Any] = {
            "position": str(pe.position), "event_id": env.event_id, "type": pe.event.type, "actor": env.actor,
            "channel": env.channel.value, "occurred_at": env.occurred_at.isoformat(),
            "recorded_at": env.recorded_at.isoformat(), "details": event_details(pe.event),
            "files": {"avro": f"events/{pe.stem}.avro", "json": f"events/{pe.stem}.json",
                      "proof": None if pe.proof is None else f"proofs/{pe.stem}.json"},
        }
        md.append(f"## {pe.position}  {env.recorded_at:%Y-%m-%d %H:%M:%S} UTC  {pe.event.type}\n")
        md.append(f"- by {env.actor} via {env.channel.value}; occurred {env.occurred_at:%Y-%m-%d %H:%M:%S} UTC; event {env.event_id}")
        for key, value in entry["details"].items():
            if value not in (None, "", [], {}):
                md.append(f"- {key}: {value}")
        if env.event_id in seen:
            entry["duplicate"] = True
            entry["changes"] = []
            md.append("- a second copy of an event already applied (a producer retry): changes nothing\n")
            steps.append(entry)
            continue
        seen.add(env.event_id)
        if is_unattributed(pe.event):
            entry["changes"] = []
            md.append("- refused before it named an election: kept with the unit, part of no unit's state\n")
            steps.append(entry)
            continue
        state_before = state
        state = apply_unit(state, pe.event)
        tally = compute_unit_tally(state, ctx)
        changes = describe_changes(state_before, state, prev, tally, event=pe.event)
        entry["changes"] = list(changes)
        entry["tally"] = tally.to_json()
        for change in changes:
            md.append(f"  - {change}")
        won = ", ".join(f"{c} {tally.cds[c]} CD / {tally.sde_display.get(c, Decimal(0))} SDE" for c in tally.cds if tally.cds[c])
        md.append(f"- tally after: {tally.status}{' (' + tally.stage + ')' if tally.stage else ''}; {won or 'no delegates'}")
        if tally.pending:
            md.append("- tie pending: " + "; ".join(f"{p.seats} seat(s) among {', '.join(p.contenders)}" for p in tally.pending))
        md.append("")
        rows.extend(_tally_rows(len(steps) + 1, pe, tally))
        steps.append(entry)
        prev = tally
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=_TALLY_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    doc = {"unit_id": unit_id, "name": unit.name if unit else None, "county": county.name if county else None,
           "election_id": ctx.election_id, "rule_set": ctx.rule_set_name, "events": steps,
           "final_tally": None if prev is None else prev.to_json()}  # fmt: skip
    return doc, "\n".join(md) + "\n", out.getvalue()

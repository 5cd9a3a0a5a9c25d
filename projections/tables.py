"""Tallies and trails as tables for people (``caucus tally``, ``caucus trail``).

Why separate from the CLI: the same tables serve the command line and tests, and JSON output never
goes through here (programs get ``to_json`` of the views directly). Candidates are listed by SDE
(as displayed and summed, the published figure), then by final alignment.
"""

from __future__ import annotations

import shlex
from decimal import Decimal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledger.cli_output import runnable_here, text
from ledger.record_headers import is_direct_writer
from projections.queries import TallyView
from projections.tally import AreaTally, UnitTally
from projections.trail import Trail, event_details

__all__ = ["area_table", "units_table", "unit_table", "print_area", "print_unit", "print_trail"]


def _order(area: AreaTally) -> list[str]:
    return sorted(area.candidates, key=lambda c: (-area.sde_display_sum.get(c, Decimal(0)), -area.final.get(c, 0), c))


def area_table(area: AreaTally, title: str, *, computed: bool = False) -> Table:
    """The area's sums; ``computed``: with the delegates the rule set computes from the units' alignments
    beside the official ones (``tally --rule-set``: the official CDs are the units' reported ones where
    they reported any, which no rule set changes)."""
    table = Table(title=title, title_justify="left")
    columns = ("candidate", "first", "final", "CDs", *(("CDs computed",) if computed else ()), "SDE")
    for col in columns:
        table.add_column(col, justify="left" if col == "candidate" else "right", overflow="fold")
    for c in _order(area):
        extra = (f"{area.cds_computed.get(c, 0):,}",) if computed else ()
        table.add_row(c, f"{area.first.get(c, 0):,}", f"{area.final.get(c, 0):,}", f"{area.cds.get(c, 0):,}", *extra,
                      f"{area.sde_display_sum.get(c, Decimal(0)):,.4f}")
    extra = (f"{sum(area.cds_computed.values()):,}",) if computed else ()
    table.add_row(
        "total", f"{sum(area.first.values()):,}", f"{sum(area.final.values()):,}", f"{sum(area.cds.values()):,}", *extra,
        f"{sum(area.sde_display_sum.values(), Decimal(0)):,.4f}", style="bold",
    )
    return table


def _reporting_line(area: AreaTally) -> str:
    pct = float(area.share_reporting) * 100
    extra = []
    if area.units_pending:
        extra.append(f"{area.units_pending} with a coin toss pending")
    if area.units_with_problems:  # what "problems" are, said once: they are not the audit's findings
        extra.append(f"{area.units_with_problems} whose tally has a problem: delegates that cannot be computed or do not add "
                     "up, a toss that decides nothing; `caucus tally --county C` marks them, `--unit U` says what")
    tail = f" ({'; '.join(extra)})" if extra else ""
    return f"units reporting: {area.units_reporting:,} of {area.units_defined:,} ({pct:.1f}%){tail}"


def _status(u: UnitTally) -> str:
    return (u.status + (f" ({u.stage})" if u.stage else "") + (" [after certification]" if u.after_certification else "")
            + (" [tie pending]" if u.pending else "") + (" [problem]" if u.problems else ""))


def units_table(units: list[UnitTally], candidates: list[str], title: str, *, wide: bool = False) -> Table:
    """The units of an area. Narrow (default): one row per unit and candidate with a final alignment
    or delegates, which fits 100 columns whatever the number of candidates; cells wrap, never cut.
    ``wide``: one row per unit and a column per candidate (final/CDs/SDE), as wide as it takes."""
    if wide:
        table = Table(title=title, title_justify="left")
        for name in ("unit", "name", "status"):
            table.add_column(name, no_wrap=True)
        table.add_column("D", justify="right")
        for c in candidates:
            table.add_column(f"{c}\nfinal/CDs/SDE", justify="right", no_wrap=True)
        for u in sorted(units, key=lambda t: (t.name or "", t.unit_id)):
            cells = [f"{u.final.get(c, 0)}/{u.cds.get(c, 0)}/{u.sde_display.get(c, Decimal(0)):.4f}" for c in candidates]
            table.add_row(u.unit_id, u.name or "?", _status(u), text(u.delegates), *cells)
        return table
    table = Table(title=title, title_justify="left", caption="--wide: one column per candidate", caption_justify="left")
    table.add_column("unit", overflow="fold")
    table.add_column("name", overflow="fold", ratio=2)
    table.add_column("status", overflow="fold", ratio=1)
    table.add_column("D", justify="right")
    table.add_column("candidate", overflow="fold")
    for name in ("final", "CDs", "SDE"):
        table.add_column(name, justify="right", no_wrap=True)
    for u in sorted(units, key=lambda t: (t.name or "", t.unit_id)):
        shown = [c for c in candidates if u.final.get(c, 0) or u.cds.get(c, 0)] or candidates[:1]
        if not shown:  # no candidate has a vote in the area yet: the unit still gets its row
            table.add_row(u.unit_id, u.name or "?", _status(u), text(u.delegates), "-", "-", "-", "-", end_section=True)
        for i, c in enumerate(shown):
            head = [u.unit_id, u.name or "?", _status(u), text(u.delegates)] if i == 0 else ["", "", "", ""]
            table.add_row(*head, c, f"{u.final.get(c, 0):,}", f"{u.cds.get(c, 0):,}",
                          f"{u.sde_display.get(c, Decimal(0)):.4f}", end_section=i == len(shown) - 1)
    return table


def unit_table(u: UnitTally, candidates: list[str]) -> Table:
    table = Table(title=f"{u.name or u.unit_id} ({u.unit_id})", title_justify="left")
    for col in ("candidate", "first", "final", "CDs reported", "CDs computed", "CDs", "SDE exact", "SDE"):
        table.add_column(col, justify="left" if col == "candidate" else "right", overflow="fold")
    for c in candidates:
        exact = u.sde.get(c)
        table.add_row(
            c, str(u.first.get(c, 0)), str(u.final.get(c, 0)),
            "-" if u.cds_reported is None else str(u.cds_reported.get(c, 0)),
            "-" if u.cds_computed is None else str(u.cds_computed.get(c, 0)),
            str(u.cds.get(c, 0)),
            "-" if exact is None else str(exact),
            f"{u.sde_display.get(c, Decimal(0)):.4f}",
        )
    return table


def print_area(console: Console, view: TallyView, area: AreaTally, title: str, county_id: str | None = None) -> None:
    """The area's heading, reporting line and sums: the state's, or ``county_id``'s."""
    meta = view.meta()
    version = "" if view.set.state == "as-of" else f" v{view.set.version}"  # an as-of view is no stored version
    console.print(f"{meta['election'] or meta['election_id']}  rule set {meta['rule_set']}  "
                  f"(projection {view.set.name}{version}{', certified' if meta['certified'] else ''})")
    console.print(runnable_here(_reporting_line(area)))
    definition = view.context.state.definition
    other_rules = definition is not None and meta["rule_set"] != definition.rule_set
    console.print(area_table(area, title, computed=other_rules))
    if other_rules:
        units = view.context.units
        cannot = sum(1 for u in view.units.values() if u.reporting and u.cds_computed is None and u.unit_id in units
                     and county_id in (None, units[u.unit_id].county_id))
        none = f" ({cannot:,} reporting unit(s) whose delegates cannot be computed count none there)" if cannot else ""
        console.print(runnable_here(
            f"CDs and SDE are the official ones (a unit's reported delegates where it reported any, which no rule set "
            f"changes); CDs computed: what {meta['rule_set']} gives from the alignments{none}. `caucus diff live "
            f"{shlex.quote('rules:' + str(meta['rule_set']))}` lists the units where they differ."), highlight=False)


def _thresholds(u: UnitTally) -> str:
    """The threshold, and the one the final alignment was judged by where the rule set recomputes it
    (idp-2016, RULES §4.6): a group viable below the first threshold is explained."""
    if u.final_threshold is None or u.final_threshold == u.threshold:
        return text(u.threshold) if u.threshold is not None else "not computed (see the problems below)"
    return f"{u.threshold} (first alignment), {u.final_threshold} (final alignment)"


def print_unit(console: Console, view: TallyView, u: UnitTally) -> None:
    candidates = list(view.context.candidates) or sorted(u.first)
    console.print(unit_table(u, candidates))
    status = u.status + (f" ({u.stage})" if u.stage else "") + (", after certification" if u.after_certification else "")
    if u.attendance is None and u.result_event_id is None:  # not reported (or only opened): nothing to explain yet
        console.print(f"status {status}; D {text(u.delegates)} ({u.delegates_source or 'not known yet'}); no result "
                      f"recorded yet; SDE weight {text(u.sde_weight)}")
        return
    console.print(
        f"status {status}; D {u.delegates} ({u.delegates_source}); T {u.attendance} ({u.attendance_source}); "
        f"threshold {_thresholds(u)}; official CDs: {u.cds_source}; SDE weight "
        f"{u.sde_weight if u.sde_weight is not None else 'not computed (see the problems below)'}"
    )
    for p in u.pending:
        console.print(f"tie pending: {p.seats} seat(s) among {', '.join(p.contenders)}: {p.reason}")
    for tie in u.tie_history:
        for note in tie.later:
            what = "redrawn by" if note.redrew else "second toss ignored:"
            console.print(f"tie {tie.seats} seat(s) among {', '.join(tie.contenders)} {what} {note.event_id} "
                          f"(winners {', '.join(note.winners)}; stood: {note.against})", highlight=False)  # fmt: skip
    if u.rejected:
        console.print(f"rejected submissions: {u.rejected}")
    for problem in u.problems:
        console.print(f"problem: {problem}")


def print_trail(console: Console, trail: Trail) -> None:
    if not trail.election_id:  # no election defined yet: only refusals that named the unit
        console.print(f"unit {trail.unit_id} (no election is defined)", highlight=False)
    else:
        console.print(f"unit {trail.unit_id} of election {trail.election_id}", highlight=False)
    if not trail.entries and trail.election_id:
        console.print(f"no events for unit {trail.unit_id!r} of election {trail.election_id!r} in the log", highlight=False)
    for e in trail.entries:
        env = e.event.envelope
        flag = "" if e.projected else "  [not projected yet]"
        console.print(Text.assemble(
            (str(e.position), "bold"),
            f"  {env.recorded_at:%Y-%m-%d %H:%M:%S}  {e.event.type}  by {env.actor} via {env.channel.value}"
            f"{_written_by(e.writer, env.actor)}  (occurred {env.occurred_at:%Y-%m-%d %H:%M:%S}){flag}",
        ), highlight=False)
        console.print(f"    event id: {e.event.event_id}", highlight=False)  # what --supersedes, prove and a toss name
        details = event_details(e.event)
        for key in ("stage", "reason", "authority", "supersedes", "contenders", "winners", "method", "caller", "witnesses"):
            if details.get(key):
                console.print(f"    {key}: {text(details[key])}", highlight=False)
        for problem in details.get("errors") or ():
            console.print(f"    error: {text(problem)}", highlight=False)
        for change in e.changes:
            console.print(f"    * {change}", highlight=False)
        t = e.tally
        won = ", ".join(f"{c} {t.cds[c]} CD / {t.sde_display.get(c, Decimal(0)):.4f}" for c in t.cds if t.cds[c])
        console.print(f"    tally: {t.status}{' (' + t.stage + ')' if t.stage else ''}; {won or 'no delegates'}", highlight=False)
    if trail.unattributed:
        console.print(f"{len(trail.unattributed)} submission(s) for unit {trail.unit_id} refused before they named an election "
                      "(kept in the log, part of no unit's state):", highlight=False)
        for u in trail.unattributed:
            env = u.event.envelope
            console.print(f"  {u.position}  {env.recorded_at:%Y-%m-%d %H:%M:%S}  {u.event.type}  by {env.actor} via "
                          f"{env.channel.value}{_written_by(u.writer, env.actor)}", highlight=False)
            for problem in event_details(u.event).get("errors") or ():
                console.print(f"    error: {text(problem)}", highlight=False)


def _written_by(writer: str, actor: str) -> str:
    """The writer beside the actor when an official wrote the record directly under another name: the
    actor is then only what the official typed, not who the intake checked."""
    return f"  (written directly by {writer})" if is_direct_writer(writer) and writer != actor else ""

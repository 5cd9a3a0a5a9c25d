"""``caucus diff A B``: two tallies side by side, as a table, JSON or CSV.

Sides are written as ``projections.audit.diff_sides`` says; the comparison is ``projections.audit.diff``.

Exit status: 0 the two sides are equal, 1 they differ, 2 a side could not be loaded (bad spec, no
store, log unreachable), so that scripts can tell "different" from "could not compare".
"""

from __future__ import annotations

import csv
import sys
from decimal import Decimal
from fractions import Fraction
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledger.cli_output import emit, fail, runnable_here, settings_of
from ledger.config import Settings, open_log
from ledger.log.port import LogError, LogLostError, LogReplacedError
from projections.audit.diff import CandidateDelta, DiffResult, diff_snapshots, sde_text
from projections.audit.diff_sides import DiffError, SideSpec, Sources, load_snapshot, parse_side, resolve_sides, stored_set
from ledger.caucus_math import display_sde
from projections.stores.port import StoreError
from projections.wiring import check_source, read_identity, unread_events

__all__ = ["register", "diff_command", "sources_for", "render_table", "write_csv", "CSV_FIELDS"]

EQUAL, DIFFERENT, OPERATIONAL = 0, 1, 2

_SIDE_HELP = (
    "live | log | as-of:TIME (events recorded at or before TIME) | position:P:N,... (the first N records of "
    "each partition named; P:..=O up to and including offset O; *:end for the others) | set:NAME | set:NAME@VERSION | set:#ID, "
    "optionally followed by "
    "/rules:NAME and /reported, /computed or /official; a side of only rules:NAME, reported or computed "
    "uses the other side's source"
)


def register(app: typer.Typer) -> None:
    app.command("diff")(diff_command)


def sources_for(settings: Settings) -> Sources:
    from projections.stores import open_store

    return Sources(lambda: open_log(settings, read_only=True), lambda: open_store(settings, read_only=True), settings.describe_log())


def diff_command(
    ctx: typer.Context,
    a: str = typer.Argument(..., help=f"Side A: {_SIDE_HELP}."),
    b: str = typer.Argument(..., help="Side B, written the same way."),
    election: Optional[str] = typer.Option(None, "--election", help="Election id, when the log holds several."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    as_csv: bool = typer.Option(False, "--csv", help="Print CSV: one row per changed measure (unit, county, state)."),
    units_only: bool = typer.Option(False, "--units-only", help="Human output: only the unit table."),
) -> None:
    """Compare two tallies: per unit and candidate (first, final, CDs, SDE) and their effect on county
    and state totals.

    Examples: `caucus diff as-of:2020-02-08T06:28:00Z live` (release vs now), `caucus diff live
    rules:idp-2016` (another rule set over the same events), `caucus diff reported computed` (what chairs
    reported vs what the rules give), `caucus diff live set:tally@2` (a rebuild vs the serving set).
    `caucus diff live log` replays the log through the same reducers and caucus math the runner uses: it
    finds what the runner or the store lost, applied twice or corrupted, not a bug of the fold itself
    (that is what the model test of the ledger and `caucus audit`'s independent checks are for).
    Exit 0: equal; 1: different; 2: could not compare; 3: the serving projection is one of another log,
    or of records the log no longer holds."""
    if as_json and as_csv:
        raise fail("choose one of --json and --csv", OPERATIONAL)
    settings = settings_of(ctx)
    try:
        side_a, side_b = resolve_sides(parse_side(a), parse_side(b))
        sources = sources_for(settings)
        behind = _of_this_log(settings, sources, (side_a, side_b))
        snap_a = load_snapshot(side_a, sources, election_id=election)
        snap_b = load_snapshot(side_b, sources, election_id=election)
    except (LogLostError, LogReplacedError):  # exit 3, as `tally` and `project` answer it (`ledger.cli.main`)
        raise
    except (DiffError, StoreError, LogError) as exc:
        raise fail(str(exc), OPERATIONAL) from exc
    result = diff_snapshots(snap_a, snap_b)
    for note in behind:  # the differences may be only what the projection has not read yet
        typer.echo(f"note: {runnable_here(note)}", err=True)
    if as_csv:
        write_csv(result, sys.stdout)
    else:
        emit({**result.to_json(), "notes": behind}, as_json, lambda: render_table(result, _console(), units_only=units_only))
    raise typer.Exit(EQUAL if result.equal else DIFFERENT)


def _of_this_log(settings: Settings, sources: Sources, sides: tuple[SideSpec, ...]) -> list[str]:
    """The serving projection (``live``) is one of the configured log, and the log still holds what it
    applied, or the diff compares two histories: a projection of a lost log beside the log refilled
    since said "EQUAL" or "400 of 400 units differ" where `tally` and `project` exit 3. A set named by
    version (``set:``) may be one of another log on purpose (the projection retired by `replay
    --new-log`). Without a side of the log, a log out of reach leaves the stored sides to compare."""
    stored = [side for side in sides if side.source == "live"]
    if not stored:
        return []
    of_log = any(side.source not in ("live", "set") for side in sides)  # a side read from the log itself
    store = sources.open_store()
    notes: list[str] = []
    try:
        try:
            log = sources.open_log()
            try:
                identity, marks = read_identity(log.log_id), log.high_watermarks()
            except BaseException:
                log.close()
                raise
        except (LogLostError, LogReplacedError):
            raise
        except LogError:
            if any(side.source not in ("live", "set") for side in sides):
                raise
            return []
        try:
            seen: set[int] = set()
            for side in stored:
                info = stored_set(store, side)
                check_source(info, store, settings, identity)
                if info.set_id in seen:
                    continue
                seen.add(info.set_id)
                with store.reader(info.set_id) as reader:
                    positions = {p: row.next_offset for p, row in reader.positions().items()}
                unread = unread_events(log, positions, marks)
                if unread:
                    notes.append(f"the projection ({side.text}) has not read {unread} record(s) of the log yet; "
                                 + ("what they change shows as a difference from the log" if of_log else
                                    "neither side holds what they change")
                                 + ": `caucus project --until-caught-up` reads them")
        finally:
            log.close()
    finally:
        store.close()
    return notes


# -- rendering -------------------------------------------------------------------------------------------


def _console() -> Console:
    """The terminal's width, COLUMNS or 100 columns (``ledger.cli_output``); ``--wide`` for no limit."""
    from ledger.cli_output import console

    return console()


def _cell(a: int | None, b: int | None) -> str:
    if a == b:
        return "" if a is None else f"{a:,}"
    if a is None or b is None:
        return f"{'-' if a is None else a} → {'-' if b is None else b}"
    return f"{a:,} → {b:,} ({b - a:+,})"


def _sde_cell(a: Fraction | None, b: Fraction | None) -> str:
    if a == b:
        return "" if a is None else sde_text(a)
    if a is None or b is None:
        return f"{sde_text(a)} → {sde_text(b)}"
    delta = display_sde(b - a)
    return f"{sde_text(a)} → {sde_text(b)} ({'+' if delta > 0 else ''}{delta})"


def _dec_cell(a: Decimal, b: Decimal) -> str:
    if a == b:
        return f"{a:,.4f}"
    d = b - a
    return f"{a:,.4f} → {b:,.4f} ({'+' if d > 0 else ''}{d:,.4f})"


def _row(c: CandidateDelta) -> list[str]:
    return [c.candidate, _cell(*c.first), _cell(*c.final), _cell(*c.cds), _sde_cell(*c.sde)]


def render_table(result: DiffResult, console: Console, *, units_only: bool = False) -> None:
    for label, snap in (("A", result.a), ("B", result.b)):
        console.print(Text.assemble((label, "bold"), f": {snap.spec.text}  —  {snap.description}; rule set "
                                    f"{snap.context.rule_set_name}, {snap.spec.basis} delegates"), highlight=False)
    s = result.summary()
    if result.equal:
        console.print(f"EQUAL: {s['units_compared']:,} reporting units compared; no unit, county or state figure differs.")
        return
    console.print(f"DIFFERENT: {s['units_changed']:,} of {s['units_compared']:,} reporting units differ, in "
                  f"{s['counties_changed']:,} counties.", highlight=False)  # fmt: skip
    units = Table(title=f"units ({len(result.units)})", title_justify="left", show_lines=False)
    for col in ("county", "unit", "name", "candidate", "first", "final", "CDs", "SDE"):
        units.add_column(col, justify="right" if col in ("first", "final", "CDs", "SDE") else "left", overflow="fold")
    for u in result.units:
        head = [u.county_name or "", u.unit_id, u.name or "?"]
        rows = [_row(c) for c in u.candidates]
        for i, row in enumerate(rows):
            units.add_row(*(head if i == 0 else ["", "", ""]), *row)
        notes = list(u.notes)
        if u.status[0] != u.status[1]:
            notes.insert(0, f"{u.status[0]} → {u.status[1]}")
        for j, note in enumerate(notes):
            lead = head if not rows and j == 0 else ["", "", ""]
            units.add_row(*lead, Text(note, style="italic"), "", "", "", "")
    console.print(units)
    if units_only:
        return
    if result.counties:
        counties = Table(title=f"effect on county totals ({len(result.counties)} counties)", title_justify="left")
        for col in ("county", "units changed", "reporting", "candidate", "first", "final", "CDs", "SDE (sum of displayed)"):
            counties.add_column(col, justify="left" if col in ("county", "candidate") else "right", overflow="fold")
        for area in result.counties:
            rep = _cell(*area.units_reporting)
            for i, c in enumerate(area.candidates or ()):
                assert c.sde_display_sum is not None
                lead = [area.name, str(area.units_changed), rep] if i == 0 else ["", "", ""]
                counties.add_row(*lead, c.candidate, _cell(*c.first), _cell(*c.final), _cell(*c.cds), _dec_cell(*c.sde_display_sum))
            if not area.candidates:
                counties.add_row(area.name, str(area.units_changed), rep, "", "", "", "", "")
        console.print(counties)
    st = result.state
    state = Table(title=f"effect on state totals (units reporting {_cell(*st.units_reporting)})", title_justify="left")
    for col in ("candidate", "first", "final", "CDs", "SDE exact", "SDE (sum of displayed)"):
        state.add_column(col, justify="left" if col == "candidate" else "right", overflow="fold")
    for c in st.candidates:
        assert c.sde_display_sum is not None
        state.add_row(c.candidate, _cell(*c.first), _cell(*c.final), _cell(*c.cds), _sde_cell(*c.sde), _dec_cell(*c.sde_display_sum))
    console.print(state)


CSV_FIELDS = ("level", "area", "unit_id", "name", "county", "candidate", "measure", "a", "b", "delta", "a_exact", "b_exact")


def _csv_rows(level: str, area: str, unit_id: str, name: str, county: str, c: CandidateDelta) -> list[dict[str, Any]]:
    rows = []
    base = {"level": level, "area": area, "unit_id": unit_id, "name": name, "county": county, "candidate": c.candidate}
    for measure in c.changed():
        if measure == "sde":
            a, b = c.sde
            rows.append({**base, "measure": "sde", "a": sde_text(a), "b": sde_text(b),
                         "delta": "" if a is None or b is None else str(display_sde(b - a)),
                         "a_exact": "" if a is None else f"{a.numerator}/{a.denominator}",
                         "b_exact": "" if b is None else f"{b.numerator}/{b.denominator}"})  # fmt: skip
        elif measure == "sde_display_sum":
            assert c.sde_display_sum is not None
            a2, b2 = c.sde_display_sum
            rows.append({**base, "measure": measure, "a": str(a2), "b": str(b2), "delta": str(b2 - a2)})
        else:
            x, y = getattr(c, measure)
            rows.append({**base, "measure": measure, "a": "" if x is None else x, "b": "" if y is None else y,
                         "delta": "" if x is None or y is None else y - x})  # fmt: skip
    return rows


def write_csv(result: DiffResult, out: Any) -> None:
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n", restval="")
    writer.writeheader()
    for u in result.units:
        base = ("unit", u.county_id or "", u.unit_id, u.name or "", u.county_name or "")
        if u.status[0] != u.status[1]:
            writer.writerow(dict(zip(CSV_FIELDS, (*base, "", "status", u.status[0], u.status[1]))))
        for note in u.notes:
            writer.writerow(dict(zip(CSV_FIELDS, (*base, "", "note", note))))
        for c in u.candidates:
            writer.writerows(_csv_rows(*base, c))
    for area in result.counties:
        for c in area.candidates:
            writer.writerows(_csv_rows("county", area.area, "", area.name, area.name, c))
    for c in result.state.candidates:
        writer.writerows(_csv_rows("state", "state", "", result.state.name, "", c))

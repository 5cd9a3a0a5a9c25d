"""What each read-API route answers, built from one ``TallyView`` with the command line's own code.

Why apart from the routes: the site renders the same documents the API returns, so a number on a
page is the number a program reads (and the one ``caucus tally --json`` prints).
"""

from __future__ import annotations

from typing import Any

from projections.audit.checks import AuditReport, audit_tallies
from projections.audit.codes import unknown_filters
from projections.queries import QueryError, TallyView, find_county, find_unit
from projections.read_api.reader import ReadError, ResultsReader, area_extras, last_updated
from projections.tally_documents import county_document, state_document, unit_document
from projections.trail import unit_trail

__all__ = ["state", "counties", "county", "unit", "trail", "audit", "county_id_of", "unit_id_of"]


def county_id_of(view: TallyView, text: str) -> str:
    try:
        return find_county(view.context, text)
    except QueryError as exc:
        raise ReadError(str(exc), 404) from exc


def unit_id_of(view: TallyView, text: str) -> str:
    try:
        return find_unit(view, text)
    except QueryError as exc:
        raise ReadError(str(exc), 404) from exc


def state(view: TallyView) -> dict[str, Any]:
    area = view.state()
    return {**state_document(view, area), **area_extras(area, last_updated(view).get(None))}


def counties(view: TallyView) -> dict[str, Any]:
    """Every county's sums in one answer (a results table needs them all at once), in one pass."""
    times = last_updated(view)
    out = [{**area.to_json(), **area_extras(area, times.get(cid))} for cid, area in view.counties().items()]
    return {**view.meta(), "counties": out}


def county(view: TallyView, text: str) -> dict[str, Any]:
    cid = county_id_of(view, text)
    return {**county_document(view, cid), **area_extras(view.county(cid), last_updated(view).get(cid))}


def unit(view: TallyView, text: str) -> dict[str, Any]:
    uid = unit_id_of(view, text)
    doc = unit_document(view, uid)
    if doc is None:
        raise ReadError(f"unit {uid!r} is not in the definition of election {view.context.election_id!r} and has no "
                        "result; the submissions refused for it are in its trail", 404)
    return doc


def trail(reader: ResultsReader, view: TallyView, text: str) -> dict[str, Any]:
    """Every event of the unit, correction and coin toss, with the tally after each (``caucus trail``)."""
    try:
        uid = find_unit(view, text)
    except QueryError:
        uid = text  # not in the definition: its refused submissions may still be in the log
    with reader.store() as store, store.reader(view.set.set_id) as r, reader.log() as log:
        result = unit_trail(log, r, view.context.election_id, uid)
    if not result.entries and not result.unattributed:
        raise ReadError(f"no events for unit {uid!r} of election {result.election_id!r}", 404)
    return {**result.to_json(), "defined": uid in view.context.units}  # as `caucus trail --json` says it


def audit_report(view: TallyView, unit_id: str | None = None) -> AuditReport:
    """The audit of every unit, or of one (the §12 checks look at one unit at a time: a precinct page
    need not audit the state)."""
    where = f"projection {view.set.name} v{view.set.version}"
    tallies = view.units.values() if unit_id is None else [t for t in (view.units.get(unit_id),) if t is not None]
    return audit_tallies(view.context, tallies, source=where, meta={"projection": view.meta()})


def audit(view: TallyView, *, county: str | None = None, unit: str | None = None, severity: list[str] | None = None,
          code: list[str] | None = None) -> dict[str, Any]:
    """The RULES.md §12 findings (``caucus audit``), narrowed to a county or a unit if asked."""
    severity = [v.strip().lower() for given in severity or () for v in given.split(",") if v.strip()]
    code = [v.strip().upper() for given in code or () for v in given.split(",") if v.strip()]
    unknown = unknown_filters(severity, code)
    if unknown is not None:
        raise ReadError(unknown, 400)
    uid = unit_id_of(view, unit) if unit else None
    cid = county_id_of(view, county) if county else None
    shown = audit_report(view, uid).filtered(severity, code, cid)
    return {**shown.to_json(), "filters": {"severity": severity or [], "code": code or [], "county": cid, "unit": uid}}

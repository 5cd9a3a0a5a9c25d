"""The public results pages as plain HTML, rendered from the read API's own documents.

Why from the documents and not from the tallies: a number on a page is then, by construction, the
number ``/api`` returns and ``caucus tally --json`` prints. Pages are server-rendered, work without
script, and use semantic tables (a caption, ``th scope``) that read well on a phone; ``static/live.js``
only swaps ``<main>`` for a fresh copy when the results feed says something changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["index_page", "state_page", "county_page", "unit_page", "error_page"]


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


def _label(long: str, short: str) -> str:
    """A column heading that shortens at phone width (``site.css``), so a table fits without scrolling."""
    return f'<span class="long">{long}</span><span class="short">{short}</span>'


def _q(value: str) -> str:
    return quote(value, safe="")


def _n(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def _time(iso: str | None) -> str:
    if not iso:
        return "not yet"
    return f'<time datetime="{_e(iso)}">{_e(iso.replace("T", " ")[:19])} UTC</time>'


def layout(title: str, main: str, *, feed: str | None = None, crumbs: Sequence[tuple[str, str]] = ()) -> str:
    nav = " › ".join(f'<a href="{_e(href)}">{_e(label)}</a>' for href, label in crumbs)
    feed_attr = f' data-feed="{_e(feed)}"' if feed else ""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<link rel="stylesheet" href="/static/site.css">
<script src="/static/live.js" defer></script>
</head>
<body{feed_attr}>
<header><nav aria-label="breadcrumb">{nav}</nav></header>
<main id="results">
{main}
</main>
<footer><p><span id="live-status" role="status" aria-live="polite">{'connecting to live updates' if feed else ''}</span>
· <a href="/docs">API</a></p></footer>
</body>
</html>
"""


def _feed(election: str, start: str | None, **filters: str) -> str:
    params = {"election": election, **filters}
    if start:
        params["from"] = start
    return "/api/feed?" + urlencode(params)


def _order(area: Mapping[str, Any]) -> list[str]:
    shown = area["sde_display_sum"]
    return sorted(area["candidates"], key=lambda c: (-Decimal(shown.get(c, "0")), -area["final"].get(c, 0), c))


def _reporting(doc: Mapping[str, Any]) -> str:
    r = doc["reporting"]
    return (f'<p class="reporting"><label for="reporting">Units reporting</label> '
            f'<progress id="reporting" max="{r["units_defined"]}" value="{r["units_reporting"]}">{_e(r["percent"])} %</progress> '
            f'<span data-field="reporting">{_n(r["units_reporting"])} of {_n(r["units_defined"])} ({_e(r["percent"])} %)</span>'
            f' · last update <span data-field="last-updated">{_time(doc.get("last_updated"))}</span></p>')  # fmt: skip


def area_table(area: Mapping[str, Any], caption: str, *, kind: str, key: str) -> str:
    """Candidates of an area with first and final alignment, CDs and SDEs (displayed sum, and a bar)."""
    order = _order(area)
    top = max((Decimal(area["sde_display_sum"].get(c, "0")) for c in order), default=Decimal(0)) or Decimal(1)
    rows = []
    for c in order:
        sde = Decimal(area["sde_display_sum"].get(c, "0"))
        width = (sde / top * 100).quantize(Decimal("0.1"))
        rows.append(
            f'<tr data-candidate="{_e(c)}"><th scope="row">{_e(c)}</th>'
            f'<td>{_n(area["first"].get(c, 0))}</td><td>{_n(area["final"].get(c, 0))}</td>'
            f'<td>{_n(area["cds"].get(c, 0))}</td>'
            f'<td class="sde"><span class="value" title="exact: {_e(area["sde_exact"].get(c, "0"))}">{sde:,.4f}</span>'
            f'<span class="bar" aria-hidden="true"><span style="width:{width}%"></span></span></td></tr>')  # fmt: skip
    return (f'<div class="scroll"><table class="tally" data-kind="{_e(kind)}" data-key="{_e(key)}"><caption>{_e(caption)}</caption>'
            f'<thead><tr><th scope="col">Candidate</th><th scope="col">{_label("First alignment", "First")}</th>'
            f'<th scope="col">{_label("Final alignment", "Final")}</th><th scope="col">{_label("County delegates", "CDs")}</th>'
            '<th scope="col">SDEs</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')  # fmt: skip


def index_page(elections: Iterable[Mapping[str, Any]]) -> str:
    items = "".join(f'<li><a href="/elections/{_q(e["election_id"])}">{_e(e["name"] or e["election_id"])}</a>'
                    f'{" (certified)" if e["certified"] else ""}</li>' for e in elections)  # fmt: skip
    return layout("Results", f"<h1>Results</h1><ul>{items or '<li>No election yet.</li>'}</ul>", crumbs=[("/", "Results")])


def state_page(state: Mapping[str, Any], counties: Mapping[str, Any], feed_from: str | None) -> str:
    eid = state["election_id"]
    area = state["state"]
    order = [c for c in _order(area) if area["final"].get(c) or area["first"].get(c)][:4]
    head = "".join(f'<th scope="col">{_e(c)} SDEs</th>' for c in order)
    rows = []
    for cty in counties["counties"]:
        cells = "".join(f'<td>{Decimal(cty["sde_display_sum"].get(c, "0")):,.4f}</td>' for c in order)
        rows.append(f'<tr><th scope="row"><a href="/elections/{_q(eid)}/counties/{_q(cty["area"])}">{_e(cty["name"])}</a></th>'
                    f'<td>{_e(cty["reporting"]["percent"])} %</td>{cells}</tr>')  # fmt: skip
    certified = ' <span class="badge">certified</span>' if state["certified"] else ""
    main = (f'<h1>{_e(state["election"] or eid)}{certified}</h1>{_reporting(state)}'
            f'{area_table(area, "Statewide", kind="state", key=eid)}'
            f'<div class="scroll"><table class="counties"><caption>Counties</caption><thead><tr><th scope="col">County</th>'
            f'<th scope="col">Reporting</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')  # fmt: skip
    return layout(f"{state['election'] or eid}: results", main, feed=_feed(eid, feed_from),
                  crumbs=[("/", "Results"), (f"/elections/{_q(eid)}", state["election"] or eid)])


def _cds_text(cds: Mapping[str, int]) -> str:
    return ", ".join(f"{_e(c)} {n}" for c, n in sorted(cds.items(), key=lambda kv: (-kv[1], kv[0])) if n) or "none"


def county_page(doc: Mapping[str, Any], feed_from: str | None) -> str:
    eid, area = doc["election_id"], doc["county"]
    rows = []
    for u in sorted(doc["units"], key=lambda u: (u["name"] or u["unit_id"])):
        status = u["status"] + (f" ({u['stage']})" if u["stage"] else "")
        rows.append(f'<tr><th scope="row"><a href="/elections/{_q(eid)}/units/{_q(u["unit_id"])}">{_e(u["name"] or u["unit_id"])}</a></th>'
                    f'<td>{_e(status)}</td><td>{_n(u["delegates"])}</td><td>{_cds_text(u["cds"])}</td></tr>')  # fmt: skip
    main = (f'<h1>{_e(area["name"])}</h1>{_reporting(doc)}{area_table(area, area["name"], kind="county", key=area["area"])}'
            f'<div class="scroll"><table class="units"><caption>Precincts of {_e(area["name"])}</caption><thead><tr>'
            '<th scope="col">Precinct</th><th scope="col">Status</th><th scope="col">Delegates</th>'
            f'<th scope="col">County delegates won</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')  # fmt: skip
    return layout(f"{area['name']}: results", main, feed=_feed(eid, feed_from, county=area["area"]),
                  crumbs=[("/", "Results"), (f"/elections/{_q(eid)}", doc["election"] or eid),
                          (f"/elections/{_q(eid)}/counties/{_q(area['area'])}", area["name"])])


def _unit_table(u: Mapping[str, Any], candidates: Sequence[str]) -> str:
    rows = []
    for c in candidates:
        if not (u["first"].get(c) or u["final"].get(c) or u["cds"].get(c)):
            continue
        computed = u["cds_computed"] or {}
        rows.append(f'<tr data-candidate="{_e(c)}"><th scope="row">{_e(c)}</th><td>{_n(u["first"].get(c, 0))}</td>'
                    f'<td>{_n(u["final"].get(c, 0))}</td><td>{_n(u["cds"].get(c, 0))}</td><td>{_n(computed.get(c))}</td>'
                    f'<td class="sde" title="exact: {_e(u["sde"].get(c, "0"))}"><span class="value">{_e(u["sde_display"].get(c, "0.0000"))}</span></td></tr>')  # fmt: skip
    return (f'<div class="scroll"><table class="tally" data-kind="unit" data-key="{_e(u["unit_id"])}">'
            '<caption>Alignment, delegates and SDEs</caption><thead><tr>'
            f'<th scope="col">Candidate</th><th scope="col">{_label("First alignment", "First")}</th>'
            f'<th scope="col">{_label("Final alignment", "Final")}</th><th scope="col">{_label("County delegates", "CDs")}</th>'
            f'<th scope="col">{_label("Computed by the rules", "Rules")}</th><th scope="col">SDEs</th>'
            f'</tr></thead><tbody>{"".join(rows) or "<tr><td colspan=6>No result yet.</td></tr>"}</tbody></table></div>')


def _events_tables(trail: Mapping[str, Any]) -> str:
    tosses, corrections, steps = [], [], []
    for e in trail["events"]:
        d = e["details"]
        when = _time(e["recorded_at"])
        if e["type"] == "TieBroken":
            tosses.append(f'<tr><td>{when}</td><td>{_e(", ".join(d["contenders"]))}</td><td>{d["seats"]}</td>'
                          f'<td>{_e(", ".join(d["winners"]))}</td><td>{_e(d["method"])}</td><td>{_e(d["caller"])}</td>'
                          f'<td>{_e(", ".join(d["witnesses"]) or "none recorded")}</td><td>{_e(d.get("reason") or "")}</td></tr>')  # fmt: skip
        if e["type"] == "ResultCorrected":
            corrections.append(f'<tr><td>{when}</td><td>{_e(d["stage"])}</td><td>{_e(d["reason"])}</td>'
                               f'<td>{_e(d["authority"])}</td><td><code>{_e(d["supersedes"])}</code></td></tr>')  # fmt: skip
        changes = "".join(f"<li>{_e(c)}</li>" for c in e["changes"]) or "<li>nothing changed</li>"
        steps.append(f'<tr><td>{when}</td><td>{_e(e["type"])}</td><td>{_e(e["actor"])}</td><td><ul>{changes}</ul></td></tr>')
    toss_t = ('<table class="tosses"><caption>Coin tosses</caption><thead><tr><th scope="col">Recorded</th>'
              '<th scope="col">Contenders</th><th scope="col">Seats</th><th scope="col">Winners</th><th scope="col">Method</th>'
              '<th scope="col">Called by</th><th scope="col">Witnesses</th><th scope="col">Reason</th></tr></thead>'
              f'<tbody>{"".join(tosses) or "<tr><td colspan=8>None.</td></tr>"}</tbody></table>')  # fmt: skip
    corr_t = ('<table class="corrections"><caption>Corrections</caption><thead><tr><th scope="col">Recorded</th>'
              '<th scope="col">Stage</th><th scope="col">Reason</th><th scope="col">Authority</th><th scope="col">Replaces</th>'
              f'</tr></thead><tbody>{"".join(corrections) or "<tr><td colspan=5>None.</td></tr>"}</tbody></table>')  # fmt: skip
    trail_t = ('<table class="trail"><caption>Paper trail</caption><thead><tr><th scope="col">Recorded</th><th scope="col">Event</th>'
               f'<th scope="col">By</th><th scope="col">What it changed</th></tr></thead><tbody>{"".join(steps)}</tbody></table>')
    return "".join(f'<div class="scroll">{t}</div>' for t in (toss_t, corr_t, trail_t))


def _findings(audit: Mapping[str, Any]) -> str:
    rows = [f'<tr><td>{_e(f["severity"])}</td><td>{_e(f["code"])}</td><td>{_e(f["candidate"] or "")}</td>'
            f'<td>{_e(f["expected"])}</td><td>{_e(f["reported"])}</td><td>{_e(f["message"])}'
            f'{"<br>Likely cause: " + _e(f["likely_cause"]) if f["likely_cause"] else ""}</td></tr>' for f in audit["findings"]]
    return ('<div class="scroll"><table class="findings"><caption>Audit findings</caption><thead><tr>'
            '<th scope="col">Severity</th><th scope="col">Check</th><th scope="col">Candidate</th><th scope="col">Expected</th>'
            '<th scope="col">Reported</th><th scope="col">What it means</th></tr></thead>'
            f'<tbody>{"".join(rows) or "<tr><td colspan=6>No finding.</td></tr>"}</tbody></table></div>')  # fmt: skip


def unit_page(doc: Mapping[str, Any], trail: Mapping[str, Any], audit: Mapping[str, Any], candidates: Sequence[str],
              county_name: str | None, feed_from: str | None) -> str:
    eid, u = doc["election_id"], doc["unit"]
    status = u["status"] + (f" ({u['stage']})" if u["stage"] else "")
    facts = (f'<dl class="facts"><dt>Status</dt><dd data-field="status">{_e(status)}</dd>'
             f'<dt>Delegates (D)</dt><dd>{_n(u["delegates"])} ({_e(u["delegates_source"])})</dd>'
             f'<dt>Attendance (T)</dt><dd>{_n(u["attendance"])} ({_e(u["attendance_source"])})</dd>'
             f'<dt>Viability threshold</dt><dd>{_n(u["threshold"])}</dd>'
             f'<dt>County delegates from</dt><dd>{_e(u["cds_source"] or "none yet")}</dd>'
             f'<dt>Last result recorded</dt><dd>{_time(u["result_recorded_at"])}</dd></dl>')  # fmt: skip
    main = (f'<h1>{_e(u["name"] or u["unit_id"])}</h1>{facts}{_unit_table(u, candidates)}'
            f'{_findings(audit)}{_events_tables(trail)}')
    crumbs = [("/", "Results"), (f"/elections/{_q(eid)}", doc["election"] or eid)]
    if u["county_id"]:
        crumbs.append((f"/elections/{_q(eid)}/counties/{_q(u['county_id'])}", county_name or u["county_id"]))
    crumbs.append((f"/elections/{_q(eid)}/units/{_q(u['unit_id'])}", u["name"] or u["unit_id"]))
    return layout(f"{u['name'] or u['unit_id']}: results", main, feed=_feed(eid, feed_from, unit=u["unit_id"]), crumbs=crumbs)


def error_page(status: int, message: str) -> str:
    return layout("Results: not available", f"<h1>Not available ({status})</h1><p>{_e(message)}</p>", crumbs=[("/", "Results")])

"""The results site's routes: ``/``, an election's statewide page, a county's, a precinct's.

Why the same answers machinery as the API (``ResultsReader.answer``): pages get ETags and
``Cache-Control`` too, so a CDN can serve them, and a page is rebuilt only when the projection moved.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import FastAPI, Header, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from projections.read_api import documents, pages
from projections.read_api.api import respond
from projections.read_api.reader import ReadError, ResultsReader

__all__ = ["add_site"]

HTML = "text/html; charset=utf-8"


def _html(text: Any) -> bytes:
    return str(text).encode()


def add_site(app: FastAPI, reader: ResultsReader, *, max_age: int = 5) -> None:
    """Add the pages and their static files to ``app``; HTML errors for the page routes."""
    static = resources.files("projections.read_api") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    def page(request: Request, election: str | None, inm: str | None, build: Any, *params: object) -> Response:
        start = reader.feed_positions()  # before the tallies: nothing published after them is missed
        try:
            answer = reader.answer(f"page:{request.url.path}", election, None, inm, lambda v: build(v, start), *params,
                                   encode=_html)
        except ReadError as exc:
            return HTMLResponse(pages.error_page(exc.status, str(exc)), status_code=exc.status,
                                headers={"Cache-Control": "no-store"})
        return respond(answer, max_age, HTML)

    @app.get("/", include_in_schema=False)
    def index(request: Request, if_none_match: str | None = Header(None)) -> Response:
        try:
            answer = reader.plain("page:/", if_none_match, lambda: pages.index_page(reader.elections()), encode=_html)
        except ReadError as exc:
            return HTMLResponse(pages.error_page(exc.status, str(exc)), status_code=exc.status,
                                headers={"Cache-Control": "no-store"})
        return respond(answer, max_age, HTML)

    @app.get("/elections/{election}", include_in_schema=False)
    def state(request: Request, election: str, if_none_match: str | None = Header(None)) -> Response:
        return page(request, election, if_none_match,
                    lambda v, s: pages.state_page(documents.state(v), documents.counties(v), s))

    @app.get("/elections/{election}/counties/{county}", include_in_schema=False)
    def county(request: Request, election: str, county: str, if_none_match: str | None = Header(None)) -> Response:
        return page(request, election, if_none_match, lambda v, s: pages.county_page(documents.county(v, county), s))

    @app.get("/elections/{election}/units/{unit}", include_in_schema=False)
    def unit(request: Request, election: str, unit: str, if_none_match: str | None = Header(None)) -> Response:
        def build(v: Any, start: str | None) -> str:
            doc = documents.unit(v, unit)
            uid = doc["unit"]["unit_id"]
            county_id = doc["unit"]["county_id"]
            county_name = v.context.counties[county_id].name if county_id in v.context.counties else None
            try:
                trail = documents.trail(reader, v, uid)
            except ReadError as exc:
                if exc.status != 404 or doc["unit"]["status"] != "not_reported":
                    raise
                trail = {"events": []}  # a defined unit that has not reported yet: its page says so
            return pages.unit_page(doc, trail, documents.audit(v, unit=uid),
                                   v.context.candidates, county_name, start)

        start = reader.feed_positions()
        try:
            answer = reader.with_log(f"page:{request.url.path}", election, if_none_match, lambda v: build(v, start),
                                     encode=_html)
        except ReadError as exc:
            return HTMLResponse(pages.error_page(exc.status, str(exc)), status_code=exc.status,
                                headers={"Cache-Control": "no-store"})
        return respond(answer, max_age, HTML)

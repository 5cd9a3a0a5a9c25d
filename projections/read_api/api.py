"""The JSON routes of ``caucus serve results`` (OpenAPI at ``/docs``); read-only, no credential.

Why conditional GET everywhere: results night is a thundering herd of readers asking for numbers that
change a few times a minute. Every answer carries an ETag (``reader.py``) and ``Cache-Control``, so a
CDN in front serves the herd and revalidates with ``If-None-Match``, which costs the server one
small query and a 304.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ledger.config import Settings
from ledger.log.port import LogError
from projections.read_api import documents
from projections.read_api.private import private_words, scrubbed
from projections.read_api.reader import Answer, ReadError, ResultsReader, dumps
from projections.read_api.stream import FeedFilter, check_resume, parse_resume, sse_events
from projections.stores.port import StoreError

__all__ = ["create_app", "respond", "feed_schemas"]

AS_OF = Query(None, description="A time (2020-02-08T06:28:00Z: events recorded at or before it) or log positions "
                                "(3:120,5:88), as `caucus tally --as-of` takes them.")
ELECTION_HELP = "Election id (GET /api/elections lists them)."


def respond(answer: Answer, max_age: int, media_type: str = "application/json") -> Response:
    """The answer, or 304 when the client's copy is current, with the caching headers of either."""
    cache = "public, max-age=31536000, immutable" if answer.immutable else f"public, max-age={max_age}, must-revalidate"
    headers = {"ETag": answer.etag, "Cache-Control": cache, "Vary": "Accept-Encoding"}
    if answer.body is None:
        return Response(status_code=304, headers=headers)
    return Response(answer.body, media_type=media_type, headers=headers)


def _error(exc: ReadError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": str(exc), "status": exc.status}}, status_code=exc.status,
                        headers={**(headers or {}), "Cache-Control": "no-store"})


def _invalid(exc: RequestValidationError) -> str:
    """FastAPI's validation errors as one line: where (query a, path unit) and what."""
    return "; ".join(f"{' '.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors()) or "invalid request"


def create_app(reader: ResultsReader, settings: Settings, *, max_age: int = 5) -> FastAPI:
    """The read API and the results site over ``reader`` (``site.add_site`` adds the pages)."""
    app = FastAPI(title="Caucus Ledger results", version="1", description=(
        "Read-only results: tallies (statewide, county, unit) with first and final alignment, county delegates and "
        "SDEs exact (n/d) and rounded, the paper trail of a unit, audit findings, diffs, and the live results feed "
        "(Server-Sent Events). The same numbers as `caucus tally --json`."))  # fmt: skip

    hide = private_words(settings)

    @app.exception_handler(ReadError)
    async def read_error(_request: Request, exc: ReadError) -> JSONResponse:
        return _error(ReadError(hide(str(exc)), exc.status))

    @app.exception_handler(StoreError)
    async def store_error(_request: Request, exc: StoreError) -> JSONResponse:
        return _error(ReadError(hide(str(exc)), 503))

    @app.exception_handler(LogError)
    async def log_error(_request: Request, exc: LogError) -> JSONResponse:
        return _error(ReadError(hide(str(exc)), 503))

    # Every error in one shape ({"error": {"message", "status"}}), the framework's own included.
    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(ReadError(_invalid(exc), 422))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(ReadError(str(exc.detail), exc.status_code), exc.headers)

    _tally_routes(app, reader, max_age)
    _evidence_routes(app, reader, settings, max_age, hide)
    _feed_route(app, reader, settings, hide)
    return app


def _tally_routes(app: FastAPI, reader: ResultsReader, max_age: int) -> None:
    """Elections, and the tallies of the state, the counties and a unit (each with ``as_of``).

    The tally routes run on the event loop: a 304 or an answer already built is returned there
    (``ResultsReader.ready``); only building one goes to a worker thread."""

    async def tally(route: str, election: str, as_of: str | None, inm: str | None, build: Callable[..., Any],
                    *params: object) -> Response:
        answer = reader.ready(route, election, as_of, inm, *params)
        if answer is None:
            answer = await run_in_threadpool(reader.answer, route, election, as_of, inm, build, *params)
        return respond(answer, max_age)

    @app.get("/api/elections", summary="The elections the serving projection holds")
    def elections(if_none_match: str | None = Header(None)) -> Response:
        return respond(reader.plain("elections", if_none_match, lambda: {"elections": reader.elections()}), max_age)

    @app.get("/api/elections/{election}/state", summary="Statewide tally: alignments, CDs, SDEs, reporting, last update")
    async def state(election: str, as_of: str | None = AS_OF, if_none_match: str | None = Header(None)) -> Response:
        return await tally("state", election, as_of, if_none_match, documents.state)

    @app.get("/api/elections/{election}/counties", summary="Every county's tally")
    async def counties(election: str, as_of: str | None = AS_OF, if_none_match: str | None = Header(None)) -> Response:
        return await tally("counties", election, as_of, if_none_match, documents.counties)

    @app.get("/api/elections/{election}/counties/{county}", summary="One county's tally and its units (id or name)")
    async def county(election: str, county: str, as_of: str | None = AS_OF, if_none_match: str | None = Header(None)) -> Response:
        return await tally("county", election, as_of, if_none_match, lambda v: documents.county(v, county), county)

    @app.get("/api/elections/{election}/units/{unit}", summary="One unit's tally (id or name)")
    async def unit(election: str, unit: str, as_of: str | None = AS_OF, if_none_match: str | None = Header(None)) -> Response:
        return await tally("unit", election, as_of, if_none_match, lambda v: documents.unit(v, unit), unit)


def _evidence_routes(app: FastAPI, reader: ResultsReader, settings: Settings, max_age: int,
                     hide: Callable[[str], str]) -> None:
    """What an auditor reads: a unit's paper trail, the audit's findings, two tallies compared."""

    def tally(route: str, election: str, as_of: str | None, inm: str | None, build: Callable[..., Any], *params: object) -> Response:
        return respond(reader.answer(route, election, as_of, inm, build, *params), max_age)

    @app.get("/api/elections/{election}/units/{unit}/trail",
             summary="The paper trail of a unit: every event, correction and coin toss, with the tally after each")
    def trail(election: str, unit: str, if_none_match: str | None = Header(None)) -> Response:
        answer = reader.with_log("trail", election, if_none_match, lambda v: documents.trail(reader, v, unit), unit)
        return respond(answer, max_age)

    @app.get("/api/elections/{election}/audit", summary="The RULES.md §12 audit's findings (`caucus audit`)")
    def audit(
        election: str, county: str | None = Query(None), unit: str | None = Query(None),
        severity: list[str] | None = Query(None), code: list[str] | None = Query(None), as_of: str | None = AS_OF,
        if_none_match: str | None = Header(None),
    ) -> Response:
        def build(v: Any) -> Any:
            return documents.audit(v, county=county, unit=unit, severity=severity, code=code)

        return tally("audit", election, as_of, if_none_match, build, county, unit, tuple(severity or ()), tuple(code or ()))

    @app.get("/api/elections/{election}/diff", summary="Two tallies compared (`caucus diff A B`)")
    def diff(election: str, a: str = Query(..., description="Side A, as `caucus diff` takes it (live, as-of:TIME, ...)."),
             b: str = Query(..., description="Side B."), if_none_match: str | None = Header(None)) -> Response:
        from projections.audit.diff import diff_snapshots
        from projections.audit.diff_sides import DiffError, load_snapshot, parse_side, resolve_sides
        from projections.audit.diff_cli import sources_for

        def build(_v: Any) -> Any:
            try:
                side_a, side_b = resolve_sides(parse_side(a), parse_side(b))
                sources = sources_for(settings)
                snaps = [load_snapshot(s, sources, election_id=election) for s in (side_a, side_b)]
            except DiffError as exc:
                raise ReadError(str(exc), 400) from exc
            return scrubbed(diff_snapshots(*snaps).to_json(), hide)

        return respond(reader.with_log("diff", election, if_none_match, build, a, b), max_age)


def feed_schemas() -> dict[str, Any]:
    """The Avro schemas of the feed's record types, every version, shared types expanded in place: a
    consumer in another language decodes the records with these alone (docs/feed.md)."""
    from ledger.codec import load_catalogue
    from projections.feed_events import FEED_TYPES

    return {"encoding": "Avro single-object encoding (0xC3 0x01, the schema's 8-byte CRC-64-AVRO fingerprint, the body)",
            "types": [{"name": n, "version": v, "schema": schema} for (n, v), schema in sorted(load_catalogue(FEED_TYPES).items())]}


def _feed_route(app: FastAPI, reader: ResultsReader, settings: Settings, hide: Callable[[str], str]) -> None:
    schemas = dumps(feed_schemas())

    @app.get("/api/feed/schemas", summary="The Avro schemas of the results feed's records (shared types expanded)")
    def schemas_route() -> Response:
        return Response(schemas, media_type="application/json", headers={"Cache-Control": "public, max-age=3600"})

    @app.get("/api/feed", summary="The results feed, live (Server-Sent Events; resumes from Last-Event-ID)",
             response_class=StreamingResponse)
    def feed(election: str | None = Query(None), county: str | None = Query(None), unit: str | None = Query(None),
             start: str | None = Query(None, alias="from", description="Feed positions to start from (an event's id); "
                                                                        "default: from now"),
             last_event_id: str | None = Header(None)) -> StreamingResponse:
        try:
            resume = parse_resume(last_event_id) or parse_resume(start)
            check_resume(settings, resume)
        except ValueError as exc:
            raise ReadError(str(exc), 400) from exc
        if election is not None:  # a typo is an answer, not a stream that never matches (the list is cached)
            known = json.loads(reader.plain("elections", None, lambda: {"elections": reader.elections()}).body or b"{}")
            if election not in {e["election_id"] for e in known.get("elections", ())}:
                raise ReadError(f"no election {election!r} in the serving projection (GET /api/elections lists them)", 404)
        return StreamingResponse(sse_events(settings, resume, FeedFilter(election, county, unit), hide),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

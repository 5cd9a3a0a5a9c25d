"""The HTTP intake: the same commands as the CLI, for the chairs' app and the phone bank.

Bodies are read raw and handed to the intake verbatim (not parsed by the web framework first), so a
malformed body is refused with the intake's own messages and recorded like any other refusal; the
published schema at ``/docs`` is generated from the same command classes that parse it. Blocking log
calls run in the thread pool; the intake's lock serialises writers.

Status codes: 201 accepted, 200 duplicate (the original receipt), 202 spooled (the log was unreachable:
kept durably, forwarded later), 401 no or bad credential, 403 wrong role or unit, 409 clashes with what
is recorded (already reported, already superseded, a tie already settled, key reused), 413 body over
1 MiB, 422 invalid, 503 (with ``Retry-After``) the log was lost, or neither the log nor the spool could
be written: nothing was recorded. Every refusal is recorded before it is answered; no input, however
malformed, is a 5xx (``producers.strict_json``). A background thread retries forwarding the spool and saves the state snapshot.

``GET /receipts/{key}`` answers the command's sender and officials only (anyone else gets 404, as for
an unknown key). ``/metrics`` (Prometheus) and ``/ready`` come from ``producers.intake_metrics``.
"""

from __future__ import annotations

import hashlib

import math
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ledger.events import Channel
from ledger.log.port import LogError
from producers.commands import CommandKind, json_schema
from producers.credentials import AuthFailure, CredentialError, CredentialStore
from producers.intake import MAX_BODY, Intake, IntakeLogLost
from producers.intake_metrics import IntakeMetrics, instrument
from producers.outcomes import Receipt, Submission
from producers.spool import SpoolError

__all__ = ["create_app"]

_STATUS = {"accepted": 201, "duplicate": 200, "spooled": 202}
_REFUSED = {"unauthenticated": 401, "forbidden": 403, "conflict": 409, "invalid": 422}


def _as_sent(request: Request, unit: str) -> str:
    """The unit id as the path spelt it. The server decodes a path's bytes that are not UTF-8 (``%ff``)
    to U+FFFD, which would be judged as a unit of that name (UNKNOWN_UNIT '\ufffd'); decoded here with
    ``surrogateescape`` instead, the intake refuses it as the CLI does (``NOT_UTF8``)."""
    if "\ufffd" not in unit:
        return unit
    for segment in (request.scope.get("raw_path") or b"").split(b"/"):
        sent = unquote_to_bytes(segment)
        if sent.decode("utf-8", "replace") == unit:
            return sent.decode("utf-8", "surrogateescape")
    return unit


def _token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _body_doc(kind: CommandKind, path_unit: bool) -> dict[str, Any]:
    schema = json_schema(kind)
    return {
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "the command's idempotency key, if not in the body",
            }
        ],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
            "description": "unit_id may be left out: it comes from the path" if path_unit else "",
        },
    }


class _Retrier:
    """Background retries of the spool and periodic snapshots, while the service runs."""

    def __init__(self, intake: Intake, every: float, snapshot_every: float) -> None:
        self.intake = intake
        self.every = every
        self.snapshot_every = snapshot_every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="intake-retry", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        # The first snapshot comes at the first wake, not a minute in: a command run beside the service
        # checks the log against the snapshot, and without one it cannot tell a lost log from a new one.
        waited = self.snapshot_every
        while not self._stop.wait(self.every):
            waited += self.every
            try:
                if self.intake.spool.pending():
                    self.intake.flush()
            except IntakeLogLost:
                pass  # the spool waits for a rebuild; /ready and /health already say the log was lost
            except Exception as exc:  # noqa: BLE001 - keep retrying; the error is visible in /health
                self.intake.last_log_error = f"background retry: {type(exc).__name__}: {exc}"
            try:
                self.intake.note_seen()  # a service killed, not stopped, leaves what it saw seconds ago
            except Exception as exc:  # noqa: BLE001 - keep retrying; the error is visible in /health
                self.intake.last_log_error = f"background retry: {type(exc).__name__}: {exc}"
            try:
                if waited >= self.snapshot_every:
                    waited = 0.0
                    if self.intake.log_lost is None:
                        self.intake.save_snapshot()
            except Exception as exc:  # noqa: BLE001 - keep retrying; the error is visible in /health
                self.intake.last_log_error = f"background retry: {type(exc).__name__}: {exc}"


def create_app(
    intake: Intake, store: CredentialStore, *, retry_seconds: float = 5.0, snapshot_seconds: float = 60.0
) -> FastAPI:
    """The intake service over a started ``Intake``; the caller closes the intake after the app stops."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        retrier = _Retrier(intake, retry_seconds, snapshot_seconds)
        retrier.start()
        try:
            yield
        finally:
            retrier.stop()
            # here, not after the server returns: uvicorn re-raises SIGTERM once it has shut down
            if intake.log_lost is None:
                await run_in_threadpool(intake.save_snapshot)

    app = FastAPI(
        title="Caucus Ledger intake",
        description=(
            "Report caucus results as immutable events. Every request needs `Authorization: Bearer <token>` "
            "(issued with `caucus credentials issue`) and an idempotency key (body field `idempotency_key` "
            "or header `Idempotency-Key`): sending the same command again returns the original receipt. "
            "Refused submissions are recorded with every error, and every error is returned."
        ),
        version="1",
        lifespan=lifespan,
    )
    metrics = IntakeMetrics(intake)
    _add_command_routes(app, intake, store, metrics, retry_seconds)
    _add_read_routes(app, intake, store, retry_seconds)
    instrument(app, intake, metrics)
    _publish_schema_defs(app)
    return app


def _unavailable(exc: Exception, retry_seconds: float) -> JSONResponse:
    """Neither the log nor the spool could keep the command: nothing was recorded, send it again."""
    retry = str(max(1, math.ceil(retry_seconds)))
    return JSONResponse({"status": "error", "message": str(exc)}, status_code=503, headers={"Retry-After": retry})


_CHANNELS = tuple(c.value for c in Channel if c not in (Channel.IMPORT, Channel.SYSTEM))
"""The channels a sender may name: ``import`` and ``system`` are the ledger's own, never a request's."""


def _unknown_channel(channel: str) -> JSONResponse:
    """Not a command yet: nothing to judge or record (an unknown channel was taken as "app", silently)."""
    return JSONResponse({"status": "rejected", "category": "invalid", "errors": [{
        "field": "channel", "code": "UNKNOWN_CHANNEL",
        "message": f"channel {channel[:40]!r} is not one of {', '.join(_CHANNELS)} (leave it out for app)"}]},
        status_code=422)


async def _bounded_body(request: Request) -> tuple[bytes, tuple[int, str] | None]:
    """The body, or, past ``MAX_BODY``, its start and the (size, SHA-256) of the whole: the rest is read
    and hashed but not kept, so no body, however large (and no token is needed to send one), holds more
    than about 1 MiB of the service's memory; the refusal still records how large it was."""
    kept = bytearray()
    digest = None
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if digest is None and size > MAX_BODY:
            digest = hashlib.sha256(kept)
            kept += chunk[: MAX_BODY + 1 - len(kept)]
            digest.update(chunk)
        elif digest is not None:
            digest.update(chunk)
        else:
            kept += chunk
    if digest is None:
        return bytes(kept), None
    return bytes(kept), (size, digest.hexdigest())


def _add_command_routes(
    app: FastAPI, intake: Intake, store: CredentialStore, metrics: IntakeMetrics, retry_seconds: float
) -> None:
    """One POST route per command; each hands the body to the intake verbatim (a refusal is recorded as sent)."""

    def unavailable(exc: Exception) -> JSONResponse:
        return _unavailable(exc, retry_seconds)

    async def submit(request: Request, kind: CommandKind, unit: str | None, channel: str | None) -> JSONResponse:
        try:
            sender = store.authenticate(_token(request))
        except CredentialError as exc:
            return unavailable(exc)
        if channel is not None and channel not in _CHANNELS:
            if not isinstance(sender, AuthFailure):
                return _unknown_channel(channel)
            channel = None  # who may not send anything hears that first (401, recorded), as for any input
        body, whole = await _bounded_body(request)
        try:
            chosen = Channel(channel) if channel is not None else Channel.APP
            outcome = await run_in_threadpool(
                intake.submit,
                Submission(
                    kind,
                    body,
                    sender,
                    chosen,
                    unit_id=unit,
                    idempotency_key=request.headers.get("idempotency-key"),
                    via=f"{request.method} {request.url.path}",
                    whole=whole,
                ),
            )
        except (LogError, SpoolError, OSError) as exc:
            return unavailable(exc)
        metrics.outcome(outcome)
        if isinstance(outcome, Receipt):
            return JSONResponse(outcome.to_json(), status_code=_STATUS[outcome.status])
        headers = {"WWW-Authenticate": 'Bearer realm="caucus"'} if outcome.category == "unauthenticated" else None
        code = 413 if whole is not None or len(body) > MAX_BODY else _REFUSED[outcome.category]
        return JSONResponse(outcome.to_json(), status_code=code, headers=headers)

    def route(path: str, kind: CommandKind, summary: str) -> Callable[..., Any]:
        path_unit = "{unit}" in path
        extra = _body_doc(kind, path_unit)
        responses: dict[int | str, dict[str, Any]] = {
            201: {"description": "accepted: the receipt (event id, log position)"},
            200: {"description": "duplicate: the receipt of the original command"},
            202: {"description": "spooled: the log is unreachable; kept durably and forwarded later"},
            401: {"description": "no or invalid credential (recorded)"},
            403: {"description": "the credential may not do this (recorded)"},
            409: {"description": "clashes with what is recorded (recorded)"},
            413: {"description": "the body is larger than 1 MiB (recorded, truncated)"},
            422: {"description": "invalid: every error, each naming its field and rule (recorded)"},
            503: {"description": "the log was lost, or neither the log nor the spool can be written (nothing recorded; see Retry-After)"},
        }
        if path_unit:

            async def unit_endpoint(request: Request, unit: str, channel: str | None = None) -> JSONResponse:
                return await submit(request, kind, _as_sent(request, unit), channel)

            endpoint: Callable[..., Any] = unit_endpoint
        else:

            async def election_endpoint(request: Request, channel: str | None = None) -> JSONResponse:
                return await submit(request, kind, None, channel)

            endpoint = election_endpoint
        endpoint.__doc__ = summary
        app.post(path, summary=summary, openapi_extra=extra, responses=responses, name=kind.value)(endpoint)
        return endpoint

    route("/elections", CommandKind.DEFINE, "Define an election (official)")
    route("/units/{unit}/open", CommandKind.OPEN, "Open a unit and record its attendance (chair of the unit or official)")
    route("/units/{unit}/results", CommandKind.REPORT, "Report a unit's result (chair of the unit or official)")
    route("/units/{unit}/corrections", CommandKind.CORRECT, "Correct a unit's result (official)")
    route("/units/{unit}/ties", CommandKind.TOSS, "Record a coin toss or drawing of lots (official)")


def _add_read_routes(app: FastAPI, intake: Intake, store: CredentialStore, retry_seconds: float) -> None:
    """A command's receipt, by its idempotency key, and the intake's health."""

    def unavailable(exc: Exception) -> JSONResponse:
        return _unavailable(exc, retry_seconds)

    @app.get("/receipts/{idempotency_key:path}", summary="What became of a command, by its idempotency key")
    async def receipt(request: Request, idempotency_key: str) -> JSONResponse:
        try:
            sender = store.authenticate(_token(request))
        except CredentialError as exc:
            return unavailable(exc)
        if isinstance(sender, AuthFailure):
            return JSONResponse(
                {"status": "rejected", "errors": [sender.problem.to_avro()]},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="caucus"'},
            )
        # A refusal that carried no key is filed under no key: "" asks for none of them (it answered
        # with whichever keyless refusal came last).
        try:
            found = await run_in_threadpool(intake.lookup, idempotency_key, sender) if idempotency_key.strip() else None
        except LogError as exc:  # the log was lost: no receipt can be confirmed until `caucus intake rebuild`
            return unavailable(exc)
        if found is None:  # also when it is not this sender's: a receipt is its sender's and officials' only
            return JSONResponse({"status": "unknown", "idempotency_key": idempotency_key}, status_code=404)
        return JSONResponse(found.to_json(), status_code=200)

    @app.get("/health", summary="Is the intake up, can it reach the log, does anything wait in the spool")
    async def health() -> JSONResponse:
        status = await run_in_threadpool(intake.status)
        status["spool"].pop("path", None)  # anyone may ask: no file paths of the machine (`caucus spool status` has it)
        ok = status["log_lost"] is None
        writing = status["reachable"] and not status["spool"]["pending"]  # events waiting: appends are failing
        status["status"] = "ok" if ok and writing else ("degraded" if ok else "log lost")
        return JSONResponse(status, status_code=200 if ok else 503)


def _publish_schema_defs(app: FastAPI) -> None:
    """Move the command schemas' ``$defs`` into the OpenAPI components, where ``/docs`` resolves them."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = build()
        components = doc.setdefault("components", {}).setdefault("schemas", {})
        for path_item in doc.get("paths", {}).values():
            for op in path_item.values():
                content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
                schema = content.get("schema")
                if isinstance(schema, dict) and "$defs" in schema:
                    components.update(schema.pop("$defs"))
        doc_text = _rewrite_refs(doc)
        app.openapi_schema = doc_text
        return doc_text

    app.openapi = openapi  # type: ignore[method-assign]


def _rewrite_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (v.replace("#/$defs/", "#/components/schemas/") if k == "$ref" and isinstance(v, str) else _rewrite_refs(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rewrite_refs(v) for v in node]
    return node

"""The HTTP intake's metrics and readiness: what an operator's Prometheus scrapes on caucus night.

- ``caucus_intake_requests_total{route, method, status}`` and ``caucus_intake_request_seconds{route}``
  (a histogram): the route is the path template (``/units/{unit}/results``), never the path itself, so
  a unit id does not become a label value.
- ``caucus_intake_rejections_total{code}``: refused submissions by error code (``UNAUTHENTICATED``,
  ``ALREADY_REPORTED``...), one count per error of each refusal.
- ``caucus_intake_spool_depth``: accepted events waiting in the spool for the log;
  ``caucus_intake_log_reachable`` and ``caucus_intake_log_lost`` (0/1).

``/ready`` answers 200 only when the log is reachable and not lost (a load balancer stops sending
chairs to an intake that could only spool or refuse); ``/health`` (the intake's status) stays as it was.
Each application has its own registry, so several can live in one process (tests).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from producers.intake import Intake
from producers.outcomes import Outcome, Refusal

__all__ = ["IntakeMetrics", "instrument"]

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class IntakeMetrics:
    def __init__(self, intake: Intake, registry: CollectorRegistry | None = None) -> None:
        self.intake = intake
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("caucus_intake_requests", "HTTP requests answered.", ["route", "method", "status"], registry=r)
        self.latency = Histogram("caucus_intake_request_seconds", "Time to answer a request.", ["route"], buckets=_BUCKETS, registry=r)
        self.rejections = Counter("caucus_intake_rejections", "Errors of refused submissions, by code.", ["code"], registry=r)
        self.spool_depth = Gauge("caucus_intake_spool_depth", "Accepted events waiting in the spool for the log.", registry=r)
        self.reachable = Gauge("caucus_intake_log_reachable", "1 when the last attempt to reach the log succeeded.", registry=r)
        self.lost = Gauge("caucus_intake_log_lost", "1 when the log no longer holds what the intake's state describes.", registry=r)
        self.spool_depth.set_function(lambda: float(len(intake.spool)))
        self.lost.set_function(lambda: 1.0 if intake.log_lost is not None else 0.0)
        self.reachable.set_function(lambda: 0.0 if intake.last_log_error or intake.log_lost else 1.0)

    def outcome(self, outcome: Outcome) -> None:
        if isinstance(outcome, Refusal):
            for problem in outcome.errors:
                self.rejections.labels(problem.code).inc()


class _Timed:
    """Times every request and counts it by route, method and status.

    A plain ASGI middleware, not ``@app.middleware("http")``: Starlette's BaseHTTPMiddleware runs the
    application in a task of its own and streams its answer through a memory channel, which cost the
    intake about a fifth of its CPU on each report on caucus night's busiest path."""

    def __init__(self, app: ASGIApp, metrics: IntakeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500  # what the client hears if the application fails before it answers

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            template = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.latency.labels(template).observe(time.perf_counter() - began)
            self.metrics.requests.labels(template, scope["method"], str(status)).inc()


def instrument(app: FastAPI, intake: Intake, metrics: IntakeMetrics | None = None) -> IntakeMetrics:
    """Add the timing middleware, ``/metrics`` and ``/ready`` to the intake's application."""
    metrics = metrics or IntakeMetrics(intake)

    app.add_middleware(_Timed, metrics=metrics)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/ready", summary="Can the intake take reports now: the log reachable and not lost")
    async def ready() -> JSONResponse:
        status: dict[str, Any] = await run_in_threadpool(intake.status)
        ok = status["log_lost"] is None and bool(status["reachable"])
        reason = None if ok else (status["log_lost"] or status["last_log_error"] or "the log is out of reach")
        return JSONResponse({"status": "ready" if ok else "unavailable", "reason": reason,
                             "spool": status["spool"]["pending"]}, status_code=200 if ok else 503)

    return metrics

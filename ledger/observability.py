"""Diagnostics (stdlib ``logging``) and the health/metrics endpoint of long-running processes.

Logging: every module logs to ``logging.getLogger(__name__)``; the command line sets the level
(``--log-level``, default WARNING, so a command's own output stays what it was) and the format
(``--log-format text|json``; JSON lines carry the logger, level, time and any ``extra`` fields,
ready for a log shipper). Diagnostics go to stderr; a command's results stay on stdout.

Endpoint (``serve_endpoint``): a runner (``caucus project --metrics-port N``) answers ``/metrics``
(Prometheus text format from its own registry), ``/health`` (the process is alive and its loop is
turning) and ``/ready`` (it is caught up and can reach the log). The intake serves the same three
paths from its web application (``producers.intake_metrics``). One small threaded HTTP server from
the standard library is enough for a scrape every few seconds and keeps the runner's loop free.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["configure_logging", "JsonFormatter", "Endpoint", "serve_endpoint", "Check"]

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}

Check = Callable[[], tuple[bool, dict[str, Any]]]
"""A health or readiness check: (ok, details shown in the response)."""


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, extra fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, sort_keys=True)


def configure_logging(level: str = "WARNING", fmt: str = "text") -> None:
    """Send the ledger's diagnostics (and its libraries') to stderr, at ``level``, as text or JSON."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_caucus", False):
            root.removeHandler(old)
    handler._caucus = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    # kafka-python logs every reconnect attempt; the ledger reports what matters itself
    logging.getLogger("kafka").setLevel(logging.WARNING if level == "DEBUG" else logging.CRITICAL)


class Endpoint:
    """A running ``/metrics`` + ``/health`` + ``/ready`` server; ``close()`` stops it."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_endpoint(registry: CollectorRegistry, *, health: Check, ready: Check, host: str = "127.0.0.1", port: int = 0) -> Endpoint:
    """Serve the three paths on ``host:port`` (0: any free port) from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 -- the standard library's name
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/health", "/ready"):
                ok, details = (health if path == "/health" else ready)()
                body = json.dumps({"status": "ok" if ok else "unavailable", **details}, default=str, sort_keys=True)
                self._send(200 if ok else 503, body.encode(), "application/json")
            else:
                self._send(404, b'{"error": "not found; try /metrics, /health or /ready"}', "application/json")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- the standard library's name
            logging.getLogger(__name__).debug("endpoint: " + format, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="caucus-endpoint", daemon=True)
    thread.start()
    return Endpoint(server, thread)

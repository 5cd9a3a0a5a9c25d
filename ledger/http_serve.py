"""Serving an ASGI app on a socket the ledger binds itself.

Why: ``uvicorn.run`` binds inside its event loop, and a port already taken ends it with a logged line
and exit 3, which is this ledger's "the log was lost" (README's exit codes); an operator who trusts
that table would restore a log that is fine. Binding first turns the clash into the ledger's own
one-line error naming ``--port`` (exit 2, as ``--metrics-port`` says it), before any banner claims
the service is up, and ``--port 0`` can print the port it got.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["bind", "port_of", "serve"]


def bind(host: str, port: int, option: str = "--port") -> socket.socket:
    """A listening TCP socket on ``host``:``port``; ``OSError`` naming ``option`` if it cannot be had."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise OSError(f"{option} {port}: cannot listen on {host}: {exc.strerror or exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart reuses the port at once
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise OSError(f"{option} {port}: cannot listen on {host}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def port_of(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def serve(app: Any, sock: socket.socket) -> bool:
    """Run ``app`` on ``sock`` until stopped (Ctrl-C, SIGTERM); False if it never started (its
    lifespan start-up failed; uvicorn has logged why). uvicorn's messages go through the ledger's
    logging (``log_config=None``: --log-level, --log-format)."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_config=None))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return bool(server.started)

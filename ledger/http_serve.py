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


def bind(host: str, port: int, option: str = "--port") -> list[socket.socket]:
    """Listening TCP sockets on every address ``host`` names (as asyncio binds them: ``""`` is every
    interface, ``localhost`` both loopbacks), or ``OSError`` naming the option at fault."""
    if not 0 <= port <= 65535:
        raise OSError(f"{option} {port}: not a port (0 to 65535)")
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise OSError(f"--host {host!r}: not an address this machine can listen on: {exc.strerror or exc}") from exc
    if port == 0:
        infos = infos[:1]  # one address: each would get a port of its own
    socks: list[socket.socket] = []
    for family, kind, proto, _, address in dict.fromkeys(infos):
        sock = socket.socket(family, kind, proto)
        socks.append(sock)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart reuses the port at once
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # the IPv4 address has a socket of its own
            sock.bind(address)
            sock.listen(2048)
        except OSError as exc:
            for made in socks:
                made.close()
            raise OSError(f"{option} {port}: cannot listen on {host or 'every interface'}: {exc.strerror or exc}") from exc
        sock.set_inheritable(True)
    return socks


def port_of(socks: list[socket.socket]) -> int:
    return int(socks[0].getsockname()[1])


def serve(app: Any, socks: list[socket.socket]) -> bool:
    """Run ``app`` on ``socks`` (closed when it stops) until stopped (Ctrl-C, SIGTERM); False if it never started (its
    lifespan start-up failed; uvicorn has logged why). uvicorn's messages go through the ledger's
    logging (``log_config=None``: --log-level, --log-format)."""
    import uvicorn

    host, port = socks[0].getsockname()[:2]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_config=None))
    try:
        server.run(sockets=socks)
    except KeyboardInterrupt:
        pass
    finally:
        for sock in socks:
            sock.close()
    return bool(server.started)

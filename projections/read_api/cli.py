"""``caucus serve results``: the read API and the public results site in one process.

Registered in the ``serve`` group the intake's command also lives in; whichever package registers first
makes the group, the other adds to it (``_serve_group``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ledger.cli_output import fail, settings_of
from ledger.config import Settings
from projections.queries import DEFAULT_SET

if TYPE_CHECKING:  # the web stack is imported when the server starts, not with every command
    from fastapi import FastAPI

__all__ = ["register", "results_app", "serve_results"]


def results_app(settings: Settings, *, projection: str = DEFAULT_SET, max_age: int = 5) -> FastAPI:
    """The whole service: JSON routes under ``/api``, pages, static files, OpenAPI at ``/docs``."""
    from projections.read_api.api import create_app
    from projections.read_api.reader import ResultsReader
    from projections.read_api.site import add_site

    reader = ResultsReader(settings, projection=projection)
    app = create_app(reader, settings, max_age=max_age)
    add_site(app, reader, max_age=max_age)
    app.router.on_shutdown.append(reader.close)
    return app


def serve_results(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0 for every interface)."),
    port: int = typer.Option(8090, "--port", min=0, max=65535, help="Port to listen on (0: any free port, printed at start)."),
    max_age: int = typer.Option(5, "--max-age", min=0, help="Seconds a CDN or browser may reuse a live answer before "
                                "revalidating it (an ETag makes revalidation cheap)."),
    projection: str = typer.Option(DEFAULT_SET, "--projection", hidden=True),
) -> None:
    """The read API and the public results site (read-only; no credential). OpenAPI docs at /docs.

    Tallies (state, counties, units; ?as_of=TIME|POSITIONS), a unit's paper trail, the audit's findings,
    diffs, and the results feed as Server-Sent Events (/api/feed). Pages update live from that feed.
    Serves what `caucus project` keeps up to date; run one beside it."""
    from ledger.http_serve import bind, port_of, serve

    settings = settings_of(ctx)
    try:
        app = results_app(settings, projection=projection, max_age=max_age)
        socks = bind(host, port)
    except OSError as exc:
        raise fail(str(exc)) from exc
    typer.echo(f"results of {settings.describe_log()} on http://{host}:{port_of(socks)} (site /, API /api, docs /docs); "
               "stop with Ctrl-C", err=True)
    if not serve(app, socks):
        raise fail("the results service did not start (see the lines above)")


def _serve_group(app: typer.Typer) -> typer.Typer:
    for info in app.registered_groups:
        if info.name == "serve" and info.typer_instance is not None:
            return info.typer_instance
    group = typer.Typer(help="Run a service.", no_args_is_help=True)
    app.add_typer(group, name="serve")
    return group


def register(app: typer.Typer) -> None:
    _serve_group(app).command("results")(serve_results)

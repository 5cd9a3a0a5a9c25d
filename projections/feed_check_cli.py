"""``caucus check-feed``: the results feed's latest view against the serving projection
(``projections.feed_check``)."""

from __future__ import annotations

from typing import Any, Optional

import typer

from ledger.cli_output import JsonOption, emit, fail, settings_of
from ledger.codec import CodecError
from projections.feed_check import FEED_CODES, FeedCheck, check_feed
from projections.feed_cli import read_latest
from projections.feed_events import feed_codec
from projections.queries import DEFAULT_SET, QueryError, resolve_set
from projections.stores import open_store
from projections.stores.port import StoreError

__all__ = ["register"]

CLEAN, ERRORS = 0, 1


def check_feed_command(
    ctx: typer.Context,
    as_json: bool = JsonOption,
    projection: str = typer.Option(DEFAULT_SET, "--projection", help="The projection set to compare with (the serving one)."),
    limit: Optional[int] = typer.Option(20, "--show", min=0, help="How many findings to list (all are counted; --json lists all)."),
) -> None:
    """Compare the results feed's latest view with the projection, key by key: every unit's tally and every
    county's and the state's sums, computed afresh from the store, at the version each has. FEED_DIFFERS
    (error): the same version says something else; FEED_MISSING / FEED_AHEAD (error): a tally the feed
    lacks, or one it holds at a version the projection never reached; FEED_EXTRA (warn): one the projection
    no longer holds; FEED_BEHIND (info): the projection moved on since it was published (`caucus project`
    publishes it); FEED_OTHER_SET (info): a copy from another projection set.

    Exit 0: no error; 1: at least one error; 2: could not check."""
    settings = settings_of(ctx)
    snapshot = read_latest(settings)
    codec = feed_codec()
    try:
        published = [codec.decode(rec.value) for rec in snapshot.records.values()]
    except CodecError as exc:
        raise fail(f"a record of the feed's latest view cannot be decoded: {exc}") from exc
    try:
        store = open_store(settings, read_only=True)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    try:
        result = check_feed(store, resolve_set(store, projection), published)
    except (QueryError, StoreError) as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()
    emit(result.to_json(), as_json, lambda: _print(result, limit))
    raise typer.Exit(ERRORS if result.has_errors else CLEAN)


def _print(result: FeedCheck, limit: int | None) -> None:
    typer.echo(f"results feed against projection {result.projection}: {result.compared:,} tallies compared, "
               f"{result.agree:,} agree")
    counts = result.to_json()["counts"]
    for code, n in sorted(counts.items(), key=lambda item: (list(FEED_CODES).index(item[0]), item[0])):
        typer.echo(f"  {code:<16}{FEED_CODES[code]:<8}{n:>8,}")
    for finding in result.findings[:limit]:
        typer.echo(f"  {finding.code:<16}{finding.key}  published v{_v(finding.published)}, projection v{_v(finding.expected)}"
                   + (f"; differs in {', '.join(finding.fields)}" if finding.fields else ""))
    if limit is not None and len(result.findings) > limit:
        typer.echo(f"  ... and {len(result.findings) - limit:,} more (--show N, or --json)")


def _v(version: Any) -> str:
    return "-" if version is None else str(version)


def register(app: typer.Typer) -> None:
    app.command("check-feed")(check_feed_command)

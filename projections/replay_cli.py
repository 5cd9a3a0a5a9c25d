"""``caucus replay``: rebuild the projection from the start of the log beside the serving one, then
switch over; or, with ``--as-of``, build it as it stood at a moment without touching the live one.

See ``projections.replay`` for why and how; this module is the command line around it.
"""

from __future__ import annotations

from typing import Optional

import typer

from ledger.cli_output import console as human_console
from ledger.cli_output import emit, fail, settings_of
from ledger.codec import CodecError
from ledger.config import Settings
from ledger.log.port import LogError, LogLostError
from projections.asof import AsOfError, parse_cut
from projections.queries import DEFAULT_SET, QueryError, TallyView, load_view
from projections.replay import CATCH_UP_BATCH, ReplayOutcome, build_as_of, rebuild
from projections.replay_integrity import checkpoint_problem
from projections.runner import Progress, RunnerError
from projections.stores import open_store
from projections.stores.port import ProjectionStore, StoreError
from projections.tally import AreaTally
from projections.wiring import existing_log_identity, open_existing_log

__all__ = ["register", "replay"]


def _line(p: Progress) -> str:
    lag = "?" if p.lag_events is None else f"{p.lag_events:,}"
    return f"replayed {p.applied:,} events ({p.rate:,.0f}/s); {lag} to go"


def replay(
    ctx: typer.Context,
    as_of: Optional[str] = typer.Option(
        None, "--as-of", help="Build the projection as it stood then, into a set that does not serve: a time "
        "(2020-02-08T06:28:00Z, events recorded at that time count) or log positions (3:120,5:88)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary."),
    print_only: bool = typer.Option(False, "--print-only", help="With --as-of: print the tally as it stood then (from the projection's history where it has one, else folded from the log in memory); store nothing."),
    promote: bool = typer.Option(True, "--promote/--no-promote", help="Switch readers to the rebuilt set when it has caught up (default)."),
    rule_set: Optional[str] = typer.Option(None, "--rule-set", help="Rebuild under another rule set (default: the serving set's)."),
    batch_size: int = typer.Option(2000, "--batch-size", min=1, help="Events per poll of the log."),
    catch_up_batch: int = typer.Option(CATCH_UP_BATCH, "--catch-up-batch", min=0, help="Events gathered per store transaction while behind the log."),
    feed: bool = typer.Option(True, "--feed/--no-feed", help="After the switch, publish the new serving view to the results feed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    new_log: bool = typer.Option(False, "--new-log", help="The serving projection was built from another log (a lost log, "
                                 "another cluster): build the new version from the configured log all the same."),
    despite_checkpoints: bool = typer.Option(False, "--despite-checkpoints", help="Rebuild and switch even if the log does "
                                             "not match its signed checkpoints (a log restored from a copy: `caucus verify` "
                                             "says what differs)."),
    projection: str = typer.Option(DEFAULT_SET, "--projection", hidden=True, help="Projection set name."),
    session_timeout_ms: int = typer.Option(10_000, "--session-timeout-ms", hidden=True, help="Kafka group session timeout."),
) -> None:
    """Rebuild the projection from the start of the log into a new version, then switch to it.

    The serving version keeps answering during the rebuild; the switch is one store transaction and
    the old version is kept (retired; see `caucus projections`). A running `caucus project` moves to
    the new version by itself. With --as-of the result goes into a set named <projection>-as-of that
    never serves (compare it: `caucus diff set:tally-as-of live`)."""
    settings = settings_of(ctx)
    try:
        cut = parse_cut(as_of) if as_of is not None else None
    except AsOfError as exc:
        raise fail(f"--as-of: {exc}") from exc
    if print_only and cut is None:
        raise fail("--print-only needs --as-of (a rebuild without it is what the stored projection is for)")
    say = (lambda p: None) if quiet else (lambda p: typer.echo(_line(p), err=True))
    try:
        existing_log_identity(settings, projection)  # the log must be there before a store is made for it
    except (StoreError, LogError) as exc:
        raise fail(str(exc)) from exc
    try:
        store = open_store(settings)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    try:
        if cut is not None and print_only:
            log = open_existing_log(settings)
            try:
                view = load_view(store, set_name=projection, rule_set=rule_set, as_of=cut, log=log)
            finally:
                log.close()
            area = view.state()
            data = {**view.meta(), "state": area.to_json()}
            emit(data, as_json, lambda: _print_state(view, area, cut.describe(), settings.describe_log()))
            return
        if cut is not None:
            log = open_existing_log(settings)
            try:
                outcome = build_as_of(store, settings, cut, name=projection, rule_set=rule_set, batch_size=batch_size,
                                      log=log, on_progress=say, session_timeout_ms=session_timeout_ms,
                                      catch_up_batch=catch_up_batch)
            finally:
                log.close()
        else:
            if promote and not despite_checkpoints:
                _held_to_checkpoints(settings)
            outcome = rebuild(store, settings, name=projection, rule_set=rule_set, batch_size=batch_size, promote=promote,
                              on_progress=say, session_timeout_ms=session_timeout_ms, catch_up_batch=catch_up_batch,
                              new_log=new_log)
            if outcome.promoted and feed:
                _publish(store, settings, outcome)
        data = outcome.to_json()
        built_view: TallyView | None = None
        if cut is not None:
            try:
                built_view = load_view(store, set_id=outcome.built.set_id)
                data["state"] = built_view.state().to_json()
                data.update({k: v for k, v in built_view.meta().items() if k not in data})
            except QueryError as exc:
                data["notes"].append(str(exc))
    except LogLostError as exc:
        raise fail(f"{exc}; the rebuild was abandoned (the serving projection is unchanged)", code=3) from exc
    except CodecError as exc:
        raise fail(f"{exc}; the rebuild was abandoned (the serving projection is unchanged)") from exc
    except (AsOfError, QueryError, RunnerError, StoreError, LogError) as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()

    def human() -> None:
        from projections.set_builders import shown_state

        b, p = outcome.built, outcome.progress
        typer.echo(f"built projection {b.name} v{b.version} (set {b.set_id}) from {settings.describe_log()}: "
                   f"{p.applied:,} events in {outcome.seconds:,.2f} s "
                   f"({p.applied / outcome.seconds if outcome.seconds > 0 else 0:,.0f}/s)")
        if outcome.promoted:
            prev = outcome.previous
            typer.echo(f"now serving: {b.name} v{b.version}" + (f"; v{prev.version} (set {prev.set_id}) retired and kept" if prev else ""))
        elif cut is None:
            typer.echo(f"not promoted: {b.name} v{b.version} is {shown_state(b)}")
        for note in outcome.notes:
            typer.echo(note)
        if built_view is not None:
            _print_state(built_view, built_view.state(), cut.describe() if cut else "", settings.describe_log())

    emit(data, as_json, human)


def _held_to_checkpoints(settings: Settings) -> None:
    """Refuse (exit 1) a replay into service of a log that does not match its signed checkpoints
    (``projections.replay_integrity``)."""
    log = open_existing_log(settings)
    try:
        problem = checkpoint_problem(settings, log)
    finally:
        log.close()
    if problem is not None:
        raise fail(f"refused: {problem}. The serving projection is unchanged. `caucus verify` lists every difference; "
                   "a log restored from a copy (its records carry new append times) is replayed all the same with "
                   "--despite-checkpoints", code=1)


def _publish(store: ProjectionStore, settings: Settings, outcome: ReplayOutcome) -> None:
    """Publish the whole new serving view (versions let subscribers keep the newest of each tally)."""
    from projections.feed import FeedOfAnotherLog, open_publisher

    publisher = open_publisher(settings, store, outcome.built, on_error=lambda m: typer.echo(f"warning: {m}", err=True))
    if publisher is None:
        return
    try:
        publisher.resume()  # a new set: its records all differ from what the latest view holds
    except FeedOfAnotherLog as exc:
        typer.echo(f"warning: nothing published: {exc}", err=True)  # the replay itself stands
    finally:
        publisher.close()


def _print_state(view: TallyView, area: AreaTally, cut: str, log: str) -> None:
    from projections.tables import print_area

    console = human_console()
    if cut:
        console.print(f"as of: {cut} (log {log})", highlight=False)  # how it was computed: the projection line
    print_area(console, view, area, "statewide")


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)

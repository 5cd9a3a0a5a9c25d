"""Commands of the projections package: ``project``, ``tally``, ``trail``, ``projections``.

The store follows the global options: ``--database`` / ``CAUCUS_DATABASE`` selects PostgreSQL,
otherwise the embedded SQLite store in the data directory. The log follows ``--kafka``.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Optional

import typer

from ledger.cli_output import JsonOption, emit, fail, runnable_here, settings_of
from ledger.cli_output import console as cli_console
from ledger.cli_output import is_wide
from ledger.codec import CodecError
from ledger.config import Settings
from ledger.log.port import LogError, LogFileReplacedError, LogLostError
from projections.backends import has_groups
from projections.feed import FeedOfAnotherLog, publishing
from projections.observe import RunnerObserver, progress_line
from projections.queries import (DEFAULT_SET, AmbiguousUnit, NoElectionYet, QueryError, RuleSetError, find_county, find_unit,
                                 load_view, resolve_set)
from projections.replay import ServingWatch, follow_serving
from projections.runner import Progress, ProjectionRunner, RunnerError
from projections.stores import open_store
from projections.stores.port import ProjectionStore, SetInfo, StoreError, StoreMissing
from projections.tally_documents import county_document, state_document, unit_document
from projections.tally_freshness import Freshness, against_the_log, unread_hint
from projections.wiring import (DEFAULT_GROUP, existing_log_identity, open_existing_log, open_log_of, source_for, unread_events)

__all__ = ["register"]


@contextmanager
def _store(settings: Settings, *, read_only: bool = False, missing_ok: bool = False) -> Iterator[ProjectionStore]:
    """The configured store; ``missing_ok``: no embedded store yet is an empty one (in memory), for
    queries that can be answered from the log alone (``tally --as-of``)."""
    try:
        store = open_store(settings, read_only=read_only)
    except StoreMissing as exc:
        if not missing_ok:
            raise fail(str(exc)) from exc
        from projections.stores.sqlite import SqliteStore

        store = SqliteStore(":memory:")
    except StoreError as exc:
        raise fail(str(exc)) from exc
    try:
        yield store
    finally:
        store.close()


_SIGNALLED: list[int] = []
"""The signals that asked this process's runner to stop (the exit status of ``--until-caught-up`` says so)."""


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """SIGINT and SIGTERM ask the runner to stop between batches: a batch is committed whole or
    not at all, never half."""
    stop = threading.Event()
    _SIGNALLED.clear()  # this run's signals only (a process may run several commands: the tests do)

    def handler(signum: int, _frame: FrameType | None) -> None:
        _SIGNALLED.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _printer(observer: RunnerObserver, group: str, repeat_after: float = 30.0) -> Callable[[Progress], None]:
    """Progress lines on stderr: a line when the state changes (events applied, lag, partitions, a
    wait), else one every ``repeat_after`` seconds (an idle runner does not print every second)."""
    last: list[object] = [None, 0.0]

    def say(p: Progress) -> None:
        waiting = observer.waiting_for_partitions()
        state = (p.applied, p.lag_events, tuple(sorted(p.assigned)), p.waiting_for_store, p.waiting_for_log, tuple(sorted(p.others_behind.items())),
                 None if waiting is None else int(waiting) // 5)
        now = time.monotonic()
        if state != last[0] or now - float(last[1]) >= repeat_after:  # type: ignore[arg-type]
            typer.echo(progress_line(p, waiting_for_partitions=waiting, group=group), err=True)
            last[0], last[1] = state, now

    return say


def project(
    ctx: typer.Context,
    until_caught_up: bool = typer.Option(False, "--until-caught-up", help="Exit once the whole log up to its high watermarks (as first seen) is applied; in a consumer group this waits for the partitions other members hold (--no-partition-timeout bounds a wait on partitions that stop moving)."),
    group: str = typer.Option(DEFAULT_GROUP, "--group", help="Kafka consumer group: runners in one group split the partitions."),
    batch_size: int = typer.Option(500, "--batch-size", min=1, help="Events per store transaction."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary at the end."),
    projection: str = typer.Option(DEFAULT_SET, "--projection", hidden=True, help="Projection set name."),
    set_id: Optional[int] = typer.Option(None, "--set-id", hidden=True, help="Update this projection set (default: the serving one)."),
    session_timeout_ms: int = typer.Option(10_000, "--session-timeout-ms", hidden=True, help="Kafka group session timeout."),
    feed: bool = typer.Option(True, "--feed/--no-feed", help="Publish changed tallies to the results feed (`caucus subscribe`)."),
    catch_up_batch: int = typer.Option(0, "--catch-up-batch", min=0, help="While far behind the log, gather up to this many events per transaction (e.g. 200000 for a first run over a long log: about 100 MB more memory, tallies computed once per unit per transaction; 0: --batch-size)."),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", min=0, max=65535, help="Serve /metrics (Prometheus), /health and /ready on this port (0: any free port, printed at start)."),
    metrics_host: str = typer.Option("127.0.0.1", "--metrics-host", help="Address for --metrics-port (0.0.0.0 for every interface)."),
    no_partition_timeout: float = typer.Option(60.0, "--no-partition-timeout", min=0.0, help="Kafka: after holding no partition this many seconds, rejoin the group with a new consumer; if that gets none either, exit 2 saying why (0: wait as long as it takes, e.g. for a standby runner). With --until-caught-up, also how long partitions another member holds may stand still before the runner exits 2 naming them."),
) -> None:
    """Consume the log into the projection store (tallies, unit state, paper-trail index).

    Exactly once: each batch's view changes and log positions are committed in one transaction,
    and a restart resumes from the stored positions. Stop with Ctrl-C or SIGTERM. Progress lines on
    stderr say how many events the runner is behind the log and, for a live log, how long ago the
    newest applied event was recorded by the ledger ("replaying history" when that was long ago)."""
    from ledger.observability import serve_endpoint

    settings = settings_of(ctx)
    observer = RunnerObserver()
    endpoint = None
    if metrics_port is not None:
        try:
            endpoint = serve_endpoint(observer.registry, health=observer.health, ready=observer.ready,
                                      host=metrics_host, port=metrics_port)
        except OSError as exc:
            raise fail(f"--metrics-port {metrics_port}: cannot listen on {metrics_host}: {exc}") from exc
        if not quiet:
            typer.echo(f"metrics on http://{metrics_host}:{endpoint.port}/metrics (also /health, /ready)", err=True)
    try:
        progress = _project(settings, observer, until_caught_up=until_caught_up, group=group, batch_size=batch_size,
                            quiet=quiet, projection=projection, set_id=set_id, session_timeout_ms=session_timeout_ms,
                            feed=feed, catch_up_batch=catch_up_batch, no_partition_timeout=no_partition_timeout)
    finally:
        if endpoint is not None:
            endpoint.close()
    if as_json:
        emit(progress.to_json(), True)
    elif not quiet:
        typer.echo(f"stopped ({progress.stopped}); {progress_line(progress)}", err=True)
    if until_caught_up and not progress.caught_up and progress.stopped == "signal" and _SIGNALLED:  # not caught up
        raise typer.Exit(143 if _SIGNALLED[-1] == signal.SIGTERM else 130)


def _project(settings: Settings, observer: RunnerObserver, *, until_caught_up: bool, group: str, batch_size: int, quiet: bool,
             projection: str, set_id: int | None, session_timeout_ms: int, feed: bool, catch_up_batch: int,
             no_partition_timeout: float) -> Progress:
    try:
        identity = existing_log_identity(settings, projection)  # first: no store is made for a log that is not there
    except (StoreError, LogError) as exc:
        raise fail(str(exc)) from exc
    with _store(settings) as store, _stop_on_signals() as stop:

        def run(info: SetInfo, watch: ServingWatch | None) -> Progress:
            try:
                source = source_for(settings, group=group, batch_size=batch_size, session_timeout_ms=session_timeout_ms,
                                    no_partition_timeout=no_partition_timeout, static_start=not until_caught_up)
            except LogError as exc:
                raise fail(str(exc)) from exc
            say = (lambda p: None) if quiet else _printer(observer, group if has_groups(settings) else "")
            runner = ProjectionRunner(store, info.set_id, source, batch_size=batch_size, rule_set=info.rule_set, on_progress=say,
                                      catch_up_batch=catch_up_batch, others_timeout=no_partition_timeout,
                                      built_from=info.source)
            if not quiet:
                typer.echo(f"projecting {source.description} into {store.describe()} (projection {info.name} v{info.version})", err=True)
            try:
                with publishing(runner, settings, store, info, enabled=feed,
                                on_error=lambda m: typer.echo(f"warning: {m}", err=True)) as publisher:
                    if publisher is not None:
                        def say_and_publish(p: Progress, say: Callable[[Progress], None] = say, pub: Any = publisher) -> None:
                            say(p)
                            pub.tick()

                        runner.on_progress = say_and_publish
                    observer.attach(runner)
                    return runner.run(until_caught_up=until_caught_up, stop=lambda: stop.is_set() or (watch is not None and watch()))
            except LogFileReplacedError as exc:  # a copy put in place may be the same log: a new start checks it
                then = ("Once a copy is in its place, start" if exc.removed else "Start") if exc.reopen else "Then start"
                raise fail(f"{exc}. {then} `caucus project` again: it checks the log there against the projection "
                           f"{info.name} v{info.version}, and goes on if it holds what was applied.", code=3) from exc
            except LogLostError as exc:
                raise fail(
                    f"{exc}. The projection {info.name} v{info.version} reflects records this log no longer holds; "
                    "restore the log, or rebuild the projection from the log as it now is with `caucus replay --new-log`.",
                    code=3,
                ) from exc
            except (RunnerError, StoreError, LogError, FeedOfAnotherLog) as exc:
                observer.log_error = str(exc)
                raise fail(str(exc)) from exc

        def switched(info: SetInfo, to: SetInfo) -> None:
            if not quiet:
                typer.echo(f"projection {info.name} v{to.version} now serves (a replay switched over); continuing with it", err=True)

        try:  # once, unless `caucus replay` switches the serving set: then on with the new one
            return follow_serving(store, settings, name=projection, set_id=set_id, identity=identity, run=run,
                                  stopped=stop.is_set, on_switch=switched)
        except (StoreError, LogError) as exc:
            raise fail(str(exc)) from exc


def tally(
    ctx: typer.Context,
    county: Optional[str] = typer.Option(None, "--county", help="One county (id or name) and its units."),
    unit: Optional[str] = typer.Option(None, "--unit", help="One unit (id, or name) in detail."),
    rule_set: Optional[str] = typer.Option(None, "--rule-set", help="Recompute under another rule set: idp-2020, idp-2016, or a variant naming the reading of an [OPEN] point, such as idp-2020\\[leftover=lots] (README: the table of options)."),
    election: Optional[str] = typer.Option(None, "--election", help="Election id, when the log holds several."),
    as_json: bool = JsonOption,
    projection: str = typer.Option(DEFAULT_SET, "--projection", hidden=True),
    as_of: Optional[str] = typer.Option(
        None, "--as-of", help="The tally as it stood then (from the projection's history when it holds the time, else replayed from the log): a time (2020-02-08T06:28:00Z; events "
        "recorded at that time count) or log positions (3:120,5:88 = records before those offsets)."),
) -> None:
    """The current tally: statewide, per county (--county), per unit (--unit); --as-of for an earlier one."""
    settings = settings_of(ctx)
    with _store(settings, read_only=True, missing_ok=as_of is not None) as store:
        try:
            log = None
            if as_of is not None:
                from projections.asof import AsOfError, parse_cut

                try:
                    cut = parse_cut(as_of)
                except AsOfError as exc:
                    raise QueryError(f"--as-of: {exc}") from exc
                log = open_existing_log(settings)
            try:
                view = load_view(store, set_name=projection, election_id=election, rule_set=rule_set,
                                 as_of=cut if log is not None else None, log=log, unit=unit)
            finally:
                if log is not None:
                    log.close()
            county_id = find_county(view.context, county) if county is not None else None
            unit_id = find_unit(view, unit, county_id, county_option=True) if unit is not None else None
            fresh = against_the_log(settings, store, view) if as_of is None else Freshness(None, None)
        except QueryError as exc:
            hint = unread_hint(settings, store, projection) if as_of is None and not isinstance(exc, RuleSetError) else ""
            raise fail(f"{exc}{hint}") from exc
        except LogError as exc:
            raise fail(str(exc)) from exc
    if fresh.note is not None:  # stderr: under --json too, beside the document, which stays the tally
        typer.echo(f"note: {runnable_here(fresh.note)}", err=True)
    behind = {} if as_of is not None else {"unread_records": fresh.unread}  # a program is told as well
    console = cli_console()

    def said_as_of() -> None:  # a past view, of the state, a county or a unit, says so before anything else
        if view.cut is not None:
            console.print(f"as of: {view.cut.describe()}, log {settings.describe_log()}", highlight=False)

    if unit_id is not None:
        t = view.unit(unit_id)
        if t is None:
            raise fail(f"unit {unit_id!r} is not in the definition of election {view.context.election_id!r} and has no "
                       "result; the submissions refused for it are in its trail (caucus trail)", code=1)
        if county_id is not None and t.county_id != county_id:  # two filters that contradict: say so
            raise fail(f"unit {unit_id!r} is in county {t.county_id!r}, not {county_id!r} (give one of --unit, --county)")
        from projections.tables import print_unit

        def human_unit() -> None:
            said_as_of()
            print_unit(console, view, t)

        emit({**(unit_document(view, unit_id) or {}), **behind}, as_json, human_unit)
        return
    from projections.tables import print_area, units_table

    if county_id is not None:
        area = view.county(county_id)
        units = view.units_in(county_id)

        def human() -> None:
            said_as_of()
            print_area(console, view, area, f"{area.name}", county_id)
            order = sorted(view.context.candidates, key=lambda c: (-area.sde_display_sum.get(c, 0), c))
            console.print(units_table(units, [c for c in order if area.final.get(c) or area.first.get(c)], f"units of {area.name}",
                                      wide=is_wide()))

        emit({**county_document(view, county_id), **behind}, as_json, human)
        return
    area = view.state()

    def human_state() -> None:
        said_as_of()
        print_area(console, view, area, "statewide")
        if view.undefined_units:
            console.print(f"{len(view.undefined_units)} unit(s) reported but not in the definition (left out of the sums): "
                          + ", ".join(u.unit_id for u in view.undefined_units[:10]))

    emit({**state_document(view), **behind}, as_json, human_state)


def _named_undefined(store: ProjectionStore, set_id: int, election: str | None) -> bool:
    """Whether events name ``election`` though nobody defined it (refusals for a mistyped id)."""
    from projections.queries import named_undefined

    with store.reader(set_id) as reader:
        return election is not None and named_undefined(reader, election)


def trail(
    ctx: typer.Context,
    unit: str = typer.Argument(..., help="Unit id (or an unambiguous name)."),
    election: Optional[str] = typer.Option(
        None, "--election", help="Election id; needed only when several elections define the unit."),
    as_json: bool = JsonOption,
    rule_set: Optional[str] = typer.Option(None, "--rule-set", help="Tallies under another rule set."),
    projection: str = typer.Option(DEFAULT_SET, "--projection", hidden=True),
) -> None:
    """Every event that touched a unit, in log order, with what it changed and the tally after it.

    Exit 2 if no event names the unit (or a record cannot be decoded: its position is named)."""
    from ledger.caucus_math import CaucusMathError, get_rule_set
    from projections.tables import print_trail
    from projections.trail import unit_trail

    settings = settings_of(ctx)
    with _store(settings, read_only=True) as store:
        try:
            info = resolve_set(store, projection)
            try:
                view = load_view(store, set_id=info.set_id, election_id=election, unit=unit)
                election_id = view.context.election_id
            except (NoElectionYet, QueryError) as exc:  # the log may still hold refusals that named the unit: its trail
                if not isinstance(exc, NoElectionYet) and not _named_undefined(store, info.set_id, election):
                    raise
                view, election_id = None, election or ""
                if rule_set is not None:
                    get_rule_set(rule_set)  # nothing is tallied, but a mistyped name is still an error
            try:
                unit_id = find_unit(view, unit) if view is not None else unit
            except AmbiguousUnit:
                raise
            except QueryError:
                unit_id = unit  # not in the definition: its refused submissions may still be in the log
            defined = view is not None and unit_id in view.context.units  # (a refusal's count gives an undefined unit a state)
            log = open_log_of(settings, info, store)
            try:
                with store.reader(info.set_id) as reader:
                    result = unit_trail(log, reader, election_id, unit_id, rule_set=rule_set)
                    positions = {p: row.next_offset for p, row in reader.positions().items()}
                behind = unread_events(log, positions)
            finally:
                log.close()
        except (QueryError, LogError, CodecError, CaucusMathError) as exc:
            raise fail(str(exc)) from exc
    if not result.entries and not result.unattributed:
        lag = (f"; the projection has not read the log's last {behind} record(s), and the trail finds a unit's events "
               "through it: run `caucus project --until-caught-up` first") if behind else ""
        if view is None:
            raise fail(f"no events for unit {unit_id!r} in {settings.describe_log()}: no election {election_id or ''} is defined "
                       f"in the projection and no refused submission names the unit{lag}".replace("  ", " "), code=2)
        what = ("the unit is defined, but nothing was recorded for it yet (`caucus tally --unit` shows it not reported"
                if defined else "the election defines no such unit and no event names it (give a unit id, or a name "
                "`caucus tally --county C` lists")
        raise fail(f"no events for unit {unit_id!r} of election {result.election_id!r} in {settings.describe_log()}: "
                   f"{what}{lag})", code=2)
    if view is None and election_id:
        typer.echo(f"note: no election {election_id!r} is defined in the projection; shown: the submissions for unit "
                   f"{unit_id!r} that named it (refused; counted by no tally)", err=True)
    elif view is None:
        typer.echo(f"note: no election is defined in the projection yet; shown: the submissions for unit {unit_id!r} "
                   "refused before they named an election", err=True)
    elif not defined:  # shown for the refusals that named it; the heading alone read as a unit of the election
        typer.echo(f"note: election {result.election_id} defines no unit {unit_id!r}; shown: what the log holds that "
                   "names it", err=True)
    emit({**result.to_json(), "defined": defined}, as_json, lambda: print_trail(cli_console(), result))


def projections_list(
    ctx: typer.Context,
    as_json: bool = JsonOption,
) -> None:
    """Projection sets in the store: name, version, state (building / serving / retired; built: a
    --no-promote or as-of set built to its end; abandoned: left building by a replay that is gone), the
    log it was built from."""
    from projections.set_builders import built_at, shown_state

    settings = settings_of(ctx)
    with _store(settings, read_only=True) as store:
        sets = store.sets()
        counts = {}
        for s in sets:
            with store.reader(s.set_id) as r:
                counts[s.set_id] = (r.event_count(), {p: row.next_offset for p, row in r.positions().items()})
    data = [
        {"set_id": s.set_id, "name": s.name, "version": s.version, "state": shown_state(s), "source": s.source,
         "rule_set": s.rule_set, "created_at": s.created_at, "promoted_at": s.promoted_at, "built_at": built_at(s),
         "events": counts[s.set_id][0], "positions": counts[s.set_id][1]}
        for s in sets
    ]

    def human() -> None:
        if not data:
            typer.echo("no projection sets yet; run `caucus project`")
        for d in data:
            typer.echo(f"{d['set_id']:>4}  {d['name']} v{d['version']:<3} {d['state']:<9} {d['events']:>9,} events  from {d['source']}")

    emit(data, as_json, human)


def register(app: typer.Typer) -> None:
    app.command("project")(project)
    app.command("tally")(tally)
    app.command("trail")(trail)
    app.command("projections")(projections_list)


"""``caucus subscribe``: follow the results feed and print each new tally as a JSON line.

The feed is at-least-once (``projections.feed``): the same tally can arrive twice, and partitions are
read in no common order. Each line printed is newer than anything printed before for its unit, county
or state (its ``version`` is higher), so a program reading the lines can simply keep the last one per
``kind`` and ``key``. Signed checkpoints of the event log come on the same feed (kind ``checkpoint``,
one line each): a subscriber that keeps them can later hold the log to them.

``--latest`` reads the feed's latest view instead (``ledger.log.latest``: one record per unit, county
and state), so a subscriber that starts late gets the current tallies without reading every change;
with ``--follow`` it goes on with the change stream from the position the view covers, so nothing
published after the view was read is missed, and nothing older than what it printed is printed.
With ``--group`` the view is where a new subscriber starts, and a known one prints only the latest
tallies it has not printed yet; either way the group then keeps the view's position.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from typing import Any, Optional

import typer

from ledger.backends import backends_for
from ledger.cli_output import JsonOption, fail, settings_of
from ledger.codec import CodecError
from ledger.events import Event
from ledger.integrity.checkpoints import CheckpointFormatError
from ledger.log.latest import LatestSnapshot
from ledger.log.port import EventLog, LogError, LogMissingError
from projections.feed import open_results_log, results_log_name
from projections.feed_events import FeedDeduper, UnitTallyPublished, feed_codec, feed_json, feed_key, feed_version

__all__ = ["register", "subscribe"]


def _wanted(event: Event[Any], unit: str | None, county: str | None, election: str | None, checkpoints_only: bool = False) -> bool:
    election_id, kind, key = feed_key(event)
    if kind == "checkpoint" or checkpoints_only:
        # A checkpoint covers the whole log, every election's units: shown unless a unit or county is asked for.
        return kind == "checkpoint" and (checkpoints_only or (unit is None and county is None))
    if election is not None and election_id != election:
        return False
    if unit is None and county is None:
        return True
    if unit is not None and kind == "unit" and key == unit:
        return True
    if county is not None:
        if kind == "county" and key == county:
            return True
        p = event.payload
        if kind == "unit" and isinstance(p, UnitTallyPublished) and p.tally.get("county_id") == county:
            return True
    return False


def resolve_filter(settings: Any, county: str | None, unit: str | None, election: str | None) -> tuple[str | None, str | None, str | None]:
    """Check a feed filter (county, unit, election) against the serving projection's election (a name
    becomes its id), so a typo stops at once instead of following a feed that never matches
    (``QueryError``). Without a projection store to ask (a subscriber on another machine), they are
    taken as given. A unit or county is one election's: that election is followed (the only one
    defining the unit, unless an election is named)."""
    if county is None and unit is None and election is None:
        return county, unit, election
    from projections.queries import find_county, find_unit, load_view
    from projections.stores import open_store
    from projections.stores.port import StoreError

    try:
        store = open_store(settings, read_only=True)
    except StoreError:
        return county, unit, election
    try:
        view = load_view(store, election_id=election, unit=unit)
        county_id = find_county(view.context, county) if county is not None else None
        return county_id, find_unit(view, unit, county_id, county_option=True) if unit is not None else None, view.context.election_id
    except StoreError:
        return county, unit, election
    finally:
        store.close()


def _resolve(settings: Any, county: str | None, unit: str | None, election: str | None) -> tuple[str | None, str | None, str | None]:
    from projections.queries import QueryError

    try:
        return resolve_filter(settings, county, unit, election)
    except QueryError as exc:
        raise fail(str(exc)) from exc


def subscribe(
    ctx: typer.Context,
    from_beginning: bool = typer.Option(False, "--from-beginning", help="Start at the feed's first record (default: only what is published from now on)."),
    unit: Optional[str] = typer.Option(None, "--unit", help="Only this unit's tallies (unit id)."),
    county: Optional[str] = typer.Option(None, "--county", help="Only this county's sums and its units' tallies (county id or name)."),
    election: Optional[str] = typer.Option(None, "--election", help="Only this election."),
    max_lines: Optional[int] = typer.Option(None, "--max", min=1, help="Stop after printing this many lines."),
    until_idle: Optional[float] = typer.Option(None, "--until-idle", min=0.0, help="Stop once nothing has arrived for this many seconds."),
    checkpoints_only: bool = typer.Option(False, "--checkpoints", help="Only the event log's signed checkpoints (kind checkpoint), to keep them."),
    group: Optional[str] = typer.Option(None, "--group", help="Keep where this subscriber stopped (in subscribers.sqlite3 in "
                                        "the data directory) and go on from there when started again: nothing missed, "
                                        "nothing repeated. A new group starts as --from / --from-beginning / --latest / "
                                        "now say; with --latest a group prints only the latest tallies it has not printed."),
    start_at: Optional[str] = typer.Option(None, "--from", help="Start at this feed position (0:12,1:40: the next offset of "
                                           "each partition, as the read API's event ids give it)."),
    latest: bool = typer.Option(False, "--latest", help="Print the latest tally of every unit, county and state once (from "
                                "the feed's latest view) and exit; with --follow, then follow the changes from there."),
    follow: bool = typer.Option(False, "--follow", help="With --latest: after the latest tallies, follow the change stream "
                                "from where they stand (nothing missed, nothing older repeated)."),
    as_json: bool = JsonOption,
) -> None:
    """Follow the results feed: a JSON line per new unit, county or state tally, and per checkpoint.

    A checkpoint line (kind checkpoint) is a signed checkpoint of the event log: its signed bytes,
    signature and key; not shown with --unit or --county.

    Tallies already printed, republished copies and out-of-date versions are dropped. Runs until
    Ctrl-C (or --max / --until-idle)."""
    from projections.feed_subscribers import parse_feed_position

    settings = settings_of(ctx)
    if from_beginning and start_at is not None:
        raise fail("choose one of --from-beginning and --from")
    if latest and (from_beginning or start_at is not None):
        raise fail("--latest starts from the latest view: it does not go with --from-beginning or --from")
    if follow and not latest:
        raise fail("--follow goes with --latest (without it, subscribe always follows)")
    try:
        given = parse_feed_position(start_at)
    except ValueError as exc:
        raise fail(f"--from: {exc}") from exc
    codec = feed_codec()
    dedupe = FeedDeduper()
    printed = 0
    last_seen = time.monotonic()

    def stop() -> bool:
        if max_lines is not None and printed >= max_lines:
            return True
        return until_idle is not None and time.monotonic() - last_seen >= until_idle

    county, unit, election = _resolve(settings, county, unit, election)
    try:
        log = open_results_log(settings, read_only=True)
    except LogMissingError:
        raise fail(f"no results feed at {results_log_name(settings)} yet: `caucus project --until-caught-up` publishes one") from None
    except LogError as exc:
        raise fail(f"cannot open the results feed at {results_log_name(settings)}: {exc}") from exc
    keeper = _Keeper.open(settings, group, log) if group else None
    positions: dict[int, int] | None = None
    try:
        start = keeper.start(dedupe) if keeper is not None else None
        if start is not None and (given is not None or from_beginning):  # a restart may repeat its first flags
            typer.echo(f"note: group {group!r} goes on from where it stopped; "
                       f"{'--from' if given is not None else '--from-beginning'} applies to a new group only", err=True)
        if latest:
            before = dict(dedupe.seen)  # a group's: what it printed before is not printed again
            view_from = _print_latest(settings, log, dedupe, lambda e: _wanted(e, unit, county, election, checkpoints_only),
                                      max_lines)
            changed = {k: v for k, v in dedupe.seen.items() if before.get(k) != v}
            printed = len(changed)
            if view_from is None:  # --max cut the view short: a group keeps its place (none, if it had none)
                if keeper is not None:  # and what it printed; its next --latest prints the rest
                    keeper.save(start or {}, changed)
                return
            # a group that had read past the view's position printed every version up to there already
            start = {p: max(o, (start or {}).get(p, 0)) for p, o in view_from.items()}
            positions = dict(start)
            if keeper is not None:
                keeper.save(positions, changed)
            if not follow or stop():
                return
        if start is None:
            if given is not None:
                _check_given(given, log.high_watermarks())
            start = given if given is not None else (None if from_beginning else log.high_watermarks())
            if given is None and not from_beginning:
                typer.echo("following the results feed from now: only tallies published from here on are printed "
                           "(--from-beginning: everything published; --latest: the current tallies first)", err=True)
        positions = {p: 0 for p in range(log.partitions)} | dict(start or {})
        for rec in log.follow(dict(positions), stop=stop, poll_interval=0.2):
            last_seen = time.monotonic()
            positions[rec.position.partition] = rec.position.offset + 1
            try:
                event = codec.decode(rec.value)
            except CodecError as exc:
                typer.echo(f"warning: skipping record {rec.position} of the results feed: {exc}", err=True)
                continue
            if not _wanted(event, unit, county, election, checkpoints_only) or not dedupe.fresh(event):
                continue
            try:
                line = feed_json(event)
            except CheckpointFormatError as exc:
                typer.echo(f"warning: skipping record {rec.position} of the results feed: {exc}", err=True)
                continue
            sys.stdout.write(json.dumps(line, sort_keys=True) + "\n")
            sys.stdout.flush()
            if keeper is not None:
                keeper.save(positions, {feed_key(event): feed_version(event)})
            printed += 1
            if stop():
                break
    except KeyboardInterrupt:
        pass
    except LogError as exc:
        raise fail(f"the results feed at {results_log_name(settings)}: {exc}") from exc
    finally:
        if keeper is not None:
            keeper.close(positions)
        log.close()


def _check_given(given: dict[int, int], marks: dict[int, int]) -> None:
    """A --from past the feed's end is a mistyped position, not a feed lost or rewound (which a group's
    stored position past the end would be, and which exits 3)."""
    for part, offset in sorted(given.items()):
        if part not in marks:
            raise fail(f"--from: partition {part} does not exist; the results feed has {len(marks)} (0..{len(marks) - 1})")
        if offset > marks[part]:
            raise fail(f"--from: position {part}:{offset} lies beyond partition {part}, which holds {marks[part]} "
                       f"record(s) (the next one will be {part}:{marks[part]})")


def read_latest(settings: Any) -> LatestSnapshot:
    """The feed's latest view as it stands, or the command's error saying why there is none."""
    try:
        view = backends_for(settings).open_results_latest(read_only=True)
    except LogMissingError:
        raise fail(f"no latest view of the results feed at {results_log_name(settings)} yet: "
                   "`caucus project` keeps one as it publishes") from None
    except LogError as exc:
        raise fail(f"cannot open the latest view of the results feed: {exc}") from exc
    try:
        return view.snapshot()
    except LogError as exc:
        raise fail(f"cannot read the latest view of the results feed: {exc}") from exc
    finally:
        view.close()


def _print_latest(settings: Any, log: EventLog, dedupe: FeedDeduper, wanted: Any, limit: int | None) -> dict[int, int] | None:
    """Print the latest view's tally of every key ``wanted`` (state, counties, units; by key), at most
    ``limit`` lines, note their versions in ``dedupe``; returns the change-stream position the view
    covers, or None when ``limit`` stopped it before the end."""
    snapshot = read_latest(settings)
    codec = feed_codec()
    events = []
    for rec in snapshot.records.values():
        try:
            event = codec.decode(rec.value)
        except CodecError as exc:
            typer.echo(f"warning: skipping the latest record of {rec.key}: {exc}", err=True)
            continue
        if wanted(event):
            events.append(event)
    order = {"state": 0, "county": 1, "unit": 2}
    written = 0
    for event in sorted(events, key=lambda e: (feed_key(e)[0], order.get(feed_key(e)[1], 3), feed_key(e)[2])):
        if limit is not None and written >= limit:
            sys.stdout.flush()
            return None
        if dedupe.fresh(event):
            sys.stdout.write(json.dumps(feed_json(event), sort_keys=True) + "\n")
            written += 1
    sys.stdout.flush()
    return {p: 0 for p in range(log.partitions)} | snapshot.follow_from


class _Keeper:
    """``--group``: the subscriber's checkpoint (``projections.feed_subscribers``) for this feed."""

    def __init__(self, checkpoint: Any, feed_id: str | None) -> None:
        self.checkpoint = checkpoint
        self.feed_id = feed_id

    @classmethod
    def open(cls, settings: Any, group: str, log: Any) -> _Keeper:
        from projections.feed_subscribers import CHECKPOINT_FILE, SubscriberCheckpoint

        try:
            return cls(SubscriberCheckpoint(settings.data_dir / CHECKPOINT_FILE, group), log.log_id)
        except (OSError, sqlite3.Error) as exc:
            log.close()
            raise fail(f"--group {group}: cannot keep its checkpoint in {settings.data_dir / CHECKPOINT_FILE}: {exc}") from exc

    def start(self, dedupe: FeedDeduper) -> dict[int, int] | None:
        """The stored position (None for a new group); the versions it printed go to ``dedupe``."""
        from projections.feed_subscribers import CheckpointMismatch

        try:
            positions, seen = self.checkpoint.load(self.feed_id)
        except CheckpointMismatch as exc:
            raise fail(str(exc), code=3) from exc  # the feed it followed is not this one: as a lost log is
        dedupe.seen.update(seen)
        return positions

    def save(self, positions: dict[int, int], changed: dict[tuple[str, str, str], int]) -> None:
        self.checkpoint.save(self.feed_id, positions, changed)

    def close(self, positions: dict[int, int] | None) -> None:
        try:
            if positions is not None:
                self.save(positions, {})  # records read past (filtered, copies) are not read again
        finally:
            self.checkpoint.close()


def register(app: typer.Typer) -> None:
    app.command("subscribe")(subscribe)

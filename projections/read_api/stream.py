"""The results feed as Server-Sent Events: the tallies ``caucus subscribe`` prints, for a browser or a CDN.

Why each event's id is the whole position vector (``0:12,1:40,...``, the next offset of every
partition of the results log): a client that reconnects sends it back as ``Last-Event-ID`` and the
stream goes on from exactly there, on every partition, whichever partition the last event came from.
The first event (``ready``) carries the position the stream starts at, so even a client that saw no
tally resumes without a gap. Copies and tallies older than one already sent are dropped per
connection (``FeedDeduper``); a client that keeps the highest ``version`` per ``kind`` and ``key``
never goes backwards across reconnects either.

Each connection follows the log in a thread of its own (``EventLog.follow`` blocks): the server's
worker threads stay free for the tally routes.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from ledger.codec import CodecError
from ledger.config import Settings
from ledger.events import Event
from ledger.log.port import EventLog, LogError, LogMissingError
from projections.feed import open_results_log
from projections.feed_subscribers import feed_position_text as position_text
from projections.feed_subscribers import parse_feed_position as parse_resume
from projections.feed_events import FeedDeduper, UnitTallyPublished, feed_codec, feed_json, feed_key

__all__ = ["FeedFilter", "check_resume", "parse_resume", "position_text", "sse_events"]

KEEP_ALIVE_SECONDS = 15.0


@dataclass(frozen=True)
class FeedFilter:
    """Which tallies a client wants: an election's, a county's sums and its units', one unit's."""

    election: str | None = None
    county: str | None = None
    unit: str | None = None

    def wants(self, event: Event[Any]) -> bool:
        election_id, kind, key = feed_key(event)
        if self.election is not None and election_id != self.election:
            return False
        if self.unit is None and self.county is None:
            return True
        if self.unit is not None and kind == "unit" and key == self.unit:
            return True
        if self.county is not None:
            p = event.payload
            return (kind == "county" and key == self.county) or (
                kind == "unit" and isinstance(p, UnitTallyPublished) and p.tally.get("county_id") == self.county)
        return False


def _frame(event: str, data: str, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {data}\n\n".encode()


def _pump(settings: Settings, start: dict[int, int] | None, put: Callable[[object], None], stop: threading.Event) -> None:
    """Follow the results log (waiting for it to exist) and hand every record to the connection."""
    log: EventLog | None = None
    try:
        while log is None:
            try:
                log = open_results_log(settings, read_only=True)
            except LogMissingError:
                if stop.wait(1.0):
                    return
        positions = {p: 0 for p in range(log.partitions)}
        positions.update(start if start is not None else log.high_watermarks())
        put(("ready", dict(positions)))
        for rec in log.follow(dict(positions), stop=stop.is_set, poll_interval=0.2):
            positions[rec.position.partition] = rec.position.offset + 1
            put((rec.value, dict(positions)))
    except LogError as exc:
        put(exc)
    finally:
        if log is not None:
            log.close()
        put(None)


def check_resume(settings: Settings, start: dict[int, int] | None) -> None:
    """Refuse (``ValueError``) a start the results log cannot have given: a partition it does not have,
    or an offset beyond its end (a lost feed, or another one). The stream would answer 200 and then an
    error event, and a browser's EventSource would reconnect with the same id every second."""
    if not start:
        return
    try:
        log = open_results_log(settings, read_only=True)
    except LogMissingError:
        raise ValueError("there is no results feed yet, so no position in it: connect without Last-Event-ID or from") from None
    try:
        marks = log.high_watermarks()
    finally:
        log.close()
    for part, offset in sorted(start.items()):
        if part not in marks:
            raise ValueError(f"position {part}:{offset}: the results feed has partitions 0 to {len(marks) - 1}")
        if offset > marks[part]:
            raise ValueError(f"position {part}:{offset} lies beyond the results feed ({part}:{marks[part]}): it belongs to "
                             "another or a lost feed; connect without Last-Event-ID to start from now")


async def sse_events(settings: Settings, start: dict[int, int] | None, wanted: FeedFilter,
                     hide: Callable[[str], str]) -> AsyncIterator[bytes]:
    """The stream of one connection; ends when the client goes (the follower thread is stopped). ``hide``
    scrubs the server's private words (the application's, built once) from an error event."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue()
    stop = threading.Event()

    def put(item: object) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the server is shutting down: the loop is closed
            stop.set()

    threading.Thread(target=_pump, args=(settings, start, put, stop), name="results-feed-sse", daemon=True).start()
    codec, dedupe = feed_codec(), FeedDeduper()
    try:
        yield b"retry: 1000\n\n"
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=KEEP_ALIVE_SECONDS)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if item is None:
                return
            if isinstance(item, Exception):
                yield _frame("error", json.dumps({"message": hide(f"the results feed: {item}")}))
                return
            assert isinstance(item, tuple)
            value: object = item[0]
            positions: dict[int, int] = item[1]
            if not isinstance(value, bytes):  # the first item: where the stream starts
                yield _frame("ready", json.dumps({"positions": position_text(positions)}), position_text(positions))
                continue
            try:
                event = codec.decode(value)
                if not wanted.wants(event) or not dedupe.fresh(event):
                    continue
            except (CodecError, TypeError):
                continue  # not a tally (a record type this server does not know): not for this stream
            yield _frame("tally", json.dumps(feed_json(event), sort_keys=True), position_text(positions))
    finally:
        stop.set()

"""Where a tally stands against its log: the store answers ``caucus tally``, and what the log holds
beyond it (a correction accepted but not yet projected) is said beside it, as a note for a person and
``unread_records`` for a program. Kept apart from the CLI: the log is asked on a thread of its own with
a time limit, so a broker that is down does not hold up a tally that the store can give."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledger.config import Settings
from ledger.log.port import LogError, LogLostError, LogMissingError
from projections.stores.port import ProjectionStore, StoreError
from projections.wiring import check_source, open_existing_log, read_identity, unread_events, unread_records

__all__ = ["LOG_ANSWER_SECONDS", "Freshness", "against_the_log", "ask_the_log", "unread_hint"]


@dataclass(frozen=True)
class Freshness:
    """``note``: what a person is told beside the tally (None: nothing to say); ``unread``: the records
    the log holds beyond the projection (None when the log could not say)."""

    note: str | None
    unread: int | None


LOG_ANSWER_SECONDS = 3.0
"""How long ``tally`` waits for the log to say where it stands before answering from the store alone."""


def against_the_log(settings: Settings, store: ProjectionStore, view: Any) -> Freshness:
    """A tally is the store's: what the log holds beyond it is not in it, which a reader should be
    told (a correction accepted but not yet projected). A store built from another log than the
    configured one is refused (exit 3), as ``project`` and ``audit`` refuse it. A log that cannot be
    read (a store copied or moved without it), or does not answer within ``LOG_ANSWER_SECONDS`` (a
    broker down: its client would wait for its own timeout), leaves the tally the store's, with a note."""
    answer = ask_the_log(settings, view.positions)
    if answer is None:
        return Freshness(f"the log did not answer within {LOG_ANSWER_SECONDS:g} s; this is the projection as of its "
                         "last batch", None)
    if "error" in answer:
        if isinstance(answer["error"], LogMissingError) and view.set.source.startswith("log:"):
            return Freshness(f"the log {settings.describe_log()} is not there, but this projection was built from log "
                             f"{view.set.source[4:]}: that log was lost, or the settings name another place; this is "
                             "the projection as of its last batch", None)
        if isinstance(answer["error"], LogError):
            return Freshness(f"the log cannot be read ({answer['error']}); this is the projection as of its last batch", None)
        raise answer["error"]
    check_source(view.set, store, settings, read_identity(answer["id"]))
    if "lost" in answer:
        raise answer["lost"]
    behind = int(answer["unread"])
    if behind:
        return Freshness(f"the log holds {behind} record(s) the projection has not read yet; whatever they change is not "
                         "in this tally: `caucus project --until-caught-up` reads them (a runner left running keeps the "
                         "tally current)", behind)
    return Freshness(None, 0)


def ask_the_log(settings: Settings, positions: Mapping[int, int] | None = None) -> dict[str, Any] | None:
    """The configured log's id and high watermarks (``id``, ``marks``), with the records beyond
    ``positions`` that are no checkpoint (``unread``, see ``unread_events``), or why it cannot be read
    (``error``); None if it does not answer within ``LOG_ANSWER_SECONDS``: a tally is not held up by a
    broker that is down, whose client would wait for its own timeout."""
    answer: dict[str, Any] = {}

    def ask() -> None:
        try:
            log = open_existing_log(settings)
            try:
                answer["id"], answer["marks"] = log.log_id, log.high_watermarks()
                if positions is not None:
                    try:
                        answer["unread"] = unread_events(log, positions, answer["marks"])
                    except LogLostError as exc:  # raised by the command, after the log's identity is checked
                        answer["lost"] = exc
            finally:
                log.close()
        except Exception as exc:  # noqa: BLE001 -- handed to the command's thread
            answer["error"] = exc

    asking = threading.Thread(target=ask, name="caucus-tally-log", daemon=True)
    asking.start()
    asking.join(LOG_ANSWER_SECONDS)
    if not asking.is_alive():
        return answer
    got = dict(answer)  # the thread may still be reading the unread tail: what it had answered by then
    if "marks" not in got or positions is None or "unread" in got or "lost" in got:
        return got if "marks" in got else None
    try:  # the log answered; only telling checkpoints apart took long: count every unread record
        got["unread"] = unread_records(got["marks"], positions)
    except LogLostError as exc:
        got["lost"] = exc
    return got


def unread_hint(settings: Settings, store: ProjectionStore, projection: str) -> str:
    """What a question the projection cannot answer may be waiting for: a runner still on its first
    catch-up has not read the election's definition, or the unit, yet ("no election is defined")."""
    info = store.serving(projection)
    if info is None:
        return ""
    try:
        with store.reader(info.set_id) as reader:
            positions = {p: row.next_offset for p, row in reader.positions().items()}
    except StoreError:
        return ""
    answer = ask_the_log(settings, positions)  # a log that cannot be read: the question's own error is the answer then
    try:
        behind = answer["unread"] if answer and "unread" in answer else 0
    except LogError:
        return ""
    return (f"; the projection has not read {behind} record(s) of the log yet, and what is asked may be among them: "
            "`caucus project --until-caught-up` reads them") if behind else ""

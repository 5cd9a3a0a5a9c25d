"""Group commit: the commands that queued on the intake's lock are decided together, in one turn.

Deciding one command costs a catch-up read and an append (each a round trip and a flush on Kafka),
while judging it costs little. So whoever takes the lock takes every command queued so far (in the
order they arrived), catches up once, judges them in turn and appends their events with one
``append_batch``. Each is judged as if the ones before it in the group were already accepted (the
group's events so far are layered over the intake's view, as spooled events are): a repeated key or a
second report of a unit inside one group is refused, or answered with the original's receipt, exactly as
one by one. Nobody hears an answer before the batch is durable (in the log, or fsynced in the spool);
if the append fails, nothing of the group is in the intake's state (the group's layer is dropped) and
each waiting command hears why, as it would alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ledger.events import Event
from ledger.log.port import Position
from producers.intake_judge import Judgment, Written, judge
from producers.intake_state import IntakeState, IntakeView, Layered
from producers.outcomes import Outcome, Submission

__all__ = ["Slot", "Queue", "Wrote", "commit_group", "MOST_IN_GROUP"]

MOST_IN_GROUP = 256
"""Commands decided in one turn at most: bounds how long the last of them waits for the first."""


@dataclass(eq=False)
class Slot:
    """One command waiting for its turn, and then its answer (or why there is none)."""

    submission: Submission
    arrived: float  # monotonic: a catch-up that began after this may be shared (``intake_lock.covers``)
    outcome: Outcome | None = None
    error: Exception | None = None
    done: bool = False

    def settle(self, outcome: Outcome) -> None:
        self.outcome, self.done = outcome, True

    def fail(self, error: Exception) -> None:
        if not self.done:
            self.error, self.done = error, True

    def result(self) -> Outcome:
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome


@dataclass
class Queue:
    """Commands in arrival order, until a holder of the intake's lock takes them."""

    most: int = MOST_IN_GROUP
    _slots: list[Slot] = field(default_factory=list)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def add(self, submission: Submission, arrived: float) -> Slot:
        slot = Slot(submission, arrived)
        with self._guard:
            self._slots.append(slot)
        return slot

    def discard(self, slot: Slot) -> None:
        """Take back a command whose sender gave up before a turn took it (it must not be written later)."""
        with self._guard:
            if slot in self._slots:
                self._slots.remove(slot)

    def __len__(self) -> int:
        return len(self._slots)

    def take(self) -> list[Slot]:
        with self._guard:
            taken, self._slots = self._slots[: self.most], self._slots[self.most :]
        return taken


@dataclass(frozen=True, slots=True)
class Wrote:
    """What became of a group's events: where each of the first ``len(positions)`` went, in order, and
    why the rest were not written (``error``: neither the log nor the spool could keep them)."""

    status: Written
    positions: list[Position | None]
    error: Exception | None = None


def commit_group(
    slots: list[Slot],
    view: IntakeView,
    now: Callable[[], datetime],
    write: Callable[[list[Event[Any]]], Wrote],
    no_refusals: Exception | None = None,
) -> None:
    """Judge ``slots`` in turn against ``view``, ``write`` their events at once, then settle each slot.
    A slot whose judgment failed hears its own error; one judged after an event that could not be
    written hears that error (its judgment assumed the event was kept). ``no_refusals``: ``view`` is
    known to lack events of the log, so a refusal may rest on what it has not seen; a command it
    would refuse hears that error instead, and nothing of it is recorded (an accepted one is checked
    again when the spool forwards it). A refusal that rests on the sender's credential alone
    (``Judgment.sender_only``) is given as ever."""
    group = IntakeState()
    judged: list[tuple[Slot, Judgment]] = []
    for slot in slots:
        try:
            judgment = judge(slot.submission, Layered(view, group) if group.applied else view, now)
        except Exception as exc:  # noqa: BLE001 - that command's own failure, as it would be alone
            slot.fail(exc)
            continue
        if judgment.refused and no_refusals is not None and not judgment.sender_only:
            slot.fail(no_refusals)
            continue
        if judgment.event is not None:
            group.apply(judgment.event, None)
        judged.append((slot, judgment))
    events = [judgment.event for _, judgment in judged if judgment.event is not None]
    wrote = write(events) if events else Wrote("accepted", [])
    for event, position in zip(events, wrote.positions):
        if position is not None:
            group.note_position(event, position)  # a repeated key of this group answers with it
    kept, index = len(wrote.positions), 0
    for slot, judgment in judged:
        position = None
        if judgment.event is not None:
            if index == kept:
                break  # this one, and all judged after it, assumed an event that was not kept
            position, index = wrote.positions[index], index + 1
        slot.settle(judgment.answer(wrote.status, position))
    for slot, _ in judged:
        slot.fail(wrote.error or RuntimeError("the group's events were not written"))

"""Commands queued on the intake's lock share a catch-up, but never miss a write made before they arrived."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from producers.commands import CommandKind
from producers.credentials import Credential
from producers.intake import Intake, Outcome, Refusal, Submission

Send = Callable[..., Outcome]


@pytest.mark.parametrize("log_kind", ["embedded", "kafka"])
def test_a_catch_up_begun_after_a_command_arrived_is_shared_unless_another_intake_wrote(
    defined: Outcome, send: Send, intake: Intake, make_intake: Callable[..., Intake], official: Credential,
    fm5: dict[str, Any],
) -> None:
    arrived = time.monotonic()
    send(CommandKind.OPEN, json.dumps({"attendance": 40}), unit="E01", key="open-e01")  # catches up after `arrived`
    with intake._locked():
        assert intake._lock.covers(arrived), "a command that arrived before that catch-up may share it"
    # Another intake process over the same directory (its own lock file handle) writes meanwhile.
    other = make_intake(intake.workdir)
    there = other.submit(Submission(CommandKind.REPORT, json.dumps(fm5), official, unit_id="FM5", idempotency_key="there"))
    assert there.accepted
    with intake._locked():
        assert not intake._lock.covers(arrived), "the other intake's write must be read before deciding"
    here = send(CommandKind.REPORT, json.dumps(fm5), unit="FM5", key="here")
    assert isinstance(here, Refusal) and here.errors[0].code == "ALREADY_REPORTED"

"""Exit 3 for a lost log, whichever command meets it: commands catch ``LogError`` and wrap it in words of
their own (``caucus trail``, ``caucus intake status``, ``caucus subscribe`` answered a lost log with 2)."""

from __future__ import annotations

import json

import pytest

from ledger.cli_output import fail
from ledger.log.port import LogLostError, LogUnavailableError


def test_an_error_raised_while_a_lost_log_is_handled_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        raise LogLostError(2, 5, 0)
    except LogLostError:
        lost = fail("the results feed: log lost or rewound")
    try:
        raise LogUnavailableError("the broker is down")
    except LogUnavailableError:
        down = fail("the broker is down")
    refused = fail("refused", 1)
    assert (lost.exit_code, down.exit_code, refused.exit_code) == (3, 2, 1)
    assert capsys.readouterr().err.splitlines()[0] == "error: the results feed: log lost or rewound"


def test_the_json_error_of_a_lost_log_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import ledger.cli_output as out

    monkeypatch.setattr(out, "wants_json", lambda: True)
    try:
        raise LogLostError(0, 1, 0)
    except LogLostError:
        out.fail("trail: log lost")
    error = json.loads(capsys.readouterr().err)["error"]
    assert (error["exit_code"], error["type"]) == (3, "LogLostError")

"""Which process is building a projection set, and whether it still is.

Why: a set is created ``building`` and stays so until its replay promotes it or finishes. A replay
killed outright (``kill -9``, a machine that lost power) cannot say it stopped, so its set stayed
``building`` forever and looked like work in progress; and two replays of one projection at once each
retired the set the other had just promoted, each reporting the same set retired. So a replay records
its host, process id and process start time in the set's params (``builder``; only a replay that is
to promote its set: a ``--no-promote`` or as-of set is marked built when it is done, ``built``); a building set whose
builder is gone is ``abandoned`` (``caucus projections``), and the next replay drops it. A replay
whose builder is alive on this host, or on a host this one cannot look at, holds the projection:
another replay refuses to start beside it, and of two that started at the same moment the one with
the higher set id steps back.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from projections.stores.port import SetInfo

__all__ = ["builder_params", "builder_of", "builder_gone", "built_at", "shown_state", "describe_builder"]


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the name (Linux), from the state on; None where it cannot
    be read. The name in parentheses may hold spaces."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot: a pid reused by another process has another
    start time. None where it cannot be read."""
    fields = _proc_stat(pid)
    if not fields:
        return None
    try:
        return int(fields[19])  # field 22
    except (IndexError, ValueError):
        return None


def _exited(pid: int) -> bool:
    """A zombie (state Z or X): it has exited, and only its parent has not collected it yet. ``kill(pid, 0)``
    still finds it, and in a container whose first process never collects, it would stay "running"."""
    fields = _proc_stat(pid)
    return fields is not None and fields[:1] in (["Z"], ["X"])


def builder_params() -> dict[str, Any]:
    """This process as a set's builder, for the set's params."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": _start_ticks(pid)}


def _params(info: SetInfo) -> dict[str, Any]:
    """A set's params as an object; empty where they are not one (or not JSON)."""
    try:
        params = json.loads(info.params or "{}")
    except ValueError:
        return {}
    return params if isinstance(params, dict) else {}


def builder_of(info: SetInfo) -> dict[str, Any] | None:
    """The builder a set's params name, or None (sets made before builders were recorded, or by ``caucus project``)."""
    builder = _params(info).get("builder")
    return builder if isinstance(builder, dict) and isinstance(builder.get("pid"), int) else None


def builder_gone(info: SetInfo) -> bool:
    """Whether ``info`` is a building set whose builder is known to be gone: it ran on this host and
    its process is no longer there (or the pid now belongs to a process started at another time)."""
    builder = builder_of(info)
    if info.state != "building" or builder is None or builder.get("host") != socket.gethostname():
        return False
    pid = int(builder["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's live process
    if _exited(pid):
        return True
    started = builder.get("start")
    now = _start_ticks(pid)
    return started is not None and now is not None and now != started


def built_at(info: SetInfo) -> str | None:
    """When a set that is not to serve was built to its end (``ProjectionStore.finish_set``), or None."""
    at = _params(info).get("built_at")
    return at if isinstance(at, str) else None


def shown_state(info: SetInfo) -> str:
    """The state to show: ``abandoned`` for a building set whose builder is gone, ``built`` for one
    that is not to serve and was built to its end, else the stored state."""
    if info.state == "building" and built_at(info) is not None:
        return "built"
    return "abandoned" if builder_gone(info) else info.state


def describe_builder(info: SetInfo) -> str:
    builder = builder_of(info) or {}
    return f"pid {builder.get('pid', '?')} on {builder.get('host', '?')}"

"""Sending a command stream to an intake and measuring what comes back.

Targets are small adapters: ``HttpTarget`` posts to the HTTP intake (``caucus serve intake``,
``producers.http``) with a bearer token; ``IntakeTarget`` submits to an in-process
``producers.intake.Intake``; ``FunctionTarget`` calls any function that answers with a receipt. The driver paces
the stream at a target rate, keeps each unit's commands in order (a correction must quote the event
id the report's receipt gave it) while different units go out concurrently, and counts receipts
against what the simulator expected: accepted, refused, duplicate, or an error of the transport.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from producers.simulator.stream import SimCommand

__all__ = [
    "SendOutcome", "Target", "FunctionTarget", "IntakeTarget", "HttpTarget", "DEFAULT_ROUTES", "DriveReport", "drive",
    "percentile", "path_unit",
]  # fmt: skip

STATUSES = ("accepted", "refused", "duplicate", "error")


@dataclass(frozen=True, slots=True)
class SendOutcome:
    status: str  # one of STATUSES
    event_id: str | None = None
    problems: tuple[str, ...] = ()
    detail: str = ""


class Target(Protocol):
    def send(self, command: SimCommand, text: str) -> SendOutcome: ...

    def close(self) -> None: ...


def receipt_from(data: Mapping[str, Any], default: str) -> SendOutcome:
    """Read a receipt document: ``status`` (or ``duplicate: true``), ``event_id``, ``errors``/``problems``."""
    status = str(data.get("status") or ("duplicate" if data.get("duplicate") else default))
    if status not in STATUSES:
        status = {"ok": "accepted", "recorded": "accepted", "rejected": "refused", "spooled": "accepted"}.get(status, default)
    problems = data.get("errors") or data.get("problems") or ()
    texts = tuple(p.get("code", str(p)) if isinstance(p, Mapping) else str(p) for p in problems)
    event_id = data.get("event_id")
    if event_id is None and isinstance(data.get("event"), Mapping):
        event_id = data["event"].get("event_id")
    return SendOutcome(status, None if event_id is None else str(event_id), texts)


class FunctionTarget:
    """An in-process intake behind one function ``submit(kind, text) -> receipt mapping``."""

    def __init__(self, submit: Callable[[str, str], Mapping[str, Any] | SendOutcome]) -> None:
        self._submit = submit

    def send(self, command: SimCommand, text: str) -> SendOutcome:
        out = self._submit(command.kind, text)
        return out if isinstance(out, SendOutcome) else receipt_from(out, "accepted")

    def close(self) -> None:
        pass


def path_unit(command: SimCommand) -> str:
    """The unit a surface files the command under: the one the body names, else the story's unit
    (a body too broken to name one is still filed under the unit whose chair sent it)."""
    named = (command.body or {}).get("unit_id")
    return named if isinstance(named, str) and named else command.unit_id


class IntakeTarget:
    """An in-process intake (``producers.intake.Intake``, started), submitting as one credential
    (an official's: corrections and tosses need one)."""

    def __init__(self, intake: Any, sender: Any, *, channel: str = "app") -> None:
        from ledger.events import Channel
        from producers.commands import CommandKind
        from producers.intake import Receipt as IntakeReceipt
        from producers.intake import Submission

        self._intake, self._sender, self._channel = intake, sender, Channel(channel)
        self._kind, self._submission, self._receipt = CommandKind, Submission, IntakeReceipt

    def send(self, command: SimCommand, text: str) -> SendOutcome:
        unit = None if command.kind == "define" else path_unit(command)
        outcome = self._intake.submit(self._submission(self._kind(command.kind), text, self._sender, self._channel,
                                                       unit_id=unit, via="simulator"))  # fmt: skip
        if isinstance(outcome, self._receipt):
            status = "duplicate" if outcome.status == "duplicate" else "accepted"
            return SendOutcome(status, outcome.event_id, tuple(w.code for w in outcome.warnings), outcome.status)
        return SendOutcome("refused", None, tuple(e.code for e in outcome.errors), outcome.category)

    def close(self) -> None:
        pass


DEFAULT_ROUTES: dict[str, str] = {
    "define": "/elections",
    "open": "/units/{unit_id}/open",
    "report": "/units/{unit_id}/results",
    "correct": "/units/{unit_id}/corrections",
    "toss": "/units/{unit_id}/ties",
}


class HttpTarget:
    """The HTTP intake (``producers.http``): 201 accepted, 202 spooled (counted as accepted), 200
    duplicate, 4xx refused (401/403 credential, 409 conflict, 422 invalid), 5xx and transport
    failures are errors."""

    def __init__(self, base_url: str, token: str | None = None, *, routes: Mapping[str, str] | None = None,
                 timeout: float = 10.0, pool: int = 16) -> None:  # fmt: skip
        import httpx

        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
        self._client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout, limits=limits)
        self._routes = dict(DEFAULT_ROUTES, **(routes or {}))
        self._httpx = httpx

    def send(self, command: SimCommand, text: str) -> SendOutcome:
        path = self._routes[command.kind].format(unit_id=quote(path_unit(command) or "_", safe=""))
        try:
            response = self._client.post(path, content=text.encode("utf-8"),
                                         headers={"idempotency-key": command.idempotency_key})  # fmt: skip
        except self._httpx.HTTPError as exc:
            return SendOutcome("error", detail=f"{type(exc).__name__}: {exc}")
        try:
            data = response.json()
        except (ValueError, json.JSONDecodeError):
            data = {}
        data = data if isinstance(data, Mapping) else {}
        code = response.status_code
        if code >= 500:
            return SendOutcome("error", detail=f"HTTP {code}")
        default = "duplicate" if code == 200 else "accepted" if code < 300 else "refused"
        receipt = receipt_from(data, default)
        if code >= 400 and receipt.status != "refused":
            receipt = SendOutcome("refused", receipt.event_id, receipt.problems, f"HTTP {code}")
        return receipt

    def close(self) -> None:
        self._client.close()


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of the values, or None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


@dataclass(slots=True)
class DriveReport:
    sent: int = 0
    elapsed_s: float = 0.0
    by_status: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[tuple[str, str]] = field(default_factory=Counter)
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.sent / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        p50, p99 = percentile(self.latencies_ms, 50), percentile(self.latencies_ms, 99)
        return {
            "sent": self.sent,
            "elapsed_s": round(self.elapsed_s, 3),
            "throughput_per_s": round(self.throughput, 1),
            "accepted": self.by_status["accepted"],
            "refused": self.by_status["refused"],
            "duplicate": self.by_status["duplicate"],
            "error": self.by_status["error"],
            "by_kind": {f"{k}/{s}": n for (k, s), n in sorted(self.by_kind.items())},
            "latency_ms": {"p50": None if p50 is None else round(p50, 2), "p99": None if p99 is None else round(p99, 2),
                           "max": round(max(self.latencies_ms), 2) if self.latencies_ms else None},  # fmt: skip
            "unexpected": self.unexpected[:50],
            "unexpected_count": len(self.unexpected),
        }


def drive(commands: Sequence[SimCommand], target: Target, *, rate: float | None = None, concurrency: int = 1,
          progress: Callable[[int, int], None] | None = None) -> DriveReport:  # fmt: skip
    """Send every command; ``rate`` is commands per second (None: as fast as the target answers)."""
    report = DriveReport()
    lock = threading.Lock()
    event_ids: dict[str, str] = {}
    done = 0

    def send(command: SimCommand, after: Future[None] | None) -> None:
        nonlocal done
        if after is not None:
            after.result()
        text = command.payload(event_ids.get(command.supersedes_key or ""))
        started = time.perf_counter()
        try:
            receipt = target.send(command, text)
        except Exception as exc:  # a target bug must be counted, not kill the run
            receipt = SendOutcome("error", detail=f"{type(exc).__name__}: {exc}")
        latency = (time.perf_counter() - started) * 1000
        with lock:
            report.sent += 1
            report.latencies_ms.append(latency)
            report.by_status[receipt.status] += 1
            report.by_kind[(command.kind, receipt.status)] += 1
            if receipt.event_id and receipt.status in ("accepted", "duplicate"):
                event_ids.setdefault(command.idempotency_key, receipt.event_id)
            if receipt.status != command.expect:
                report.unexpected.append({"seq": command.seq, "kind": command.kind, "unit_id": command.unit_id,
                                          "expected": command.expect, "got": receipt.status,
                                          "problems": list(receipt.problems), "detail": receipt.detail})  # fmt: skip
            done += 1
            count = done
        if progress is not None:
            progress(count, len(commands))

    begin = time.perf_counter()
    last: dict[str, Future[None]] = {}
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for i, command in enumerate(commands):
            if rate:
                delay = begin + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            future = pool.submit(send, command, last.get(command.unit_id))
            if command.kind == "define":
                future.result()  # everything else needs the election
            else:
                last[command.unit_id] = future
        for future in list(last.values()):
            future.result()
    report.elapsed_s = time.perf_counter() - begin
    return report

"""Latency of the read API's statewide tally under many concurrent clients, with and without ETag hits.

Why: results night is a herd of readers polling one number; a CDN in front revalidates with
``If-None-Match``. This measures what one ``caucus serve results`` process answers on loopback, in
the same run, both ways: a full ``GET /api/elections/E/state`` (200 and the JSON body, from the
answer cache) and the same GET carrying the current ETag (304, no body).

Workload: the 2020 Iowa history (``--data``, default ``../shared/data/iowa2020`` beside the
repository) imported and projected on the embedded backend in a temporary directory, or, without
that data, a simulated election (``caucus demo --units N``). Then ``--clients`` concurrent clients,
each on its own keep-alive connection, send ``--requests`` GETs each (a bounded run), in two
phases run in alternating ``--rounds``; a small HTTP/1.1 client on asyncio streams keeps the load generator cheap. Client and
server share the machine's cores, which the figures include.

    python scripts/bench_read_api.py                      # 200 clients x 25 requests x 2 rounds, both phases
    python scripts/bench_read_api.py --clients 50 --requests 20 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CAUCUS = str(Path(sys.executable).parent / "caucus")
DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "iowa2020"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _caucus(data: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}
    done = subprocess.run([CAUCUS, "--data-dir", str(data), *args], env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        sys.exit(f"caucus {' '.join(args)} failed: {done.stderr}")
    return done.stdout


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if length:
        await reader.readexactly(length)
    return status


async def _client(port: int, request: bytes, count: int, latencies: list[float], statuses: dict[int, int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(count):
            began = time.perf_counter()
            status = await _get(reader, writer, request)
            latencies.append(time.perf_counter() - began)
            statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()


async def _round(port: int, path: str, etag: str | None, clients: int, requests: int, latencies: list[float],
                 statuses: dict[int, int]) -> float:
    extra = f"If-None-Match: {etag}\r\n" if etag else ""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n{extra}\r\n".encode()
    began = time.perf_counter()
    await asyncio.gather(*(_client(port, request, requests, latencies, statuses) for _ in range(clients)))
    return time.perf_counter() - began


def _phases(port: int, path: str, etag: str, clients: int, requests: int, rounds: int) -> list[dict[str, object]]:
    """Full GETs and ETag hits in alternating rounds (so neither phase gets the quieter minutes of a
    shared machine), each phase's latencies pooled over its rounds."""
    pooled: list[tuple[list[float], dict[int, int], list[float]]] = [([], {}, []), ([], {}, [])]
    for _ in range(rounds):
        for (latencies, statuses, times), tag in zip(pooled, (None, etag)):
            times.append(asyncio.run(_round(port, path, tag, clients, requests, latencies, statuses)))
    return [_summary(latencies, statuses, sum(times)) for latencies, statuses, times in pooled]


def _summary(latencies: list[float], statuses: dict[int, int], elapsed: float) -> dict[str, object]:
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

    return {"requests": len(latencies), "seconds": elapsed, "rate": len(latencies) / elapsed, "p50_ms": pct(0.50),
            "p99_ms": pct(0.99), "max_ms": latencies[-1] * 1000, "statuses": statuses}


def _prepare(data: Path, source: Path | None, units: int) -> str:
    if source is not None:
        _caucus(data, "import", "idp2020", "--data", str(source))
        _caucus(data, "project", "--until-caught-up", "-q")
        return "the 2020 Iowa history"
    _caucus(data, "demo", "--units", str(units), "--json")
    return f"a simulated election of {units} units"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--requests", type=int, default=25, help="GETs per client and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per phase, the phases alternating")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the 2020 Iowa files (else a simulated election)")
    parser.add_argument("--units", type=int, default=1765, help="units of the simulated election, without --data")
    args = parser.parse_args()
    import httpx

    source = args.data if (args.data / "idp_apportionment.csv").is_file() else None
    with tempfile.TemporaryDirectory(prefix="bench-read-api-") as tmp:
        data = Path(tmp) / "data"
        workload = _prepare(data, source, args.units)
        election = json.loads(_caucus(data, "tally", "--json"))["election_id"]
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}
        server = subprocess.Popen([CAUCUS, "--data-dir", str(data), "serve", "results", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            path = f"/api/elections/{election}/state"
            deadline = time.monotonic() + 60
            while True:
                try:
                    first = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=30)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        sys.exit("the server did not answer within 60 s")
                    time.sleep(0.2)
            etag, size = first.headers["etag"], len(first.content)
            full, cond = _phases(port, path, etag, args.clients, args.requests, args.rounds)
        finally:
            server.terminate()
            server.wait(10)
    print(f"read API: GET {path} ({size:,} bytes) on loopback; {workload}; embedded backend")
    print(f"{args.clients} concurrent clients x {args.requests} requests x {args.rounds} alternating rounds per phase; "
          f"{os.cpu_count()} CPUs; Python {platform.python_version()}; client and server on the same machine")
    print(f"{'':<22}{'200 (full body)':>18}{'304 (If-None-Match)':>22}")
    for label, key, fmt in (("requests", "requests", "{:,}"), ("seconds", "seconds", "{:.2f}"), ("requests/s", "rate", "{:,.0f}"),
                            ("p50 latency (ms)", "p50_ms", "{:.1f}"), ("p99 latency (ms)", "p99_ms", "{:.1f}"),
                            ("max latency (ms)", "max_ms", "{:.1f}"), ("statuses", "statuses", "{}")):
        print(f"{label:<22}{fmt.format(full[key]):>18}{fmt.format(cond[key]):>22}")


if __name__ == "__main__":
    main()

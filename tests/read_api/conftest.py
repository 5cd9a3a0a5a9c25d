"""Fixtures of the read-API tests: the 2020 history imported and projected on either backend, and the
real ``caucus serve results`` (and, for the site, ``caucus project`` and ``caucus serve intake``) in
processes of their own, driven as an operator would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from tests.shared_data import IOWA2020, WHERE

REPO = Path(__file__).resolve().parents[2]
IOWA_DIR = IOWA2020
CAUCUS = str(Path(sys.executable).parent / "caucus")
ELECTION = "iowa-2020-dem-caucus"


def caucus_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}
    return {**env, **(extra or {})}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Backend:
    """Where one imported history lives: the global options naming it, and the processes serving it."""

    name: str
    base: list[str]
    env: dict[str, str]
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    url: str = ""

    def run(self, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([CAUCUS, *self.base, *args], env=self.env, capture_output=True, text=True, timeout=600)
        assert done.returncode in ok, f"caucus {' '.join(args)} exited {done.returncode}: {done.stderr}"
        return done

    def json(self, *args: str, ok: tuple[int, ...] = (0,)) -> Any:
        return json.loads(self.run(*args, "--json", ok=ok).stdout)

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        out = (self.workdir / f"{name}.log").open("wb")
        process = subprocess.Popen([CAUCUS, *self.base, *args], env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def output(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def serve_results(self) -> str:
        """Start ``caucus serve results`` on a free port; its base URL once it answers."""
        port = free_port()
        self.start("results", "serve", "results", "--port", str(port))
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(url + "/api/elections"), 60, lambda: self.output("results"))
        return url

    def stop(self) -> None:
        for p in self.processes:
            p.terminate()
        for p in self.processes:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


def wait_until(check: Any, seconds: float, why: Any = lambda: "") -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not ready after {seconds} s: {why()}")
        time.sleep(0.1)


@pytest.fixture(scope="session")
def support_module() -> SimpleNamespace:
    """This folder's helpers, for its tests (test files cannot import a conftest by name)."""
    return SimpleNamespace(Backend=Backend, caucus_env=caucus_env, free_port=free_port, wait_until=wait_until)


@pytest.fixture(scope="session")
def iowa_dir() -> Path:
    if not (IOWA_DIR / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {IOWA_DIR} ({WHERE})")
    return IOWA_DIR


def _backend(kind: str, workdir: Path, request: pytest.FixtureRequest) -> Iterator[Backend]:
    data = workdir / "data"
    if kind == "embedded":
        yield Backend(kind, ["--data-dir", str(data)], caucus_env(), workdir)
        return
    from infra.postgres import temporary_database

    bootstrap = request.getfixturevalue("kafka_bootstrap")
    topic = f"t-{uuid.uuid4().hex[:8]}"
    with temporary_database("test", request.getfixturevalue("pg_server")) as dsn:
        env = caucus_env({"CAUCUS_RESULTS_TOPIC": f"{topic}-results"})
        yield Backend(kind, ["--data-dir", str(data), "--kafka", bootstrap, "--topic", topic, "--database", dsn], env, workdir)


@pytest.fixture(scope="module", params=["embedded", "kafka_postgres"])
def iowa(request: pytest.FixtureRequest, iowa_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """The 2020 history imported and projected (``caucus import``, ``caucus project --until-caught-up``)
    on the embedded backends or on Kafka + PostgreSQL, with ``caucus serve results`` running over it
    (``backend.url``)."""
    workdir = tmp_path_factory.mktemp(f"read-api-{request.param}")
    for backend in _backend(str(request.param), workdir, request):
        try:
            backend.run("import", "idp2020", "--data", str(iowa_dir))
            backend.run("project", "--until-caught-up", "-q", "--group", f"read-api-{uuid.uuid4().hex[:6]}",
                        "--session-timeout-ms", "2000")
            backend.url = backend.serve_results()
            yield backend
        finally:
            backend.stop()

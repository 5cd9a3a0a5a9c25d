"""A service whose port is taken says so in one line and exits 2 (an operational error), as
``--metrics-port`` does: never exit 3, which tells an operator the log was lost, and no banner
claiming the service is up before it fails."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

CAUCUS = str(Path(sys.executable).parent / "caucus")


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        yield int(held.getsockname()[1])


def _public_key(tmp_path: Path) -> str:
    pem = Ed25519PrivateKey.generate().public_key().public_bytes(serialization.Encoding.PEM,
                                                                 serialization.PublicFormat.SubjectPublicKeyInfo)
    path = tmp_path / "signer.pub"
    path.write_bytes(pem)
    return str(path)


@pytest.mark.parametrize("service", ["results", "intake", "witness"])
def test_a_port_already_taken_is_exit_2_naming_the_port(service: str, taken_port: int, tmp_path: Path) -> None:
    data = tmp_path / "data"
    if service == "results":
        subprocess.run([CAUCUS, "--data-dir", str(data), "demo"], capture_output=True, timeout=300, check=True,
                       env={k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")} | {"CAUCUS_KEY_HOME": str(tmp_path / "keys")})
        args = ["serve", "results"]
    elif service == "intake":
        args = ["serve", "intake"]
    else:
        args = ["witness", "serve", str(tmp_path / "witness"), "--public-key", _public_key(tmp_path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")} | {"CAUCUS_KEY_HOME": str(tmp_path / "keys")}
    done = subprocess.run([CAUCUS, "--data-dir", str(data), *args, "--port", str(taken_port)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"error: --port {taken_port}: cannot listen on 127.0.0.1: Address already in use"], done.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["serve", "intake", "--port", "70000"], "Invalid value for '--port'"),
    (["serve", "intake", "--host", "no-such-host.invalid", "--port", "0"], "error: --host 'no-such-host.invalid': not an address"),
])
def test_a_port_or_host_no_socket_can_have_is_named(args: list[str], message: str, tmp_path: Path) -> None:
    """A port past 65535 was taken modulo 65536 by the socket; a host that does not resolve was blamed on --port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")} | {"CAUCUS_KEY_HOME": str(tmp_path / "keys")}
    done = subprocess.run([CAUCUS, "--data-dir", str(tmp_path / "data"), *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and message in done.stderr and "on http://" not in done.stderr, done.stderr

"""Helpers for the operator's and auditor's tests: the installed ``caucus`` command, run as it is run (loaded by ``conftest.py`` as the ``ops`` fixture).

Commands run in a subprocess (``run``) where what is tested is the process (exit code, files left
behind, another user), or in-process (``in_process``) where hundreds of invocations must stay fast;
both go through ``ledger.cli.main``, the real entry point.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import shutil

import pytest
from tests.shared_data import IOWA2020, WHERE

CAUCUS = str(Path(sys.executable).parent / "caucus")
DATA = IOWA2020
NOBODY = 65534


def can_switch_user() -> bool:
    """Root, with util-linux's setpriv: commands can then run as another user (``run(as_user=...)``)."""
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def need_data() -> None:
    if not (DATA / "idp_apportionment.csv").is_file():
        pytest.skip(f"the 2020 Iowa data is not at {DATA} ({WHERE})")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any CAUCUS_* setting of the machine running the tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}
    env.update(extra)
    return env


def run(args: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None, as_user: int | None = None,
        timeout: float = 300, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``caucus ARGS`` in ``cwd``; ``as_user``: run as that uid/gid (the tests run as root, where file
    permissions stop nothing; another user is how a read-only directory is really read-only)."""

    prefix = [] if as_user is None else ["setpriv", f"--reuid={as_user}", f"--regid={as_user}", "--clear-groups"]
    return subprocess.run([*prefix, CAUCUS, *args], cwd=cwd, env=dict(env) if env is not None else clean_env(),
                          capture_output=True, text=True, timeout=timeout, input=stdin)


def ok(done: subprocess.CompletedProcess[str], *codes: int) -> subprocess.CompletedProcess[str]:
    allowed = codes or (0,)
    assert done.returncode in allowed, f"exit {done.returncode}: {done.args}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    return done


def in_process(args: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``ledger.cli.main(args)`` in this process: (exit code, stdout, stderr)."""
    from ledger.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()


def file_state(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every file under ``root``: (mode, size, mtime_ns, sha256), to show that nothing changed."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            st = path.stat()
            found[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return found


@dataclass(frozen=True)
class Workspace:
    """The real 2020 history, imported, projected and checkpointed in ``root`` (data in ``root/caucus-data``)."""

    root: Path
    corrected_unit: str
    event_id: str
    official_token: str

    @property
    def data(self) -> Path:
        return self.root / "caucus-data"


def build_2020_workspace(root: Path) -> Workspace:
    """Import the party's releases, project them, sign a checkpoint and issue an official's credential."""
    root.mkdir(parents=True, exist_ok=True)
    ok(run(["import", "idp2020", "--data", str(DATA), "--json"], cwd=root))
    ok(run(["project", "--until-caught-up", "-q"], cwd=root))
    ok(run(["checkpoint", "--json"], cwd=root))
    issued = json.loads(ok(run(["credentials", "issue", "--official", "Auditor", "--json"], cwd=root)).stdout)
    tail = [json.loads(line) for line in ok(run(["log", "tail", "-n", "200", "--json"], cwd=root)).stdout.splitlines()]
    corrected = next(e for e in tail if e["type"] == "ResultCorrected")
    return Workspace(root, corrected["unit_id"], corrected["event_id"], issued["token"])


def as_json(text: str) -> Any:
    return json.loads(text)

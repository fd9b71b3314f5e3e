"""Managed local servers: started detached, stopped by PID, checked over HTTP.

Each server keeps its state under ``<home>/servers/<name>/``: ``server.pid`` (the PID of a
process that leads its own session, so stopping it stops its children) and ``server.log``
(its stdout and stderr). Servers listen on 127.0.0.1 only, and health checks use the
standard library with proxies disabled, so nothing here reaches beyond this machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from contract import FlywheelError

HOST = "127.0.0.1"
_POLL_S = 0.2
PROGRESS_EVERY_S = 10.0
"""How often a start that is still waiting says so."""
Progress = Callable[[str], None]
"""Where a start reports that it is still waiting (a line for a person)."""
_LOG_TAIL_LINES = 20
# No proxy handler: a proxy set in the environment must never carry our local health checks.
_LOCAL_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerError(FlywheelError):
    """A local server that would not start, answer or stop."""


@dataclass(frozen=True)
class ServerSpec:
    """How to run one local server: its command, extra environment and health URL."""

    name: str
    argv: tuple[str, ...]
    port: int
    health_path: str
    env: Mapping[str, str] = field(default_factory=dict)
    host: str = HOST
    start_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.host != HOST:
            raise ServerError(f"server {self.name}: host must be {HOST}, not {self.host}")

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:4200``."""
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class ServerStatus:
    """What ``status()`` saw: a live process (``running``) that may or may not answer."""

    name: str
    running: bool
    pid: int | None
    url: str
    healthy: bool


class ManagedServer:
    """One local server process, with its PID file and log under ``home/servers/<name>/``.

    ``progress``, when set, hears a line every ``progress_every_s`` while a start waits
    for the server to answer (the CLI prints them; flows leave it silent)."""

    progress_every_s: float = PROGRESS_EVERY_S

    def __init__(self, spec: ServerSpec, home: Path) -> None:
        self.spec = spec
        self.progress: Progress | None = None
        self.state_dir = home / "servers" / spec.name
        self.pid_file = self.state_dir / "server.pid"
        self.log_file = self.state_dir / "server.log"

    @property
    def health_url(self) -> str:
        return self.spec.url + self.spec.health_path

    def with_timeout(self, start_timeout_s: float) -> ManagedServer:
        """This server, waited for up to ``start_timeout_s`` when it starts."""
        if start_timeout_s <= 0:
            raise ServerError(f"{self.spec.name}: the start timeout must be positive")
        self.spec = replace(self.spec, start_timeout_s=start_timeout_s)
        return self

    def status(self) -> ServerStatus:
        """Report whether the recorded process is alive and answers its health URL."""
        pid = self._live_pid()
        healthy = pid is not None and http_ok(self.health_url)
        return ServerStatus(self.spec.name, pid is not None, pid, self.spec.url, healthy)

    def start(self) -> ServerStatus:
        """Start the server unless it already runs; return once it answers its health URL.

        Raises ``ServerError`` when the port is taken by another process, or when the
        server does not become healthy within the spec's timeout (it is then killed).
        """
        pid = self._live_pid()
        if pid is not None:
            if self._wait_healthy(pid):
                return self.status()
            raise ServerError(
                f"{self.spec.name} (pid {pid}) runs but does not answer {self.health_url}; "
                f"stop it with `flywheel server stop {self.spec.name}`.{self._log_tail(0)}"
            )
        self.pid_file.unlink(missing_ok=True)
        if port_in_use(self.spec.port):
            raise ServerError(
                f"{self.spec.name}: port {self.spec.port} on {HOST} is already in use by "
                "another process; stop it or choose another port (--port)"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.spec.env, **self._secret_env()}
        with self.log_file.open("ab") as log:
            offset = log.tell()
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {self.spec.argv}\n".encode())
            log.flush()
            try:
                process = subprocess.Popen(
                    self.spec.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.state_dir,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ServerError(
                    f"{self.spec.name}: cannot run {self.spec.argv[0]}: {exc}"
                ) from exc
        self.pid_file.write_text(f"{process.pid}\n")
        if self._wait_healthy(process.pid):
            return self.status()
        self.stop()
        raise ServerError(
            f"{self.spec.name} did not answer {self.health_url} within "
            f"{self.spec.start_timeout_s:.0f} s, and was stopped; on a busy machine give it "
            f"longer (--timeout, or start_timeout_s in its settings) (log: {self.log_file})"
            f"{self._log_tail(offset)}"
        )

    def stop(self, timeout_s: float = 15.0) -> bool:
        """Stop the process group: SIGTERM, then SIGKILL after ``timeout_s``.

        Returns False when nothing was running. The PID file is removed either way.
        """
        pid = self._live_pid()
        self.pid_file.unlink(missing_ok=True)
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        if _alive(pid):
            _signal_group(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        # Children the leader left behind share its process group.
        _signal_group(pid, signal.SIGKILL)
        return True

    def access_notes(self) -> tuple[str, ...]:
        """Lines for people: how to sign in or authenticate (never a secret itself)."""
        return ()

    def _secret_env(self) -> Mapping[str, str]:
        """Environment the process gets on top of the spec's, kept out of the spec's repr."""
        return {}

    def _live_pid(self) -> int | None:
        """The recorded PID if that process is alive and still leads its own session."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if not _alive(pid):
            return None
        try:
            # We start servers as session leaders; a reused PID almost never is one.
            return pid if os.getsid(pid) == pid else None
        except OSError:
            return None

    def _wait_healthy(self, pid: int) -> bool:
        start = time.monotonic()
        deadline = start + self.spec.start_timeout_s
        said = start
        while time.monotonic() < deadline:
            if http_ok(self.health_url):
                return True
            if not _alive(pid):
                return False
            now = time.monotonic()
            if self.progress is not None and now - said >= self.progress_every_s:
                said = now
                self.progress(
                    f"waiting for {self.spec.name} to answer {self.health_url}: "
                    f"{now - start:.0f} s of at most {self.spec.start_timeout_s:.0f} s "
                    f"(log: {self.log_file})"
                )
            time.sleep(_POLL_S)
        return http_ok(self.health_url)

    def _log_tail(self, offset: int) -> str:
        try:
            with self.log_file.open("rb") as log:
                log.seek(offset)
                lines = log.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        tail = lines[-_LOG_TAIL_LINES:]
        return "\nlast lines of the log:\n" + "\n".join(tail) if tail else ""


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """True when ``GET url`` answers 2xx (proxies bypassed)."""
    try:
        with _LOCAL_HTTP.open(url, timeout=timeout_s) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def port_in_use(port: int, host: str = HOST) -> bool:
    """True when something accepts connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def free_port(preferred: int | None = None) -> int:
    """``preferred`` when it can be bound on 127.0.0.1, else a port the OS picks."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # As servers bind: a port whose old connections linger in TIME_WAIT is free.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((HOST, candidate))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise ServerError("no free port on 127.0.0.1")


def _alive(pid: int) -> bool:
    """True for a running process; reaps it first if it is our exited child."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # A zombie whose parent has not reaped it yet is dead for our purposes.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)

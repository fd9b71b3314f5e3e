"""Local servers the flywheel needs (Prefect, Label Studio), started detached, stopped by PID.

Each server keeps its state under ``<home>/servers/<name>/``: ``server.pid`` (the PID of a
process that leads its own session, so stopping it stops its children) and ``server.log``
(its stdout and stderr). Servers listen on 127.0.0.1 only, and health checks use the
standard library with proxies disabled, so nothing here reaches beyond this machine.

Code that runs flows must do so inside ``prefect_api(url)`` (with ``url`` from
``resolve_prefect_api``): otherwise Prefect runs them on a temporary in-process server, or
fails when ``PREFECT_SERVER_ALLOW_EPHEMERAL_MODE=false``, and the runs never reach the
server the UI shows.

Label Studio runs from its own virtual environment (``make label-studio``): its pins clash
with Prefect's. Its admin password and API token come from settings; unset ones are
generated once and kept in ``<home>/servers/label-studio/credentials.json`` (mode 0600), so
later starts reuse the account the database was created with. Secrets travel to the server
in its environment, never on its command line, in its log or in an error message.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, cast

from pydantic import ValidationError

from contract import FlywheelError, InvalidInputError

if TYPE_CHECKING:
    from flows.settings import FlywheelSettings, LabelStudioSettings

HOST = "127.0.0.1"
PREFECT_DEFAULT_PORT = 4200
LABEL_STUDIO_DEFAULT_PORT = 8089
LABEL_STUDIO_DEFAULT_USERNAME = "admin@flywheel.local"
LABEL_STUDIO_VENV_ENV = "FLYWHEEL_LABEL_STUDIO_VENV"
REPO_ROOT = Path(__file__).resolve().parents[1]
_POLL_S = 0.2
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
    """One local server process, with its PID file and log under ``home/servers/<name>/``."""

    def __init__(self, spec: ServerSpec, home: Path) -> None:
        self.spec = spec
        self.state_dir = home / "servers" / spec.name
        self.pid_file = self.state_dir / "server.pid"
        self.log_file = self.state_dir / "server.log"

    @property
    def health_url(self) -> str:
        return self.spec.url + self.spec.health_path

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
            f"{self.spec.start_timeout_s:.0f} s (log: {self.log_file}){self._log_tail(offset)}"
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
        deadline = time.monotonic() + self.spec.start_timeout_s
        while time.monotonic() < deadline:
            if http_ok(self.health_url):
                return True
            if not _alive(pid):
                return False
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


def prefect_server(home: Path, port: int = PREFECT_DEFAULT_PORT) -> ManagedServer:
    """The Prefect 3 server (API and UI) on 127.0.0.1, its database under ``home/prefect``."""
    prefect = Path(sys.executable).parent / "prefect"
    url = f"http://{HOST}:{port}"
    spec = ServerSpec(
        name="prefect",
        argv=(str(prefect), "server", "start", "--host", HOST, "--port", str(port)),
        port=port,
        health_path="/api/health",
        env={
            "PREFECT_HOME": str((home / "prefect").absolute()),
            "PREFECT_API_URL": f"{url}/api",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false",
            "PREFECT_UI_ENABLED": "true",
            "PYTHONUNBUFFERED": "1",
        },
    )
    return ManagedServer(spec, home)


def local_prefect_api(port: int) -> str:
    """The API URL of the local Prefect server on ``port``."""
    return f"http://{HOST}:{port}/api"


class LabelStudioAccess(NamedTuple):
    """Where a Label Studio server answers and the API token to use (hidden from repr)."""

    url: str
    token: str

    def __repr__(self) -> str:
        return f"LabelStudioAccess(url={self.url!r}, token='**********')"


@dataclass(frozen=True)
class LabelStudioAccount:
    """The admin account of a local Label Studio server."""

    username: str
    password: str = field(repr=False)
    token: str = field(repr=False)


def label_studio_venv() -> Path:
    """Label Studio's environment: ``$FLYWHEEL_LABEL_STUDIO_VENV``, else the repo's own."""
    named = os.environ.get(LABEL_STUDIO_VENV_ENV)
    return Path(named) if named else REPO_ROOT / ".venv-label-studio"


def label_studio_account(
    credentials_file: Path,
    username: str = LABEL_STUDIO_DEFAULT_USERNAME,
    *,
    token: str | None = None,
    password: str | None = None,
) -> LabelStudioAccount:
    """The admin account: given secrets win, missing ones come from ``credentials_file``.

    A secret neither given nor in the file is generated (a 40-hex-character token, a random
    password) and written to the file, mode 0600. Given secrets are never written.
    """
    stored = _read_credentials(credentials_file)
    generated: dict[str, str] = {}
    if token is None:
        token = stored.get("token") or generated.setdefault("token", secrets.token_hex(20))
    if password is None:
        password = stored.get("password") or generated.setdefault(
            "password", secrets.token_urlsafe(18)
        )
    if generated:
        _write_credentials(credentials_file, {**stored, "username": username, **generated})
    return LabelStudioAccount(username, password, token)


class LabelStudioServer(ManagedServer):
    """Label Studio from its own environment; ``start`` also checks the API token works.

    The account is resolved on ``start`` (or on first use of ``account``), so ``status``
    and ``stop`` neither need the environment nor write credentials.
    """

    def __init__(
        self,
        spec: ServerSpec,
        home: Path,
        venv: Path,
        username: str,
        token: str | None,
        password: str | None,
    ) -> None:
        super().__init__(spec, home)
        self.venv = venv
        self.data_dir = home / "label-studio"
        self.credentials_file = self.state_dir / "credentials.json"
        self._username = username
        self._given_token = token
        self._given_password = password
        self._account: LabelStudioAccount | None = None

    @property
    def account(self) -> LabelStudioAccount:
        """The admin account (see ``label_studio_account``)."""
        if self._account is None:
            self._account = label_studio_account(
                self.credentials_file,
                self._username,
                token=self._given_token,
                password=self._given_password,
            )
        return self._account

    @property
    def access(self) -> LabelStudioAccess:
        """The server's URL and API token, for the SDK."""
        return LabelStudioAccess(self.spec.url, self.account.token)

    def start(self) -> ServerStatus:
        """Start as ``ManagedServer.start`` does, then check that the token is accepted."""
        executable = Path(self.spec.argv[0])
        if self._live_pid() is None and not executable.is_file():
            raise ServerError(
                f"{self.spec.name}: no Label Studio at {executable}; run `make label-studio` "
                f"to create its environment from requirements-label-studio.lock "
                f"(or point {LABEL_STUDIO_VENV_ENV} at one)"
            )
        status = super().start()
        self.check_token()
        return status

    def check_token(self) -> None:
        """Raise ``ServerError`` unless the server accepts the account's API token."""
        request = urllib.request.Request(
            self.spec.url + "/api/current-user/whoami",
            headers={"Authorization": f"Token {self.account.token}"},
        )
        try:
            with _LOCAL_HTTP.open(request, timeout=10) as response:
                who = json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code not in (401, 403):
                raise ServerError(
                    f"{self.spec.name} on {self.spec.url} answers HTTP {exc.code} to a token check"
                ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ServerError(f"{self.spec.name} on {self.spec.url}: token check: {exc}") from None
        else:
            if isinstance(who, dict) and "email" in who:
                return
        source = "from settings" if self._given_token else f"in {self.credentials_file}"
        raise ServerError(
            f"{self.spec.name} on {self.spec.url} refuses the API token {source}: its database "
            f"under {self.data_dir} was created with another one. Use that token, or stop the "
            f"server and remove {self.data_dir} and {self.credentials_file} to start afresh."
        )

    def access_notes(self) -> tuple[str, ...]:
        """Where the admin password and API token are; never the secrets themselves."""

        def where(given: str | None, variable: str) -> str:
            return f"settings ({variable})" if given else str(self.credentials_file)

        return (
            f"admin {self._username}: password in "
            f"{where(self._given_password, 'FLYWHEEL_LABEL_STUDIO__PASSWORD')}",
            f"API token in {where(self._given_token, 'FLYWHEEL_LABEL_STUDIO__TOKEN')}",
        )

    def _secret_env(self) -> Mapping[str, str]:
        return {
            "LABEL_STUDIO_USERNAME": self.account.username,
            "LABEL_STUDIO_PASSWORD": self.account.password,
            "LABEL_STUDIO_USER_TOKEN": self.account.token,
        }


def label_studio_server(
    home: Path,
    port: int = LABEL_STUDIO_DEFAULT_PORT,
    *,
    username: str = LABEL_STUDIO_DEFAULT_USERNAME,
    token: str | None = None,
    password: str | None = None,
    venv: Path | None = None,
) -> LabelStudioServer:
    """Label Studio on 127.0.0.1, offline, its database and media under ``home/label-studio``.

    ``venv`` defaults to ``label_studio_venv()``; unset secrets as in ``label_studio_account``.
    """
    venv = (venv or label_studio_venv()).absolute()
    data_dir = (home / "label-studio").absolute()
    spec = ServerSpec(
        name="label-studio",
        argv=(
            str(venv / "bin" / "label-studio"),
            "start",
            "--no-browser",
            "--internal-host",
            HOST,
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
        ),
        port=port,
        health_path="/health",
        env={
            "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
            "LATEST_VERSION_CHECK": "false",
            "COLLECT_ANALYTICS": "false",
            "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
            # Label Studio reports errors to its Sentry by default; empty turns that off.
            "LABEL_STUDIO_SENTRY_DSN": "",
            "LABEL_STUDIO_FRONTEND_SENTRY_DSN": "",
            "LABEL_STUDIO_FEATURE_FLAGS_OFFLINE": "true",
            # It also reads unprefixed names (DJANGO_DB, DATABASE_NAME) another tool may set.
            "LABEL_STUDIO_DJANGO_DB": "sqlite",
            "LABEL_STUDIO_DATABASE_NAME": str(data_dir / "label_studio.sqlite3"),
            "PYTHONUNBUFFERED": "1",
        },
        # The first start migrates a new database: about 30 s on two cores.
        start_timeout_s=120.0,
    )
    return LabelStudioServer(spec, home, venv, username, token, password)


def label_studio_credentials(
    home: Path, settings: LabelStudioSettings, *, start: bool = True
) -> LabelStudioAccess:
    """The Label Studio to use: ``settings.url`` with its token, else the local server.

    The token comes from the settings (the environment), or from the Prefect Secret block
    ``settings.token_block`` on the current Prefect API. The local server is started when
    needed if ``start``; otherwise one that does not answer raises ``ServerError``.
    """
    settings = with_token_from_block(settings)
    if settings.url is not None:
        if settings.token is None:
            raise ServerError("label-studio: url is set but token is not")
        return LabelStudioAccess(settings.url.rstrip("/"), settings.token.get_secret_value())
    server = _label_studio_from_settings(home, settings.port, settings)
    if start:
        server.start()
    elif server.status().healthy:
        server.check_token()
    else:
        raise ServerError(
            f"no Label Studio answers on {server.spec.url} and no url is set; "
            "start one with `flywheel server start label-studio`"
        )
    return server.access


def with_token_from_block(settings: LabelStudioSettings) -> LabelStudioSettings:
    """``settings`` with ``token`` read from its Prefect Secret block, when it names one."""
    if settings.token_block is None:
        return settings
    from prefect.blocks.system import Secret

    name = settings.token_block
    try:
        block = cast("Secret[str]", Secret.load(name))
    except ValueError as exc:
        raise ServerError(
            f"label_studio.token_block: the Prefect API has no Secret block named {name!r}; "
            f"create it (prefect block create secret, or Secret(value=...).save({name!r}))"
        ) from exc
    token = block.value.get_secret_value()
    if not isinstance(token, str) or not token:
        raise ServerError(f"label_studio.token_block: the Secret block {name!r} holds no text")
    try:
        return type(settings).model_validate(
            settings.model_dump() | {"token": token, "token_block": None}
        )
    except ValidationError as exc:
        raise ServerError(
            f"label_studio.token_block: the token in {name!r} is not usable: "
            + "; ".join(str(e["msg"]) for e in exc.errors())
        ) from None


def _label_studio_from_settings(
    home: Path, port: int, settings: LabelStudioSettings | None
) -> LabelStudioServer:
    if settings is None:
        return label_studio_server(home, port)
    return label_studio_server(
        home,
        port,
        username=settings.username,
        token=settings.token.get_secret_value() if settings.token else None,
        password=settings.password.get_secret_value() if settings.password else None,
    )


def _read_credentials(path: Path) -> dict[str, str]:
    try:
        values = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        values = None
    if not isinstance(values, dict) or not all(isinstance(v, str) and v for v in values.values()):
        raise ServerError(f"{path} is not a credentials file this code wrote; remove it")
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return {str(k): str(v) for k, v in values.items()}


def _write_credentials(path: Path, values: Mapping[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        json.dump(dict(values), out, indent=2)
        out.write("\n")
    partial.replace(path)


@dataclass(frozen=True)
class ServerKind:
    """A server the flywheel knows by name: its title, default port and factory.

    The factory gets the settings for servers that need more than a port (accounts).
    """

    title: str
    default_port: int
    build: Callable[[Path, int, FlywheelSettings | None], ManagedServer]
    has_ui: bool = False


SERVERS: Mapping[str, ServerKind] = {
    "label-studio": ServerKind(
        "Label Studio",
        LABEL_STUDIO_DEFAULT_PORT,
        lambda home, port, settings: _label_studio_from_settings(
            home, port, settings.label_studio if settings else None
        ),
        has_ui=True,
    ),
    "prefect": ServerKind(
        "Prefect", PREFECT_DEFAULT_PORT, lambda home, port, _: prefect_server(home, port), True
    ),
}


def known_server(
    name: str, home: Path, port: int | None = None, settings: FlywheelSettings | None = None
) -> ManagedServer:
    """The named server (see ``SERVERS``) on ``port`` or its default port.

    ``settings`` supplies what a server needs beyond its port (Label Studio's account);
    without them, defaults.
    """
    kind = SERVERS.get(name)
    if kind is None:
        raise InvalidInputError("server", f"unknown server {name!r}", SERVERS)
    return kind.build(home, kind.default_port if port is None else port, settings)


def resolve_prefect_api(home: Path, port: int, *, start: bool = True) -> str:
    """The Prefect API to use: ``PREFECT_API_URL`` when set, else the local server's.

    The local server is started when needed if ``start``; otherwise a server that is not
    running raises ``ServerError``.
    """
    from_env = os.environ.get("PREFECT_API_URL")
    if from_env:
        return from_env
    server = prefect_server(home, port)
    if start:
        server.start()
    elif not server.status().healthy:
        raise ServerError(
            f"no Prefect server answers on {server.spec.url} and PREFECT_API_URL is not set; "
            "start one with `flywheel server start prefect`"
        )
    return local_prefect_api(port)


@contextlib.contextmanager
def prefect_api(url: str) -> Iterator[None]:
    """Point Prefect (flows, tasks, clients) at ``url`` for the duration of the block."""
    from prefect.settings import temporary_settings

    with temporary_settings(updates={"api.url": url}):
        yield


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

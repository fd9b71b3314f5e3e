"""The local Label Studio server, its admin account, and which Label Studio to use.

Label Studio runs from its own virtual environment (``make label-studio``): its pins clash
with Prefect's. Its admin password and API token come from settings; unset ones are
generated once and kept in ``<home>/servers/label-studio/credentials.json`` (mode 0600), so
later starts reuse the account the database was created with. Secrets travel to the server
in its environment, never on its command line, in its log or in an error message.

The server serves the artifact store (screenshots, page sources) to signed-in users through
Label Studio's local-files storage. Its document root ``<home>/label-studio/local-files``
holds nothing but the link ``artifacts`` to the store: a storage (any user may add one) can
reach no other file of this machine, not the database nor the credentials.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, cast

from pydantic import ValidationError

from flows.servers.managed import (
    _LOCAL_HTTP,
    HOST,
    ManagedServer,
    ServerError,
    ServerSpec,
    ServerStatus,
)

if TYPE_CHECKING:
    from flows.settings import LabelStudioSettings

LABEL_STUDIO_DEFAULT_PORT = 8089
LABEL_STUDIO_DEFAULT_USERNAME = "admin@flywheel.local"
LABEL_STUDIO_VENV_ENV = "FLYWHEEL_LABEL_STUDIO_VENV"
REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS_LINK = "artifacts"
"""The link to the artifact store in the server's local-files document root."""


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
        artifacts: Path,
    ) -> None:
        super().__init__(spec, home)
        self.venv = venv
        self.data_dir = home / "label-studio"
        self.files_root = local_files_root(home).absolute()
        self.artifacts = artifacts
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

    @property
    def artifact_root(self) -> Path:
        """The artifact store as the server reaches it: the link in its document root."""
        return self.files_root / ARTIFACTS_LINK

    def start(self) -> ServerStatus:
        """Link the artifact store into the document root, start as ``ManagedServer.start``
        does, then check that the token is accepted."""
        executable = Path(self.spec.argv[0])
        if self._live_pid() is None and not executable.is_file():
            raise ServerError(
                f"{self.spec.name}: no Label Studio at {executable}; run `make label-studio` "
                f"to create its environment from requirements-label-studio.lock "
                f"(or point {LABEL_STUDIO_VENV_ENV} at one)"
            )
        self.link_artifacts()
        status = super().start()
        self.check_token()
        return status

    def link_artifacts(self) -> None:
        """Make ``artifact_root`` a link to the artifact store (both created if missing)."""
        link, target = self.artifact_root, self.artifacts.absolute()
        target.mkdir(parents=True, exist_ok=True)
        self.files_root.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        if link.exists() and not link.is_symlink():
            raise ServerError(f"{link} should be a link to the artifact store; remove it")
        # A new link replaces the old atomically: a concurrent start sees one or the other.
        partial = link.with_name(f".{link.name}.{os.getpid()}")
        partial.unlink(missing_ok=True)
        partial.symlink_to(target, target_is_directory=True)
        partial.replace(link)

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
    artifacts: Path | None = None,
    start_timeout_s: float = 600.0,
) -> LabelStudioServer:
    """Label Studio on 127.0.0.1, offline, its database and media under ``home/label-studio``.

    ``venv`` defaults to ``label_studio_venv()``; unset secrets as in ``label_studio_account``.
    ``artifacts`` is the artifact store it serves, by default ``home/artifacts`` (as
    ``FlywheelSettings.artifacts_path``).
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
            # Serves files under a local-files storage of a project the user may see.
            "LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED": "true",
            "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT": str(local_files_root(home).absolute()),
            "PYTHONUNBUFFERED": "1",
        },
        # The first start migrates a new database: about 30 s on two idle cores, several
        # times that on busy ones.
        start_timeout_s=start_timeout_s,
    )
    artifacts = artifacts if artifacts is not None else home / "artifacts"
    return LabelStudioServer(spec, home, venv, username, token, password, artifacts)


def local_files_root(home: Path) -> Path:
    """The local server's local-files document root: only the link to the artifact store."""
    return home / "label-studio" / "local-files"


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


def label_studio_artifact_root(home: Path, settings: LabelStudioSettings) -> Path | None:
    """Where the Label Studio to use reaches the artifact store: the local server's link
    (``LabelStudioServer.artifact_root``), or None for one named by ``settings.url``, which
    cannot read this machine's files (the review page then names artifacts as text)."""
    if settings.url is not None:
        return None
    return local_files_root(home).absolute() / ARTIFACTS_LINK


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
        start_timeout_s=settings.start_timeout_s,
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

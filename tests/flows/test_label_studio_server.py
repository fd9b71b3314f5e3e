"""Label Studio: the SDK authenticates with the token, the server listens on 127.0.0.1 only,
and a local server keeps the account it generated, in a 0600 file, across starts."""

from __future__ import annotations

import json
import re
import stat
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from label_studio_sdk import LabelStudio
from label_studio_sdk.core.api_error import ApiError
from pydantic import SecretStr
from typer.testing import CliRunner

from cli.servers import server_app
from flows.servers import (
    LABEL_STUDIO_DEFAULT_USERNAME,
    LabelStudioAccess,
    ServerError,
    free_port,
    http_ok,
    label_studio_account,
    label_studio_credentials,
    label_studio_server,
)
from flows.settings import LabelStudioSettings

runner = CliRunner()
TOKEN = re.compile(r"[0-9a-f]{40}")


def _cli(*args: str) -> str:
    result = runner.invoke(server_app, list(args))
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return result.output


def _sdk(url: str, token: str) -> LabelStudio:
    return LabelStudio(base_url=url, api_key=token)  # type: ignore[no-untyped-call]


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets that listen on ``port`` (from /proc/net)."""
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            if table == "tcp":
                found.add(".".join(str(b) for b in reversed(bytes.fromhex(address))))
            else:
                found.add(f"ipv6 {address}")
    return found


@pytest.mark.slow
def test_the_sdk_authenticates_with_the_token_and_a_wrong_one_is_refused(
    label_studio: LabelStudioAccess,
) -> None:
    url, token = label_studio
    client = _sdk(url, token)
    me = client.users.whoami()
    assert me.email is not None and "@" in me.email
    assert isinstance(list(client.projects.list()), list)

    with pytest.raises(ApiError) as refused:
        _sdk(url, "0" * 40).users.whoami()
    assert refused.value.status_code == 401


@pytest.mark.slow
def test_the_server_listens_on_127_0_0_1_only(label_studio: LabelStudioAccess) -> None:
    parts = urlsplit(label_studio.url)
    assert parts.hostname == "127.0.0.1" and parts.port is not None
    assert _listening_addresses(parts.port) == {"127.0.0.1"}


@pytest.mark.slow
def test_a_local_server_keeps_its_generated_account_across_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TOKEN", "PASSWORD", "URL", "USERNAME"):
        monkeypatch.delenv(f"FLYWHEEL_LABEL_STUDIO__{name}", raising=False)
    port = free_port()
    where = ("--home", str(tmp_path), "--port", str(port))
    server = label_studio_server(tmp_path, port)

    began = time.monotonic()
    out = _cli("start", "label-studio", *where)
    first_start_s = time.monotonic() - began
    assert f"Label Studio UI: http://127.0.0.1:{port}" in out
    assert f"API token in {server.credentials_file}" in out
    assert stat.S_IMODE(server.credentials_file.stat().st_mode) == 0o600
    stored = json.loads(server.credentials_file.read_text())
    assert stored["username"] == LABEL_STUDIO_DEFAULT_USERNAME
    assert TOKEN.fullmatch(stored["token"]) and len(stored["password"]) >= 20
    assert stored["token"] not in out and stored["password"] not in out

    status = json.loads(_cli("status", "label-studio", *where, "--json"))
    assert status["healthy"] and status["url"] == f"http://127.0.0.1:{port}"
    assert _sdk(server.spec.url, stored["token"]).users.whoami().email == (
        LABEL_STUDIO_DEFAULT_USERNAME
    )
    assert (tmp_path / "label-studio" / "label_studio.sqlite3").is_file()

    # Another token for this database is refused, and the message does not quote it.
    other = "ab" * 20
    with pytest.raises(ServerError, match="refuses the API token from settings") as refused:
        label_studio_server(tmp_path, port, token=other).start()
    assert other not in str(refused.value)

    assert f"stopped label-studio (pid {status['pid']})" in _cli("stop", "label-studio", *where)
    assert not http_ok(server.health_url)

    began = time.monotonic()
    again = label_studio_server(tmp_path, port)
    assert again.start().healthy
    second_start_s = time.monotonic() - began
    assert json.loads(server.credentials_file.read_text()) == stored  # reused, not regenerated
    assert again.access == (server.spec.url, stored["token"])
    assert _sdk(server.spec.url, stored["token"]).users.whoami().id is not None

    log = server.log_file.read_text()
    assert stored["token"] not in log and stored["password"] not in log
    assert again.stop()
    print(f"Label Studio: first start {first_start_s:.1f} s, second {second_start_s:.1f} s")


def test_a_missing_environment_says_how_to_make_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYWHEEL_LABEL_STUDIO_VENV", str(tmp_path / "nowhere"))
    monkeypatch.delenv("FLYWHEEL_LABEL_STUDIO__URL", raising=False)
    result = runner.invoke(server_app, ["start", "label-studio", "--home", str(tmp_path)])
    assert result.exit_code == 1
    assert isinstance(result.exception, ServerError)
    assert "run `make label-studio`" in str(result.exception)
    assert str(tmp_path / "nowhere" / "bin" / "label-studio") in str(result.exception)
    assert not (tmp_path / "servers").exists()  # nothing started, no account written


def test_generated_secrets_are_kept_0600_and_given_ones_never_written(tmp_path: Path) -> None:
    file = tmp_path / "servers" / "label-studio" / "credentials.json"
    first = label_studio_account(file)
    assert TOKEN.fullmatch(first.token)
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert first.token not in repr(first) and first.password not in repr(first)
    assert label_studio_account(file) == first

    given = "cd" * 20
    account = label_studio_account(file, token=given)
    assert (account.token, account.password) == (given, first.password)
    assert given not in file.read_text()

    elsewhere = tmp_path / "other" / "credentials.json"
    label_studio_account(elsewhere, token=given, password="a given password")
    assert not elsewhere.exists()


def test_a_damaged_credentials_file_is_named_not_quoted(tmp_path: Path) -> None:
    file = tmp_path / "credentials.json"
    file.write_text('{"token": 5, "password": "hunter2-hunter2"}')
    with pytest.raises(ServerError, match="not a credentials file") as damaged:
        label_studio_account(file)
    assert str(file) in str(damaged.value) and "hunter2" not in str(damaged.value)


def test_credentials_come_from_a_configured_url_or_the_local_server(tmp_path: Path) -> None:
    settings = LabelStudioSettings(url="http://127.0.0.1:9/", token=SecretStr("a.personal.token"))
    access = label_studio_credentials(tmp_path, settings)
    assert access == ("http://127.0.0.1:9", "a.personal.token")
    assert "personal" not in repr(access) and "personal" not in str([access])
    assert not (tmp_path / "servers").exists()  # nothing local was started or written

    with pytest.raises(ServerError, match="flywheel server start label-studio"):
        label_studio_credentials(tmp_path, LabelStudioSettings(port=free_port()), start=False)

"""Local servers: a real Prefect server's lifecycle, the CLI, and flow runs that land on it."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from prefect import flow, get_client
from typer.testing import CliRunner

from cli.servers import server_app
from contract import InvalidInputError
from flows.servers import (
    ServerError,
    free_port,
    http_ok,
    prefect_api,
    prefect_server,
    resolve_prefect_api,
)
from tests.flows.prefect_api import get

runner = CliRunner()


def _cli(*args: str) -> str:
    result = runner.invoke(server_app, list(args))
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return result.output


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.mark.slow
def test_start_status_stop_a_real_prefect_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = str(free_port())
    where = ("--home", str(tmp_path), "--port", port)
    monkeypatch.setenv("FLYWHEEL_PREFECT__PORT", port)  # for the commands without a name
    server = prefect_server(tmp_path, int(port))

    began = time.monotonic()
    out = _cli("start", "prefect", *where)
    first_start_s = time.monotonic() - began
    assert f"Prefect UI: http://127.0.0.1:{port}" in out
    status = server.status()
    assert status.running and status.healthy and status.pid is not None
    assert server.pid_file.read_text().strip() == str(status.pid)
    assert (tmp_path / "prefect").is_dir()  # PREFECT_HOME, with the server's database

    began = time.monotonic()
    assert server.start().pid == status.pid  # idempotent: the running server is reused
    assert time.monotonic() - began < 5
    started = json.loads(_cli("start", "prefect", *where, "--json"))
    assert (started["pid"], started["healthy"]) == (status.pid, True)
    assert started["log"] == str(server.log_file)
    alone = {
        "name": "prefect",
        "running": True,
        "pid": status.pid,
        "url": f"http://127.0.0.1:{port}",
        "healthy": True,
    }
    assert json.loads(_cli("status", "prefect", *where, "--json")) == alone
    every = json.loads(_cli("status", "--home", str(tmp_path), "--json"))
    assert [s["name"] for s in every] == ["appium", "label-studio", "model", "prefect"]
    assert [s for s in every if s["running"]] == [alone]

    # Without a name, stop stops every server of the state folder that runs, by name.
    assert _cli("stop", "--home", str(tmp_path)) == f"stopped prefect (pid {status.pid})\n"
    assert not server.pid_file.exists()
    assert not server.status().running
    assert not http_ok(server.health_url)
    assert "was not running" in _cli("stop", "prefect", *where)
    assert json.loads(_cli("stop", "--home", str(tmp_path), "--json")) == {
        "stopped": [],
        "not_running": ["appium", "label-studio", "model", "prefect"],
    }
    assert "no server of this state folder was running" in _cli("stop", "--home", str(tmp_path))
    refused = runner.invoke(server_app, ["stop", "--port", port, "--home", str(tmp_path)])
    assert isinstance(refused.exception, InvalidInputError)
    assert refused.exception.field == "--port"

    # A PID file left by a crash names a dead process: status ignores it, start replaces it.
    server.pid_file.write_text(f"{_dead_pid()}\n")
    assert not server.status().running
    restarted = server.start()
    assert restarted.healthy and restarted.pid != status.pid
    assert server.stop()
    assert not server.stop()
    print(f"first start {first_start_s:.1f} s")


def test_start_refuses_a_port_held_by_another_process(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = prefect_server(tmp_path, holder.getsockname()[1])
        with pytest.raises(ServerError, match="already in use by another process"):
            server.start()
    assert not server.pid_file.exists()


def test_an_unknown_server_name_lists_the_allowed_ones(tmp_path: Path) -> None:
    result = runner.invoke(server_app, ["status", "postgres", "--home", str(tmp_path)])
    assert result.exit_code == 1
    assert isinstance(result.exception, InvalidInputError)
    allowed = "(allowed: appium, label-studio, model, prefect)"
    assert str(result.exception) == f"server: unknown server 'postgres' {allowed}"


def test_resolve_prefect_api_prefers_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4999/api")
    assert resolve_prefect_api(tmp_path, 4200) == "http://127.0.0.1:4999/api"
    assert not (tmp_path / "servers").exists()  # nothing was started

    monkeypatch.delenv("PREFECT_API_URL")
    with pytest.raises(ServerError, match="flywheel server start prefect"):
        resolve_prefect_api(tmp_path, free_port(), start=False)


@flow(name="servers-test-ping", persist_result=False)
def ping(x: int) -> int:
    return x + 1


@pytest.mark.slow
def test_a_flow_run_lands_on_the_real_server(prefect_api_url: str) -> None:
    with prefect_api(prefect_api_url):
        state = ping(41, return_state=True)
        assert state.result() == 42
        run_id = state.state_details.flow_run_id
        assert run_id is not None
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(run_id)
    assert run.state is not None and run.state.is_completed()
    # Read it back over plain HTTP too: the run is on that server, not an ephemeral one.
    assert get(prefect_api_url, f"/flow_runs/{run_id}")["id"] == str(run_id)

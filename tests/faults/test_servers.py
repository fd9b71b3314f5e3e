"""Servers that start slowly, die mid-round, or are busy: bounded waits that say what they
wait for, and a round that stops saying how to resume instead of hanging."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cli.prefect import EXIT_SERVER_LOST
from flows.servers import ManagedServer, ServerError, ServerSpec, free_port, prefect_server
from flows.servers.prefect import local_prefect_api
from flows.servers.watch import watch_api
from storage import Catalog
from tests.flows.commands import FLYWHEEL, command_env
from tests.storage.holders import catalog_held


def silent_server(home: Path) -> ManagedServer:
    """A process that runs but never answers its health URL."""
    argv = (sys.executable, "-c", "import time; time.sleep(120)")
    return ManagedServer(ServerSpec("silent", argv, free_port(), "/health"), home)


def test_a_start_that_waits_says_so_and_stops_what_never_answered(tmp_path: Path) -> None:
    lines: list[str] = []
    server = silent_server(tmp_path).with_timeout(1.5)
    server.progress, server.progress_every_s = lines.append, 0.3
    began = time.monotonic()
    with pytest.raises(ServerError, match=r"did not answer .* within 2 s, and was stopped") as err:
        server.start()
    assert time.monotonic() - began < 10
    assert "--timeout" in str(err.value) and "start_timeout_s" in str(err.value)
    assert len(lines) >= 3
    assert all(line.startswith("waiting for silent to answer") for line in lines)
    assert "of at most 2 s" in lines[-1]
    assert not server.status().running and not server.pid_file.exists()


def test_a_start_timeout_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="must be positive"):
        silent_server(tmp_path).with_timeout(0)


@pytest.mark.parametrize("name", ["prefect", "label-studio", "appium", "model"])
def test_start_timeouts_come_from_settings_and_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from flows.servers import known_server
    from flows.settings import load_settings

    section = {"label-studio": "LABEL_STUDIO", "model": "SERVING"}.get(name, name.upper())
    monkeypatch.setenv(f"FLYWHEEL_{section}__START_TIMEOUT_S", "321")
    server = known_server(name, tmp_path, free_port(), load_settings())
    assert server.spec.start_timeout_s == 321
    assert server.with_timeout(12).spec.start_timeout_s == 12


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def test_the_watch_calls_once_the_api_has_been_silent_long_enough() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = f"http://127.0.0.1:{server.server_address[1]}/api"
    heard: list[tuple[float, str]] = []
    with watch_api(api, 1.0, lambda why: heard.append((time.monotonic(), why)), every_s=0.1):
        time.sleep(1.5)
        assert heard == []  # answering all along
        server.shutdown()
        server.server_close()
        died = time.monotonic()
        while not heard and time.monotonic() - died < 10:
            time.sleep(0.05)
    ((when, why),) = heard
    assert 0.5 <= when - died < 3.0  # silent for 1 s, counted from its last answer
    assert why.startswith(f"the Prefect API at {api} has not answered for")


def test_a_busy_catalog_is_waited_for_beyond_a_few_seconds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "catalog.duckdb"
    Catalog.open(path).close()
    began = time.monotonic()
    with (
        catalog_held(path, release_after_s=7) as holder,
        caplog.at_level(logging.WARNING, logger="storage.connection"),
        Catalog.open(path) as catalog,  # the default wait: two minutes
    ):
        assert catalog.stats()["rounds"] == 0
        assert time.monotonic() - began >= 5
    assert f"is in use by PID {holder.pid}: waiting for it, up to 120 s" in caplog.text


ROUND = ("round", "--tasks", "240", "--seed", "13", "--json")
SMALL_SHARDS = {"FLYWHEEL_ROUND__SHARD_SIZE": "4", "FLYWHEEL_ROUND__COLLECT_WORKERS": "1"}


@pytest.mark.slow
def test_a_round_whose_prefect_server_dies_stops_and_resumes_after_a_restart(
    tmp_path: Path, prefect_api_url: str
) -> None:
    server = prefect_server(tmp_path / "server", free_port())
    server.start()
    api = local_prefect_api(server.spec.port)
    home = tmp_path / "home"
    env = command_env(home, api, FLYWHEEL_PREFECT__DEAD_AFTER_S="8", **SMALL_SHARDS)
    try:
        proc = subprocess.Popen(
            [FLYWHEEL, *ROUND],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if len(list(home.glob("rounds/*/shards/*.parquet"))) >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the round ended before its server could be killed"
        pid = server.status().pid
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        killed = time.monotonic()
        try:
            _, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == EXIT_SERVER_LOST, stderr[-3000:]
        assert time.monotonic() - killed < 60
        assert "has not answered for" in stderr and "run the same command again" in stderr

        server.start()  # the same database: the server comes back
        resumed = subprocess.run(
            [FLYWHEEL, *ROUND], env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    finally:
        server.stop()
    clean = subprocess.run(
        [FLYWHEEL, *ROUND],
        env=command_env(tmp_path / "clean", prefect_api_url, **SMALL_SHARDS),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert clean.returncode == 0, clean.stderr[-3000:]
    first, second = json.loads(resumed.stdout), json.loads(clean.stdout)
    assert first["counts"] == second["counts"]
    assert first["dataset_version"] == second["dataset_version"]


@pytest.mark.slow
def test_rounds_started_at_once_on_one_home_both_finish(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """They meet the catalog's lock again and again: each wait is bounded, not retried once."""
    home = tmp_path / "home"
    procs = [
        subprocess.Popen(
            [FLYWHEEL, "round", "--tasks", "160", "--seed", str(seed), "--json"],
            env=command_env(home, prefect_api_url, FLYWHEEL_ROUND__SHARD_SIZE="8"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (21, 22, 23)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    for proc, (_, stderr) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, stderr[-3000:]
    summaries = [json.loads(out) for out, _ in outs]
    with Catalog.open(home / "catalog.duckdb", read_only=True) as catalog:
        rounds = {r.id: r for r in catalog.rounds.every()}
    for summary in summaries:
        assert rounds[summary["round_id"]].status == "done"
        assert rounds[summary["round_id"]].dataset_id == summary["dataset_version"]

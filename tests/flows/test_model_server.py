"""The model server's command, engine and champion, without starting any process."""

from __future__ import annotations

import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from cli.servers import _server
from contract import ModelRecord, Split, TrainingMethod
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.servers import (
    MODEL_DEFAULT_PORT,
    SERVERS,
    ManagedServer,
    ModelServer,
    ServerError,
    ServerStatus,
    known_server,
    model_server,
)
from flows.settings import FlywheelSettings, ServingSettings
from serving import SERVED_AS
from serving.__main__ import parser as serving_parser
from storage import Catalog
from tests.storage.builders import make_version, write_shards

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
PORT = 8123


def _record(dataset_id: str = "ds-abc", name: str = "mobile-planner-r1") -> ModelRecord:
    return ModelRecord(
        name=name,
        dataset_id=dataset_id,
        base="tiny",
        method=TrainingMethod.SFT,
        path=f"/state/models/{name}",
        created_at=T0,
    )


def _registered_champion(home: Path, sandbox: MobileSandbox) -> ModelRecord:
    """``home``'s catalog with one frozen dataset version (two scripted episodes) and a
    model of it registered and promoted to champion."""
    tasks = sample_tasks(2, 0, sandbox, split=Split.TRAIN)
    policy = ScriptedPolicy(FaultConfig(rate=0.0))
    runs = [run_episode(t, sandbox, policy, round_id="round-a") for t in tasks]
    shards = home / "shards"
    write_shards(runs, shards)
    version = make_version(runs)
    record = _record(version.id)
    with Catalog.open(home / "catalog.duckdb") as catalog:
        catalog.trajectories.ingest([shards])
        assert catalog.datasets.freeze(version)
        assert catalog.models.register(record)
        catalog.models.promote(record.id, reason="first deployment", at=T0)
    return record


def _pairs(argv: tuple[str, ...]) -> dict[str, str]:
    """``--flag value`` pairs of a command (every flag takes one value)."""
    assert len(argv) % 2 == 0, argv
    return dict(zip(argv[::2], argv[1::2], strict=True))


def test_the_local_command_serves_the_record_as_the_champion(tmp_path: Path) -> None:
    record = _record()
    settings = ServingSettings(port=PORT, engine="local", max_new_tokens=64, threads=3)
    server = model_server(tmp_path, PORT, settings)
    argv = server.argv(record)

    assert argv[:3] == (sys.executable, "-m", "serving")
    assert _pairs(argv[3:]) == {
        "--model-dir": "/state/models/mobile-planner-r1",
        "--model-id": record.id,
        "--name": "mobile-planner-r1",
        "--port": str(PORT),
        "--served-as": SERVED_AS,
        "--max-new-tokens": "64",
        "--threads": "3",
    }
    assert SERVED_AS == "champion"
    # ``python -m serving`` reads exactly what the server writes.
    args = serving_parser().parse_args(list(argv[3:]))
    assert (args.model_dir, args.model_id, args.name) == (record.path, record.id, record.name)
    assert (args.port, args.served_as, args.max_new_tokens, args.threads) == (
        PORT,
        "champion",
        64,
        3,
    )


def test_the_default_settings_give_their_reply_length_and_torch_threads(tmp_path: Path) -> None:
    server = model_server(tmp_path, PORT, ServingSettings(engine="local"))
    pairs = _pairs(server.argv(_record())[3:])
    assert (pairs["--port"], pairs["--max-new-tokens"], pairs["--threads"]) == (
        str(PORT),
        "256",
        "0",
    )


def test_the_vllm_command_names_the_registry_id_first(tmp_path: Path) -> None:
    record = _record()
    server = model_server(tmp_path, PORT, ServingSettings(engine="vllm"))
    assert server.engine == "vllm"
    assert server.argv(record) == (
        "vllm",
        "serve",
        "/state/models/mobile-planner-r1",
        "--host",
        "127.0.0.1",
        "--port",
        str(PORT),
        "--served-model-name",
        record.id,
        "champion",
        "mobile-planner-r1",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    )


def test_a_model_named_like_the_alias_is_served_under_it_once(tmp_path: Path) -> None:
    record = _record(name="champion")
    argv = model_server(tmp_path, PORT, ServingSettings(engine="vllm")).argv(record)
    start = argv.index("--served-model-name") + 1
    assert argv[start : start + 3] == (record.id, "champion", "--enable-auto-tool-choice")


def test_auto_is_vllm_only_where_vllm_is_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = model_server(tmp_path, PORT, ServingSettings(engine="auto"))
    monkeypatch.setattr("serving.vllm.vllm_available", lambda: False)
    assert server.engine == "local"
    assert server.argv(_record())[:3] == (sys.executable, "-m", "serving")

    monkeypatch.setattr("serving.vllm.vllm_available", lambda: True)
    assert server.engine == "vllm"
    assert server.argv(_record())[:2] == ("vllm", "serve")
    # An engine chosen by name does not ask.
    assert model_server(tmp_path, PORT, ServingSettings(engine="local")).engine == "local"


def test_auto_is_local_here() -> None:
    if shutil.which("vllm") is not None:
        pytest.skip("vllm is installed here")
    assert ModelServer(Path("/nonexistent"), PORT).engine == "local"


def test_the_port_argument_wins_over_the_settings(tmp_path: Path) -> None:
    server = model_server(tmp_path, 9001, ServingSettings(port=8123, max_new_tokens=7))
    assert server.spec.port == 9001 and server.settings.port == 9001
    assert server.settings.max_new_tokens == 7
    assert server.health_url == "http://127.0.0.1:9001/health"
    assert _pairs(server.argv(_record())[3:])["--port"] == "9001"
    assert model_server(tmp_path).spec.port == MODEL_DEFAULT_PORT == 8000


def test_start_without_a_catalog_says_there_is_no_champion(tmp_path: Path) -> None:
    home = tmp_path / "home"
    server = model_server(home, PORT)
    with pytest.raises(ServerError, match="there is no champion to serve yet"):
        server.start()
    assert not server.state_dir.exists()  # no log, no PID file: nothing was started
    assert not (home / "catalog.duckdb").exists()  # nor a catalog created


def test_start_without_a_champion_says_how_to_promote_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    Catalog.open(home / "catalog.duckdb").close()
    server = model_server(home, PORT)
    with pytest.raises(ServerError, match="`flywheel deploy --model ID`"):
        server.start()
    assert not server.pid_file.exists() and not server.log_file.exists()


def test_start_serves_the_champion_of_the_catalog(
    tmp_path: Path, sandbox: MobileSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    champion = _registered_champion(home, sandbox)
    server = model_server(home, PORT, ServingSettings(engine="local"))
    assert server.champion() == champion

    started: list[tuple[str, ...]] = []

    def fake_start(self: ManagedServer) -> ServerStatus:  # stands for the real process
        started.append(self.spec.argv)
        return ServerStatus("model", True, 4242, self.spec.url, True)

    monkeypatch.setattr(ManagedServer, "start", fake_start)
    assert server.start().pid == 4242
    assert started == [server.argv(champion)]
    assert _pairs(started[0][3:])["--model-id"] == champion.id

    # A model given to the server is served instead of the champion.
    other = _record(name="mobile-planner-r2")
    ModelServer(home, PORT, ServingSettings(engine="local"), model=other).start()
    assert _pairs(started[1][3:])["--model-id"] == other.id


def test_a_server_never_started_is_not_running(tmp_path: Path) -> None:
    server = model_server(tmp_path, PORT)
    assert server.status() == ServerStatus(
        "model", running=False, pid=None, url=f"http://127.0.0.1:{PORT}", healthy=False
    )
    assert server.stop() is False
    assert server.state_dir == tmp_path / "servers" / "model"


def test_the_registry_knows_the_model_server(tmp_path: Path) -> None:
    kind = SERVERS["model"]
    assert (kind.title, kind.default_port, kind.section, kind.has_ui) == (
        "Model",
        8000,
        "serving",
        False,
    )
    default = known_server("model", tmp_path)
    assert isinstance(default, ModelServer)
    assert default.spec.port == 8000 and default.spec.health_path == "/health"

    settings = FlywheelSettings(serving=ServingSettings(port=8123, threads=2, engine="local"))
    server = known_server("model", tmp_path, 9002, settings)
    assert isinstance(server, ModelServer)
    assert server.spec.port == 9002
    assert (server.settings.port, server.settings.threads) == (9002, 2)


def test_the_cli_takes_the_model_server_port_from_the_serving_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("FLYWHEEL_"):
            monkeypatch.delenv(name)
    config = tmp_path / "flywheel.toml"
    config.write_text("")
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(config))
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLYWHEEL_SERVING__PORT", "8765")
    monkeypatch.setenv("FLYWHEEL_SERVING__MAX_NEW_TOKENS", "12")

    server = _server("model", None, None)
    assert isinstance(server, ModelServer)
    assert server.spec.port == 8765
    assert server.settings.max_new_tokens == 12
    assert server.state_dir == tmp_path / "home" / "servers" / "model"

    # --port wins over the settings, and the settings follow it.
    chosen = _server("model", tmp_path / "other", 9003)
    assert isinstance(chosen, ModelServer)
    assert (chosen.spec.port, chosen.settings.port) == (9003, 9003)
    assert chosen.state_dir == tmp_path / "other" / "servers" / "model"

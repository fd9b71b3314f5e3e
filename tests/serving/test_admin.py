"""Swapping the served model in place (``/admin/load``), and a server that cannot start."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest

from serving.client import ServingError, health, load_model, probe
from tests.serving.builders import (
    SERVED_ID,
    SERVED_NAME,
    RunningServer,
    serving_argv,
    serving_env,
)

pytestmark = pytest.mark.slow

FIRST, FIRST_NAME, SECOND = SERVED_ID, SERVED_NAME, "model-second"


def test_load_swaps_the_model_without_a_restart(
    server: RunningServer, folders: tuple[Path, Path]
) -> None:
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    hello: list[Any] = [{"role": "user", "content": "hi"}]
    assert client.chat.completions.create(model="champion", messages=hello).model == FIRST

    loaded = load_model(server.base_url, str(folders[1]), SECOND, "tiny-second")
    try:
        assert loaded["model_id"] == SECOND
        assert loaded["replaced"] == FIRST
        now = health(server.base_url)
        assert now is not None
        assert (now["model_id"], now["name"], now["path"]) == (
            SECOND,
            "tiny-second",
            str(folders[1].resolve()),
        )
        assert client.chat.completions.create(model="champion", messages=hello).model == SECOND
        assert [m.id for m in client.models.list()] == ["champion", SECOND, "tiny-second"]
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model=FIRST, messages=hello)
        assert server.process.poll() is None  # the same process
    finally:  # a rollback, which leaves the shared server as the other tests expect it
        back = load_model(server.base_url, str(folders[0]), FIRST, FIRST_NAME)
    assert (back["model_id"], back["replaced"]) == (FIRST, SECOND)
    assert probe(server.base_url) == FIRST


@pytest.mark.parametrize("problem", ["not a model", "fails the probe", "no such folder"])
def test_a_failed_load_keeps_the_old_model_served(
    server: RunningServer, tmp_path: Path, unprobeable: Path, problem: str
) -> None:
    folder = {"not a model": tmp_path, "fails the probe": unprobeable}.get(
        problem, tmp_path / "missing"
    )
    with pytest.raises(ServingError) as raised:
        load_model(server.base_url, str(folder), "model-bad", "bad")

    message = str(raised.value)
    assert str(folder) in message
    expected = {
        "not a model": "config.json",
        "fails the probe": "probe",
        "no such folder": "no such",
    }
    assert expected[problem] in message
    now = health(server.base_url)
    assert now is not None
    assert now["model_id"] == FIRST
    assert probe(server.base_url) == FIRST


def test_a_load_against_no_server_is_a_serving_error(tmp_path: Path) -> None:
    from flows.servers import free_port

    with pytest.raises(ServingError, match="does not answer"):
        load_model(f"http://127.0.0.1:{free_port()}", str(tmp_path), "m", "n", timeout_s=2)


def test_a_folder_that_does_not_load_exits_nonzero_with_the_reason(tmp_path: Path) -> None:
    argv = serving_argv(tmp_path / "missing", "model-x", "x", 1)
    done = subprocess.run(
        argv, check=False, capture_output=True, text=True, env=serving_env(), timeout=120
    )

    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("serving: error: path: ")
    assert "no such directory" in lines[0]

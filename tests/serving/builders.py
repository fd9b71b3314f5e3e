"""Tiny model folders and a real ``python -m serving`` process, for the serving tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agents.policies.base import TaskView
from agents.policies.chat_format import format_tools, opening_messages
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.servers import free_port
from serving.client import health
from serving.command import serve_command
from training.base_model import BaseModel, render, save_model, tiny_model, train_tokenizer

MAX_NEW_TOKENS = 16
SERVED_ID = "model-0a1b2c"
SERVED_NAME = "tiny-served"
START_TIMEOUT_S = 90.0


def sandbox_corpus(n: int = 3, seed: int = 0) -> list[str]:
    """Opening conversations of sandbox tasks, rendered with all the sandbox's tools (what
    an episode's prompt holds), so the tokenizer keeps such a prompt short."""
    sandbox = MobileSandbox()
    texts = []
    for task in sample_tasks(n, seed, sandbox):
        sandbox.reset(task)
        view = TaskView(
            goal=task.goal,
            tools=sandbox.tool_specs(),
            subagents=sandbox.subagent_specs(),
            max_steps=4,
        )
        texts.append(render(opening_messages(view), format_tools(view)))
    return texts


def model_folders(root: Path, seeds: tuple[int, ...]) -> list[Path]:
    """One tiny model folder per seed under ``root``, sharing one tokenizer."""
    tokenizer = train_tokenizer(sandbox_corpus())
    folders = []
    for seed in seeds:
        folder = root / f"tiny-{seed}"
        save_model(BaseModel(tiny_model(tokenizer, seed=seed), tokenizer, "tiny"), folder)
        folders.append(folder)
    return folders


def serving_argv(folder: Path, model_id: str, name: str, port: int) -> list[str]:
    return list(serve_command(folder, model_id, name, port, max_new_tokens=MAX_NEW_TOKENS))


def serving_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class RunningServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def running_server(folder: Path, model_id: str, name: str, log: Path) -> Iterator[RunningServer]:
    """``python -m serving`` on a free port, once its ``/health`` answers; killed after."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            serving_argv(folder, model_id, name, port),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=serving_env(),
        )
    server = RunningServer(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_healthy(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_healthy(server: RunningServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if health(server.base_url, timeout_s=1.0) is not None:
            return
        if server.process.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(
        f"python -m serving did not answer {server.base_url}/health "
        f"(exit status {server.process.poll()}):\n{server.log.read_text()}"
    )


def copy_folder(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target

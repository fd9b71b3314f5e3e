"""Two tiny model folders and one ``python -m serving`` process per test process (xdist
worker), and one torch thread (as in training's tests: the workers share the cores)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.serving.builders import (
    SERVED_ID,
    SERVED_NAME,
    RunningServer,
    model_folders,
    running_server,
)


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny models with one tokenizer, different weights."""
    first, second = model_folders(tmp_path_factory.mktemp("models"), (0, 1))
    return first, second


@pytest.fixture(scope="session")
def unprobeable(tmp_path_factory: pytest.TempPathFactory, folders: tuple[Path, Path]) -> Path:
    """A folder that loads but whose chat template fails to render: it fails the probe."""
    from transformers import AutoTokenizer

    from tests.serving.builders import copy_folder

    folder = copy_folder(folders[0], tmp_path_factory.mktemp("broken") / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokenizer.chat_template = "{{ raise_exception('this template renders nothing') }}"
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def server(
    folders: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """A real server serving ``folders[0]`` as ``SERVED_ID``; a test that swaps its model
    swaps it back."""
    log = tmp_path_factory.mktemp("server") / "serving.log"
    with running_server(folders[0], SERVED_ID, SERVED_NAME, log) as running:
        yield running

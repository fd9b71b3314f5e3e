"""One torch thread per test process: the suite runs one xdist worker per core, and
torch's default (a thread per core in each worker) makes token-by-token generation
several times slower when the workers contend (see ``flywheel bench training --threads``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

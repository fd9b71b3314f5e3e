"""The greedy policy a local model is evaluated with, in this process or in workers.

A small model on the CPU is evaluated by single-threaded worker processes, one a core
(``episode_workers``): its replies are too little work for torch's threads (two threads
gain 1.1-1.2x on the nano base), while two processes run nearly twice as many episodes.
A large model (``SMALL_MODEL_PARAMETERS`` or more), a model on a GPU, one core, or an
evaluation too short to repay starting the workers (``MIN_WORKER_EPISODES``) stays in
this process, as does a run that asks for one process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from tempfile import TemporaryDirectory

import torch
from transformers import PreTrainedModel

from agents.policies.base import Policy
from training.base_model import BaseModel, load_base, save_model
from training.chat_model import LocalChatModel
from training.episode_workers import PolicyWorkers

SMALL_MODEL_PARAMETERS = 50_000_000
"""Below this many parameters a reply is latency-bound, and processes beat threads."""

MIN_WORKER_EPISODES = 100
"""Fewer episodes than this run in this process: a worker takes seconds to start
(torch and the sandbox imported, the model loaded), a nano episode well under one."""

MAX_WORKERS = 8


def evaluation_processes(model: PreTrainedModel, episodes: int) -> int:
    """How many worker processes evaluate ``episodes`` episodes of ``model`` (module
    docstring); 1: none, this process does."""
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    small = sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMETERS
    if not (on_cpu and small) or episodes < MIN_WORKER_EPISODES:
        return 1
    return min(os.cpu_count() or 1, MAX_WORKERS)


@contextmanager
def greedy_policy(
    base: BaseModel,
    name: str,
    *,
    max_new_tokens: int,
    max_context: int,
    processes: int,
    folder: Path | None = None,
) -> Iterator[Policy | PolicyWorkers]:
    """``base``'s greedy policy named ``name``: in this process when ``processes`` is 1,
    else in that many workers, which load the model from ``folder`` (where it is saved
    already) or from a copy saved for them and deleted when the context ends."""
    if processes == 1:
        yield _greedy(base, name, max_new_tokens, max_context)
        return
    with ExitStack() as stack:
        if folder is None:
            folder = Path(stack.enter_context(TemporaryDirectory(prefix="flywheel-eval-")))
            save_model(base, folder)
        build = partial(worker_policy, str(folder), name, max_new_tokens, max_context)
        yield PolicyWorkers(build, processes)


def worker_policy(folder: str, name: str, max_new_tokens: int, max_context: int) -> Policy:
    """A worker process's greedy policy: the model saved in ``folder``, on one thread."""
    torch.set_num_threads(1)
    return _greedy(load_base(folder), name, max_new_tokens, max_context)


def _greedy(base: BaseModel, name: str, max_new_tokens: int, max_context: int) -> LocalChatModel:
    return LocalChatModel(
        base.model,
        base.tokenizer,
        name=name,
        temperature=0.0,
        max_new_tokens=max_new_tokens,
        max_context=max_context,
    )

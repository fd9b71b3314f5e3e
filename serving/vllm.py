"""Serving on a GPU machine: the ``vllm serve`` command for a model folder.

vLLM speaks the same OpenAI-compatible API as the CPU server, and with the ``hermes``
tool-call parser it reads the ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
blocks our chat template writes. Differences that matter to callers:

- vLLM answers with the *first* of its served names as a completion's ``model``: put the
  registry id first (``model_names``) so that completions name the model that answered,
  as the CPU server's do.
- Its ``/health`` is an empty 200 (``serving.client.health`` then gives ``status`` and,
  from ``/v1/models``, the first served name as ``model_id``), and it has no
  ``/admin/load``: swapping its model means stopping the process and starting
  ``vllm serve`` on the new folder.

Nothing here runs vLLM: there is no GPU nor vLLM where the tests run, so only the
command is tested.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from contract import InvalidInputError

__all__ = ["VLLM", "model_names", "vllm_argv", "vllm_available"]

VLLM = "vllm"
HOST = "127.0.0.1"
TOOL_CALL_PARSER = "hermes"


def vllm_available() -> bool:
    """True when the ``vllm`` executable is on PATH and torch sees a CUDA GPU."""
    if shutil.which(VLLM) is None:
        return False
    import torch  # only where vLLM is installed: the check above is cheap

    return bool(torch.cuda.is_available())


def model_names(model_id: str, name: str, served_as: str = "champion") -> tuple[str, ...]:
    """The names a model answers to, its registry id first (what vLLM reports)."""
    return tuple(dict.fromkeys((model_id, served_as, name)))


def vllm_argv(
    model_dir: Path | str,
    port: int,
    served_names: Sequence[str],
    max_model_len: int | None = None,
) -> tuple[str, ...]:
    """``vllm serve`` for ``model_dir`` on 127.0.0.1:``port``, answering to
    ``served_names`` (in order, duplicates dropped; the first is what completions carry as
    ``model``), with automatic tool choice and the ``hermes`` tool-call parser."""
    if not 1 <= port <= 65535:
        raise InvalidInputError("port", f"{port} is not a port", ["1 to 65535"])
    names = tuple(dict.fromkeys(n for n in served_names if n))
    if not names:
        raise InvalidInputError("served_names", "at least one non-empty name is needed")
    if max_model_len is not None and max_model_len < 1:
        raise InvalidInputError("max_model_len", f"{max_model_len} is below 1")
    argv = [VLLM, "serve", str(model_dir), "--host", HOST, "--port", str(port)]
    argv += ["--served-model-name", *names]
    argv += ["--enable-auto-tool-choice", "--tool-call-parser", TOOL_CALL_PARSER]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    return tuple(argv)

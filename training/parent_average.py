"""A continued run's weights averaged with its parent's, once training ends.

A continuation of the loop's champion swings single templates (one lost a third of its
development successes in a turn), and the promotion gate refuses a drop of 0.02 in any
capability. Averaging the fine-tuned weights with those it started from keeps what the
parent knew and most of what the run learned (WiSE-FT, Wortsman et al. 2022; model soups).
Measured on the later candidates of two loops, an average lost no capability where its
candidate lost one, and kept most of a clear gain (README, "Averaging with the parent").

The average is taken parameter by parameter, ``(1 - share) * trained + share * parent``;
buffers (rotary frequencies and the like) are the trained model's, and the parent's weights
are read from its folder, so training holds no second copy of the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from contract import FlywheelError


class ParentMismatchError(FlywheelError):
    """The parent's parameters are not the trained model's (names or shapes differ)."""


@dataclass(frozen=True)
class ParentAverage:
    """What was averaged, as ``training.json`` records it."""

    parent: str
    """The folder the parent's weights were read from."""
    share: float
    """The parent's share of every parameter."""
    parameters: int
    """Parameters averaged (tied ones once)."""

    def to_json(self) -> dict[str, Any]:
        return {"parent": self.parent, "share": self.share, "parameters": self.parameters}


def average_with_parent(model: PreTrainedModel, parent: Path, share: float) -> ParentAverage:
    """Move every parameter of ``model`` towards the parent's (in place) by ``share``:
    ``share`` 0 leaves it as trained, 1 would restore the parent. The parent is loaded
    from ``parent`` on the CPU, and dropped on return."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"share {share} is outside [0, 1)")
    weights = AutoModelForCausalLM.from_pretrained(parent, local_files_only=True).state_dict()
    return ParentAverage(str(parent), share, average_parameters(model, weights, share))


def average_parameters(
    model: torch.nn.Module, parent: dict[str, torch.Tensor], share: float
) -> int:
    """``average_with_parent`` on a state dict already loaded: the number of parameters
    (tensors) averaged. Every floating parameter of ``model`` must be in ``parent`` with
    its shape, checked before any is changed."""
    params = [(n, p) for n, p in model.named_parameters() if p.is_floating_point()]
    missing = [n for n, _ in params if n not in parent]
    wrong = [n for n, p in params if n in parent and parent[n].shape != p.shape]
    problems = [f"missing {', '.join(missing[:3])}"] if missing else []
    if wrong:
        problems.append(f"other shapes for {', '.join(wrong[:3])}")
    if problems:
        raise ParentMismatchError(
            "the parent's weights do not fit the trained model: " + "; ".join(problems)
        )
    if share == 0.0:
        return 0
    with torch.no_grad():
        for name, param in params:
            param.lerp_(parent[name].to(device=param.device, dtype=param.dtype), share)
    return len(params)

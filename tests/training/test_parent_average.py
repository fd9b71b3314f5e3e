"""A continued run's weights averaged with its parent's: the arithmetic on known weights,
tied parameters once, buffers left as trained, a parent that does not fit refused before
anything changes, and a parent read from a saved model folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from training.parent_average import (
    ParentMismatchError,
    average_parameters,
    average_with_parent,
)


class Tied(torch.nn.Module):
    """Two layers sharing one weight (as tied embeddings do), a bias, and an integer
    buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(3, 3)
        self.second = torch.nn.Linear(3, 3)
        self.second.weight = self.first.weight
        self.register_buffer("steps", torch.tensor([7]))


def _filled(module: Tied, value: float) -> Tied:
    with torch.no_grad():
        for param in module.parameters():
            param.fill_(value)
    return module


def test_each_parameter_moves_towards_the_parent_by_the_share() -> None:
    model = _filled(Tied(), 1.0)
    parent = {name: torch.full_like(p, 5.0) for name, p in model.state_dict().items()}
    parent["steps"] = torch.tensor([99])

    averaged = average_parameters(model, parent, 0.25)

    # 0.75 * 1 + 0.25 * 5, the tied weight once (twice would give 2.75).
    assert averaged == 3  # first.weight (shared), first.bias, second.bias
    for name, param in model.named_parameters():
        assert torch.equal(param, torch.full_like(param, 2.0)), name
    assert model.second.weight is model.first.weight
    assert model.get_buffer("steps").tolist() == [7], "buffers stay as trained"


def test_share_zero_leaves_the_model_as_trained() -> None:
    model = _filled(Tied(), 1.0)
    parent = {name: torch.zeros_like(p) for name, p in model.state_dict().items()}
    assert average_parameters(model, parent, 0.0) == 0
    assert all(torch.equal(p, torch.ones_like(p)) for p in model.parameters())


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda parent: parent.pop("first.bias"), "missing first.bias"),
        (
            lambda parent: parent.__setitem__("second.bias", torch.zeros(4)),
            "other shapes for second.bias",
        ),
    ],
)
def test_a_parent_that_does_not_fit_is_refused_before_anything_changes(
    change: object, says: str
) -> None:
    model = _filled(Tied(), 1.0)
    parent = {name: torch.zeros_like(p) for name, p in model.state_dict().items()}
    change(parent)  # type: ignore[operator]
    with pytest.raises(ParentMismatchError, match=says):
        average_parameters(model, parent, 0.5)
    assert all(torch.equal(p, torch.ones_like(p)) for p in model.parameters())


def _llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def test_the_parent_is_read_from_its_saved_folder(tmp_path: Path) -> None:
    parent = _llama(seed=0)
    parent.save_pretrained(tmp_path / "parent")
    trained = _llama(seed=1)
    before = {n: p.detach().clone() for n, p in trained.named_parameters()}
    expected = {n: 0.4 * before[n] + 0.6 * p.detach() for n, p in parent.named_parameters()}

    record = average_with_parent(trained, tmp_path / "parent", 0.6)

    assert record.to_json() == {
        "parent": str(tmp_path / "parent"),
        "share": 0.6,
        "parameters": len(expected),
    }
    for name, param in trained.named_parameters():
        assert torch.allclose(param, expected[name], atol=1e-6), name
    assert not torch.equal(trained.model.embed_tokens.weight, before["model.embed_tokens.weight"])


@pytest.mark.parametrize("share", [-0.1, 1.0, 1.5])
def test_a_share_outside_zero_to_one_is_refused(tmp_path: Path, share: float) -> None:
    with pytest.raises(ValueError, match=f"share {share} is outside"):
        average_with_parent(_llama(seed=0), tmp_path / "nowhere", share)

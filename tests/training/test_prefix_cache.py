"""The prefix cache: a reply prefills only what the last generation did not compute, with
the logits of a full prefill, and never reuses keys of other weights or other tokens."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from agents.policies.chat_format import format_tools, opening_messages, task_view
from agents.runner import run_episode
from contract import TaskSpec
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from tests.training.builders import base_for_task
from training.base_model import BaseModel
from training.chat_model import LocalChatModel
from training.prefix_cache import PrefixCache, common_prefix

MAX_STEPS = 3


@pytest.fixture(scope="module")
def task() -> TaskSpec:
    return instantiate(template_named("toggle_phone_setting"), 3, MobileSandbox())


@pytest.fixture(scope="module")
def base(task: TaskSpec) -> BaseModel:
    return base_for_task(task, MAX_STEPS)


def _policy(base: BaseModel, prefix: PrefixCache | None) -> LocalChatModel:
    return LocalChatModel(
        base.model, base.tokenizer, name="tiny", temperature=0.0, max_new_tokens=6, prefix=prefix
    )


def _prompt(base: BaseModel, task: TaskSpec) -> list[int]:
    policy = _policy(base, None)
    view = task_view(task, MobileSandbox(), MAX_STEPS)
    return policy.encode(policy.render(opening_messages(view), format_tools(view), prompt=True))


def _last_logits(
    base: BaseModel, ids: list[int], prefix: PrefixCache | None = None
) -> torch.Tensor:
    """The next token's logits after ``ids``: a full prefill, or only what ``prefix`` lacks."""
    with torch.no_grad():
        if prefix is None:
            logits: torch.Tensor = base.model(input_ids=torch.tensor([ids])).logits[0, -1]
            return logits
        cache = prefix.for_context(base.model, ids)
        rest = torch.tensor([ids[cache.get_seq_length() :]])
        logits = base.model(input_ids=rest, cache=cache, use_cache=True).logits[0, -1]
        prefix.keep(ids)
        return logits


def test_episodes_reuse_their_own_context_and_reply_as_without_reuse(
    base: BaseModel, task: TaskSpec
) -> None:
    reusing = _policy(base, PrefixCache())
    episodes = {}
    for label, policy in (("full", _policy(base, None)), ("reused", reusing)):
        run_episode(task, MobileSandbox(), policy, max_steps=MAX_STEPS)  # a first task
        trajectory = run_episode(task, MobileSandbox(), policy, max_steps=MAX_STEPS)
        trace = policy.sessions[-1].trace
        assert trace is not None and len(trajectory.steps) == MAX_STEPS
        episodes[label] = (trace.completion_ids, [s.model_output for s in trajectory.steps])
    assert episodes["reused"] == episodes["full"]
    prefix = reusing.prefix
    assert prefix is not None
    # Five of six generations started from the last one's context: at least the prompt.
    assert prefix.reused_tokens >= 5 * (len(_prompt(base, task)) - 1)


def test_reused_keys_give_the_logits_of_a_full_prefill(base: BaseModel, task: TaskSpec) -> None:
    prompt = _prompt(base, task)
    prefix = PrefixCache()
    new, _ = _policy(base, prefix).generate(prompt)
    longer = [*prompt, *new, *prompt[:7]]  # the reply, then what the harness adds
    reused_before = prefix.reused_tokens
    logits = _last_logits(base, longer, prefix)
    assert prefix.reused_tokens - reused_before == len(prompt) + len(new) - 1
    torch.testing.assert_close(logits, _last_logits(base, longer), atol=1e-5, rtol=1e-4)


def test_a_context_that_parts_from_the_cache_keeps_only_the_shared_start(
    base: BaseModel, task: TaskSpec
) -> None:
    prompt = _prompt(base, task)
    prefix = PrefixCache()
    _policy(base, prefix).generate(prompt)
    other = [*prompt[:10], *reversed(prompt[10:])]
    shared = common_prefix(prompt, other)
    assert 10 <= shared < len(prompt) - 1
    cache = prefix.for_context(base.model, other)
    assert cache.get_seq_length() == shared and prefix.ids == other[:shared]
    with torch.no_grad():
        rest = torch.tensor([other[shared:]])
        logits = base.model(input_ids=rest, cache=cache, use_cache=True).logits[0, -1]
    torch.testing.assert_close(logits, _last_logits(base, other), atol=1e-5, rtol=1e-4)
    # The same context again: every token but the last is reused, never all of them.
    prefix.keep(other)
    assert prefix.for_context(base.model, other).get_seq_length() == len(other) - 1


def test_changed_weights_start_a_fresh_cache(task: TaskSpec) -> None:
    base = base_for_task(task, MAX_STEPS, seed=1)  # its own: this test changes the weights
    prompt = _prompt(base, task)
    prefix = PrefixCache()
    policy = _policy(base, prefix)
    policy.generate(prompt)
    optimizer = torch.optim.SGD(base.model.parameters(), lr=0.5)
    base.model.train()
    loss = base.model(input_ids=torch.tensor([prompt]), labels=torch.tensor([prompt])).loss
    loss.backward()
    optimizer.step()  # in place, as every trainer's step is
    reused_before = prefix.reused_tokens
    after = policy.generate(prompt)
    assert prefix.reused_tokens == reused_before  # nothing of the old weights' keys
    assert after == _policy(base, None).generate(prompt)
    assert base.model.training  # generation restores the mode it found


def test_a_cache_in_use_is_left_alone_by_a_second_generation(
    base: BaseModel, task: TaskSpec
) -> None:
    prompt = _prompt(base, task)
    prefix = PrefixCache()
    policy = _policy(base, prefix)
    first = policy.generate(prompt)
    held = list(prefix.ids)
    copy = replace(policy, max_new_tokens=4)  # a server's per-request copy shares it
    assert copy.prefix is prefix
    with prefix.claimed() as claimed:
        assert claimed is prefix
        second = copy.generate(prompt)  # meanwhile: without the cache
        assert prefix.ids == held
    assert second[0] == first[0][: len(second[0])]  # greedy: the same start
    assert prefix.reused_tokens == 0

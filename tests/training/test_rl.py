"""Online RL with CARE on TRL's GRPO machinery: the reward function hands TRL CARE's
advantages, and a short run on real sandbox rollouts changes the model."""

from __future__ import annotations

import dataclasses
import math
from itertools import islice
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from trl.trainer.utils import RepeatSampler

from contract import InvalidInputError, Split, TaskSpec
from envs.bfcl.construct import bfcl_specs
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from storage import Catalog
from tests.training.builders import FrozenDataset, frozen_dataset, train_tasks
from training.base_model import BaseModel
from training.care import Regime, Rollout, care_group
from training.rl import RlResult, WeightedRepeatSampler, _CareScorer, _RunState, run_rl
from training.settings import RlSettings, SftSettings, TrainRequest
from training.sft import run_sft
from training.trainer import TrainingData, prepare
from training.trainer import load_base as trainer_load_base


def _column(groups: list[list[tuple[bool, float, int, int]]], index: int) -> list[Any]:
    return [rollout[index] for group in groups for rollout in group]


def test_the_reward_function_hands_trl_care_advantages_group_by_group() -> None:
    settings = RlSettings(group_size=4, max_new_tokens=50, max_steps=4)
    state = _RunState(settings, RlResult())
    groups = [  # (success, progress, output tokens, tool calls)
        [(False, 0.0, 40, 1), (False, 0.5, 80, 2), (False, 0.25, 60, 1), (False, 0.0, 20, 0)],
        [(True, 1.0, 40, 1), (False, 0.5, 80, 2), (True, 1.0, 60, 1), (False, 0.0, 20, 0)],
        [(True, 1.0, 40, 1), (True, 1.0, 80, 2), (True, 1.0, 60, 1), (True, 1.0, 20, 1)],
    ]
    kwargs = {
        "success": _column(groups, 0),
        "progress": _column(groups, 1),
        "output_tokens": _column(groups, 2),
        "tool_calls": _column(groups, 3),
        "task_id": [f"task-{g}" for g in range(3) for _ in range(4)],
    }
    scores = _CareScorer(state)(prompts=[None] * 12, completions=[None] * 12, **kwargs)

    assert [g.regime for g in state.result.groups] == [
        Regime.PROGRESS,
        Regime.CONSOLIDATION,
        Regime.EFFICIENCY,
    ]
    for g, group in enumerate(groups):
        expected = care_group(
            [Rollout(*r) for r in group], settings.budget_for(None), settings.care
        )
        part = scores[4 * g : 4 * g + 4]
        assert part == list(expected.advantages)
        # TRL with scale_rewards="none" subtracts the group mean: CARE's sum to zero.
        assert abs(sum(a for a in part if a is not None)) < 1e-12
        assert state.result.groups[g].rewards == expected.rewards
        assert state.result.groups[g].task_id == f"task-{g}"
    efficiency = state.result.groups[2]
    assert max(abs(a) for a in efficiency.advantages) < 0.2  # the anchor keeps them small


def test_bad_rl_settings_are_refused_by_name() -> None:
    with pytest.raises(InvalidInputError) as raised:
        RlSettings.of({"group_size": 1})
    assert raised.value.field == "rl.group_size"
    with pytest.raises(InvalidInputError) as raised:
        RlSettings.of({"p_low": 0.9, "p_high": 0.5})
    assert "p_low" in str(raised.value)
    with pytest.raises(InvalidInputError) as raised:
        RlSettings.of({"epsilon_high": 1.5})
    assert raised.value.field == "rl.epsilon_high"
    with pytest.raises(InvalidInputError) as raised:
        RlSettings.of({"updats": 3})
    assert raised.value.field == "rl.updats"


def _already_done(task: TaskSpec) -> TaskSpec:
    """``task`` with a verifier its initial state already meets (the setting keeps its
    value): a task the untrained model cannot fail, so its groups are all-success."""
    data = task.model_dump(mode="json", exclude={"id"})
    data["verifier"]["checks"][0]["where"][1]["value"] = True
    data["goal"] = "Leave my Wi-Fi as it is."
    return TaskSpec.model_validate(data)


@pytest.mark.slow
def test_a_short_rl_run_changes_the_model_and_records_care_rewards(tmp_path: Path) -> None:
    sandbox = MobileSandbox()
    wifi_off = instantiate(template_named("toggle_phone_setting"), 3, sandbox)
    done = _already_done(wifi_off)
    dataset = frozen_dataset(tmp_path, train_tasks("toggle_phone_setting", 4))
    request = TrainRequest.of({"dataset_id": dataset.version.id})
    with Catalog.open(dataset.catalog_path) as catalog:
        data = prepare(catalog, tmp_path, request)
    base: BaseModel = trainer_load_base(request, data)
    # A little SFT, so replies end at varied lengths (cost differs between rollouts).
    run_sft(
        base,
        data.sft,
        SftSettings(max_steps=20, batch_size=1, learning_rate=5e-3, max_length=4096),
        tmp_path / "sft",
    )
    before = {name: p.detach().clone() for name, p in base.model.named_parameters()}

    settings = RlSettings(
        updates=3,
        group_size=4,
        tasks_per_update=2,
        max_steps=2,
        max_new_tokens=40,
        schedule_every=1,
    )
    # A scripted development probe (success falls after the first update): the schedule
    # then lowers lambda_eff and raises p_high, and the third update rewards with them.
    probes = iter([(0.5, 0.3), (0.0, 0.3), (0.0, 0.3)])
    result = run_rl(
        base, [done, wifi_off], settings, tmp_path / "rl", dev_probe=lambda _: next(probes)
    )

    assert result.trajectories == settings.updates * settings.tasks_per_update * 4
    assert [u.update for u in result.curve] == [1, 2, 3]
    moved = {move.parameter: (step, move) for step, move in result.moves}
    assert moved["lambda_eff"][0] == 2 and moved["lambda_eff"][1].after < settings.lambda_eff
    assert result.final_care.lambda_eff == moved["lambda_eff"][1].after
    assert {g.care.lambda_eff for g in result.groups if g.update == 3} == {
        result.final_care.lambda_eff
    }
    assert {g.fingerprint for g in result.groups} == {done.fingerprint, wifi_off.fingerprint}
    assert len(result.groups) == settings.updates * settings.tasks_per_update
    assert [u.groups for u in result.curve] == [settings.tasks_per_update] * settings.updates
    assert all(
        u.informative == sum(g.informative for g in result.groups if g.update == u.update)
        for u in result.curve
    )
    assert result.informative_share > 0
    # The loss of one pass over fresh rollouts is about 0; the gradient norm shows the move.
    moving = [u for u in result.curve if u.informative]
    assert moving and all(u.grad_norm is not None and u.grad_norm > 0 for u in moving)
    assert moving[0].to_json()["grad_norm"] == moving[0].grad_norm
    changed = [n for n, p in base.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "updates with non-zero advantages must move the weights"
    assert Regime.EFFICIENCY in result.regimes_met
    budget = settings.budget_for(None)
    for group in result.groups:
        care = group.care
        for s, p, e, r, tokens in zip(
            group.successes,
            group.progress,
            group.costs,
            group.rewards,
            group.output_tokens,
            strict=True,
        ):
            if group.regime is Regime.EFFICIENCY:
                assert math.isclose(r, float(s) - care.lambda_eff * e)
            elif group.regime is Regime.PROGRESS:
                assert math.isclose(r, float(s) + care.lambda_prog * p)
            else:
                assert r == float(s)
            assert tokens <= budget.output_tokens
            # The cost is the recorded tokens' share of the budget plus the calls' share.
            token_part = care.token_weight * min(1.0, tokens / budget.output_tokens)
            assert token_part - 1e-12 <= e <= token_part + (1.0 - care.token_weight) + 1e-12
        if group.regime is Regime.EFFICIENCY:
            assert all(group.successes)
    spread = [g for g in result.groups if len(set(g.costs)) > 1]
    assert any(g.regime is Regime.EFFICIENCY for g in spread)


def test_fewer_rl_tasks_than_one_update_takes_are_refused(tmp_path: Path) -> None:
    """TRL would drop the short batch and train nothing; the run is refused instead."""
    (task,) = train_tasks("toggle_phone_setting", 1)
    with pytest.raises(InvalidInputError) as refused:
        run_rl(cast(BaseModel, None), [task], RlSettings(tasks_per_update=2), tmp_path)
    assert refused.value.field == "rl.tasks_per_update"
    assert "1 RL task" in str(refused.value)


@pytest.fixture
def prepared(tmp_path: Path) -> tuple[BaseModel, TrainingData, FrozenDataset]:
    """The tiny base before any training, and the training data of three tasks it cannot
    do: every rollout fails with no progress, so every group's rewards are equal."""
    dataset = frozen_dataset(tmp_path, train_tasks("toggle_phone_setting", 3))
    request = TrainRequest.of({"dataset_id": dataset.version.id})
    with Catalog.open(dataset.catalog_path) as catalog:
        data = prepare(catalog, tmp_path, request)
    return trainer_load_base(request, data), data, dataset


@pytest.fixture
def untrained(
    prepared: tuple[BaseModel, TrainingData, FrozenDataset],
) -> tuple[BaseModel, list[TaskSpec]]:
    base, data, _ = prepared
    return base, list(data.rl_tasks)


def _weights(base: BaseModel) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in base.model.named_parameters()}


def test_groups_with_equal_rewards_are_replaced_counted_and_move_nothing(
    untrained: tuple[BaseModel, list[TaskSpec]], tmp_path: Path
) -> None:
    base, tasks = untrained
    before = _weights(base)
    settings = RlSettings(
        updates=1,
        group_size=2,
        tasks_per_update=1,
        max_steps=1,
        max_new_tokens=8,
        resamples=2,
        probe_tasks=0,
    )
    result = run_rl(base, tasks, settings, tmp_path / "rl")

    (update,) = result.curve
    assert [g.skipped for g in result.groups] == [True, True, False]
    assert len({g.task_id for g in result.groups}) == 3  # each replacement another task
    assert (update.groups, update.informative, update.skipped) == (3, 0, 2)
    assert update.informative_share == 0.0 and result.informative_share == 0.0
    assert update.rollouts == 2  # the group that reached the loss
    assert update.grad_norm == 0.0
    assert update.movement().endswith("gradient norm 0.0000"), "a flat update says so"
    unlogged = dataclasses.replace(update, grad_norm=None)
    assert unlogged.movement().endswith(", gradient norm -"), "a norm not logged: a dash"
    tiny_negative = dataclasses.replace(update, loss=-0.00001, grad_norm=0.5)
    assert tiny_negative.movement() == "loss 0.0000, gradient norm 0.5000", "no -0.0000"
    assert result.trajectories == 3 * 2
    assert all(not g.informative and set(g.advantages) == {0.0} for g in result.groups)
    assert all(torch.equal(p, before[n]) for n, p in base.model.named_parameters())
    assert update.to_json()["skipped"] == 2


def test_rl_draws_its_tasks_by_the_summed_weight_of_their_rows(
    prepared: tuple[BaseModel, TrainingData, FrozenDataset], tmp_path: Path
) -> None:
    base, data, dataset = prepared
    summed: dict[str, float] = {}
    for member in dataset.version.members:
        summed[member.task_id] = summed.get(member.task_id, 0.0) + member.weight
    assert data.rl_weights == summed  # every row of the export, whatever SFT chose

    never, heavy, light = (t.id for t in data.rl_tasks)
    weights = {never: 0.0, heavy: 3.0, light: 1.0}
    settings = RlSettings(
        updates=3,
        group_size=2,
        tasks_per_update=1,
        max_steps=1,
        max_new_tokens=8,
        resamples=2,
        probe_tasks=0,
    )
    drawn = run_rl(base, data.rl_tasks, settings, tmp_path / "w", weights=weights)

    # Each update: a flat group of one weighted task, replaced by the other; then no task
    # of weight above 0 is left untried, so that group stays.
    assert drawn.weighted and [u.groups for u in drawn.curve] == [2, 2, 2]
    assert [g.skipped for g in drawn.groups] == [True, False] * 3
    assert {g.task_id for g in drawn.groups} == {heavy, light}
    uniform = settings.model_copy(update={"weighted": False})
    spread = run_rl(base, data.rl_tasks, uniform, tmp_path / "u", weights=weights)
    assert not spread.weighted and never in {g.task_id for g in spread.groups}
    unweighted = run_rl(base, data.rl_tasks, settings, tmp_path / "n", weights=None)
    assert not unweighted.weighted and [u.groups for u in unweighted.curve] == [3, 3, 3]


def test_rl_task_weights_a_draw_cannot_use_are_refused(
    untrained: tuple[BaseModel, list[TaskSpec]], tmp_path: Path
) -> None:
    base, tasks = untrained
    settings = RlSettings(updates=1, group_size=2, tasks_per_update=1, probe_tasks=0)
    for weights in ({t.id: 0.0 for t in tasks}, {t.id: -1.0 for t in tasks}):
        with pytest.raises(InvalidInputError) as refused:
            run_rl(base, tasks, settings, tmp_path, weights=weights)
        assert refused.value.field == "weight" and "RL task" in str(refused.value)


def test_the_weighted_sampler_lays_batches_out_as_trl_does() -> None:
    layout = {"mini_repeat_count": 3, "batch_size": 2, "repeat_count": 2}
    equal = WeightedRepeatSampler([1.0] * 7, **layout, seed=4)
    indices = list(equal)
    trl = RepeatSampler(range(7), mini_repeat_count=3, batch_size=2, repeat_count=2)
    assert len(indices) == len(equal) == len(trl)
    chunks = [indices[i : i + 12] for i in range(0, len(indices), 12)]
    for chunk in chunks:  # [a a a b b b] twice: a group per task, the batch repeated
        assert chunk[:6] == chunk[6:]
        assert chunk[:3] == [chunk[0]] * 3 and chunk[3:6] == [chunk[3]] * 3
    assert indices == list(WeightedRepeatSampler([1.0] * 7, **layout, seed=4))
    assert indices != list(WeightedRepeatSampler([1.0] * 7, **layout, seed=5))
    only = WeightedRepeatSampler([0, 0, 0, 2.5, 0, 0, 0], **layout, seed=4)
    assert set(only) == {3}


def test_rl_does_not_start_from_a_checkpoint_that_gives_no_signal(
    untrained: tuple[BaseModel, list[TaskSpec]], tmp_path: Path
) -> None:
    base, tasks = untrained
    before = _weights(base)
    settings = RlSettings(updates=2, group_size=2, tasks_per_update=1, max_steps=1, probe_tasks=2)
    result = run_rl(base, tasks, settings, tmp_path / "rl")

    assert result.not_run is not None and "0 of 2 RL tasks" in result.not_run
    assert result.curve == [] and result.groups == [] and result.trajectories == 0
    assert all(torch.equal(p, before[n]) for n, p in base.model.named_parameters())


@pytest.mark.slow
def test_rl_rolls_bfcl_tasks_out_on_bfcl_s_world(tmp_path: Path) -> None:
    dataset = frozen_dataset(tmp_path, train_tasks("toggle_phone_setting", 2))
    request = TrainRequest.of({"dataset_id": dataset.version.id})
    with Catalog.open(dataset.catalog_path) as catalog:
        data = prepare(catalog, tmp_path, request)
    base: BaseModel = trainer_load_base(request, data)
    bfcl = list(islice(bfcl_specs(Split.TRAIN), 2))
    settings = RlSettings(
        updates=1, group_size=2, tasks_per_update=2, max_steps=2, max_new_tokens=16, probe_tasks=0
    )

    result = run_rl(base, bfcl, settings, tmp_path / "rl")  # the sandbox would refuse them

    assert result.not_run is None
    assert {g.fingerprint for g in result.groups} == {t.fingerprint for t in bfcl}
    assert result.trajectories == 4

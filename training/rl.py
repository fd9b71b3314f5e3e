"""Online RL in the sandbox with CARE, on TRL's GRPO machinery.

One update: ``tasks_per_update`` RL tasks, ``group_size`` rollouts each, with the current
model as the policy (``LocalChatModel``: the harness's chat format, tool calls parsed from
the model's text, malformed output a typed error in the trajectory); each rollout verified
by its task's verifier; CARE's rewards and advantages per group (``training/care.py``);
then TRL's token-level clipped surrogate with asymmetric clipping (``epsilon_low``,
``epsilon_high``), each trajectory's token losses averaged over its own generated tokens
(``1/T_i``: TRL's ``loss_type="grpo"``), no KL term.

What TRL's ``GRPOTrainer`` does here, and what we add:

- **Multi-turn tool rollouts** go through its ``rollout_func``: a rollout is a whole
  sandbox episode, returned as the opening prompt's ids, every token after it, and an
  ``env_mask`` that keeps the harness's tokens (tool results, nudges) out of the loss.
  The trainer hands ``rollout_func`` only the prompts, so each prompt's first message
  carries its ``task_id`` (chat templates ignore the extra key).
- **A custom advantage** has no hook in TRL, but it needs none: the reward function
  returns CARE's advantage ``A_i`` itself, and ``scale_rewards="none"`` makes TRL's
  advantage ``r_i - mean(r)`` over the group, which leaves ``A_i`` unchanged because CARE's
  advantages already sum to zero in a group. CARE's real rewards, regimes and costs are
  recorded beside it (``GroupRecord``).
- **The schedule controller** (``training/schedule.py``) runs from a callback every
  ``schedule_every`` updates when a development probe is given, and moves the CARE
  parameters the reward function reads.

Rollouts run one after another on the training process: on CPU a tiny model generates
faster than batching pays for, and on a GPU the same loop runs on the device.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

import datasets
import torch
from transformers import (
    PrinterCallback,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from trl.trainer.grpo_config import GRPOConfig
from trl.trainer.grpo_trainer import GRPOTrainer

from agents.policies.chat_format import opening_messages, task_view
from agents.runner import run_episode
from contract import InvalidInputError, TaskSpec
from envs.sandbox import MobileSandbox
from training.base_model import BaseModel as Base
from training.care import CareConfig, Regime, Rollout, care_group
from training.chat_model import LocalChatModel
from training.schedule import DevMetrics, Move, ScheduleConfig, next_config
from training.settings import RlSettings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental


@dataclass(frozen=True)
class GroupRecord:
    """One task's group in one update: what CARE made of it."""

    update: int
    task_id: str
    fingerprint: str
    competence: float
    regime: Regime
    successes: tuple[bool, ...]
    progress: tuple[float, ...]
    costs: tuple[float, ...]
    rewards: tuple[float, ...]
    advantages: tuple[float, ...]
    output_tokens: tuple[int, ...]
    care: CareConfig
    """The CARE parameters in effect (the schedule may have moved them)."""


@dataclass(frozen=True)
class UpdateRecord:
    """One update's curve point."""

    update: int
    loss: float
    mean_reward: float
    success_rate: float
    mean_output_tokens: float
    regimes: dict[str, int]
    reward_by_regime: dict[str, float]
    rollouts: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "update": self.update,
            "loss": self.loss,
            "mean_reward": self.mean_reward,
            "success_rate": self.success_rate,
            "mean_output_tokens": self.mean_output_tokens,
            "regimes": dict(self.regimes),
            "reward_by_regime": dict(self.reward_by_regime),
            "rollouts": self.rollouts,
            "seconds": self.seconds,
        }


@dataclass
class RlResult:
    """What a run did: its curve, its groups, the schedule's moves and its speed."""

    curve: list[UpdateRecord] = field(default_factory=list)
    groups: list[GroupRecord] = field(default_factory=list)
    moves: list[tuple[int, Move]] = field(default_factory=list)
    final_care: CareConfig = field(default_factory=CareConfig)
    trajectories: int = 0
    seconds: float = 0.0

    @property
    def rollouts_per_second(self) -> float:
        return self.trajectories / self.seconds if self.seconds else 0.0

    @property
    def regimes_met(self) -> set[Regime]:
        return {g.regime for g in self.groups}


DevProbe = Callable[[LocalChatModel], tuple[float, float]]
"""Development success rate and mean cost of the current model (for the schedule)."""


def rl_prompts(tasks: Sequence[TaskSpec], settings: RlSettings) -> datasets.Dataset:
    """One row per task: its opening messages (the first carrying ``task_id``), telling
    the step budget its rollouts run under."""
    sandbox = MobileSandbox()
    rows = []
    for task in tasks:
        view = task_view(task, sandbox, settings.steps_for(task))
        messages: list[dict[str, Any]] = list(opening_messages(view))
        messages[0] = {**messages[0], "task_id": task.id}
        rows.append({"prompt": messages, "task_id": task.id})
    return datasets.Dataset.from_list(rows)


def run_rl(
    base: Base,
    tasks: Sequence[TaskSpec],
    settings: RlSettings,
    out_dir: Path,
    *,
    on_update: Callable[[UpdateRecord], None] | None = None,
    dev_probe: DevProbe | None = None,
) -> RlResult:
    """Train ``base.model`` in place for ``settings.updates`` updates on ``tasks``."""
    if len(tasks) < settings.tasks_per_update:  # TRL would drop the short batch: no update
        raise InvalidInputError(
            "rl.tasks_per_update",
            f"{settings.tasks_per_update} tasks per update, but the dataset has "
            f"{len(tasks)} RL task(s)",
            [f"1 <= tasks_per_update <= {max(1, len(tasks))}"],
        )
    torch.manual_seed(settings.seed)
    result = RlResult(final_care=settings.care)
    by_id = {t.id: t for t in tasks}
    state = _RunState(
        settings,
        result,
        fingerprints={t.id: t.fingerprint for t in tasks},
        tasks={t.id: t for t in tasks},
    )
    policy = LocalChatModel(
        model=base.model,
        tokenizer=base.tokenizer,
        name=base.name,
        temperature=settings.temperature,
        max_new_tokens=settings.max_new_tokens,
        max_context=settings.max_context,
    )

    sandbox = MobileSandbox()

    def rollout(prompts: list[Any], trainer: GRPOTrainer) -> dict[str, Any]:
        return _rollouts(prompts, by_id, sandbox, policy, settings, state)

    batch = settings.tasks_per_update * settings.group_size
    args = GRPOConfig(
        output_dir=str(out_dir),
        max_steps=settings.updates,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=settings.group_size,
        steps_per_generation=1,
        num_iterations=settings.iterations,
        epsilon=settings.epsilon_low,
        epsilon_high=settings.epsilon_high,
        loss_type="grpo",
        scale_rewards="none",
        beta=0.0,
        max_completion_length=settings.max_new_tokens
        * max(settings.steps_for(task) for task in tasks),
        temperature=settings.temperature,
        seed=settings.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        activation_checkpointing=False,  # transformers 5.24's name; TRL's default is on
        remove_unused_columns=False,
        shuffle_dataset=True,
        ddp_find_unused_parameters=False,  # every parameter gets a gradient
    )
    trainer = GRPOTrainer(
        model=base.model,
        reward_funcs=[_CareScorer(state)],
        args=args,
        train_dataset=rl_prompts(tasks, settings),
        processing_class=base.tokenizer,
        rollout_func=rollout,
        callbacks=[_UpdateLog(state, policy, on_update, dev_probe)],
    )
    trainer.remove_callback(PrinterCallback)  # what disable_tqdm puts in the bar's place
    started = time.perf_counter()
    trainer.train()
    result.seconds = time.perf_counter() - started
    result.final_care = state.care
    return result


@dataclass
class _RunState:
    """What the rollouts, the scorer and the callback share during a run."""

    settings: RlSettings
    result: RlResult
    care: CareConfig = field(init=False)
    update: int = 0
    started: float = field(default_factory=time.perf_counter)
    previous: DevMetrics | None = None
    fingerprints: dict[str, str] = field(default_factory=dict)
    tasks: dict[str, TaskSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.care = self.settings.care


def _rollouts(
    prompts: list[Any],
    tasks: dict[str, TaskSpec],
    sandbox: MobileSandbox,
    policy: LocalChatModel,
    settings: RlSettings,
    state: _RunState,
) -> dict[str, Any]:
    out: dict[str, list[Any]] = {
        key: []
        for key in (
            "prompt_ids",
            "completion_ids",
            "env_mask",
            "task_id",
            "success",
            "progress",
            "output_tokens",
            "tool_calls",
        )
    }
    end_of_turn = policy.tokenizer.eos_token_id
    for prompt in prompts:
        task = tasks[prompt[0]["task_id"]]
        policy.sessions.clear()
        trajectory = run_episode(  # one sandbox for the run: its world cache serves the G resets
            task, sandbox, policy, max_steps=settings.steps_for(task), stop_when_verified=True
        )
        trace = policy.sessions[0].trace if policy.sessions else None
        if trace is None:
            raise RuntimeError(f"the episode of {task.id} asked the model nothing")
        completion, mask = list(trace.completion_ids), list(trace.model_mask)
        if not completion:  # TRL needs one token; a harness token carries no loss
            completion, mask = [int(end_of_turn)], [0]
        out["prompt_ids"].append(trace.prompt_ids)
        out["completion_ids"].append(completion)
        out["env_mask"].append(mask)
        out["task_id"].append(task.id)
        out["success"].append(trajectory.verdict.passed)
        out["progress"].append(trajectory.verdict.progress)
        out["output_tokens"].append(trace.generated_tokens)
        out["tool_calls"].append(trajectory.cost.tool_calls)
        state.result.trajectories += 1
    return {**out, "logprobs": None}


class _CareScorer:
    """TRL reward function: CARE's advantage per rollout (see the module docstring)."""

    __name__ = "care"

    def __init__(self, state: _RunState) -> None:
        self._state = state

    def __call__(
        self, prompts: list[Any], completions: list[Any], **kwargs: Any
    ) -> list[float | None]:
        state = self._state
        size = state.settings.group_size
        scores: list[float | None] = []
        state.update += 1
        for start in range(0, len(prompts), size):
            part = slice(start, start + size)
            rollouts = [
                Rollout(success=bool(s), progress=float(p), output_tokens=int(t), tool_calls=int(c))
                for s, p, t, c in zip(
                    kwargs["success"][part],
                    kwargs["progress"][part],
                    kwargs["output_tokens"][part],
                    kwargs["tool_calls"][part],
                    strict=True,
                )
            ]
            task_id = kwargs["task_id"][start]
            budget = state.settings.budget_for(state.tasks.get(task_id))
            group = care_group(rollouts, budget, state.care)
            state.result.groups.append(
                GroupRecord(
                    update=state.update,
                    task_id=task_id,
                    fingerprint=state.fingerprints.get(task_id, ""),
                    competence=group.competence,
                    regime=group.regime,
                    successes=tuple(r.success for r in rollouts),
                    progress=tuple(r.progress for r in rollouts),
                    costs=group.costs,
                    rewards=group.rewards,
                    advantages=group.advantages,
                    output_tokens=tuple(r.output_tokens for r in rollouts),
                    care=state.care,
                )
            )
            scores += group.advantages
        return scores


class _UpdateLog(TrainerCallback):
    """Turns each logged update into an ``UpdateRecord``; runs the schedule."""

    def __init__(
        self,
        state: _RunState,
        policy: LocalChatModel,
        on_update: Callable[[UpdateRecord], None] | None,
        dev_probe: DevProbe | None,
    ) -> None:
        self._state = state
        self._policy = policy
        self._on_update = on_update
        self._dev_probe = dev_probe

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs or "loss" not in logs:
            return
        run = self._state
        groups = [g for g in run.result.groups if g.update == run.update]
        record = update_record(run.update, float(logs["loss"]), groups, run.started)
        run.result.curve.append(record)
        if self._on_update is not None:
            self._on_update(record)

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        run = self._state
        every = run.settings.schedule_every
        if self._dev_probe is None or every == 0 or state.global_step % every:
            return
        recent = [g for g in run.result.groups if g.update > state.global_step - every]
        success, cost = self._dev_probe(self._policy)
        shares = Counter(g.regime for g in recent)
        metrics = DevMetrics(
            success=success,
            mean_cost=cost,
            progress_share=shares[Regime.PROGRESS] / max(1, len(recent)),
            efficiency_share=shares[Regime.EFFICIENCY] / max(1, len(recent)),
        )
        run.care, moves = next_config(run.care, metrics, run.previous, ScheduleConfig())
        run.previous = metrics
        run.result.moves += [(state.global_step, move) for move in moves]


def update_record(
    update: int, loss: float, groups: Sequence[GroupRecord], started: float
) -> UpdateRecord:
    rewards = [r for g in groups for r in g.rewards]
    successes = [s for g in groups for s in g.successes]
    tokens = [t for g in groups for t in g.output_tokens]
    by_regime: dict[str, list[float]] = {}
    for g in groups:
        by_regime.setdefault(g.regime.value, []).extend(g.rewards)
    return UpdateRecord(
        update=update,
        loss=loss,  # NaN stays NaN: a diverged run must show in its curve
        mean_reward=_mean(rewards),
        success_rate=_mean([float(s) for s in successes]),
        mean_output_tokens=_mean([float(t) for t in tokens]),
        regimes={k: sum(1 for g in groups if g.regime.value == k) for k in by_regime},
        reward_by_regime={k: _mean(v) for k, v in by_regime.items()},
        rollouts=len(rewards),
        seconds=time.perf_counter() - started,
    )


def _mean(values: Sequence[float]) -> float:
    return fmean(values) if values else 0.0

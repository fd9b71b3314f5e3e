"""Online RL with CARE, on TRL's GRPO machinery, each task run on its own backend (the
sandbox, BFCL's world).

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
- **Tasks drawn by weight** (``rl.weighted``): a task's chance is the summed sampling
  weight of its rows (``training/sampling.py``), by ``WeightedRepeatSampler``, which
  keeps TRL's layout of a batch; a replacement group's task is drawn the same way.
- **The schedule controller** (``training/schedule.py``) runs from a callback every
  ``schedule_every`` updates when a development probe is given, and moves the CARE
  parameters the reward function reads.

Rollouts run one after another on the training process: on CPU a tiny model generates
faster than batching pays for, and on a GPU the same loop runs on the device.
"""

from __future__ import annotations

import os
import random
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from statistics import fmean
from typing import Any, cast

import datasets
import torch
from torch.utils.data import Sampler
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
from envs.backends import Backends, tools_of
from envs.verification import replay_plan
from training.base_model import BaseModel as Base
from training.care import CareConfig, CareGroup, Regime, Rollout, care_group
from training.chat_model import LocalChatModel
from training.sampling import checked_weights
from training.schedule import DevMetrics, Move, ScheduleConfig, next_config
from training.settings import RlSettings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental
# TRL's generation helper reads a property transformers deprecates: nothing of ours to
# change, and the warning would greet every training run.
warnings.filterwarnings(
    "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
)

FLAT = 1e-9
"""Rewards closer than this are equal: their group's advantages are zero."""


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
    skipped: bool = False
    """Its rewards were all equal and another task's group replaced it (dynamic sampling):
    it never reached the loss."""

    @property
    def informative(self) -> bool:
        """Its rewards differ, so its advantages are not all zero: it moves the policy."""
        return max(self.rewards) - min(self.rewards) > FLAT


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
    groups: int = 0
    """Groups sampled for the update, skipped ones included."""
    informative: int = 0
    """Groups whose rewards differ (non-zero advantages)."""
    skipped: int = 0
    """Groups with equal rewards replaced by another task's (dynamic sampling)."""
    grad_norm: float | None = None
    """The update's gradient norm (before clipping): what shows it moved the policy. Its
    loss is about 0 by construction (one pass over fresh rollouts: the ratio is 1, and a
    group's normalized advantages average to 0), so the loss alone says nothing."""

    def movement(self) -> str:
        """``loss L, gradient norm G`` (``-`` where the trainer logged no norm): how far
        the update moved the policy, as every log line of an update says it."""
        norm = "-" if self.grad_norm is None else f"{self.grad_norm:.4f}"
        loss = round(self.loss, 4) + 0.0  # -0.00001 shows as 0.0000, not -0.0000
        return f"loss {loss:.4f}, gradient norm {norm}"

    @property
    def informative_share(self) -> float:
        """Informative groups among those sampled: the share of rollouts that carry signal."""
        return self.informative / self.groups if self.groups else 0.0

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
            "groups": self.groups,
            "informative": self.informative,
            "skipped": self.skipped,
            "informative_share": self.informative_share,
            "grad_norm": self.grad_norm,
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
    not_run: str | None = None
    """Why no update ran (the starting checkpoint gives no signal), or None."""
    weighted: bool = False
    """Whether tasks were drawn by their sampling weights (``rl.weighted``)."""

    @property
    def rollouts_per_second(self) -> float:
        return self.trajectories / self.seconds if self.seconds else 0.0

    @property
    def informative_share(self) -> float:
        """Informative groups among all sampled, over the run."""
        return sum(g.informative for g in self.groups) / len(self.groups) if self.groups else 0.0

    @property
    def regimes_met(self) -> set[Regime]:
        return {g.regime for g in self.groups}


DevProbe = Callable[[LocalChatModel], tuple[float, float]]
"""Development success rate and mean cost of the current model (for the schedule)."""


def rl_prompts(tasks: Sequence[TaskSpec], settings: RlSettings) -> datasets.Dataset:
    """One row per task: its opening messages (the first carrying ``task_id``), telling
    the step budget its rollouts run under."""
    rows = []
    for task in tasks:
        view = task_view(task, tools_of(task), settings.steps_for(task))
        messages: list[dict[str, Any]] = list(opening_messages(view))
        messages[0] = {**messages[0], "task_id": task.id}
        rows.append({"prompt": messages, "task_id": task.id})
    return datasets.Dataset.from_list(rows)


@dataclass(frozen=True)
class StartingSignal:
    """Greedy episodes of the starting checkpoint on some of its RL tasks, against what
    doing nothing earns on them (a check its initial state meets counts as progress)."""

    tasks: int
    successes: int
    mean_progress: float
    idle_progress: float
    """Mean progress of finishing at once, without a single call."""

    @property
    def any(self) -> bool:
        """Some episode succeeded or got further than doing nothing: groups can differ."""
        return self.successes > 0 or self.mean_progress > self.idle_progress + FLAT

    def reason(self) -> str:
        return (
            f"RL skipped: greedy, the starting checkpoint solves {self.successes} of "
            f"{self.tasks} RL tasks with mean progress {self.mean_progress:.3f} "
            f"(doing nothing: {self.idle_progress:.3f}), so its groups' rewards would be "
            "equal and no update would move it; train SFT longer (or set rl.probe_tasks=0 "
            "to run RL anyway)"
        )


def starting_signal(base: Base, tasks: Sequence[TaskSpec], settings: RlSettings) -> StartingSignal:
    """Greedy episodes on ``settings.probe_tasks`` of ``tasks`` (drawn from the seed)."""
    chosen = random.Random(settings.seed).sample(
        sorted(tasks, key=lambda t: t.id), min(settings.probe_tasks, len(tasks))
    )
    policy = LocalChatModel(
        model=base.model,
        tokenizer=base.tokenizer,
        name=base.name,
        temperature=0.0,
        max_new_tokens=settings.max_new_tokens,
        max_context=settings.max_context,
    )
    backends = Backends()
    verdicts = [
        run_episode(t, backends.for_task(t), policy, max_steps=settings.steps_for(t)).verdict
        for t in chosen
    ]
    return StartingSignal(
        tasks=len(verdicts),
        successes=sum(v.passed for v in verdicts),
        mean_progress=_mean([v.partial_progress for v in verdicts]),
        idle_progress=_mean(
            [replay_plan(t, (), backends.for_task(t)).partial_progress for t in chosen]
        ),
    )


def draw_weights(
    tasks: Sequence[TaskSpec], weights: Mapping[str, float] | None, weighted: bool
) -> list[float] | None:
    """The weight each of ``tasks`` is drawn by: its own in ``weights`` when ``weighted``
    and every task has one, else None (every task equally often). All of them 0 is an
    ``InvalidInputError`` naming ``weight``."""
    if not weighted or weights is None or any(t.id not in weights for t in tasks):
        return None
    return checked_weights([weights[t.id] for t in tasks], "RL task")


class WeightedRepeatSampler(Sampler[int]):
    """The prompt indices of GRPO's batches, as TRL's ``RepeatSampler`` lays them out
    (each index ``mini_repeat_count`` times in a row, a chunk of ``batch_size`` indices
    ``repeat_count`` times), with the indices drawn in proportion to ``weights``, with
    replacement, from a generator seeded by ``seed``: every process draws the same."""

    def __init__(
        self,
        weights: Sequence[float],
        *,
        mini_repeat_count: int,
        batch_size: int,
        repeat_count: int,
        seed: int,
    ) -> None:
        self.weights = torch.tensor(weights, dtype=torch.double)
        self.mini_repeat_count = mini_repeat_count
        self.batch_size = batch_size
        self.repeat_count = repeat_count
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[int]:
        chunks = len(self.weights) // self.batch_size
        draws = torch.multinomial(
            self.weights, chunks * self.batch_size, replacement=True, generator=self.generator
        ).tolist()
        for start in range(0, len(draws), self.batch_size):
            for _ in range(self.repeat_count):
                for index in draws[start : start + self.batch_size]:
                    yield from [index] * self.mini_repeat_count

    def __len__(self) -> int:
        chunks = len(self.weights) // self.batch_size
        return chunks * self.batch_size * self.mini_repeat_count * self.repeat_count


class _WeightedGrpoTrainer(GRPOTrainer):
    """GRPO whose batches draw their tasks by ``task_weights`` (TRL's own draw for None)."""

    def __init__(self, *args: Any, task_weights: list[float] | None, **kwargs: Any) -> None:
        self.task_weights = task_weights
        super().__init__(*args, **kwargs)

    def _get_train_sampler(self, dataset: Any = None) -> Sampler[int]:
        if self.task_weights is None:
            return super()._get_train_sampler(dataset)
        args = cast(GRPOConfig, self.args)
        group = cast(int, self.num_generations)
        return WeightedRepeatSampler(  # the arguments TRL gives its own sampler
            self.task_weights,
            mini_repeat_count=group,
            batch_size=cast(int, args.generation_batch_size) // group,
            repeat_count=self.num_iterations * cast(int, args.steps_per_generation),
            seed=args.seed,
        )


def run_rl(
    base: Base,
    tasks: Sequence[TaskSpec],
    settings: RlSettings,
    out_dir: Path,
    *,
    weights: Mapping[str, float] | None = None,
    on_update: Callable[[UpdateRecord], None] | None = None,
    dev_probe: DevProbe | None = None,
) -> RlResult:
    """Train ``base.model`` in place for ``settings.updates`` updates on ``tasks``, drawn
    by ``weights`` (by task id: ``task_weights`` of the export's rows) when
    ``settings.weighted``; first, unless ``settings.probe_tasks`` is 0, check that the
    model gives RL a signal (``starting_signal``): without one nothing runs and
    ``RlResult.not_run`` says why."""
    if len(tasks) < settings.tasks_per_update:  # TRL would drop the short batch: no update
        raise InvalidInputError(
            "rl.tasks_per_update",
            f"{settings.tasks_per_update} tasks per update, but the dataset has "
            f"{len(tasks)} RL task(s)",
            [f"1 <= tasks_per_update <= {max(1, len(tasks))}"],
        )
    drawn = draw_weights(tasks, weights, settings.weighted)
    if settings.probe_tasks:
        signal = starting_signal(base, tasks, settings)
        if not signal.any:
            return RlResult(final_care=settings.care, not_run=signal.reason())
    torch.manual_seed(settings.seed)
    result = RlResult(final_care=settings.care, weighted=drawn is not None)
    by_id = {t.id: t for t in tasks}
    state = _RunState(
        settings,
        result,
        fingerprints={t.id: t.fingerprint for t in tasks},
        tasks={t.id: t for t in tasks},
        weights=None if drawn is None else {t.id: w for t, w in zip(tasks, drawn, strict=True)},
    )
    policy = LocalChatModel(
        model=base.model,
        tokenizer=base.tokenizer,
        name=base.name,
        temperature=settings.temperature,
        max_new_tokens=settings.max_new_tokens,
        max_context=settings.max_context,
    )

    backends = Backends()

    def rollout(prompts: list[Any], trainer: GRPOTrainer) -> dict[str, Any]:
        return _rollouts(prompts, by_id, backends, policy, settings, state)

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
    trainer = _WeightedGrpoTrainer(
        model=base.model,
        reward_funcs=[_CareScorer(state)],
        args=args,
        train_dataset=rl_prompts(tasks, settings),
        processing_class=base.tokenizer,
        rollout_func=rollout,
        callbacks=[_UpdateLog(state, policy, on_update, dev_probe)],
        task_weights=drawn,
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
    weights: dict[str, float] | None = None
    """The weight each task is drawn by; None: every task equally often."""
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.care = self.settings.care
        self.rng = random.Random(self.settings.seed)

    def replacement(self, tried: set[str]) -> str | None:
        """A task not yet sampled in this update, drawn from the seed (by ``weights``);
        None if none is left (none of weight above 0)."""
        left = sorted(set(self.tasks) - tried)
        if self.weights is None:
            return self.rng.choice(left) if left else None
        weights = self.weights
        left = [task_id for task_id in left if weights[task_id] > 0]
        return self.rng.choices(left, [weights[t] for t in left])[0] if left else None

    def record(
        self, task_id: str, rollouts: list[Rollout], update: int, *, skipped: bool = False
    ) -> CareGroup:
        """CARE's verdict on one group, kept in the run's groups."""
        budget = self.settings.budget_for(self.tasks.get(task_id))
        group = care_group(rollouts, budget, self.care)
        self.result.groups.append(
            GroupRecord(
                update=update,
                task_id=task_id,
                fingerprint=self.fingerprints.get(task_id, ""),
                competence=group.competence,
                regime=group.regime,
                successes=tuple(r.success for r in rollouts),
                progress=tuple(r.progress for r in rollouts),
                costs=group.costs,
                rewards=group.rewards,
                advantages=group.advantages,
                output_tokens=tuple(r.output_tokens for r in rollouts),
                care=self.care,
                skipped=skipped,
            )
        )
        return group


@dataclass(frozen=True)
class _Episode:
    """One rollout as TRL takes it, with what CARE reads of it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    task_id: str
    success: bool
    progress: float
    output_tokens: int
    tool_calls: int

    @property
    def rollout(self) -> Rollout:
        return Rollout(self.success, self.progress, self.output_tokens, self.tool_calls)


def _episode(
    task: TaskSpec, backends: Backends, policy: LocalChatModel, settings: RlSettings
) -> _Episode:
    policy.sessions.clear()
    trajectory = run_episode(  # one sandbox for the run: its world cache serves the G resets
        task,
        backends.for_task(task),
        policy,
        max_steps=settings.steps_for(task),
        stop_when_verified=True,
    )
    trace = policy.sessions[0].trace if policy.sessions else None
    if trace is None:
        raise RuntimeError(f"the episode of {task.id} asked the model nothing")
    completion, mask = list(trace.completion_ids), list(trace.model_mask)
    if not completion:  # TRL needs one token; a harness token carries no loss
        completion, mask = [int(policy.tokenizer.eos_token_id)], [0]
    return _Episode(
        prompt_ids=trace.prompt_ids,
        completion_ids=completion,
        env_mask=mask,
        task_id=task.id,
        success=trajectory.verdict.passed,
        progress=trajectory.verdict.partial_progress,
        output_tokens=trace.generated_tokens,
        tool_calls=trajectory.cost.tool_calls,
    )


def _rollouts(
    prompts: list[Any],
    tasks: dict[str, TaskSpec],
    backends: Backends,
    policy: LocalChatModel,
    settings: RlSettings,
    state: _RunState,
) -> dict[str, Any]:
    """``group_size`` rollouts per task of the batch. A group whose CARE rewards are all
    equal has zero advantages and moves nothing: it is recorded as skipped and replaced
    by a group of another task, at most ``resamples`` times (dynamic sampling, as in DAPO);
    the last one stays whatever its rewards."""
    size = settings.group_size
    batch = [prompts[i][0]["task_id"] for i in range(0, len(prompts), size)]
    tried = set(batch)
    episodes: list[_Episode] = []
    for task_id in batch:
        task = tasks[task_id]
        for attempt in range(settings.resamples + 1):
            group = [_episode(task, backends, policy, settings) for _ in range(size)]
            state.result.trajectories += size
            if attempt == settings.resamples:
                break
            care = care_group([e.rollout for e in group], settings.budget_for(task), state.care)
            replacement = state.replacement(tried)
            if max(care.rewards) - min(care.rewards) > FLAT or replacement is None:
                break
            state.record(task.id, [e.rollout for e in group], state.update + 1, skipped=True)
            task = tasks[replacement]
            tried.add(replacement)
        episodes += group
    columns = {f.name: [getattr(e, f.name) for e in episodes] for f in fields(_Episode)}
    return {**columns, "logprobs": None}


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
            group = state.record(task_id, rollouts, state.update)
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
        norm = logs.get("grad_norm")
        record = update_record(
            run.update,
            float(logs["loss"]),
            groups,
            run.started,
            grad_norm=None if norm is None else float(norm),
        )
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
    update: int,
    loss: float,
    groups: Sequence[GroupRecord],
    started: float,
    *,
    grad_norm: float | None = None,
) -> UpdateRecord:
    """The curve point of one update: the rollouts that reached the loss (skipped groups
    left out), and how many groups were sampled, informative and skipped."""
    trained = [g for g in groups if not g.skipped]
    rewards = [r for g in trained for r in g.rewards]
    successes = [s for g in trained for s in g.successes]
    tokens = [t for g in trained for t in g.output_tokens]
    by_regime: dict[str, list[float]] = {}
    for g in trained:
        by_regime.setdefault(g.regime.value, []).extend(g.rewards)
    return UpdateRecord(
        update=update,
        loss=loss,  # NaN stays NaN: a diverged run must show in its curve
        mean_reward=_mean(rewards),
        success_rate=_mean([float(s) for s in successes]),
        mean_output_tokens=_mean([float(t) for t in tokens]),
        regimes={k: sum(1 for g in trained if g.regime.value == k) for k in by_regime},
        reward_by_regime={k: _mean(v) for k, v in by_regime.items()},
        rollouts=len(rewards),
        seconds=time.perf_counter() - started,
        groups=len(groups),
        informative=sum(g.informative for g in groups),
        skipped=sum(g.skipped for g in groups),
        grad_norm=grad_norm,
    )


def _mean(values: Sequence[float]) -> float:
    return fmean(values) if values else 0.0

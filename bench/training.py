"""Training throughput: SFT tokens/s, RL rollouts/s and generation tokens/s.

**Data.** ``tasks`` training-split sandbox tasks (distinct fingerprints) collected by the
scripted policy (faults at rate 0.3, always recovered), shards ingested into a fresh
catalog, the successes frozen as an approved dataset version; ``training.trainer.prepare``
exports it. Set-up, timed apart.

**Work**, on the embedded tiny model (``training.trainer.load_base``: no download), in
the trainer's order:

1. SFT: ``training.sft.run_sft``; tokens processed per second (padding excluded), and
   supervised tokens per second, estimated as processed tokens times the rows' supervised
   share;
2. generation: one episode of the SFT model (``LocalChatModel``, sampled) on the first RL
   task through ``agents.runner.run_episode``; generated tokens per second of the episode
   and of ``generate`` alone;
3. RL: ``training.rl.run_rl``; rollouts per second and generated rollout tokens per second
   over the whole run (rollouts and updates).

With a GPU, the same again on a larger Qwen2 (``LARGER``, random weights, the tiny
model's tokenizer). Figures and ratios, never pass or fail.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, Qwen2ForCausalLM

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from bench.machine import cores, cpu_seconds, torch_processor, torch_threads, work_folder
from contract import (
    ApprovalDecision,
    DatasetApproval,
    DatasetMember,
    DatasetVersion,
    MixTarget,
    Outcome,
    Split,
    TaskSpec,
    Trajectory,
)
from curation.balance import dataset_content_hash
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.settings import catalog_path
from storage import Catalog, write_trajectory_shard
from training.base_model import BaseModel, device, tiny_config
from training.chat_model import LocalChatModel
from training.rl import RlResult, run_rl
from training.settings import RlSettings, SftSettings, TrainRequest
from training.sft import SftResult, run_sft, tokenize_rows
from training.trainer import TrainingData, load_base, prepare

ROUND = "round-bench-training"
SHARD_SIZE = 50
LARGER: dict[str, int] = {
    "hidden_size": 512,
    "layers": 8,
    "heads": 8,
    "kv_heads": 4,
    "intermediate_size": 1536,
}
"""The larger configuration (``tiny_config`` keywords), run only with a GPU."""


@dataclass(frozen=True)
class DatasetFigures:
    """The frozen dataset the runs train on, and what building it took."""

    episodes: int
    members: int
    sft_rows: int
    rl_tasks: int
    row_tokens: int
    """Tokens of the ``sft`` rows, one pass (the tiny tokenizer, cut to ``max_length``)."""
    supervised_tokens: int
    """Of those, the tokens the loss covers."""
    setup_seconds: float

    @property
    def supervised_share(self) -> float:
        return self.supervised_tokens / self.row_tokens if self.row_tokens else 0.0


@dataclass(frozen=True)
class SftFigures:
    steps: int
    batch_size: int
    tokens_seen: int
    seconds: float
    cpu_seconds: float
    """CPU time of the process (torch's threads included) over the run."""
    tokens_per_second: float
    supervised_tokens_per_second: float
    first_loss: float
    last_loss: float


@dataclass(frozen=True)
class GenerationFigures:
    max_new_tokens: int
    replies: int
    generated_tokens: int
    seconds: float
    """The whole episode: rendering, tokenizing, the sandbox and ``generate``."""
    generate_seconds: float
    tokens_per_second: float
    generate_tokens_per_second: float


@dataclass(frozen=True)
class RlFigures:
    updates: int
    group_size: int
    tasks_per_update: int
    max_steps: int | None
    max_new_tokens: int
    rollouts: int
    seconds: float
    cpu_seconds: float
    rollouts_per_second: float
    mean_output_tokens: float
    """Generated tokens per rollout, over all updates."""
    rollout_tokens_per_second: float


@dataclass(frozen=True)
class ModelRun:
    """One model's figures."""

    model: str
    parameters: int
    sft: SftFigures
    generation: GenerationFigures
    rl: RlFigures

    @property
    def ratios(self) -> dict[str, float]:
        return {
            "rl_rollout_tokens_vs_sft_tokens": _ratio(
                self.rl.rollout_tokens_per_second, self.sft.tokens_per_second
            ),
            "generation_tokens_vs_sft_tokens": _ratio(
                self.generation.tokens_per_second, self.sft.tokens_per_second
            ),
            "rl_rollout_tokens_vs_generation_tokens": _ratio(
                self.rl.rollout_tokens_per_second, self.generation.tokens_per_second
            ),
        }


@dataclass(frozen=True)
class TrainingBenchmark:
    """What a run measured: the dataset, one ``ModelRun`` per model, where it ran."""

    threads: int
    cores: int
    load_average: float
    """The 1-minute load average at the end: other work slows every figure here."""
    cpu: str
    """The CPU and torch's kernels (``torch_processor``): figures differ between hosts."""
    device: str
    dataset: DatasetFigures
    runs: tuple[ModelRun, ...]
    skipped: str | None
    """Why the larger model did not run (no GPU), or None."""
    seed: int

    @property
    def ratios(self) -> dict[str, float]:
        """Each run's own ratios; with two runs, the larger model's figures over the tiny's."""
        ratios = {f"{run.model}.{k}": v for run in self.runs for k, v in run.ratios.items()}
        if len(self.runs) == 2:
            tiny, larger = self.runs
            pairs = {
                "sft_tokens_per_second": (tiny.sft.tokens_per_second, larger.sft.tokens_per_second),
                "generation_tokens_per_second": (
                    tiny.generation.tokens_per_second,
                    larger.generation.tokens_per_second,
                ),
                "rl_rollouts_per_second": (
                    tiny.rl.rollouts_per_second,
                    larger.rl.rollouts_per_second,
                ),
            }
            for name, (small, big) in pairs.items():
                ratios[f"larger_vs_tiny.{name}"] = _ratio(big, small)
        return ratios

    def to_json(self) -> dict[str, Any]:
        return {
            "threads": self.threads,
            "cores": self.cores,
            "load_average": self.load_average,
            "cpu": self.cpu,
            "device": self.device,
            "seed": self.seed,
            "dataset": {
                **asdict(self.dataset),
                "supervised_share": self.dataset.supervised_share,
            },
            "runs": [asdict(run) for run in self.runs],
            "ratios": self.ratios,
            "skipped": self.skipped,
        }


def run_training_benchmark(
    *,
    sft_steps: int = 20,
    batch_size: int = 4,
    rl_updates: int = 2,
    group_size: int = 4,
    tasks: int = 24,
    tasks_per_update: int = 1,
    max_steps: int = 3,
    max_new_tokens: int = 48,
    seed: int = 0,
    threads: int | None = None,
    workdir: Path | None = None,
) -> TrainingBenchmark:
    """Build the dataset, then measure SFT, generation and RL on the tiny model (and on
    the larger one with a GPU). torch runs ``threads`` intra-op threads (default: the
    cores this process may use). ``workdir`` is kept; without it a temporary folder is
    used and removed."""
    with (
        torch_threads(threads) as used_threads,
        work_folder(workdir, "flywheel-bench-training-") as work,
    ):
        started = time.perf_counter()
        home = work / "home"
        with Catalog.open(catalog_path(home)) as catalog:
            dataset_id, episodes = frozen_dataset(catalog, home / "shards", tasks, seed)
            request = TrainRequest.of({"dataset_id": dataset_id, "seed": seed})
            data = prepare(catalog, home, request)
        base = load_base(request, data)
        sft = SftSettings(max_steps=sft_steps, batch_size=batch_size, seed=seed)
        rl = RlSettings(
            updates=rl_updates,
            group_size=group_size,
            tasks_per_update=tasks_per_update,
            max_steps=max_steps,
            max_new_tokens=max_new_tokens,
            probe_tasks=0,  # throughput, not learning: the untrained model runs RL anyway
            resamples=0,  # every update the same number of rollouts
            seed=seed,
        )
        rows = tokenize_rows(base.tokenizer, data.sft, sft.max_length)
        dataset = DatasetFigures(
            episodes=episodes,
            members=len(data.sft),
            sft_rows=len(rows.input_ids),
            rl_tasks=len(data.rl_tasks),
            row_tokens=sum(len(ids) for ids in rows.input_ids),
            supervised_tokens=rows.trained_tokens,
            setup_seconds=time.perf_counter() - started,
        )
        runs = [measure(base, data, dataset, sft, rl, work / "tiny", seed)]
        skipped: str | None = "the larger model: no GPU (torch.cuda.is_available() is False)"
        if torch.cuda.is_available():
            larger = BaseModel(larger_model(base, seed), base.tokenizer, "larger")
            runs.append(measure(larger, data, dataset, sft, rl, work / "larger", seed))
            skipped = None
    return TrainingBenchmark(
        threads=used_threads,
        cores=cores(),
        load_average=os.getloadavg()[0],
        cpu=torch_processor(),
        device=str(device()),
        dataset=dataset,
        runs=tuple(runs),
        skipped=skipped,
        seed=seed,
    )


def frozen_dataset(catalog: Catalog, shards: Path, tasks: int, seed: int) -> tuple[str, int]:
    """Scripted episodes of ``tasks`` training tasks (distinct fingerprints) stored in
    ``catalog``, the successes frozen and approved; the version's id and the episodes."""
    sandbox = MobileSandbox()
    distinct: dict[str, TaskSpec] = {}
    for task in sample_tasks(4 * tasks, seed, sandbox, split=Split.TRAIN):
        distinct.setdefault(task.fingerprint, task)
    chosen = list(distinct.values())[:tasks]
    policy = ScriptedPolicy(FaultConfig(rate=0.3, recovery_rate=1.0))
    runs = [run_episode(t, sandbox, policy, round_id=ROUND) for t in chosen]
    version = freeze_successes(catalog, runs, shards, round_id=ROUND, approver="bench")
    return version.id, len(runs)


def freeze_successes(
    catalog: Catalog, runs: Sequence[Trajectory], shards: Path, *, round_id: str, approver: str
) -> DatasetVersion:
    """Store ``runs`` (episodes of round ``round_id``) through shards in ``shards``, and
    freeze their successes as an approved dataset version."""
    paths = []
    for start in range(0, len(runs), SHARD_SIZE):
        path = shards / f"shard-{start // SHARD_SIZE:05d}.parquet"
        write_trajectory_shard(runs[start : start + SHARD_SIZE], path, shard=path.stem)
        paths.append(path)
    catalog.trajectories.ingest(paths)
    members = sorted(
        (
            DatasetMember(trajectory_id=t.id, task_id=t.task.id, weight=1.0)
            for t in runs
            if t.metadata.outcome is Outcome.SUCCESS
        ),
        key=lambda m: m.trajectory_id,
    )
    return freeze_members(catalog, members, round_id=round_id, approver=approver)


def freeze_members(
    catalog: Catalog, members: Sequence[DatasetMember], *, round_id: str, approver: str
) -> DatasetVersion:
    """``members`` (of trajectories the catalog holds) frozen as an approved version."""
    version = DatasetVersion(
        round_id=round_id,
        parent=None,
        content_hash=dataset_content_hash(members),
        members=tuple(members),
        target=MixTarget(),
        achieved={},
        policies=("scripted@1",),
        human_reviewed=0,
    )
    catalog.datasets.decide(
        version,
        DatasetApproval(
            dataset_id=version.id,
            round_id=round_id,
            content_hash=version.content_hash,
            target=version.target,
            decision=ApprovalDecision.APPROVE,
            approver=approver,
            automatic=True,
            decided_at=datetime.now(UTC),
        ),
    )
    return version


def larger_model(base: BaseModel, seed: int) -> PreTrainedModel:
    """A ``LARGER`` Qwen2 with random weights for ``base``'s tokenizer, on ``device()``."""
    tokenizer = base.tokenizer
    config = tiny_config(
        len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **LARGER,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(device())  # type: ignore[arg-type]  # transformers types `to` through a wrapper
    return model


def measure(
    base: BaseModel,
    data: TrainingData,
    dataset: DatasetFigures,
    sft: SftSettings,
    rl: RlSettings,
    out: Path,
    seed: int,
) -> ModelRun:
    """SFT, then one generated episode, then RL, on ``base.model`` (trained in place)."""
    parameters = sum(p.numel() for p in base.model.parameters())
    cpu = cpu_seconds()
    sft_result = run_sft(base, data.sft, sft, out / "sft")
    sft_cpu = cpu_seconds() - cpu
    generation = measure_generation(base, data.rl_tasks[0], rl, seed)
    cpu = cpu_seconds()
    rl_result = run_rl(base, data.rl_tasks, rl, out / "rl", weights=data.rl_weights)
    _synchronize()
    rl_cpu = cpu_seconds() - cpu
    return ModelRun(
        model=base.name,
        parameters=parameters,
        sft=sft_figures(sft_result, sft, dataset, sft_cpu),
        generation=generation,
        rl=rl_figures(rl_result, rl, rl_cpu),
    )


def sft_figures(
    result: SftResult, settings: SftSettings, dataset: DatasetFigures, cpu: float
) -> SftFigures:
    losses = [point["loss"] for point in result.curve]
    return SftFigures(
        steps=result.steps,
        batch_size=settings.batch_size,
        tokens_seen=result.tokens_seen,
        seconds=result.seconds,
        cpu_seconds=cpu,
        tokens_per_second=result.tokens_per_second,
        supervised_tokens_per_second=result.tokens_per_second * dataset.supervised_share,
        first_loss=losses[0] if losses else math.nan,
        last_loss=losses[-1] if losses else math.nan,
    )


def rl_figures(result: RlResult, settings: RlSettings, cpu: float) -> RlFigures:
    rollouts = sum(u.rollouts for u in result.curve)
    tokens = sum(u.mean_output_tokens * u.rollouts for u in result.curve)
    return RlFigures(
        updates=settings.updates,
        group_size=settings.group_size,
        tasks_per_update=settings.tasks_per_update,
        max_steps=settings.max_steps,
        max_new_tokens=settings.max_new_tokens,
        rollouts=result.trajectories,
        seconds=result.seconds,
        cpu_seconds=cpu,
        rollouts_per_second=result.rollouts_per_second,
        mean_output_tokens=tokens / rollouts if rollouts else 0.0,
        rollout_tokens_per_second=tokens / result.seconds if result.seconds > 0 else 0.0,
    )


@dataclass
class _TimedChatModel(LocalChatModel):
    """A ``LocalChatModel`` that adds up the time ``generate`` takes."""

    generate_seconds: float = 0.0
    calls: int = 0

    def generate(self, context: list[int], grammar: str | None = None) -> tuple[list[int], bool]:
        _synchronize()
        started = time.perf_counter()
        try:
            return super().generate(context, grammar)
        finally:
            _synchronize()
            self.generate_seconds += time.perf_counter() - started
            self.calls += 1


def measure_generation(
    base: BaseModel, task: TaskSpec, settings: RlSettings, seed: int
) -> GenerationFigures:
    """One sampled episode of ``base`` on ``task``, as a rollout runs it."""
    policy = _TimedChatModel(
        base.model,
        base.tokenizer,
        name=base.name,
        temperature=settings.temperature,
        max_new_tokens=settings.max_new_tokens,
        max_context=settings.max_context,
    )
    torch.manual_seed(seed)
    started = time.perf_counter()
    run_episode(task, MobileSandbox(), policy, max_steps=settings.max_steps)
    seconds = time.perf_counter() - started
    trace = policy.sessions[0].trace if policy.sessions else None
    generated = trace.generated_tokens if trace is not None else 0
    return GenerationFigures(
        max_new_tokens=settings.max_new_tokens,
        replies=policy.calls,
        generated_tokens=generated,
        seconds=seconds,
        generate_seconds=policy.generate_seconds,
        tokens_per_second=generated / seconds if seconds > 0 else 0.0,
        generate_tokens_per_second=(
            generated / policy.generate_seconds if policy.generate_seconds > 0 else 0.0
        ),
    )


def report(bench: TrainingBenchmark) -> str:
    """The figures as a table (stage, figure, value, unit), then the ratios."""
    d = bench.dataset
    lines = [
        f"training benchmark on {bench.device}: torch threads {bench.threads} "
        f"({bench.cores} cores), load average {bench.load_average:.1f}, seed {bench.seed}",
        f"  CPU: {bench.cpu}",
        f"  dataset: {d.episodes} scripted episodes, {d.members} members, {d.sft_rows} SFT "
        f"rows of {d.row_tokens:,} tokens ({d.supervised_share:.0%} supervised), "
        f"{d.rl_tasks} RL tasks; set-up (untimed) {d.setup_seconds:.1f} s",
    ]
    rows: list[tuple[str, str, str, str]] = []
    for run in bench.runs:
        s, g, r = run.sft, run.generation, run.rl
        name = f"{run.model} ({run.parameters / 1e6:.2f}M params)"
        rows += [
            (name, "", "", ""),
            ("  SFT", "processed tokens", f"{s.tokens_per_second:,.0f}", "tokens/s"),
            (
                "  SFT",
                "supervised tokens (est.)",
                f"{s.supervised_tokens_per_second:,.0f}",
                "tokens/s",
            ),
            ("  SFT", f"{s.steps} steps x {s.batch_size} rows", f"{s.seconds:.2f}", "s"),
            ("  SFT", "CPU time (torch's threads)", f"{s.cpu_seconds:.2f}", "s"),
            ("  SFT", "tokens seen", f"{s.tokens_seen:,}", "tokens"),
            ("  SFT", "loss first -> last", f"{s.first_loss:.3f} -> {s.last_loss:.3f}", ""),
            ("  generation", "episode", f"{g.tokens_per_second:,.0f}", "tokens/s"),
            (
                "  generation",
                "generate() alone",
                f"{g.generate_tokens_per_second:,.0f}",
                "tokens/s",
            ),
            (
                "  generation",
                "generated tokens",
                f"{g.generated_tokens:,}",
                f"in {g.seconds:.2f} s",
            ),
            ("  RL", "rollouts", f"{r.rollouts_per_second:.2f}", "rollouts/s"),
            ("  RL", "rollout tokens", f"{r.rollout_tokens_per_second:,.0f}", "tokens/s"),
            ("  RL", "output tokens per rollout", f"{r.mean_output_tokens:.1f}", "tokens"),
            (
                "  RL",
                f"{r.updates} updates x {r.tasks_per_update} tasks x {r.group_size}",
                f"{r.seconds:.2f}",
                f"s ({r.rollouts} rollouts)",
            ),
            ("  RL", "CPU time (torch's threads)", f"{r.cpu_seconds:.2f}", "s"),
        ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    header = ("stage", "figure", "value", "unit")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]

    def line(row: tuple[str, str, str, str]) -> str:
        stage, figure, value, unit = row
        return f"  {stage:{widths[0]}}  {figure:{widths[1]}}  {value:>{widths[2]}}  {unit}".rstrip()

    lines += [line(header), line(("-" * widths[0], "-" * widths[1], "-" * widths[2], "----"))]
    lines += [line(row) for row in rows]
    lines.append("  ratios:")
    lines += [f"    {name}: {value:.3f}" for name, value in bench.ratios.items()]
    if bench.skipped:
        lines.append(f"  skipped: {bench.skipped}")
    return "\n".join(lines)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()

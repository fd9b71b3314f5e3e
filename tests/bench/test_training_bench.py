"""The training benchmark runs SFT, a generated episode and RL on the tiny model and
reports consistent figures. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.training import TrainingBenchmark, report, run_training_benchmark

FLYWHEEL = str(Path(sys.executable).parent / "flywheel")
TINY_OPTIONS = {
    "sft_steps": 2,
    "batch_size": 1,
    "rl_updates": 1,
    "group_size": 2,
    "tasks_per_update": 1,
    "max_steps": 1,
    "max_new_tokens": 4,
    "tasks": 3,
}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> TrainingBenchmark:
    return run_training_benchmark(
        **TINY_OPTIONS, threads=1, workdir=tmp_path_factory.mktemp("bench-training")
    )


def test_the_figures_are_positive_and_consistent(bench: TrainingBenchmark) -> None:
    d = bench.dataset
    assert d.episodes == 3
    assert 1 <= d.sft_rows <= d.members <= d.episodes
    assert 1 <= d.rl_tasks <= d.members
    assert 0 < d.supervised_tokens < d.row_tokens

    (run,) = bench.runs  # the larger model only with a GPU
    assert run.model == "tiny" and run.parameters > 0
    s, g, r = run.sft, run.generation, run.rl
    assert s.steps == 2 and s.batch_size == 1
    assert s.tokens_seen > 0 and s.seconds > 0 and s.cpu_seconds > 0
    assert s.tokens_per_second == pytest.approx(s.tokens_seen / s.seconds)
    assert 0 < s.supervised_tokens_per_second < s.tokens_per_second
    assert s.first_loss > 0 and s.last_loss > 0

    assert g.replies == 1  # max_steps 1: one reply
    assert 0 < g.generated_tokens <= g.max_new_tokens == 4
    assert 0 < g.generate_seconds <= g.seconds
    assert g.tokens_per_second <= g.generate_tokens_per_second

    assert r.rollouts == r.updates * r.group_size * r.tasks_per_update == 2
    assert r.seconds > 0 and r.rollouts_per_second == pytest.approx(r.rollouts / r.seconds)
    assert r.cpu_seconds > 0
    assert r.max_steps is not None
    assert 0 < r.mean_output_tokens <= r.max_steps * r.max_new_tokens
    assert r.rollout_tokens_per_second == pytest.approx(
        r.mean_output_tokens * r.rollouts / r.seconds
    )


def test_the_report_and_json_carry_the_figures_and_ratios(bench: TrainingBenchmark) -> None:
    assert bench.threads == 1
    assert torch.get_num_threads() != 0  # restored, whatever it was
    data = bench.to_json()
    assert json.loads(json.dumps(data)) == data
    assert set(data) == {
        "threads",
        "cores",
        "load_average",
        "cpu",
        "device",
        "seed",
        "dataset",
        "runs",
        "ratios",
        "skipped",
    }
    (run,) = data["runs"]
    assert set(run) == {"model", "parameters", "sft", "generation", "rl"}
    ratios = data["ratios"]
    assert ratios["tiny.rl_rollout_tokens_vs_sft_tokens"] == pytest.approx(
        run["rl"]["rollout_tokens_per_second"] / run["sft"]["tokens_per_second"]
    )
    assert all(value > 0 for value in ratios.values())

    text = report(bench)
    assert data["cpu"].endswith(f"torch kernels {torch.backends.cpu.get_cpu_capability()}")
    for needle in (
        "torch threads 1",
        f"CPU: {data['cpu']}",
        "SFT",
        "processed tokens",
        "rollouts/s",
        "ratios:",
    ):
        assert needle in text
    if not torch.cuda.is_available():
        assert data["skipped"] and "no GPU" in text


@pytest.mark.slow  # about 20 s: a new process imports torch, transformers and TRL
def test_the_cli_prints_the_figures_as_json(tmp_path: Path) -> None:
    options = [f"--{k.replace('_', '-')}={v}" for k, v in TINY_OPTIONS.items()]
    result = subprocess.run(
        [FLYWHEEL, "bench", "training", *options, "--threads=1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["threads"] == 1
    assert data["runs"][0]["rl"]["rollouts"] == 2
    assert data["runs"][0]["sft"]["tokens_seen"] > 0

"""Running sampled episodes for the CLI: settings are read here and passed down."""

from __future__ import annotations

from agents.runner import run_episode
from contract import Capability, Difficulty, Split, Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.policies import build_policy
from flows.settings import load_settings


def run_episodes(
    *,
    n: int,
    seed: int,
    policy_name: str,
    fault_rate: float | None = None,
    capability: Capability | None = None,
    difficulty: Difficulty | None = None,
    split: Split | None = None,
    max_steps: int | None = None,
) -> list[Trajectory]:
    settings = load_settings()
    policy = build_policy(policy_name, settings, fault_rate)
    sandbox = MobileSandbox()
    tasks = sample_tasks(
        n, seed, sandbox, capability=capability, difficulty=difficulty, split=split
    )
    budget = max_steps or settings.episode.max_steps
    return [run_episode(task, sandbox, policy, max_steps=budget) for task in tasks]

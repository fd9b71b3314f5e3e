"""Running sampled episodes for the CLI: settings are read here and passed down."""

from __future__ import annotations

from agents.policies.base import Policy
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import Capability, Difficulty, InvalidInputError, Split, Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from flows.settings import FlywheelSettings, load_settings

POLICIES = ("scripted", "openai")


def build_policy(name: str, settings: FlywheelSettings, fault_rate: float | None) -> Policy:
    if name == "scripted":
        rate = settings.episode.fault_rate if fault_rate is None else fault_rate
        return ScriptedPolicy(FaultConfig(rate=rate, recovery_rate=settings.episode.recovery_rate))
    if name == "openai":
        from agents.policies.openai_policy import OpenAIPolicy, make_client

        endpoint = settings.policy
        key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
        client = make_client(endpoint.base_url, key, endpoint.timeout_s)
        return OpenAIPolicy(
            client,
            endpoint.model,
            temperature=endpoint.temperature,
            max_attempts=endpoint.max_attempts,
        )
    raise InvalidInputError("policy", f"unknown policy {name!r}", POLICIES)


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

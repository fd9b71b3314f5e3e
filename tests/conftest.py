"""Shared fixtures: a sandbox and trajectories from real scripted episodes."""

from __future__ import annotations

import pytest

from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks


@pytest.fixture(scope="session")
def sandbox() -> MobileSandbox:
    return MobileSandbox()


@pytest.fixture(scope="session")
def faulty_trajectories(sandbox: MobileSandbox) -> list[Trajectory]:
    """Episodes over every kind of template, most with an injected fault."""
    policy = ScriptedPolicy(FaultConfig(rate=0.8, recovery_rate=0.5))
    return [run_episode(t, sandbox, policy) for t in sample_tasks(240, 11, sandbox)]

"""Policies built from settings (the one place that reads endpoint settings)."""

from __future__ import annotations

from agents.policies.base import Policy
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from contract import InvalidInputError
from flows.settings import FlywheelSettings

POLICIES = ("scripted", "openai")


def build_policy(
    name: str,
    settings: FlywheelSettings,
    fault_rate: float | None = None,
    recovery_rate: float | None = None,
) -> Policy:
    """The named policy; ``fault_rate`` and ``recovery_rate`` override the scripted ones."""
    if name == "scripted":
        rate = settings.episode.fault_rate if fault_rate is None else fault_rate
        recovery = settings.episode.recovery_rate if recovery_rate is None else recovery_rate
        return ScriptedPolicy(FaultConfig(rate=rate, recovery_rate=recovery))
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

"""Policies built from settings (the one place that reads endpoint settings).

``champion`` is the OpenAI-compatible policy pointed at the local model server
(``flywheel server start model``, or the deployment flow): it asks for the model by its
alias and records the registry id the server says it serves, so a round collected with
the champion names the model that collected it.
"""

from __future__ import annotations

from agents.policies.base import Policy
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from contract import FlywheelError, InvalidInputError
from flows.servers.managed import HOST
from flows.settings import FlywheelSettings

POLICIES = ("scripted", "openai", "champion")
CHAMPION = "champion"
"""The alias the model server answers to."""


def build_policy(
    name: str,
    settings: FlywheelSettings,
    fault_rate: float | None = None,
    recovery_rate: float | None = None,
    model: str | None = None,
) -> Policy:
    """The named policy; ``fault_rate`` and ``recovery_rate`` override the scripted ones.
    For ``champion``, ``model`` is the registry id the caller expects the server to serve
    (a different one is refused: the champion changed under a round)."""
    if name == "scripted":
        rate = settings.episode.fault_rate if fault_rate is None else fault_rate
        recovery = settings.episode.recovery_rate if recovery_rate is None else recovery_rate
        return ScriptedPolicy(FaultConfig(rate=rate, recovery_rate=recovery))
    if name == "openai":
        endpoint = settings.policy
        key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
        return _openai(endpoint.base_url, key, endpoint.model, settings, endpoint.model)
    if name == CHAMPION:
        served = served_champion(settings)
        if model is not None and served != model:
            raise FlywheelError(
                f"the model server at {champion_url(settings)} now serves {served}, not "
                f"{model}: the champion changed during the round; run the round again"
            )
        return _openai(champion_url(settings) + "/v1", None, CHAMPION, settings, served)
    raise InvalidInputError("policy", f"unknown policy {name!r}", POLICIES)


def champion_url(settings: FlywheelSettings) -> str:
    """The local model server's base URL (without ``/v1``)."""
    return f"http://{HOST}:{settings.serving.port}"


def served_champion(settings: FlywheelSettings) -> str:
    """The registry id of the model the local model server serves; ``FlywheelError``
    naming ``round.policy`` when no server answers."""
    from serving.client import health

    status = health(champion_url(settings))
    if status is None:
        raise InvalidInputError(
            "round.policy",
            f"'champion' needs the model server, and none answers on {champion_url(settings)}: "
            "deploy a model (flywheel deploy) or start it (flywheel server start model)",
            POLICIES,
        )
    served = status.get("model_id")
    if not isinstance(served, str) or not served:
        raise InvalidInputError(
            "round.policy",
            f"the model server on {champion_url(settings)} does not say which model it serves "
            "(no model_id in its /health or /v1/models), so trajectories could not name it",
            POLICIES,
        )
    return served


def _openai(
    base_url: str, key: str | None, model: str, settings: FlywheelSettings, recorded_as: str
) -> Policy:
    from agents.policies.openai_policy import OpenAIPolicy, make_client

    endpoint = settings.policy
    return OpenAIPolicy(
        make_client(base_url, key, endpoint.timeout_s, endpoint.max_response_bytes),
        model,
        temperature=endpoint.temperature,
        retry=settings.retries.llm,
        recorded_as=recorded_as,
        max_response_bytes=endpoint.max_response_bytes,
    )

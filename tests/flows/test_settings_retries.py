"""``[retries]``: one policy per dependency, reaching the one place that applies it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from agents.llm import OpenAIJsonLLM
from agents.policies.openai_policy import OpenAIPolicy
from contract import FlywheelError
from contract.retry import LLM_RETRY
from flows.gates import build_gate
from flows.policies import build_policy
from flows.round_config import resolve_config
from flows.settings import agent_llm, load_settings
from human_gate.label_studio import LabelStudioGate


def test_a_policy_set_in_the_file_reaches_where_it_is_applied(config: Path) -> None:
    config.write_text(
        "[policy]\nbase_url = 'http://127.0.0.1:9/v1'\n"
        "[agent_llm]\nroles = ['curator']\n"
        "[agent_llm.endpoint]\nbase_url = 'http://127.0.0.1:9/v1'\n"
        "[retries.llm]\nattempts = 2\nbackoff_s = 0.25\n"
        "[retries.backend]\nattempts = 5\n"
    )
    settings = load_settings()
    assert settings.retries.llm.model_dump() == {
        "attempts": 2,
        "backoff_s": 0.25,
        "max_backoff_s": LLM_RETRY.max_backoff_s,
    }
    assert settings.retries.backend.backoff_s == 0.0  # a field left out keeps its default
    policy = build_policy("openai", settings)
    assert isinstance(policy, OpenAIPolicy) and policy.retry == settings.retries.llm
    llm = agent_llm(settings, "curator")
    assert isinstance(llm, OpenAIJsonLLM) and llm._retry == settings.retries.llm
    assert resolve_config(settings).max_backend_attempts == 5


def test_label_studio_calls_follow_their_policy(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYWHEEL_LABEL_STUDIO__URL", "http://127.0.0.1:9")
    monkeypatch.setenv("FLYWHEEL_LABEL_STUDIO__TOKEN", "f" * 40)
    monkeypatch.setenv("FLYWHEEL_RETRIES__LABEL_STUDIO__ATTEMPTS", "2")
    gate = build_gate("label-studio", load_settings())
    assert isinstance(gate, LabelStudioGate) and gate.config.retry.attempts == 2


@pytest.mark.parametrize(
    ("text", "moved"),
    [
        ("[policy]\nmax_attempts = 3\n", "policy.max_attempts: has moved to retries.llm.attempts"),
        (
            "[round]\nmax_backend_attempts = 2\n",
            "round.max_backend_attempts: has moved to retries.backend.attempts",
        ),
    ],
)
def test_a_moved_setting_says_where_it_went(config: Path, text: str, moved: str) -> None:
    config.write_text(text)
    with pytest.raises(FlywheelError, match=re.escape(moved)):
        load_settings()


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("FLYWHEEL_RETRIES__LLM__ATTEMPTS", "0", "retries.llm.attempts"),
        ("FLYWHEEL_RETRIES__BACKEND__ATTEMPTS", "11", "retries.backend.attempts"),
        ("FLYWHEEL_RETRIES__LABEL_STUDIO__BACKOFF_S", "60", "must not exceed max_backoff_s"),
        ("FLYWHEEL_RETRIES__PREFECT_API", "0", "retries.prefect_api"),
    ],
)
def test_a_policy_out_of_range_is_refused_naming_it(
    config: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(FlywheelError, match=re.escape(needle)):
        load_settings()


def test_the_prefect_api_policy_reaches_prefect_s_client_and_the_runs_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prefect.settings import get_current_settings

    from flows.servers import prefect_api

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    monkeypatch.delenv("PREFECT_CLIENT_MAX_RETRIES", raising=False)
    with prefect_api("http://127.0.0.1:9/api", attempts=3):
        assert get_current_settings().client.max_retries == 2
        assert os.environ["PREFECT_CLIENT_MAX_RETRIES"] == "2"  # subprocesses inherit it
        assert os.environ["PREFECT_API_URL"] == "http://127.0.0.1:9/api"
    assert os.environ["PREFECT_API_URL"] == "http://127.0.0.1:1/api"
    assert "PREFECT_CLIENT_MAX_RETRIES" not in os.environ

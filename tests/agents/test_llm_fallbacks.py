"""Every agent's LLM behind one wrapper (``consult``): an endpoint that refuses
connections, or a client that lets its own exceptions out, costs each agent its LLM's
contribution and nothing else; the node goes on along its deterministic path."""

from __future__ import annotations

import httpx2
import openai
import pytest
from pydantic import JsonValue

from agents.balancer import run_balancer
from agents.curator import curate
from agents.llm import JsonLLM, LLMFailure, OpenAIJsonLLM, consult
from agents.policies.openai_policy import make_client
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from agents.task_constructor import construct_tasks
from contract import (
    RetryPolicy,
    Split,
    TaskSource,
    Trajectory,
    default_plan,
)
from curation.balance import default_target
from curation.routing import CuratorConfig
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from human_gate import final_decisions
from tests.agents.test_balancer import approve_all
from tests.fakes import refusing_url

FAST = RetryPolicy(attempts=2, backoff_s=0.0, max_backoff_s=0.0)


class Counting:
    """A ``JsonLLM`` that counts the questions it was asked before passing them on."""

    def __init__(self, inner: JsonLLM) -> None:
        self.inner = inner
        self.asked = 0

    def ask_json(self, system: str, user: str) -> dict[str, JsonValue]:
        self.asked += 1
        return self.inner.ask_json(system, user)


class Raising:
    """A ``JsonLLM`` of one's own whose client's exception escapes it."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def ask_json(self, system: str, user: str) -> dict[str, JsonValue]:
        raise self.error


def refusing() -> Counting:
    return Counting(OpenAIJsonLLM(make_client(refusing_url(), None, 2.0), "m", retry=FAST))


@pytest.fixture(scope="module")
def episodes(sandbox: MobileSandbox) -> list[Trajectory]:
    policy = ScriptedPolicy(FaultConfig(rate=0.3))
    return [run_episode(t, sandbox, policy, round_id="r") for t in sample_tasks(30, 5, sandbox)]


def test_consult_turns_every_client_error_into_a_failure() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    errors: list[Exception] = [
        openai.APIConnectionError(request=request),
        httpx2.ConnectError("refused"),
        ConnectionRefusedError("refused"),
    ]
    for error in errors:
        failure = consult(Raising(error), "system", "user")
        assert isinstance(failure, LLMFailure) and failure.endpoint
        assert type(error).__name__ in failure.reason
    down = consult(refusing(), "system", "user")
    assert isinstance(down, LLMFailure) and down.endpoint
    assert "APIConnectionError" in down.reason and "after 2 attempt(s)" in down.reason


def test_the_task_constructor_keeps_template_wording(sandbox: MobileSandbox) -> None:
    llm = refusing()
    result = construct_tasks("round-down", default_plan(10), 4, sandbox, llm=llm)
    assert len(result.tasks) == 10
    assert all(t.source is TaskSource.TEMPLATE for t in result.tasks)
    assert llm.asked <= 2  # once per pass at most: then the pass stops asking
    raised = construct_tasks(
        "round-raise",
        default_plan(10),
        4,
        sandbox,
        llm=Raising(openai.APIConnectionError(request=httpx2.Request("POST", "http://x"))),
    )
    assert [t.goal for t in raised.tasks] == [t.goal for t in result.tasks]


def test_the_curator_records_the_outage_and_decides_by_its_rules(
    episodes: list[Trajectory],
) -> None:
    llm = refusing()
    judged = curate(episodes, "r", CuratorConfig(), llm)
    plain = curate(episodes, "r", CuratorConfig())
    assert llm.asked == 1  # the first failure stops the asking
    assert [r.suggested for r in judged] == [r.suggested for r in plain]
    answers = [r.judge for r in judged if r.judge is not None]
    assert answers and all(
        isinstance(a, dict) and "APIConnectionError" in str(a["error"]) for a in answers
    )


def test_the_balancer_proposes_without_a_rationale(episodes: list[Trajectory]) -> None:
    train = [t for t in episodes if t.task.split is Split.TRAIN]
    reviews = approve_all(train)
    target = default_target()
    state = run_balancer("r", train, final_decisions(reviews), target, llm=refusing())
    plain = run_balancer("r", train, final_decisions(reviews), target)
    assert state["rationale"] is None
    (error,) = state["errors"]
    assert error.startswith("rationale: ") and "APIConnectionError" in error
    assert state["version"] is not None and plain["version"] is not None
    assert state["version"].members == plain["version"].members

"""The OpenAI-compatible policy, through the real ``openai`` client and the real sandbox.

Only the model is scripted (``ScriptedChatServer``); the client, the runner, the sandbox
and the verifier are the real ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agents.policies.base import TaskView
from agents.policies.openai_policy import (
    HARNESS,
    OpenAIPolicy,
    RawCall,
    make_client,
    parse_call,
)
from agents.runner import run_episode
from contract import (
    ErrorKind,
    ExecutionError,
    Finish,
    InvalidInputError,
    MemoryRead,
    Outcome,
    RetryPolicy,
    SubAgentCall,
    TaskSpec,
    Termination,
    ToolCall,
    ToolSpec,
    Trajectory,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from tests.agents.conversations import assert_valid_conversation, plan_replies
from tests.fakes import (
    RawReply,
    Reply,
    ScriptedChatServer,
    error_reply,
    json_reply,
    refusal_reply,
    text_reply,
    tool_call_reply,
    tool_calls_reply,
)

API_KEY = "sk-test-very-secret-0123456789"
MODEL = "scripted-model"


@pytest.fixture(scope="module")
def task() -> TaskSpec:
    return instantiate(template_named("text_contact"), 7, MobileSandbox())


def run(task: TaskSpec, replies: list[Reply], **policy_kw: Any) -> tuple[Trajectory, list[Any]]:
    with ScriptedChatServer(replies) as server:
        client = make_client(server.base_url, API_KEY, timeout_s=5.0)
        policy = OpenAIPolicy(client, MODEL, sleep=lambda s: None, **policy_kw)
        trajectory = run_episode(task, MobileSandbox(), policy, max_steps=8)
        requests = server.requests
    for body in requests:
        assert_valid_conversation(body["messages"])
    return trajectory, requests


def tool_messages(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (m for m in body["messages"] if m["role"] == "tool")


def test_reference_plan_through_the_real_client_is_verified(task: TaskSpec) -> None:
    trajectory, requests = run(task, plan_replies(task))

    assert trajectory.verdict.passed
    assert trajectory.metadata.outcome is Outcome.SUCCESS
    assert trajectory.metadata.termination is Termination.VERIFIED
    assert trajectory.metadata.policy.name == "openai"
    assert trajectory.metadata.policy.model == MODEL
    assert [s.action for s in trajectory.steps] == list(task.reference_plan)
    assert all(s.feedback.ok for s in trajectory.steps)
    assert all((s.input_tokens, s.output_tokens) == (12, 3) for s in trajectory.steps)
    assert trajectory.cost.input_tokens == 24
    assert "search_contacts(" in trajectory.steps[0].model_output
    # the second request carried the first call's result as a tool message
    (answer,) = tool_messages(requests[1])
    assert "result" in json.loads(answer["content"])


def test_requests_offer_tools_and_harness_but_never_the_verifier(task: TaskSpec) -> None:
    _, requests = run(task, plan_replies(task))

    first = requests[0]
    assert first["model"] == MODEL
    assert first["tool_choice"] == "auto"
    assert first["temperature"] == 0.0
    names = [t["function"]["name"] for t in first["tools"]]
    assert set(task.tools) <= set(names)
    assert set(HARNESS) <= set(names)
    assert {"subagent_gui", "subagent_search"} <= set(names)
    assert len(names) == len(set(names))
    gui = next(t for t in first["tools"] if t["function"]["name"] == "subagent_gui")
    assert "instruction" in gui["function"]["parameters"]["required"]
    assert first["messages"][0]["role"] == "system"
    assert "2026-03-14" in first["messages"][0]["content"]
    assert first["messages"][1] == {"role": "user", "content": task.goal}

    sent = json.dumps(requests)
    assert task.verifier.to_json().decode() not in sent
    for secret in ("reference_plan", "verifier", "exactly_one", "icontains", API_KEY):
        assert secret not in sent


def test_api_key_is_recorded_nowhere(task: TaskSpec) -> None:
    trajectory, _ = run(task, [error_reply(401), *plan_replies(task)])
    assert trajectory.metadata.outcome is Outcome.BACKEND_ERROR
    assert API_KEY not in trajectory.to_json().decode()
    trajectory, _ = run(task, plan_replies(task))
    assert API_KEY not in trajectory.to_json().decode()


def _recovers(trajectory: Trajectory) -> None:
    """A later good reply still completes the episode."""
    assert trajectory.verdict.passed
    assert trajectory.metadata.outcome is Outcome.SUCCESS
    assert trajectory.metadata.recovered


def test_non_json_arguments_are_invalid_arguments(task: TaskSpec) -> None:
    bad = tool_call_reply("search_contacts", '{"query": "Yusuf')
    trajectory, requests = run(task, [bad, *plan_replies(task)])

    first = trajectory.steps[0]
    assert first.action is None
    assert first.feedback.error is not None
    assert first.feedback.error.kind is ErrorKind.INVALID_ARGUMENTS
    assert "JSON" in first.feedback.error.message
    assert '{"query": "Yusuf' in first.model_output
    (answer,) = tool_messages(requests[1])
    assert json.loads(answer["content"])["error"]["kind"] == "invalid_arguments"
    _recovers(trajectory)


def test_unknown_tool_is_answered_by_the_sandbox(task: TaskSpec) -> None:
    trajectory, _ = run(task, [tool_call_reply("teleport", "{}"), *plan_replies(task)])

    first = trajectory.steps[0]
    assert first.action == ToolCall(tool="teleport")
    assert first.feedback.error is not None
    assert first.feedback.error.kind is ErrorKind.UNKNOWN_TOOL
    _recovers(trajectory)


def test_text_without_a_tool_call_is_malformed_output(task: TaskSpec) -> None:
    trajectory, requests = run(task, [text_reply("I will text them now."), *plan_replies(task)])

    first = trajectory.steps[0]
    assert first.action is None
    assert first.feedback.error is not None
    assert first.feedback.error.kind is ErrorKind.MALFORMED_OUTPUT
    assert first.model_output == "I will text them now."
    # the next request shows the text and a nudge to call a function
    assert requests[1]["messages"][-2] == {
        "role": "assistant",
        "content": "I will text them now.",
    }
    assert requests[1]["messages"][-1]["role"] == "user"
    _recovers(trajectory)


@pytest.mark.parametrize(
    "reply",
    [
        refusal_reply("I can't help with that."),
        refusal_reply("", finish_reason="content_filter"),
    ],
    ids=["refusal", "content_filter"],
)
def test_endpoint_refusal_is_typed_and_the_episode_goes_on(task: TaskSpec, reply: Reply) -> None:
    trajectory, _ = run(task, [reply, *plan_replies(task)])

    first = trajectory.steps[0]
    assert first.action is None
    assert first.feedback.error is not None
    assert first.feedback.error.kind is ErrorKind.ENDPOINT_REFUSAL
    _recovers(trajectory)


def test_only_the_first_of_several_tool_calls_is_executed(task: TaskSpec) -> None:
    search, send = task.reference_plan
    assert isinstance(search, ToolCall)
    assert isinstance(send, ToolCall)
    both = tool_calls_reply(
        (search.tool, json.dumps(search.arguments)), (send.tool, json.dumps(send.arguments))
    )
    trajectory, requests = run(task, [both, tool_call_reply("finish", '{"answer": "no"}')])

    first = trajectory.steps[0]
    assert first.action == search
    assert first.feedback.ok
    assert send.tool in first.model_output
    answers = list(tool_messages(requests[1]))
    assert len(answers) == 2
    assert "result" in json.loads(answers[0]["content"])
    assert "not executed" in answers[1]["content"]
    # the second call never reached the sandbox: nothing was sent
    assert not trajectory.verdict.passed
    assert trajectory.metadata.termination is Termination.FINISHED


def test_ill_typed_harness_call_names_the_field(task: TaskSpec) -> None:
    trajectory, _ = run(task, [tool_call_reply("memory_read", '{"key": 3}'), *plan_replies(task)])

    first = trajectory.steps[0]
    assert first.action is None
    assert first.feedback.error is not None
    assert first.feedback.error.kind is ErrorKind.INVALID_ARGUMENTS
    assert first.feedback.error.field == "key"
    _recovers(trajectory)


def test_transient_error_is_retried_inside_the_step(task: TaskSpec) -> None:
    trajectory, requests = run(task, [error_reply(500), error_reply(429), *plan_replies(task)])

    assert trajectory.verdict.passed
    assert trajectory.steps[0].feedback.ok
    assert trajectory.metadata.retries == 2
    assert len(requests) == 4


def test_persistent_unavailability_ends_as_endpoint_error(task: TaskSpec) -> None:
    retry = RetryPolicy(attempts=3, backoff_s=0.0, max_backoff_s=0.0)
    trajectory, requests = run(task, [error_reply(503)] * 3, retry=retry)

    assert trajectory.metadata.outcome is Outcome.BACKEND_ERROR
    assert trajectory.metadata.termination is Termination.ENDPOINT_ERROR
    assert trajectory.metadata.retries == 2
    assert len(requests) == 3
    (step,) = trajectory.steps
    assert step.feedback.error is not None
    assert step.feedback.error.kind is ErrorKind.ENDPOINT_ERROR


def test_unreachable_endpoint_ends_as_endpoint_error(task: TaskSpec) -> None:
    with ScriptedChatServer() as server:
        base_url = server.base_url  # closed on exit: nothing listens there any more
    delays: list[float] = []
    client = make_client(base_url, None, timeout_s=2.0)
    retry = RetryPolicy(attempts=4, backoff_s=0.5, max_backoff_s=1.5)
    policy = OpenAIPolicy(client, MODEL, retry=retry, sleep=delays.append)
    trajectory = run_episode(task, MobileSandbox(), policy)

    assert trajectory.metadata.termination is Termination.ENDPOINT_ERROR
    assert trajectory.metadata.outcome is Outcome.BACKEND_ERROR  # no one's failure in it
    assert trajectory.metadata.retries == 3
    assert delays == [0.5, 1.0, 1.5]  # doubling, capped


def test_harness_calls_parse_to_actions() -> None:
    subagents = frozenset({"gui"})
    assert parse_call(RawCall("1", "memory_read", '{"key": "user.name"}'), subagents) == (
        MemoryRead(key="user.name")
    )
    assert parse_call(RawCall("1", "finish", '{"answer": "ok"}'), subagents) == Finish(answer="ok")
    call = RawCall("1", "subagent_gui", '{"instruction": "open", "app": "bank"}')
    assert parse_call(call, subagents) == SubAgentCall(
        agent="gui", instruction="open", arguments={"app": "bank"}
    )
    missing = parse_call(RawCall("1", "subagent_gui", '{"app": "bank"}'), subagents)
    assert not isinstance(missing, SubAgentCall)
    assert getattr(missing, "field", None) == "instruction"
    not_object = parse_call(RawCall("1", "finish", "[1, 2]"), subagents)
    assert getattr(not_object, "kind", None) is ErrorKind.INVALID_ARGUMENTS
    # an unknown sub-agent is just an unknown tool for the backend to refuse
    assert parse_call(RawCall("1", "subagent_x", "{}"), subagents) == ToolCall(tool="subagent_x")


_DEEP = "[" * 300 + "]" * 300
_DEEPER = "[" * 2_000 + "]" * 2_000


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ('{"n": NaN}', "not valid JSON"),
        ('{"n": -Infinity}', "not valid JSON"),
        ('{"n": 1e400}', "not valid JSON"),
        ('{"q": "\\ud800"}', "not valid JSON"),
        ('{"q": "\ud800"}', "not valid JSON"),
        (f'{{"q": {_DEEP}}}', "cannot be stored as JSON"),
        (f'{{"q": {_DEEPER}}}', "not valid JSON"),
    ],
    ids=[
        "nan",
        "infinity",
        "past-double",
        "lone-surrogate-escape",
        "lone-surrogate",
        "deep",
        "deeper",
    ],
)
def test_arguments_a_trajectory_cannot_hold_are_an_invalid_call(arguments: str, says: str) -> None:
    """What Python's ``json`` reads but canonical JSON cannot write (so that storing or
    describing the action would raise later) is refused where the reply is read."""
    refused = parse_call(RawCall("1", "search_contacts", arguments), frozenset())
    assert isinstance(refused, ExecutionError), refused
    assert refused.kind is ErrorKind.INVALID_ARGUMENTS and says in refused.message


def test_an_integer_past_64_bits_is_read_as_the_number_it_is() -> None:
    """A model wrote ``minutes`` past 64 bits during RL: the action is the double, and it
    describes and stores as any other."""
    big = parse_call(
        RawCall("1", "start_timer", '{"minutes": -123456789012345678901234}'), frozenset()
    )
    assert big == ToolCall(tool="start_timer", arguments={"minutes": -1.2345678901234568e23})
    assert "minutes=" in big.describe()


def test_a_call_past_what_a_trajectory_holds_is_answered_and_the_episode_goes_on(
    task: TaskSpec,
) -> None:
    deep = tool_call_reply("search_contacts", f'{{"query": {_DEEP}}}')
    trajectory, requests = run(task, [deep, *plan_replies(task)])

    first = trajectory.steps[0]
    assert first.action is None and first.feedback.error is not None
    assert first.feedback.error.kind is ErrorKind.INVALID_ARGUMENTS
    (answer,) = tool_messages(requests[1])
    assert json.loads(answer["content"])["error"]["kind"] == "invalid_arguments"
    _recovers(trajectory)
    assert Trajectory.from_json(trajectory.to_json()) == trajectory


def test_start_reads_only_the_view() -> None:
    view = TaskView(goal="Say hi", tools=(), subagents=(), max_steps=3)
    session = OpenAIPolicy(make_client("http://127.0.0.1:9/v1", None, 1.0), MODEL).start(
        None,  # type: ignore[arg-type]  # the task itself is never read
        view,
    )
    assert session.messages[1] == {"role": "user", "content": "Say hi"}


def test_a_tool_named_like_a_harness_function_is_refused_at_start() -> None:
    clash = ToolSpec(name="finish", domain="x", description="clash", parameters={"type": "object"})
    view = TaskView(goal="g", tools=(clash,), subagents=(), max_steps=3)
    policy = OpenAIPolicy(make_client("http://127.0.0.1:9/v1", None, 1.0), MODEL)
    with pytest.raises(InvalidInputError, match="finish"):
        policy.start(None, view)  # type: ignore[arg-type]


def test_an_html_page_with_status_200_ends_the_episode_as_an_endpoint_error(
    task: TaskSpec,
) -> None:
    page = RawReply(b"<html><body>Service unavailable</body></html>", content_type="text/html")
    trajectory, requests = run(task, [page, *plan_replies(task)])

    assert trajectory.metadata.outcome is Outcome.BACKEND_ERROR
    assert trajectory.metadata.termination is Termination.ENDPOINT_ERROR
    assert len(requests) == 1  # not transient: never asked again
    (step,) = trajectory.steps
    assert step.action is None and step.feedback.error is not None
    assert step.feedback.error.kind is ErrorKind.ENDPOINT_ERROR
    assert "malformed completion: the body is not JSON" in step.feedback.error.message


@pytest.mark.parametrize(
    "call",
    [
        {"id": "c1", "type": "function", "function": {}},
        {"id": "c1", "type": "function", "function": {"name": "send_message", "arguments": 5}},
        {"id": "c1", "type": "custom", "custom": {"name": "x", "input": "y"}},
        "search_contacts()",
    ],
    ids=["empty-function", "number-arguments", "custom-call", "call-as-text"],
)
def test_a_malformed_tool_call_is_malformed_output_and_the_episode_goes_on(
    task: TaskSpec, call: object
) -> None:
    bad = json_reply({"choices": [{"message": {"content": None, "tool_calls": [call]}}]})
    trajectory, requests = run(task, [bad, *plan_replies(task)])

    first = trajectory.steps[0]
    assert first.action is None and first.feedback.error is not None
    assert first.feedback.error.kind is ErrorKind.MALFORMED_OUTPUT
    assert "tool_calls[0]" in first.feedback.error.message
    assert first.model_output.startswith("[malformed tool_call] tool_calls[0]")
    # the model is shown what it sent and asked again; nothing malformed is echoed
    assert requests[1]["messages"][-2] == {"role": "assistant", "content": first.model_output}
    assert requests[1]["messages"][-1]["content"].startswith("Your last reply contained no usable")
    _recovers(trajectory)

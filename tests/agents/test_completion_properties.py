"""Properties of the completion boundary, over responses ``hypothesis`` makes up: any
body, of any shape, through the real ``openai`` client and a local server. Nothing
raises; an episode over such replies is a valid trajectory whose conversation is the one
the policy sent."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.completions import Completion, CompletionFailure, parse_completion, request_completion
from agents.policies.chat_format import trajectory_conversation
from agents.policies.openai_policy import make_client
from agents.runner import run_episode
from contract import Outcome, RetryPolicy, TaskSpec, Trajectory
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from tests.agents.conversations import CapturingPolicy, assert_valid_conversation
from tests.fakes import RawReply, ScriptedChatServer

TASK: TaskSpec = instantiate(template_named("text_contact"), 7, MobileSandbox())
NAMES = ["search_contacts", "send_message", "finish", "memory_read", "subagent_gui", "teleport"]
ARGUMENTS = ['{"query": "Yusuf"}', '{"answer": "ok"}', "{}", "", '{"key": 3}', "[1]", '{"a'] + [
    json.dumps(call.arguments) for call in TASK.reference_plan if hasattr(call, "arguments")
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


def either(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a value of the right shape, sometimes any JSON at all."""
    return st.one_of(valid, valid, valid, json_values)


calls = st.fixed_dictionaries(
    {},
    optional={
        "id": either(st.sampled_from(["c1", "c2", "", "c1"])),
        "type": either(st.sampled_from(["function", "custom"])),
        "function": either(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": either(st.sampled_from(NAMES)),
                    "arguments": either(st.sampled_from(ARGUMENTS)),
                },
            )
        ),
    },
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "role": st.just("assistant"),
        "content": either(st.none() | st.text(max_size=40)),
        "refusal": either(st.none() | st.none() | st.text(max_size=10)),
        "tool_calls": either(st.none() | st.lists(either(calls), max_size=3)),
    },
)
usages = st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": either(st.integers(min_value=0, max_value=10**6)),
        "completion_tokens": either(st.integers(min_value=0, max_value=10**6)),
        "total_tokens": either(st.integers(min_value=0, max_value=10**6)),
    },
)
completions = st.fixed_dictionaries(
    {},
    optional={
        "choices": either(
            st.lists(
                either(
                    st.fixed_dictionaries(
                        {"message": either(messages)},
                        optional={
                            "finish_reason": either(
                                st.sampled_from(["stop", "tool_calls", "length", "content_filter"])
                            )
                        },
                    )
                ),
                max_size=2,
            )
        ),
        "usage": either(usages),
        "model": either(st.text(max_size=8)),
        "object": st.just("chat.completion"),
    },
)
bodies = st.one_of(
    completions.map(lambda c: json.dumps(c).encode()),
    completions.map(lambda c: json.dumps(c).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.sampled_from([b"<html>502</html>", b"", b"null", b'{"choices": [{"message":']),
)
responses = st.builds(
    RawReply,
    body=bodies,
    status=st.sampled_from([200, 200, 200, 200, 400, 404, 429, 500, 503]),
    content_type=st.sampled_from(["application/json", "text/html", "text/plain"]),
)


@settings(max_examples=400, deadline=None)
@given(body=bodies)
def test_any_body_parses_to_a_completion_or_a_failure(body: bytes) -> None:
    parsed = parse_completion(body)
    assert isinstance(parsed, Completion | CompletionFailure)
    if isinstance(parsed, Completion):
        reply = parsed.reply
        assert all(c.name and isinstance(c.arguments, str) for c in reply.calls)
        assert len({c.id for c in reply.calls}) == len(reply.calls)
        assert not (reply.calls and reply.malformed)
        assert reply.input_tokens >= 0 and reply.output_tokens >= 0
    else:
        assert parsed.message


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=responses)
def test_any_response_through_the_real_client_is_data(response: RawReply) -> None:
    with ScriptedChatServer([response]) as server:
        client = make_client(server.base_url, "sk-secret-0123456789", timeout_s=5.0)
        result = request_completion(
            client, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        )
    assert isinstance(result, Completion | CompletionFailure)
    if isinstance(result, CompletionFailure):
        assert "sk-secret-0123456789" not in result.message


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies=st.lists(responses, max_size=6))
def test_an_episode_over_any_replies_is_a_valid_trajectory(replies: list[RawReply]) -> None:
    with ScriptedChatServer(replies) as server:
        client = make_client(server.base_url, None, timeout_s=5.0)
        retry = RetryPolicy(attempts=2, backoff_s=0.0, max_backoff_s=0.0)
        policy = CapturingPolicy(client, "m", sleep=lambda s: None, retry=retry)
        trajectory = run_episode(TASK, MobileSandbox(), policy, max_steps=8)
        requests = server.requests

    assert Trajectory.model_validate_json(trajectory.to_json()) == trajectory
    for body in requests:
        assert_valid_conversation(body["messages"])
    if trajectory.metadata.outcome is not Outcome.BACKEND_ERROR:
        (session,) = policy.sessions
        (view,) = policy.views
        assert trajectory_conversation(trajectory, view).messages == session.messages

"""The LLM GUI agent on a fake Appium phone (``appium_url``), through the real ``openai``
client: only the model is scripted (``ScriptedChatServer``)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agents.gui_agent import LLMGuiAgent
from agents.policies.openai_policy import make_client
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import (
    ErrorKind,
    Outcome,
    RetryPolicy,
    StateChange,
    SubAgentCall,
    TaskSpec,
    Termination,
    UIStateCheck,
    VerifierSpec,
)
from envs.appium.backend import GUI_AGENT, ShardDevices
from envs.appium.device import DeviceSession, session
from envs.appium.gui_agent import GuiReport
from envs.appium.pool import DevicePool, DeviceSpec
from envs.appium.profiles import FakeProfile
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from envs.screen import PERMISSIONS, permission_id, select
from storage.artifacts import ArtifactStore
from tests.fakes import (
    Reply,
    ScriptedChatServer,
    error_reply,
    refusing_url,
    text_reply,
    tool_call_reply,
)
from tests.fakes.chat_server import ChatReply

API_KEY = "sk-test-very-secret-0123456789"
SWITCH = permission_id("transit", "notifications")
GRANT = {"app": "transit", "operation": "grant_permission", "target": "notifications"}


def call(name: str, **arguments: Any) -> ChatReply:
    return tool_call_reply(name, json.dumps(arguments))


def tap(element_id: str) -> ChatReply:
    return call("tap", locator={"by": "id", "value": element_id})


READ = call("read_screen")
DONE = call("done", success=True, result={"granted": True}, summary="Notifications are on.")


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


@pytest.fixture
def phone(appium_url: str, store: ArtifactStore) -> Iterator[DeviceSession]:
    with session(appium_url, FakeProfile(), store.put) as device:
        yield device


def operate(
    device: DeviceSession, replies: Sequence[Reply], **agent_kw: Any
) -> tuple[GuiReport, list[dict[str, Any]]]:
    with ScriptedChatServer(replies) as server:
        client = make_client(server.base_url, API_KEY, timeout_s=5.0)
        retry = RetryPolicy(attempts=3, backoff_s=0.0, max_backoff_s=0.0)
        agent = LLMGuiAgent(client, "gui-model", retry=retry, **agent_kw)
        report = agent.operate(device, "Turn on notifications for the transit app.", GRANT)
        return report, server.requests


def switch_on(device: DeviceSession) -> bool:
    return [e["checked"] for e in select(device.screen_document(), f"//*[@id='{SWITCH}']")] == [
        "true"
    ]


def test_the_model_reads_the_screen_taps_and_is_done(
    phone: DeviceSession, store: ArtifactStore
) -> None:
    report, requests = operate(phone, [READ, tap(SWITCH), DONE])
    feedback = report.feedback
    assert feedback.error is None, feedback.error
    assert feedback.result == {"granted": True}
    assert feedback.state_changes == (
        StateChange(collection=PERMISSIONS, entity_id="transit:notifications", op="updated"),
    )
    assert feedback.latency_ms > 0
    assert report.trace == [
        "read_screen() ✓",
        f"tap(id={SWITCH}) ✓",
        "screenshot() ✓",
    ]
    assert sorted(Path(ref).suffix for ref in report.artifacts) == [".png", ".xml"]
    assert all(ref in store for ref in report.artifacts)
    assert switch_on(phone)
    assert len(requests) == 3
    assert (report.input_tokens, report.output_tokens) == (3 * 12, 3 * 3)  # each reply's usage
    first = requests[0]
    assert first["model"] == "gui-model" and first["tool_choice"] == "auto"
    names = [t["function"]["name"] for t in first["tools"]]
    assert names[0] == "tap" and {"read_screen", "launch_app", "done"} <= set(names)
    system, user = first["messages"]
    assert system["role"] == "system" and "read_screen" in system["content"]
    assert "Turn on notifications" in user["content"]
    assert json.dumps(GRANT, sort_keys=True) in user["content"]
    tool = requests[1]["messages"][-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_1_0"
    assert f"[{SWITCH}]" in tool["content"] and "unchecked" in tool["content"]


def test_unusable_replies_are_fed_back_and_the_call_still_succeeds(phone: DeviceSession) -> None:
    replies = [
        text_reply("I will look at the screen."),
        tool_call_reply("read_screen", "{not json"),
        call("click", element=SWITCH),
        call("tap", locator={"by": "xpath", "value": "//*[@id="}),
        tap(SWITCH),
        DONE,
    ]
    report, requests = operate(phone, replies)
    assert report.feedback.error is None, report.feedback.error
    assert report.feedback.state_changes != ()
    assert report.trace == [
        "(no tool call) ✗ malformed_output",
        "read_screen(…) ✗ invalid_arguments",
        "click(…) ✗ unknown_tool",
        "tap(xpath=//*[@id=) ✗ invalid_locator",
        f"tap(id={SWITCH}) ✓",
        "screenshot() ✓",
    ]
    answers = [r["messages"][-1] for r in requests[1:5]]
    assert answers[0]["role"] == "user" and "no usable tool call" in answers[0]["content"]
    kinds = [json.loads(a["content"])["error"]["kind"] for a in answers[1:]]
    assert kinds == ["invalid_arguments", "unknown_tool", "invalid_locator"]
    assert "tap, long_press" in answers[2]["content"]
    assert switch_on(phone)


def test_a_model_that_never_finishes_runs_out_of_actions(phone: DeviceSession) -> None:
    report, requests = operate(phone, [READ, READ, READ], max_actions=2)
    error = report.feedback.error
    assert error is not None
    assert error.kind is ErrorKind.PRECONDITION_FAILED
    assert error.message == "the GUI agent did not finish in 2 screen actions"
    assert len(requests) == 2
    assert report.trace == ["read_screen() ✓", "read_screen() ✓", "screenshot() ✓"]


def test_done_without_success_is_a_precondition_failure(phone: DeviceSession) -> None:
    gave_up = call("done", success=False, summary="There is no such switch.")
    report, _ = operate(phone, [READ, gave_up])
    assert report.feedback.error is not None
    assert report.feedback.error.kind is ErrorKind.PRECONDITION_FAILED
    assert report.feedback.error.message == "There is no such switch."
    assert report.feedback.state_changes == ()


def test_an_endpoint_that_fails_is_an_endpoint_error(phone: DeviceSession) -> None:
    report, requests = operate(phone, [error_reply(500)] * 3)
    error = report.feedback.error
    assert error is not None and error.kind is ErrorKind.ENDPOINT_ERROR
    assert error.message.startswith("GUI model endpoint failed: InternalServerError")
    assert "after 3 attempt(s)" in error.message
    assert API_KEY not in error.message
    assert len(requests) == 3
    refused, _ = operate(phone, [error_reply(401, f"bad key {API_KEY}")])
    assert refused.feedback.error is not None
    assert refused.feedback.error.kind is ErrorKind.ENDPOINT_ERROR
    assert API_KEY not in refused.feedback.error.message


def test_an_episode_with_the_llm_gui_agent_verifies_on_the_device(
    appium_url: str, store: ArtifactStore
) -> None:
    made = instantiate(
        template_named("grant_app_permission"),
        3,
        MobileSandbox(),
        params={"app": "gym", "permission": "camera"},
    )
    camera = permission_id("gym", "camera")
    on = UIStateCheck(xpath=f"//*[@id='{camera}']", attributes={"checked": "true"})
    checks = VerifierSpec(checks=(*made.verifier.checks, on))
    spec = TaskSpec.model_validate(
        made.model_copy(update={"verifier": checks, "id": ""}).model_dump()
    )
    pool = DevicePool(
        [DeviceSpec("phone-1", appium_url, FakeProfile())], store=store.put, lease_timeout_s=5
    )
    with ScriptedChatServer([READ, tap(camera), DONE]) as server:
        agent = LLMGuiAgent(make_client(server.base_url, API_KEY, 5.0), "gui-model")
        with ShardDevices(pool, gui_agent=agent) as shard:
            backend = shard.backend(0)
            trajectory = run_episode(spec, backend, ScriptedPolicy())
            evidence = backend.evidence()
        assert server.remaining == 0
        task_message = server.requests[0]["messages"][1]["content"]
    assert trajectory.metadata.outcome is Outcome.SUCCESS, trajectory.verdict
    assert {r.kind: r.met for r in trajectory.verdict.checks} == {
        "collaboration": True,
        "state": True,
        "ui_state": True,
        "no_collateral": True,
    }
    assert evidence.final[PERMISSIONS]["gym:camera"]["granted"] is True
    (step,) = [
        s
        for s in trajectory.steps
        if isinstance(s.action, SubAgentCall) and s.action.agent == GUI_AGENT
    ]
    assert step.observation == (
        f"GUI agent on phone-1: read_screen() ✓ · tap(id={camera}) ✓ · screenshot() ✓"
    )
    assert sorted(Path(ref).suffix for ref in step.artifacts) == [".png", ".xml"]
    # The scripted planner spends no tokens: the step's and the trajectory's are the GUI model's.
    assert (step.input_tokens, step.output_tokens) == (3 * 12, 3 * 3)
    assert (trajectory.cost.input_tokens, trajectory.cost.output_tokens) == (3 * 12, 3 * 3)
    assert isinstance(step.action, SubAgentCall)
    assert step.action.instruction in task_message


def test_a_gui_model_outage_ends_the_episode_and_leaves_the_device_healthy(
    appium_url: str, store: ArtifactStore
) -> None:
    """The device did nothing wrong: its lease is not marked broken, and the episode is
    an endpoint error, which the collector does not run again on another device."""
    spec = instantiate(template_named("grant_app_permission"), 3, MobileSandbox())
    pool = DevicePool(
        [DeviceSpec("phone-1", appium_url, FakeProfile())], store=store.put, lease_timeout_s=5
    )
    retry = RetryPolicy(attempts=2, backoff_s=0.0, max_backoff_s=0.0)
    agent = LLMGuiAgent(make_client(refusing_url(), API_KEY, 2.0), "gui-model", retry=retry)
    with ShardDevices(pool, gui_agent=agent) as shard:
        backend = shard.backend(0)
        trajectory = run_episode(spec, backend, ScriptedPolicy())
        assert shard.backend(1).device == "phone-1"
        assert shard.failed == []  # the device was not given up as broken
    assert trajectory.metadata.termination is Termination.ENDPOINT_ERROR
    assert trajectory.metadata.outcome is Outcome.BACKEND_ERROR
    last = trajectory.steps[-1].feedback.error
    assert last is not None and last.kind is ErrorKind.ENDPOINT_ERROR
    assert "after 2 attempt(s)" in last.message and API_KEY not in last.message

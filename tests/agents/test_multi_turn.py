"""Tasks of several user turns: the episode goes on after each finish but the last, the
policy hears the next turn then, and the conversation (a policy's, the export's, Label
Studio's view) shows each user turn where it was said."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import pytest

from agents.curator import curate
from agents.policies.chat_format import (
    OPENAI_POLICY,
    RawCall,
    Reply,
    action_call,
    task_view,
    template_messages,
    trajectory_conversation,
)
from agents.policies.openai_policy import ChatSession
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import (
    TERMINAL_KINDS,
    Finish,
    PolicyInfo,
    TaskSpec,
    Termination,
    step_budget,
)
from envs.bfcl.backend import BfclBackend, task_spec
from envs.bfcl.tasks import load_tasks
from envs.sandbox import MobileSandbox
from human_gate import GateItem
from human_gate.label_studio.view import render_html
from storage import Catalog
from tests.training.builders import frozen_dataset, train_tasks
from training.export import export_dataset

TEMPLATE = "buy_product"
LATER = ("Also do the rest, please.", "Thanks, that is all.")


def turns_of(task: TaskSpec) -> TaskSpec:
    """``task`` asked in three user turns: its plan's first call, then the rest, then
    nothing more; the policy finishes each turn."""
    plan = [a for a in task.reference_plan if a.kind not in TERMINAL_KINDS]
    split = (
        *plan[:1],
        Finish(answer="First part done."),
        *plan[1:],
        Finish(answer="All done."),
        Finish(answer="Bye."),
    )
    data = task.model_dump(exclude={"id"})
    return TaskSpec.model_validate({**data, "reference_plan": split, "follow_ups": LATER})


def user_turns(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def _replaying(task: TaskSpec, seen: list[tuple[list[dict[str, Any]], list[str]]]) -> Any:
    """A reply source that calls ``task``'s reference plan in order, recording each
    request's messages and offered function names."""

    class Replay:
        def __init__(self) -> None:
            self.next = 0

        def reply(
            self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
        ) -> tuple[Reply | None, int, str]:
            seen.append((list(messages), [t["function"]["name"] for t in tools]))
            name, arguments = action_call(task.reference_plan[self.next])
            call = RawCall(f"call_{self.next}", name, json.dumps(arguments))
            self.next += 1
            return Reply(None, None, "tool_calls", (call,), 0, 0), 0, ""

    return Replay()


_TEST_POLICY = PolicyInfo(name=OPENAI_POLICY, version="test")


@dataclass
class _ChatPolicy:
    """A chat policy over ``_replaying``'s source."""

    seen: list[tuple[list[dict[str, Any]], list[str]]]
    tools_per_request: bool
    info: PolicyInfo = _TEST_POLICY
    sessions: list[ChatSession] = field(default_factory=list)

    def start(self, task: TaskSpec, view: Any) -> ChatSession:
        source = _replaying(task, self.seen)
        session = ChatSession(source, view, tools_per_request=self.tools_per_request)
        self.sessions.append(session)
        return session


def test_the_episode_goes_on_after_each_finish_but_the_last() -> None:
    task = turns_of(train_tasks(TEMPLATE, 1)[0])
    assert len(task.reference_plan) >= 4
    trajectory = run_episode(task, MobileSandbox(), ScriptedPolicy(), stop_when_verified=False)
    kinds = [s.action.kind for s in trajectory.steps if s.action is not None]
    assert kinds.count("finish") == 3 and kinds[-1] == "finish"
    assert trajectory.metadata.termination is Termination.FINISHED
    assert trajectory.verdict.passed
    one_turn = train_tasks(TEMPLATE, 1)[0]
    stops = run_episode(one_turn, MobileSandbox(), ScriptedPolicy(), stop_when_verified=False)
    assert [s.action.kind for s in stops.steps if s.action is not None].count("finish") == 1


def test_a_chat_policy_hears_each_later_turn_after_its_finish() -> None:
    task = turns_of(train_tasks(TEMPLATE, 1)[0])
    sandbox = MobileSandbox()
    seen: list[tuple[list[dict[str, Any]], list[str]]] = []

    trajectory = run_episode(task, sandbox, _ChatPolicy(seen, True), stop_when_verified=False)

    assert trajectory.metadata.termination is Termination.FINISHED
    requests = [messages for messages, _ in seen]
    heard = [user_turns(r) for r in requests]
    assert heard[0] == [task.goal]
    assert heard[2] == [task.goal, LATER[0]], "the next turn comes right after the finish"
    assert heard[-1] == [task.goal, *LATER]
    replayed = trajectory_conversation(trajectory, task_view(task, sandbox, step_budget(task)))
    finish_answer = replayed.messages.index(
        next(m for m in replayed.messages if m["role"] == "user" and m["content"] == LATER[0])
    )
    assert replayed.messages[finish_answer - 1]["role"] == "tool"
    assert replayed.messages[: len(requests[-1])] == requests[-1]


def test_the_export_and_the_annotators_view_show_every_user_turn(tmp_path: Path) -> None:
    tasks = [turns_of(t) for t in train_tasks(TEMPLATE, 3)]
    frozen = frozen_dataset(tmp_path, tasks)
    with Catalog.open(frozen.catalog_path) as catalog:
        export_dataset(catalog, frozen.version.id, tmp_path / "export")
        stored = {
            m.trajectory_id: catalog.trajectories.get(m.trajectory_id)
            for m in frozen.version.members
        }
    trajectory = next(iter(stored.values()))
    sft = datasets.load_from_disk(str(tmp_path / "export" / "hf"))["sft"]
    assert len(sft) == 3
    for row in sft:
        messages = row["messages"]
        assert user_turns(messages)[1:] == list(LATER)
        episode = stored[row["trajectory_id"]]
        view = task_view(episode.task, MobileSandbox(), step_budget(episode.task))
        replayed = template_messages(trajectory_conversation(episode, view).messages)
        assert messages == json.loads(json.dumps(replayed)), "columns and records agree"
        trained = [t for m, t in zip(messages, row["trained"], strict=True) if m["role"] == "user"]
        assert trained == [False, False, False]
    record = curate([trajectory], "r")[0]
    html = render_html(GateItem(trajectory, record))
    assert "User, turn 2:" in html and "User, turn 3:" in html
    assert html.index("User, turn 2:") < html.index("User, turn 3:")


@pytest.mark.parametrize("per_request", [True, False], ids=["an endpoint", "a local model"])
def test_a_tool_that_arrives_mid_conversation_is_described_then_offered(
    per_request: bool,
) -> None:
    task = task_spec(load_tasks("miss_func")[3])  # find and ls arrive with turn two
    seen: list[tuple[list[dict[str, Any]], list[str]]] = []
    policy = _ChatPolicy(seen, per_request)

    trajectory = run_episode(task, BfclBackend(), policy, stop_when_verified=False)

    assert trajectory.verdict.passed
    first_tools = seen[0][1]
    assert "find" not in first_tools
    arrival = next(
        i for i, (messages, _) in enumerate(seen) if task.follow_ups[0] in user_turns(messages)[-1]
    )
    said = user_turns(seen[arrival][0])[-1]
    described = [json.loads(line)["function"]["name"] for line in said.splitlines()[1:]]
    assert described == ["find", "ls"]
    assert ("find" in seen[arrival][1]) is per_request
    assert seen[arrival - 1][1] == first_tools  # nothing arrives before its turn
    offered = [t["function"]["name"] for t in policy.sessions[0].offered]
    assert {"find", "ls"} <= set(offered), "a local model's call grammar offers them too"

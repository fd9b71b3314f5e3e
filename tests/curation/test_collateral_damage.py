"""Episodes that do their task and harm something else: they fail, curation names the
nearest failure type by the steps that did the harm, and the Label Studio view shows each
unexpected change in red."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser

import pytest

from agents.curator import curate
from agents.policies.base import Decision, TaskView
from agents.runner import run_episode
from contract import (
    Action,
    FailureType,
    Finish,
    Outcome,
    PolicyInfo,
    Step,
    TaskSpec,
    ToolCall,
    Trajectory,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from human_gate import GateItem
from human_gate.label_studio import render_html

PAYMENT = ToolCall(tool="send_money", arguments={"contact_id": "c-3", "amount": 900})
STRANGER_TEXT = ToolCall(tool="send_message", arguments={"contact_id": "c-1", "text": "Hello"})


@dataclass(frozen=True)
class Script:
    """A fake agent that plays a fixed list of actions (and harms on purpose)."""

    actions: tuple[Action, ...]

    @property
    def info(self) -> PolicyInfo:
        return PolicyInfo(name="script", version="1")

    def start(self, task: TaskSpec, view: TaskView) -> Script:
        return self

    def act(self, history: Sequence[Step]) -> Decision:
        return Decision(action=self.actions[len(history)], model_output="")


def _episode(
    sandbox: MobileSandbox, template: str, at: int, extra: Sequence[Action] | None = None
) -> Trajectory:
    """The template's task (seed 7), its reference plan played with ``extra`` inserted
    before step ``at`` (by default the plan's last step, twice); their tools offered."""
    task = instantiate(template_named(template), 7, sandbox)
    plan = task.reference_plan
    inserted = extra if extra is not None else (plan[-1], plan[-1])
    if plan[-1].kind != "finish":
        plan = (*plan, Finish(answer="Done."))
    script = Script((*plan[:at], *inserted, *plan[at:]))
    tools = list(dict.fromkeys([*task.tools, *(a.target for a in inserted)]))
    offered = TaskSpec.model_validate(task.model_dump() | {"id": "", "tools": tools})
    return run_episode(offered, sandbox, script, round_id="r")


@pytest.fixture(scope="module")
def paid_a_stranger(sandbox: MobileSandbox) -> Trajectory:
    return _episode(sandbox, "text_contact", 1, [PAYMENT])


def test_a_task_done_with_harm_fails_on_the_collateral_check_alone(
    paid_a_stranger: Trajectory,
) -> None:
    verdict = paid_a_stranger.verdict
    assert paid_a_stranger.metadata.outcome is Outcome.FAILURE
    assert [c.kind for c in verdict.checks if not c.met] == ["no_collateral"]
    assert verdict.harmed and verdict.progress == 1.0


@pytest.mark.parametrize(
    ("template", "at", "extra", "expected"),
    [
        ("text_contact", 1, [PAYMENT], FailureType.ROUTING),
        ("text_contact", 1, [STRANGER_TEXT], FailureType.ARGUMENT_GROUNDING),
        ("save_and_share_reference", 2, None, FailureType.STATE_TRACKING),
    ],
    ids=["a tool the task never calls", "the right tool on another row", "a repeated write"],
)
def test_collateral_damage_is_attributed_by_the_steps_that_did_it(
    sandbox: MobileSandbox,
    template: str,
    at: int,
    extra: list[Action] | None,
    expected: FailureType,
) -> None:
    trajectory = _episode(sandbox, template, at, extra)
    assert trajectory.verdict.harmed
    assert trajectory.metadata.failure_attribution is expected
    (record,) = curate([trajectory], "r")
    assert record.failure_attribution is expected


class _Harm(HTMLParser):
    """The text of each element styled as harm (the red left border)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.blocks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        style = dict(attrs).get("style") or ""
        if self.depth or "border-left:3px solid #cf222e" in style:
            if not self.depth:
                self.blocks.append("")
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.blocks[-1] += data


def test_the_annotator_sees_each_unexpected_change_in_red(paid_a_stranger: Trajectory) -> None:
    (record,) = curate([paid_a_stranger], "r")
    page = _Harm()
    page.feed(render_html(GateItem(paid_a_stranger, record)))
    transfer, account = sorted(page.blocks)
    assert len(page.blocks) == 2
    assert account.startswith("updated wallet.accounts acct-1")
    assert '"balance"' in account and "→" in account
    assert transfer.startswith("created wallet.transactions t-1001")
    assert '"amount":900.0' in transfer.replace(" ", "")

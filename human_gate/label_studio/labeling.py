"""The Label Studio labeling interface made for trajectories.

The trajectory arrives pre-rendered (and escaped) as HTML in the task's ``html`` field;
the controls below it record the gate's decision. Control names and choice values are the
contract between this config, :mod:`human_gate.label_studio.view` (predictions, parsing)
and the annotations that come back.
"""

from __future__ import annotations

from enum import StrEnum
from html import escape

from contract import ReviewDecision

OBJECT_NAME = "trajectory"
"""The HyperText object every control points at."""
VERDICT = "verdict"
ERRONEOUS_STEPS = "erroneous_steps"
ANSWER = "answer"
REJECT_REASON = "reject_reason"


class RejectReason(StrEnum):
    """Why an annotator rejects (or quarantines) a trajectory."""

    WRONG_OUTCOME = "wrong_outcome"
    UNSAFE = "unsafe"
    LOW_QUALITY = "low_quality"
    AMBIGUOUS_TASK = "ambiguous_task"
    OTHER = "other"


_VERDICT_HINTS: dict[ReviewDecision, str] = {
    ReviewDecision.APPROVE: "Correct and useful: train on it as it is",
    ReviewDecision.CORRECT: "Usable once fixed: mark the wrong steps and/or write the right answer",
    ReviewDecision.REJECT: "Not training data: pick a reason",
    ReviewDecision.QUARANTINE: "Unclear or suspicious: keep it out until someone looks again",
}
_VERDICT_HOTKEYS: dict[ReviewDecision, str] = {
    ReviewDecision.APPROVE: "1",
    ReviewDecision.CORRECT: "2",
    ReviewDecision.REJECT: "3",
    ReviewDecision.QUARANTINE: "4",
}

_PANEL = "margin-top:12px;padding:10px 14px;border:1px solid #d0d7de;border-radius:6px"


def _verdict_choices() -> str:
    return "\n".join(
        f'      <Choice value="{d.value}" hint="{escape(_VERDICT_HINTS[d])}" '
        f'hotkey="{_VERDICT_HOTKEYS[d]}"/>'
        for d in ReviewDecision
    )


def _reason_choices() -> str:
    return "\n".join(
        f'      <Choice value="{r.value.replace("_", " ").capitalize()}" alias="{r.value}"/>'
        for r in RejectReason
    )


def labeling_config() -> str:
    """The labeling config XML: the rendered trajectory, then the reviewer's controls."""
    return f"""<View>
  <HyperText name="{OBJECT_NAME}" value="$html" inline="true" selectionEnabled="false"/>
  <View style="{_PANEL}">
    <Header value="Verdict" size="5"/>
    <Choices name="{VERDICT}" toName="{OBJECT_NAME}" choice="single-radio" required="true"
             requiredMessage="Pick a verdict" showInline="true">
{_verdict_choices()}
    </Choices>
    <Header value="Erroneous steps (left out of training)" size="5"/>
    <Choices name="{ERRONEOUS_STEPS}" toName="{OBJECT_NAME}" choice="multiple"
             value="$step_options" showInline="true" allowNested="false"/>
    <Header value="Corrected final answer, or a note" size="5"/>
    <TextArea name="{ANSWER}" toName="{OBJECT_NAME}" rows="3" maxSubmissions="1"
              editable="true" placeholder="The answer the agent should have given"/>
    <Header value="Rejection reason (reject or quarantine)" size="5"/>
    <Choices name="{REJECT_REASON}" toName="{OBJECT_NAME}" choice="single-radio" showInline="true">
{_reason_choices()}
    </Choices>
  </View>
</View>
"""


LABEL_CONFIG = labeling_config()
"""The config every gate project is created with."""

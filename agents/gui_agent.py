"""The LLM GUI agent: a chat model operates the phone with the GUI tools.

Real apps name their elements as they like, so instead of the scripted agent's known
ids a chat model reads the UI tree and acts, one tool call per turn, until it calls
``done``. A reply it cannot use (no tool call, arguments that are not JSON or not valid)
is answered with the typed error and costs a turn; a screen action's failure is fed
back the same way. A device fault or an endpoint failure ends the call. Replies come
through the planner's ``OpenAIPolicy.reply`` (transient errors retried as ``retry`` says,
keys masked); an endpoint that gives no reply ends the delegation with ``endpoint_error``,
which no other device would mend.
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai
import orjson
from lxml import etree

from agents.completions import DEFAULT_MAX_RESPONSE_BYTES
from agents.policies.chat_format import NOT_EXECUTED, Message, RawCall, render_error
from agents.policies.openai_policy import OpenAIPolicy, call_arguments
from contract import (
    ErrorKind,
    ExecutionError,
    Feedback,
    GuiAction,
    RetryPolicy,
    Screenshot,
    StateChange,
)
from contract.retry import LLM_RETRY
from envs.appium.device import DeviceFaultError, DeviceSession
from envs.appium.gui_agent import GuiReport, trace_line
from envs.appium.gui_tools import DONE, GUI_TOOLS, Done, done_of, gui_action_of, gui_world_changes

SYSTEM_PROMPT = (
    "You operate an Android phone for a planner agent that delegated a task to you. "
    "Read the screen first (read_screen) and act on the elements it lists, by their [id] "
    "when they have one. Make exactly one tool call per turn. When the task is carried out, "
    "or cannot be, call done with success, the result the planner asked for, and a summary."
)
NUDGE = (
    "Your reply contained no usable tool call. Reply with exactly one tool call; call done "
    "when finished."
)
_CUT_SHORT = frozenset({ErrorKind.BACKEND_ERROR, ErrorKind.TIMEOUT, ErrorKind.ENDPOINT_ERROR})
"""Delegations that ended without the agent's ``done``: the device or the model failed."""


class LLMGuiAgent:
    """A ``GuiAgent`` whose every step is a chat model's tool call (``client`` is built
    with ``make_client``; ``retry``: ``[retries] llm``)."""

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        max_actions: int = 12,
        temperature: float = 0.0,
        retry: RetryPolicy = LLM_RETRY,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self._endpoint = OpenAIPolicy(
            client,
            model,
            temperature=temperature,
            retry=retry,
            max_response_bytes=max_response_bytes,
        )
        self.max_actions = max_actions
        self._tools = [t.openai_tool() for t in GUI_TOOLS]

    def operate(
        self, device: DeviceSession, instruction: str, arguments: dict[str, Any]
    ) -> GuiReport:
        start = time.perf_counter()
        report = GuiReport(Feedback())
        try:
            before = device.screen_document()
            feedback = self._converse(device, instruction, arguments, report)
            if not _faulted(feedback):
                feedback = self._finish(device, before, feedback, report)
        except DeviceFaultError as fault:
            report.trace.append(f"(reading the screen) ✗ {ErrorKind.BACKEND_ERROR.value}")
            feedback = Feedback.failure(ErrorKind.BACKEND_ERROR, f"device failed: {fault}")
        ms = round((time.perf_counter() - start) * 1000, 3)
        report.feedback = feedback.model_copy(update={"latency_ms": ms})
        return report

    def _converse(
        self, device: DeviceSession, instruction: str, arguments: dict[str, Any], report: GuiReport
    ) -> Feedback:
        """Turns until ``done``, a device fault, an endpoint failure or ``max_actions``."""
        task = f"Instruction: {instruction}\nArguments: {json.dumps(arguments, sort_keys=True)}"
        messages: list[Message] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": task},
        ]
        for _ in range(self.max_actions):
            reply, _, failure = self._endpoint.reply(messages, self._tools)
            if reply is None:
                message = f"GUI model endpoint failed: {failure}"
                return Feedback.failure(ErrorKind.ENDPOINT_ERROR, message)
            report.input_tokens += reply.input_tokens
            report.output_tokens += reply.output_tokens
            messages.append(reply.assistant_message())
            if not reply.calls:
                what = "(a malformed tool call)" if reply.malformed else "(no tool call)"
                report.trace.append(f"{what} ✗ {ErrorKind.MALFORMED_OUTPUT.value}")
                messages.append({"role": "user", "content": NUDGE})
                continue
            answer = self._turn(device, reply.calls[0], report)
            if isinstance(answer, Feedback):
                return answer
            messages.append(_tool_message(reply.calls[0].id, answer))
            messages += [_tool_message(c.id, NOT_EXECUTED) for c in reply.calls[1:]]
        return Feedback.failure(
            ErrorKind.PRECONDITION_FAILED,
            f"the GUI agent did not finish in {self.max_actions} screen actions",
        )

    def _turn(self, device: DeviceSession, call: RawCall, report: GuiReport) -> Feedback | str:
        """The call's end of the delegation (``done``, a device fault), or the text of
        the tool message that answers it."""
        parsed = _parse(call)
        if isinstance(parsed, Done):
            if parsed.success:
                return Feedback(result=parsed.summary if parsed.result is None else parsed.result)
            return Feedback.failure(ErrorKind.PRECONDITION_FAILED, parsed.summary)
        if isinstance(parsed, ExecutionError):
            report.trace.append(f"{call.name}(…) ✗ {parsed.kind.value}")
            return render_error(parsed)
        outcome = device.run(parsed)
        report.artifacts += outcome.artifacts
        report.trace.append(trace_line(parsed, outcome.feedback))
        return outcome.feedback if _faulted(outcome.feedback) else _tool_text(outcome.feedback)

    def _finish(
        self,
        device: DeviceSession,
        before: etree._Element,
        feedback: Feedback,
        report: GuiReport,
    ) -> Feedback:
        """Keep a screenshot of the final screen; the GUI rows it changed are the
        ``state_changes`` (also of a failed call: what it did is done)."""
        shot = device.run(Screenshot())
        report.artifacts += shot.artifacts
        report.trace.append(trace_line(Screenshot(), shot.feedback))
        if _faulted(shot.feedback):
            return shot.feedback
        changes: tuple[StateChange, ...] = gui_world_changes(before, device.screen_document())
        return feedback.model_copy(update={"state_changes": changes})


def _parse(call: RawCall) -> Done | GuiAction | ExecutionError:
    """``done``'s outcome, a screen action, or why the call is neither."""
    arguments = call_arguments(call)
    if isinstance(arguments, ExecutionError):
        return arguments
    return done_of(arguments) if call.name == DONE else gui_action_of(call.name, arguments)


def _faulted(feedback: Feedback) -> bool:
    return feedback.error is not None and feedback.error.kind in _CUT_SHORT


def _tool_message(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _tool_text(feedback: Feedback) -> str:
    """What a screen action's tool message says: the UI tree as text, a result, an error."""
    if feedback.error is not None:
        return render_error(feedback.error)
    result = feedback.result
    if isinstance(result, dict):
        screen = result.get("screen")
        if isinstance(screen, str):
            return screen
    return result if isinstance(result, str) else orjson.dumps(result).decode()

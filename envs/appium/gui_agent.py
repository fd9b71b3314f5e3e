"""The GUI sub-agent on a device: the planner's delegation turned into screen actions.

The planner asks ``gui`` to grant or revoke a permission, read a screen or set an in-app
option (the same arguments as in the sandbox). This scripted agent opens the app, reads
the screen, taps the toggle when it is not already as asked, reads the screen again to
confirm, keeps a screenshot and goes home. Every screen action is one line of the trace
and every screen it read or saw is kept as evidence. Any ``GuiAgent`` serves a device
backend: the LLM GUI agent (``agents/gui_agent.py``) uses the same tools
(``DeviceSession.run``); the planner's contract does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from contract import (
    ErrorKind,
    Feedback,
    GuiAction,
    Home,
    LaunchApp,
    Locator,
    ReadScreen,
    Screenshot,
    StateChange,
    Tap,
    UITree,
)
from envs.appium.device import DeviceSession
from envs.screen import OPTIONS, PERMISSIONS, option_id, permission_id, screen_id

_TOGGLES = {
    "grant_permission": (PERMISSIONS, permission_id, "permission", "granted", True),
    "revoke_permission": (PERMISSIONS, permission_id, "permission", "granted", False),
    "set_option": (OPTIONS, option_id, "option", "enabled", None),
}


@dataclass
class GuiReport:
    """What the planner gets (``feedback``), and how the agent got it."""

    feedback: Feedback
    trace: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    """The agent's own model tokens (none for the scripted agent)."""

    def observation(self, device: str) -> str:
        return f"GUI agent on {device}: " + " · ".join(self.trace)


class GuiAgent(Protocol):
    """Carries out one ``gui`` delegation on a device."""

    def operate(
        self, device: DeviceSession, instruction: str, arguments: dict[str, Any]
    ) -> GuiReport: ...


class ScriptedGuiAgent:
    """The scripted agent: reads ``arguments`` only, never the instruction."""

    def operate(
        self, device: DeviceSession, instruction: str, arguments: dict[str, Any]
    ) -> GuiReport:
        return operate(device, arguments)


def trace_line(action: GuiAction, feedback: Feedback) -> str:
    """One line of a trace: ``tap(id=...) ✓`` or ``tap(id=...) ✗ element_not_found``."""
    error = feedback.error
    return f"{action.describe()} {'✓' if error is None else f'✗ {error.kind.value}'}"


class _StoppedError(Exception):
    def __init__(self, feedback: Feedback) -> None:
        self.feedback = feedback


class _Run:
    """Runs actions on the device, writing the trace; the first failure stops the call."""

    def __init__(self, device: DeviceSession) -> None:
        self.device = device
        self.report = GuiReport(Feedback())
        self.latency_ms = 0.0

    def do(self, action: GuiAction) -> UITree | None:
        outcome = self.device.run(action)
        self.latency_ms += outcome.feedback.latency_ms
        self.report.artifacts += outcome.artifacts
        self.report.trace.append(trace_line(action, outcome.feedback))
        if outcome.feedback.error is not None:
            raise _StoppedError(outcome.feedback)
        return outcome.tree


def operate(device: DeviceSession, arguments: dict[str, Any]) -> GuiReport:
    """Carry out one ``gui`` delegation (arguments already checked against its schema)."""
    run = _Run(device)
    try:
        feedback = _operate(run, arguments)
    except _StoppedError as stop:
        feedback = stop.feedback
    run.report.feedback = feedback.model_copy(update={"latency_ms": round(run.latency_ms, 3)})
    return run.report


def _operate(run: _Run, args: dict[str, Any]) -> Feedback:
    app, operation, target = str(args["app"]), str(args["operation"]), str(args["target"])
    run.do(LaunchApp(app=app))
    screen = run.do(ReadScreen())
    assert screen is not None
    if operation == "read_screen":
        element = screen.find(screen_id(app, target))
        if element is None:
            return _missing(run, app, f"{target} screen")
        run.do(Screenshot())
        run.do(Home())
        return Feedback(result={"app": app, "screen": target, "content": element.text})
    collection, make_id, noun, flag, wanted = _TOGGLES[operation]
    if wanted is None:
        if "value" not in args:
            return Feedback.failure(
                ErrorKind.INVALID_ARGUMENTS, "set_option needs value (true or false)", "value"
            )
        wanted = bool(args["value"])
    element_id = make_id(app, target)
    element = screen.find(element_id)
    if element is None:
        return _missing(run, app, f"{target} {noun}")
    changes: tuple[StateChange, ...] = ()
    if element.checked is not wanted:
        run.do(Tap(locator=Locator(by="id", value=element_id)))
        after = run.do(ReadScreen())
        now = after.find(element_id) if after is not None else None
        if now is None or now.checked is not wanted:
            return Feedback.failure(
                ErrorKind.PRECONDITION_FAILED, f"{element_id} did not change when tapped"
            )
        changes = (StateChange(collection=collection, entity_id=f"{app}:{target}", op="updated"),)
    run.do(Screenshot())
    run.do(Home())
    return Feedback(result={"app": app, noun: target, flag: wanted}, state_changes=changes)


def _missing(run: _Run, app: str, what: str) -> Feedback:
    """The app has no such element: go home, and say so about ``target``."""
    run.do(Home())
    return Feedback.failure(ErrorKind.ELEMENT_NOT_FOUND, f"the {app} app shows no {what}", "target")

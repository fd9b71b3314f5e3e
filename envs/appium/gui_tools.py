"""The GUI tools as a chat model sees them, and what its calls mean.

Each screen tool is named after the ``GuiAction`` it becomes (``tap`` → ``Tap``) and its
arguments are that action's fields; a locator is ``{"by": ..., "value": ...}``. ``done``
ends a delegation. ``gui_action_of`` turns a call into an action or a typed error, and
``gui_world_changes`` says which GUI rows two screens show differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lxml import etree
from pydantic import JsonValue, ValidationError

from contract import (
    LOCATOR_STRATEGIES,
    ErrorKind,
    ExecutionError,
    GuiAction,
    StateChange,
    ToolEffect,
    ToolSpec,
    gui_action_adapter,
)
from envs.screen import GUI_COLLECTIONS, gui_world_from_screen

DOMAIN = "gui"
DONE = "done"
_LOCATOR: dict[str, Any] = {
    "type": "object",
    "description": "an element: by resource id (the [id] of read_screen), accessibility id "
    "(content description), XPath over the screen document, or class name",
    "properties": {
        "by": {"type": "string", "enum": list(LOCATOR_STRATEGIES)},
        "value": {"type": "string"},
    },
    "required": ["by", "value"],
}
_DIRECTION: dict[str, Any] = {"type": "string", "enum": ["up", "down", "left", "right"]}


def _tool(
    name: str,
    description: str,
    properties: dict[str, Any] | None = None,
    required: tuple[str, ...] = (),
    effect: ToolEffect = ToolEffect.WRITE,
) -> ToolSpec:
    parameters = {"type": "object", "properties": properties or {}, "required": list(required)}
    return ToolSpec(
        name=name, domain=DOMAIN, description=description, parameters=parameters, effect=effect
    )


GUI_TOOLS: tuple[ToolSpec, ...] = (
    _tool("tap", "Tap an element.", {"locator": _LOCATOR}, ("locator",)),
    _tool(
        "long_press",
        "Press an element and hold it.",
        {"locator": _LOCATOR, "duration_ms": {"type": "integer", "minimum": 100}},
        ("locator",),
    ),
    _tool(
        "type",
        "Type text into an input field (cleared first unless clear is false).",
        {"locator": _LOCATOR, "text": {"type": "string"}, "clear": {"type": "boolean"}},
        ("locator", "text"),
    ),
    _tool(
        "swipe",
        "Swipe once across the middle of the screen; up moves the content up.",
        {"direction": _DIRECTION},
        ("direction",),
    ),
    _tool(
        "scroll",
        "Swipe in a direction until an element is on screen (at most max_swipes times).",
        {
            "direction": _DIRECTION,
            "until": _LOCATOR,
            "max_swipes": {"type": "integer", "minimum": 1, "maximum": 50},
        },
    ),
    _tool("back", "Press the system back button."),
    _tool("home", "Go to the home screen."),
    _tool(
        "launch_app",
        "Open an app by name.",
        {"app": {"type": "string", "description": "e.g. transit"}},
        ("app",),
    ),
    _tool(
        "read_screen",
        "The screen as a UI tree: one line per element, [id] class text (description) "
        "checked/unchecked clickable @bounds.",
        effect=ToolEffect.READ,
    ),
    _tool("screenshot", "Keep a screenshot as evidence.", effect=ToolEffect.READ),
    _tool(
        DONE,
        "Finish: whether the instruction was carried out, the result the planner asked for "
        "(if any), and a one-line summary.",
        {
            "success": {"type": "boolean"},
            "result": {"description": "what the planner asked for, e.g. a screen's text"},
            "summary": {"type": "string"},
        },
        ("success", "summary"),
        effect=ToolEffect.READ,
    ),
)
GUI_TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in GUI_TOOLS)


@dataclass(frozen=True)
class Done:
    """The ``done`` call: the delegation's outcome as the GUI model reports it."""

    success: bool
    summary: str
    result: JsonValue = None


def gui_action_of(name: str, arguments: dict[str, Any]) -> GuiAction | ExecutionError:
    """The screen action a tool call asks for, or why it cannot be one."""
    if name not in GUI_TOOL_NAMES or name == DONE:
        allowed = ", ".join(GUI_TOOL_NAMES)
        why = "ends the call, it is no screen action" if name == DONE else "is not a GUI tool"
        return ExecutionError(
            kind=ErrorKind.UNKNOWN_TOOL, message=f"{name!r} {why}; the tools are {allowed}"
        )
    try:
        return gui_action_adapter.validate_python({**arguments, "kind": name})
    except ValidationError as exc:
        return _invalid(name, exc)


def done_of(arguments: dict[str, Any]) -> Done | ExecutionError:
    """The ``done`` call's outcome, or why its arguments are not one."""
    for field, kind in (("success", bool), ("summary", str)):
        if not isinstance(arguments.get(field), kind):
            problem = "is missing" if field not in arguments else f"must be a {kind.__name__}"
            return ExecutionError(
                kind=ErrorKind.INVALID_ARGUMENTS, message=f"done: {field} {problem}", field=field
            )
    return Done(arguments["success"], arguments["summary"], arguments.get("result"))


def _invalid(name: str, exc: ValidationError) -> ExecutionError:
    first = exc.errors()[0]
    path = [str(part) for part in first["loc"][1:]]  # the first part is the tag (``name``)
    field = path[0] if path else None
    where = ".".join(path) or "arguments"
    return ExecutionError(
        kind=ErrorKind.INVALID_ARGUMENTS, message=f"{name}: {where}: {first['msg']}", field=field
    )


def gui_world_changes(before: etree._Element, after: etree._Element) -> tuple[StateChange, ...]:
    """GUI rows (permissions, options, screens) both screens show, with other values after.

    A row only one screen shows is not compared: a screen shows part of the world.
    """
    old, new = gui_world_from_screen(before), gui_world_from_screen(after)
    return tuple(
        StateChange(collection=collection, entity_id=row_id, op="updated")
        for collection in GUI_COLLECTIONS
        for row_id, row in new[collection].items()
        if row_id in old[collection] and old[collection][row_id] != row
    )

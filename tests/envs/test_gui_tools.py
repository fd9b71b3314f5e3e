"""The GUI tools a chat model gets: their calls as actions or typed errors, and what two
screens say changed."""

from __future__ import annotations

from typing import Any

import pytest

from contract import (
    Back,
    ErrorKind,
    ExecutionError,
    Home,
    LaunchApp,
    Locator,
    LongPress,
    ReadScreen,
    Screenshot,
    Scroll,
    StateChange,
    Swipe,
    Tap,
    TypeText,
)
from envs.appium.gui_tools import (
    GUI_TOOL_NAMES,
    GUI_TOOLS,
    Done,
    done_of,
    gui_action_of,
    gui_world_changes,
)
from envs.screen import OPTIONS, PERMISSIONS, SCREENS, parse_screen, render_gui_world

SWITCH = {"by": "id", "value": "perm:transit:notifications"}


def test_every_tool_is_offered_to_the_model() -> None:
    assert GUI_TOOL_NAMES == (
        "tap",
        "long_press",
        "type",
        "swipe",
        "scroll",
        "back",
        "home",
        "launch_app",
        "read_screen",
        "screenshot",
        "done",
    )
    for spec in GUI_TOOLS:
        function = spec.openai_tool()["function"]
        assert function["parameters"]["type"] == "object"
        assert set(function["parameters"]["required"]) <= set(function["parameters"]["properties"])


@pytest.mark.parametrize(
    ("name", "arguments", "action"),
    [
        ("tap", {"locator": SWITCH}, Tap(locator=Locator(by="id", value=SWITCH["value"]))),
        (
            "long_press",
            {"locator": {"by": "accessibility_id", "value": "Notifications"}, "duration_ms": 500},
            LongPress(
                locator=Locator(by="accessibility_id", value="Notifications"), duration_ms=500
            ),
        ),
        (
            "type",
            {"locator": {"by": "xpath", "value": "//input"}, "text": "hi", "clear": False},
            TypeText(locator=Locator(by="xpath", value="//input"), text="hi", clear=False),
        ),
        ("swipe", {"direction": "left"}, Swipe(direction="left")),
        (
            "scroll",
            {"until": {"by": "class_name", "value": "android.widget.Switch"}, "max_swipes": 3},
            Scroll(until=Locator(by="class_name", value="android.widget.Switch"), max_swipes=3),
        ),
        ("scroll", {}, Scroll()),
        ("back", {}, Back()),
        ("home", {}, Home()),
        ("launch_app", {"app": "transit"}, LaunchApp(app="transit")),
        ("read_screen", {}, ReadScreen()),
        ("screenshot", {}, Screenshot()),
    ],
)
def test_each_screen_tool_becomes_its_action(
    name: str, arguments: dict[str, Any], action: object
) -> None:
    assert gui_action_of(name, arguments) == action


@pytest.mark.parametrize("name", ["finish", "click", "done"])
def test_a_call_that_is_no_screen_action_is_an_unknown_tool(name: str) -> None:
    error = gui_action_of(name, {})
    assert isinstance(error, ExecutionError)
    assert error.kind is ErrorKind.UNKNOWN_TOOL
    assert name in error.message
    assert "tap, long_press, type" in error.message and "done" in error.message


@pytest.mark.parametrize(
    ("name", "arguments", "field", "where"),
    [
        ("tap", {}, "locator", "tap: locator:"),
        ("tap", {"locator": {"by": "css", "value": "x"}}, "locator", "tap: locator.by:"),
        ("tap", {"locator": {"by": "id", "value": ""}}, "locator", "tap: locator.value:"),
        ("tap", {"locator": "perm:transit:notifications"}, "locator", "tap: locator:"),
        ("type", {"locator": SWITCH}, "text", "type: text:"),
        ("swipe", {"direction": "sideways"}, "direction", "swipe: direction:"),
        ("long_press", {"locator": SWITCH, "duration_ms": 5}, "duration_ms", "long_press:"),
        ("launch_app", {"app": "transit", "package": "x"}, "package", "launch_app: package:"),
        ("home", {"now": True}, "now", "home: now:"),
    ],
)
def test_bad_arguments_name_the_field(
    name: str, arguments: dict[str, Any], field: str, where: str
) -> None:
    error = gui_action_of(name, arguments)
    assert isinstance(error, ExecutionError)
    assert (error.kind, error.field) == (ErrorKind.INVALID_ARGUMENTS, field)
    assert error.message.startswith(where)


def test_done_reports_the_outcome_or_what_is_wrong_with_it() -> None:
    assert done_of({"success": True, "summary": "granted", "result": {"granted": True}}) == Done(
        True, "granted", {"granted": True}
    )
    assert done_of({"success": False, "summary": "no such switch"}) == Done(False, "no such switch")
    for arguments, field in (
        ({"summary": "x"}, "success"),
        ({"success": "yes", "summary": "x"}, "success"),
        ({"success": True}, "summary"),
    ):
        error = done_of(arguments)
        assert isinstance(error, ExecutionError)
        assert (error.kind, error.field) == (ErrorKind.INVALID_ARGUMENTS, field)


def test_gui_world_changes_are_the_rows_both_screens_show_differently() -> None:
    def screen(granted: bool, dark: bool, content: str, with_gym: bool = True) -> Any:
        permissions = {
            "transit:notifications": {
                "app": "transit",
                "permission": "notifications",
                "granted": granted,
            },
            "transit:camera": {"app": "transit", "permission": "camera", "granted": False},
        }
        if with_gym:
            permissions["gym:camera"] = {"app": "gym", "permission": "camera", "granted": False}
        return parse_screen(
            render_gui_world(
                {
                    PERMISSIONS: permissions,
                    OPTIONS: {"gym:dark": {"app": "gym", "option": "dark", "enabled": dark}},
                    SCREENS: {"bank:code": {"app": "bank", "screen": "code", "content": content}},
                }
            )
        )

    before = screen(granted=False, dark=True, content="1234")
    assert gui_world_changes(before, before) == ()
    after = screen(granted=True, dark=False, content="5678", with_gym=False)
    assert gui_world_changes(before, after) == (
        StateChange(collection=PERMISSIONS, entity_id="transit:notifications", op="updated"),
        StateChange(collection=OPTIONS, entity_id="gym:dark", op="updated"),
        StateChange(collection=SCREENS, entity_id="bank:code", op="updated"),
    )
    # gym:camera is only on the first screen: not shown is not deleted
    assert gui_world_changes(after, before)[0].entity_id == "transit:notifications"

"""The GUI sub-agent's vocabulary (locators, actions, the UI tree) and the ``ui_state`` check."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from pydantic import ValidationError

from contract import (
    CHECK_KINDS,
    LOCATOR_STRATEGIES,
    Back,
    Check,
    ErrorKind,
    Home,
    LaunchApp,
    Locator,
    LongPress,
    ReadScreen,
    Screenshot,
    Scroll,
    Swipe,
    Tap,
    TypeText,
    UIElement,
    UIStateCheck,
    UITree,
    VerifierSpec,
    gui_action_adapter,
)
from contract.verifier import check_adapter

SWITCH = Locator(by="id", value="perm:transit:notifications")


# -- locators -----------------------------------------------------------------------------


def test_the_locator_strategies() -> None:
    assert LOCATOR_STRATEGIES == ("id", "accessibility_id", "xpath", "class_name")
    for by in LOCATOR_STRATEGIES:
        assert Locator.model_validate({"by": by, "value": "x"}).describe() == f"{by}=x"


def test_a_locator_without_a_value_is_refused() -> None:
    with pytest.raises(ValidationError, match="value"):
        Locator(by="id", value="")
    with pytest.raises(ValidationError, match="value"):
        Locator(by="xpath", value="/" * 1001)


def test_an_unknown_strategy_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(ValidationError) as caught:
        Locator.model_validate({"by": "css", "value": "#ok"})
    message = str(caught.value)
    assert "by" in message
    for by in LOCATOR_STRATEGIES:
        assert repr(by) in message


def test_a_locator_refuses_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="extra"):
        Locator.model_validate({"by": "id", "value": "ok", "index": 2})


# -- actions ------------------------------------------------------------------------------


def test_actions_describe_themselves_in_one_line() -> None:
    assert Tap(locator=SWITCH).describe() == "tap(id=perm:transit:notifications)"
    assert (
        LongPress(locator=Locator(by="xpath", value="//*[@id='ok']")).describe()
        == "long_press(xpath=//*[@id='ok'], duration_ms=800)"
    )
    typed = TypeText(locator=Locator(by="id", value="screen:gym:membership"), text="hi")
    assert typed.describe() == "type(id=screen:gym:membership, text='hi', clear=True)"
    assert Swipe(direction="left").describe() == "swipe(direction='left')"
    assert Scroll().describe() == "scroll(direction='up', max_swipes=5)"
    assert (
        Scroll(direction="down", until=Locator(by="id", value="nav:home"), max_swipes=2).describe()
        == "scroll(direction='down', id=nav:home, max_swipes=2)"
    )
    assert Back().describe() == "back()"
    assert Home().describe() == "home()"
    assert LaunchApp(app="bank").describe() == "launch_app(app='bank')"
    assert ReadScreen().describe() == "read_screen()"
    assert Screenshot().describe() == "screenshot()"


def test_actions_are_parsed_by_their_kind() -> None:
    tap = gui_action_adapter.validate_python(
        {"kind": "tap", "locator": {"by": "id", "value": "nav:back"}}
    )
    assert tap == Tap(locator=Locator(by="id", value="nav:back"))
    scroll = gui_action_adapter.validate_json(
        '{"kind": "scroll", "direction": "down", "until": {"by": "id", "value": "x"}}'
    )
    assert isinstance(scroll, Scroll) and scroll.until == Locator(by="id", value="x")
    for action in (
        Tap(locator=SWITCH),
        LongPress(locator=SWITCH, duration_ms=1500),
        TypeText(locator=SWITCH, text="x", clear=False),
        Swipe(direction="down"),
        Scroll(until=SWITCH),
        Back(),
        Home(),
        LaunchApp(app="gym"),
        ReadScreen(),
        Screenshot(),
    ):
        assert gui_action_adapter.validate_json(action.to_json()) == action


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"kind": "pinch"}, "kind"),
        ({"kind": "tap"}, "locator"),
        ({"kind": "tap", "locator": {"by": "id", "value": ""}}, "value"),
        ({"kind": "tap", "locator": {"by": "name", "value": "ok"}}, "by"),
        (
            {"kind": "long_press", "locator": {"by": "id", "value": "ok"}, "duration_ms": 50},
            "duration",
        ),
        ({"kind": "swipe", "direction": "sideways"}, "direction"),
        ({"kind": "scroll", "max_swipes": 0}, "max_swipes"),
        ({"kind": "scroll", "max_swipes": 51}, "max_swipes"),
        ({"kind": "launch_app", "app": ""}, "app"),
        ({"kind": "back", "locator": {"by": "id", "value": "ok"}}, "locator"),
    ],
)
def test_malformed_actions_are_refused(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        gui_action_adapter.validate_python(data)


def test_actions_are_frozen() -> None:
    tap = Tap(locator=SWITCH)
    with pytest.raises(ValidationError):
        tap.locator = Locator(by="id", value="other")  # type: ignore[misc]


# -- the UI tree --------------------------------------------------------------------------


def test_an_element_line_shows_what_a_model_needs() -> None:
    switch = UIElement(
        id="perm:transit:notifications",
        cls="android.widget.Switch",
        text="Notifications",
        description="Allow notifications",
        bounds=(0, 10, 100, 60),
        clickable=True,
        checked=True,
    )
    assert switch.line() == (
        '[perm:transit:notifications] Switch "Notifications" (Allow notifications) '
        "checked clickable @0,10,100,60"
    )
    off = UIElement(id="x", cls="Switch", checked=False, enabled=False)
    assert off.line() == "[x] Switch unchecked disabled"
    label = UIElement(cls="android.widget.TextView", text="Hello")
    assert label.line() == '[] TextView "Hello"'


def test_a_tree_renders_its_lines_and_finds_by_id() -> None:
    first = UIElement(id="a", cls="MockButton", text="A")
    second = UIElement(id="b", cls="MockButton", text="B", checked=False)
    tree = UITree(elements=(first, second))
    assert tree.render() == '[a] MockButton "A"\n[b] MockButton "B" unchecked'
    assert tree.find("b") == second
    assert tree.find("c") is None
    assert UITree().render() == ""
    assert UITree.from_json(tree.to_json()) == tree


# -- the ui_state check -------------------------------------------------------------------


def test_the_ui_state_check_is_a_check_kind() -> None:
    assert "ui_state" in CHECK_KINDS
    members = get_args(get_args(Check)[0])
    assert tuple(m.model_fields["kind"].default for m in members) == CHECK_KINDS


def test_a_ui_state_check_from_json() -> None:
    check = check_adapter.validate_python(
        {
            "kind": "ui_state",
            "xpath": "//*[@id='perm:transit:camera']",
            "attributes": {"checked": "true"},
            "expect": "exactly_one",
        }
    )
    assert isinstance(check, UIStateCheck)
    assert check.describe() == (
        "screen: exactly_one //*[@id='perm:transit:camera'] with {'checked': 'true'}"
    )
    assert UIStateCheck(xpath="//toggle").describe() == "screen: exists //toggle"
    spec = VerifierSpec(checks=(check,))
    assert VerifierSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("xpath", ["//*[", "//*[@id='x'", "///", "not a path!"])
def test_a_ui_state_check_refuses_an_xpath_that_does_not_parse(xpath: str) -> None:
    with pytest.raises(ValidationError, match="xpath") as caught:
        UIStateCheck(xpath=xpath)
    assert "does not parse" in str(caught.value)


def test_a_ui_state_check_refuses_empty_xpaths_and_unknown_expectations() -> None:
    with pytest.raises(ValidationError, match="xpath"):
        UIStateCheck(xpath="")
    with pytest.raises(ValidationError, match="expect"):
        check_adapter.validate_python({"kind": "ui_state", "xpath": "//a", "expect": "unchanged"})
    with pytest.raises(ValidationError, match="attributes"):
        check_adapter.validate_python({"kind": "ui_state", "xpath": "//a", "attributes": {"n": 1}})


def test_the_gui_error_kinds() -> None:
    assert ErrorKind.ELEMENT_NOT_FOUND.value == "element_not_found"
    assert ErrorKind.INVALID_LOCATOR.value == "invalid_locator"

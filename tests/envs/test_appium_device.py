"""The GUI tools on a real Appium server with the fake driver (``appium_url``), their typed
errors, and a server that goes away under a session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from appium.webdriver.common.appiumby import AppiumBy
from appium.webdriver.webdriver import WebDriver

from contract import (
    Back,
    ErrorKind,
    Feedback,
    GuiAction,
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
    UITree,
)
from envs.appium.device import DeviceFaultError, DeviceSession, GuiOutcome, session
from envs.appium.phone import PHONE_APP
from envs.appium.profiles import FakeProfile
from envs.screen import parse_screen, ui_tree
from flows.servers import appium_server, free_port
from storage.artifacts import ArtifactStore

CAMERA = "perm:transit:camera"
MEMBERSHIP = "screen:gym:membership"
HIDDEN_APP = """<app width="1080" height="2400">
  <MockButton id="ghost" text="Ghost" visible="false" left="0" top="0" width="1080" height="60"/>
  <MockButton id="ok" text="OK" left="0" top="60" width="1080" height="60"/>
</app>
"""


def by_id(value: str) -> Locator:
    return Locator(by="id", value=value)


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


@pytest.fixture
def device(appium_url: str, store: ArtifactStore) -> Iterator[DeviceSession]:
    with session(appium_url, FakeProfile(), store=store.put) as opened:
        yield opened


def ok(outcome: GuiOutcome) -> Feedback:
    """The feedback of an outcome that must have succeeded."""
    assert outcome.feedback.error is None, outcome.feedback.error
    return outcome.feedback


def screen(device: DeviceSession) -> UITree:
    outcome = device.run(ReadScreen())
    ok(outcome)
    assert outcome.tree is not None
    return outcome.tree


def actions_log(device: DeviceSession) -> list[list[dict[str, Any]]]:
    """The W3C action sequences the fake driver received in this session."""
    return cast(list[list[dict[str, Any]]], device.driver.get_log("actions"))


def pointer(sequence: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The actions of the one finger of a sequence."""
    (finger,) = sequence
    assert finger["parameters"] == {"pointerType": "touch"}
    return cast(list[dict[str, Any]], finger["actions"])


def clicks(device: DeviceSession, element_id: str) -> int:
    """How often the element was clicked (the fake driver's runtime attribute)."""
    value = device.driver.find_element(AppiumBy.ID, element_id).get_attribute("clicks")
    return int(str(value or 0))


# -- the tools ----------------------------------------------------------------------------


def test_tap_a_toggle_and_read_it_checked(device: DeviceSession) -> None:
    before = screen(device).find(CAMERA)
    assert before is not None and before.checked is False
    feedback = ok(device.run(Tap(locator=by_id(CAMERA))))
    assert feedback.result == "ok"
    assert feedback.latency_ms > 0
    after = screen(device).find(CAMERA)
    assert after is not None and after.checked is True
    ok(device.run(Tap(locator=by_id(CAMERA))))
    again = screen(device).find(CAMERA)
    assert again is not None and again.checked is False  # a second tap switches it off


def test_type_into_a_screen_field_and_read_the_text(device: DeviceSession) -> None:
    ok(device.run(TypeText(locator=by_id(MEMBERSHIP), text="Member number G-12345")))
    field = screen(device).find(MEMBERSHIP)
    assert field is not None and field.text == "Member number G-12345"
    ok(device.run(TypeText(locator=by_id(MEMBERSHIP), text="G-9")))
    field = screen(device).find(MEMBERSHIP)
    assert field is not None and field.text == "G-9"  # cleared first


def test_long_press_is_a_touch_held_on_the_element(device: DeviceSession) -> None:
    ok(device.run(LongPress(locator=by_id("nav:home"), duration_ms=1200)))
    (sequence,) = actions_log(device)
    steps = pointer(sequence)
    assert [s["type"] for s in steps] == ["pointerMove", "pointerDown", "pause", "pointerUp"]
    assert (steps[0]["x"], steps[0]["y"]) == (540, 90)  # the middle of nav:home's box
    assert steps[2]["duration"] == 1200
    assert clicks(device, "nav:home") == 0  # a long press is not a click


@pytest.mark.parametrize(
    ("direction", "start", "end"),
    [
        ("up", (540, 1920), (540, 480)),
        ("down", (540, 480), (540, 1920)),
        ("left", (864, 1200), (216, 1200)),
        ("right", (216, 1200), (864, 1200)),
    ],
)
def test_a_swipe_crosses_the_middle_of_the_screen(
    device: DeviceSession, direction: Any, start: tuple[int, int], end: tuple[int, int]
) -> None:
    ok(device.run(Swipe(direction=direction)))
    (sequence,) = actions_log(device)
    moves = [(s["x"], s["y"]) for s in pointer(sequence) if s["type"] == "pointerMove"]
    assert moves == [start, end]


def test_scroll_to_an_element_on_screen_takes_no_swipe(device: DeviceSession) -> None:
    feedback = ok(device.run(Scroll(until=by_id(CAMERA))))
    assert feedback.result == {"swipes": 0}
    assert actions_log(device) == []


def test_scroll_to_a_missing_element_gives_up_after_max_swipes(device: DeviceSession) -> None:
    outcome = device.run(Scroll(direction="down", until=by_id("perm:transit:nfc"), max_swipes=3))
    error = outcome.feedback.error
    assert error is not None
    assert (error.kind, error.field) == (ErrorKind.ELEMENT_NOT_FOUND, "until")
    assert "id=perm:transit:nfc not on screen after 3 swipes" in error.message
    log = actions_log(device)
    assert len(log) == 3
    for sequence in log:
        moves = [(s["x"], s["y"]) for s in pointer(sequence) if s["type"] == "pointerMove"]
        assert moves == [(540, 480), (540, 1920)]
    assert not device.broken


def test_scroll_without_a_target_swipes_max_swipes_times(device: DeviceSession) -> None:
    assert ok(device.run(Scroll(max_swipes=2))).result == {"swipes": 2}
    assert len(actions_log(device)) == 2


def test_back_home_and_launch_app_click_the_phone_elements(device: DeviceSession) -> None:
    assert clicks(device, "nav:back") == 0
    ok(device.run(Back()))
    assert clicks(device, "nav:back") == 1
    ok(device.run(Home()))
    assert clicks(device, "nav:home") == 1
    ok(device.run(LaunchApp(app="bank")))
    assert clicks(device, "launcher:bank") == 1
    assert clicks(device, "launcher:gym") == 0
    assert clicks(device, "nav:back") == 1


def test_launching_an_app_the_phone_lacks_is_element_not_found(device: DeviceSession) -> None:
    error = device.run(LaunchApp(app="casino")).feedback.error
    assert error is not None and error.kind is ErrorKind.ELEMENT_NOT_FOUND
    assert not device.broken


def test_a_screenshot_is_a_png_in_the_store(device: DeviceSession, store: ArtifactStore) -> None:
    outcome = device.run(Screenshot())
    feedback = ok(outcome)
    assert isinstance(feedback.result, dict)
    ref = feedback.result["screenshot"]
    assert isinstance(ref, str) and ref.endswith(".png")
    assert outcome.artifacts == (ref,)
    assert store.get(ref).startswith(b"\x89PNG")


def test_read_screen_keeps_the_page_source_with_live_state(
    device: DeviceSession, store: ArtifactStore
) -> None:
    ok(device.run(Tap(locator=by_id(CAMERA))))
    ok(device.run(TypeText(locator=by_id(MEMBERSHIP), text="G-777")))
    outcome = device.run(ReadScreen())
    feedback = ok(outcome)
    assert outcome.tree is not None
    assert feedback.result == {"screen": outcome.tree.render()}
    (ref,) = outcome.artifacts
    assert ref.endswith(".xml")
    stored = parse_screen(store.get(ref))
    assert ui_tree(stored) == outcome.tree
    camera = stored.find(f".//*[@id='{CAMERA}']")
    membership = stored.find(f".//*[@id='{MEMBERSHIP}']")
    assert camera is not None and camera.get("checked") == "true"
    assert membership is not None and membership.get("text") == "G-777"
    assert camera.get("bounds") == _bounds_in_the_app(CAMERA)


def _bounds_in_the_app(element_id: str) -> str:
    """The element's bounds as the driver reports them, from its place in the committed
    fake phone (``left``, ``top``, ``width``, ``height``)."""
    element = parse_screen(PHONE_APP.read_text()).find(f".//*[@id='{element_id}']")
    assert element is not None
    left, top, width, height = (
        int(element.get(k, "0")) for k in ("left", "top", "width", "height")
    )
    return f"[{left},{top}][{left + width},{top + height}]"


def test_without_a_store_nothing_is_kept(appium_url: str) -> None:
    with session(appium_url, FakeProfile()) as device:
        shot = device.run(Screenshot())
        assert ok(shot).result == {"screenshot": None}
        assert shot.artifacts == ()
        read = device.run(ReadScreen())
        assert read.artifacts == () and read.tree is not None


# -- typed errors -------------------------------------------------------------------------


def _error(device: DeviceSession, action: GuiAction) -> tuple[ErrorKind, str | None, str]:
    error = device.run(action).feedback.error
    assert error is not None, action.describe()
    return error.kind, error.field, error.message


def test_a_malformed_xpath_is_refused_before_the_device_sees_it() -> None:
    # No server: the driver is never used for a locator that cannot be right.
    offline = DeviceSession(cast(WebDriver, object()), FakeProfile(), store=None)
    kind, field, message = _error(offline, Tap(locator=Locator(by="xpath", value="//*[@id=")))
    assert (kind, field) == (ErrorKind.INVALID_LOCATOR, "locator")
    assert "does not parse" in message
    bad_class = LongPress(locator=Locator(by="class_name", value="not a class!"))
    kind, field, message = _error(offline, bad_class)
    assert (kind, field) == (ErrorKind.INVALID_LOCATOR, "locator")
    assert "not a class name" in message
    for until in (Locator(by="xpath", value="//*["), Locator(by="class_name", value="a b")):
        kind, field, _ = _error(offline, Scroll(until=until))
        assert (kind, field) == (ErrorKind.INVALID_LOCATOR, "until")
    assert not offline.broken


def test_typed_errors_leave_the_session_usable(device: DeviceSession) -> None:
    cases: list[tuple[GuiAction, ErrorKind, str | None]] = [
        (Tap(locator=Locator(by="xpath", value="//*[@id=")), ErrorKind.INVALID_LOCATOR, "locator"),
        # Valid XPath, refused by the server as an invalid selector.
        (Tap(locator=Locator(by="xpath", value="badsel")), ErrorKind.INVALID_LOCATOR, "locator"),
        (
            Tap(locator=Locator(by="class_name", value="not a class!")),
            ErrorKind.INVALID_LOCATOR,
            "locator",
        ),
        (Tap(locator=by_id("perm:transit:nfc")), ErrorKind.ELEMENT_NOT_FOUND, "locator"),
        (
            TypeText(locator=by_id("perm:nowhere:camera"), text="x"),
            ErrorKind.ELEMENT_NOT_FOUND,
            "locator",
        ),
        # A button takes no text.
        (TypeText(locator=by_id(CAMERA), text="x"), ErrorKind.PRECONDITION_FAILED, None),
        # A scroll's target is a locator too.
        (
            Scroll(until=Locator(by="class_name", value="not a class!")),
            ErrorKind.INVALID_LOCATOR,
            "until",
        ),
    ]
    for action, kind, field in cases:
        got_kind, got_field, message = _error(device, action)
        assert (got_kind, got_field) == (kind, field), (action.describe(), message)
        assert not device.broken, action.describe()
    assert "tap(xpath=badsel): the device refused the locator" in _error(device, cases[1][0])[2]
    ok(device.run(Tap(locator=by_id(CAMERA))))
    camera = screen(device).find(CAMERA)
    assert camera is not None and camera.checked is True


def test_a_hidden_element_is_a_failed_precondition(appium_url: str, tmp_path: Path) -> None:
    app = tmp_path / "hidden.xml"
    app.write_text(HIDDEN_APP)
    with session(appium_url, FakeProfile(app=app)) as device:
        kind, field, message = _error(device, Tap(locator=by_id("ghost")))
        assert (kind, field) == (ErrorKind.PRECONDITION_FAILED, None)
        assert message == "tap(id=ghost): the element is hidden or disabled"
        assert not device.broken
        ok(device.run(Tap(locator=by_id("ok"))))
        assert clicks(device, "ok") == 1


# -- a server that goes away --------------------------------------------------------------


@pytest.mark.slow
def test_a_killed_server_is_a_backend_error_and_breaks_the_session(tmp_path: Path) -> None:
    port = free_port()
    server = appium_server(tmp_path / "home", port)
    server.start()
    try:
        with session(f"http://127.0.0.1:{port}", FakeProfile(), command_timeout_s=5) as device:
            ok(device.run(Tap(locator=by_id(CAMERA))))
            assert server.stop() is True
            actions: list[GuiAction] = [
                Tap(locator=by_id(CAMERA)),
                ReadScreen(),
                Screenshot(),
                Swipe(direction="up"),
                Back(),
            ]
            for action in actions:
                outcome = device.run(action)  # never raises
                error = outcome.feedback.error
                assert error is not None, action.describe()
                assert error.kind is ErrorKind.BACKEND_ERROR
                assert error.message.startswith(f"{action.describe()}: device failed: ")
                assert "\n" not in error.message
                assert outcome.artifacts == ()
                assert device.broken
            with pytest.raises(DeviceFaultError, match="reading the screen failed"):
                device.screen_document()
        # Closing a session whose server is gone raised nothing either.
    finally:
        server.stop()

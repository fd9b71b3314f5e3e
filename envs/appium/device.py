"""One Appium session on one device, and the GUI agent's tools over it.

Every tool returns contract feedback and never raises for anything a GUI agent can
send: a locator that matches nothing is ``element_not_found``, a malformed one
``invalid_locator`` (checked here before the device sees it, and again from the
server's answer), a hidden or disabled element ``precondition_failed``. A dead server
or session is a ``backend_error`` (a slow one a ``timeout``) and marks the session
broken: the pool then recreates it, and the collector retries the episode elsewhere.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import urllib3
from appium import webdriver
from appium.options.common import AppiumOptions
from appium.webdriver.client_config import AppiumClientConfig
from appium.webdriver.common.appiumby import AppiumBy
from appium.webdriver.webdriver import WebDriver
from appium.webdriver.webelement import WebElement
from lxml import etree
from selenium.common.exceptions import (
    ElementNotInteractableException,
    InvalidElementStateException,
    InvalidSelectorException,
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
    UnknownMethodException,
    WebDriverException,
)
from selenium.webdriver.common.actions import interaction
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.common.actions.pointer_input import PointerInput
from selenium.webdriver.common.proxy import Proxy, ProxyType

from contract import (
    Back,
    ErrorKind,
    Feedback,
    FlywheelError,
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
from envs.appium.profiles import DriverProfile
from envs.screen import ScreenError, to_xml, ui_tree

_BY = {
    "id": AppiumBy.ID,
    "accessibility_id": AppiumBy.ACCESSIBILITY_ID,
    "xpath": AppiumBy.XPATH,
    "class_name": AppiumBy.CLASS_NAME,
}
_CLASS_NAME = re.compile(r"^[A-Za-z_][\w.$]*$")
_SWIPE_SHARE = 0.3
Store = Callable[[bytes, str], str]
"""Keeps evidence bytes (with a suffix like ``.png``) and returns its reference."""


@dataclass(frozen=True)
class GuiOutcome:
    """A tool's feedback, the evidence it stored, and the screen it read (if it did)."""

    feedback: Feedback
    artifacts: tuple[str, ...] = ()
    tree: UITree | None = None


class DeviceFaultError(FlywheelError):
    """The device, its session or its server failed."""


def locator_problem(locator: Locator) -> str | None:
    """Why ``locator`` is malformed, or None."""
    if locator.by == "xpath":
        try:
            etree.XPath(locator.value)
        except etree.XPathSyntaxError as exc:
            return f"xpath {locator.value!r} does not parse: {exc}"
    elif locator.by == "class_name" and not _CLASS_NAME.match(locator.value):
        return f"{locator.value!r} is not a class name like android.widget.Switch"
    return None


def connect(server: str, capabilities: dict[str, Any], command_timeout_s: float) -> WebDriver:
    """A new session on the Appium server at ``server`` (never through a proxy);
    ``DeviceFaultError`` saying why when there is none."""
    options = AppiumOptions()
    options.load_capabilities(capabilities)
    try:
        return webdriver.Remote(
            server, options=options, client_config=client_config(server, command_timeout_s)
        )
    except Exception as exc:
        raise DeviceFaultError(f"no session on {server}: {_reason(exc)}") from None


NO_RETRIES = urllib3.Retry(total=0, redirect=0, raise_on_redirect=False)
"""No connection, read or status retry, and no redirect followed (Appium sends none)."""


def client_config(server: str, command_timeout_s: float) -> AppiumClientConfig:
    """How the Appium client talks to ``server``: directly, and with urllib3's own retries
    off (it would try a refused connection three more times): a failed device is tried
    again by the collector, on another device, as ``[retries] backend`` says."""
    return AppiumClientConfig(
        remote_server_addr=server,
        timeout=max(1, round(command_timeout_s)),
        proxy=Proxy({"proxyType": ProxyType.DIRECT}),
        init_args_for_pool_manager={"init_args_for_pool_manager": {"retries": NO_RETRIES}},
    )


class DeviceSession:
    """The GUI tools on one session; ``broken`` once the device failed under it."""

    def __init__(self, driver: WebDriver, profile: DriverProfile, store: Store | None) -> None:
        self.driver = driver
        self.profile = profile
        self._store = store
        self.broken = False

    def run(self, action: GuiAction) -> GuiOutcome:
        """Run one GUI action; a failure is typed feedback, never an exception."""
        start = time.perf_counter()
        for field in ("locator", "until"):  # ``until``: the target of a scroll
            locator = getattr(action, field, None)
            problem = locator_problem(locator) if isinstance(locator, Locator) else None
            if problem is not None:
                return GuiOutcome(Feedback.failure(ErrorKind.INVALID_LOCATOR, problem, field))
        try:
            outcome = self._dispatch(action)
        except Exception as exc:
            feedback = self._failure(exc, action)
            return GuiOutcome(feedback.model_copy(update={"latency_ms": _ms(start)}))
        feedback = outcome.feedback.model_copy(update={"latency_ms": _ms(start)})
        return GuiOutcome(feedback, outcome.artifacts, outcome.tree)

    def close(self) -> None:
        """End the session; a session that is gone already is fine."""
        with contextlib.suppress(Exception):
            self.driver.quit()

    # -- the tools -------------------------------------------------------------------

    def _dispatch(self, action: GuiAction) -> GuiOutcome:
        if isinstance(action, Tap):
            self._find(action.locator).click()
        elif isinstance(action, LongPress):
            self._press(self._find(action.locator), action.duration_ms)
        elif isinstance(action, TypeText):
            element = self._find(action.locator)
            if action.clear:
                element.clear()
            element.send_keys(action.text)
        elif isinstance(action, Swipe):
            self._swipe(action.direction)
        elif isinstance(action, Scroll):
            return self._scroll(action)
        elif isinstance(action, Back):
            self.profile.back(self.driver)
        elif isinstance(action, Home):
            self.profile.home(self.driver)
        elif isinstance(action, LaunchApp):
            self.profile.launch_app(self.driver, action.app)
        elif isinstance(action, ReadScreen):
            return self.read_screen()
        elif isinstance(action, Screenshot):
            ref = self._keep(self.driver.get_screenshot_as_png(), ".png")
            return GuiOutcome(Feedback(result={"screenshot": ref}), (ref,) if ref else ())
        return GuiOutcome(Feedback(result="ok"))

    def read_screen(self) -> GuiOutcome:
        """The screen as a compact UI tree; its page source is kept as evidence."""
        try:
            root = self.profile.screen(self.driver)
        except ScreenError as exc:
            raise DeviceFaultError(str(exc)) from None
        tree = ui_tree(root)
        ref = self._keep(to_xml(root).encode(), ".xml")
        return GuiOutcome(
            Feedback(result={"screen": tree.render()}), (ref,) if ref else (), tree=tree
        )

    def screen_document(self) -> etree._Element:
        """The live screen document (for verification); raises DeviceFaultError."""
        try:
            return self.profile.screen(self.driver)
        except Exception as exc:
            self.broken = True
            raise DeviceFaultError(f"reading the screen failed: {_reason(exc)}") from None

    def _find(self, locator: Locator) -> WebElement:
        return self.driver.find_element(_BY[locator.by], locator.value)

    def _press(self, element: WebElement, duration_ms: int) -> None:
        rect = element.rect
        x, y = rect["x"] + rect["width"] // 2, rect["y"] + rect["height"] // 2
        actions = self._touch()
        actions.pointer_action.move_to_location(x, y).pointer_down()  # type: ignore[no-untyped-call]
        actions.pointer_action.pause(duration_ms / 1000).release()
        actions.perform()

    def _swipe(self, direction: str) -> None:
        size = self.driver.get_window_size()
        cx, cy = size["width"] // 2, size["height"] // 2
        dx = round(size["width"] * _SWIPE_SHARE)
        dy = round(size["height"] * _SWIPE_SHARE)
        start, end = {
            "up": ((cx, cy + dy), (cx, cy - dy)),
            "down": ((cx, cy - dy), (cx, cy + dy)),
            "left": ((cx + dx, cy), (cx - dx, cy)),
            "right": ((cx - dx, cy), (cx + dx, cy)),
        }[direction]
        actions = self._touch()
        actions.pointer_action.move_to_location(*start).pointer_down()  # type: ignore[no-untyped-call]
        actions.pointer_action.pause(0.1).move_to_location(*end).release()
        actions.perform()

    def _touch(self) -> ActionBuilder:
        """W3C actions with one finger."""
        finger = PointerInput(interaction.POINTER_TOUCH, "finger")  # type: ignore[no-untyped-call]
        return ActionBuilder(self.driver, mouse=finger)

    def _scroll(self, action: Scroll) -> GuiOutcome:
        target = action.until
        for swipes in range(action.max_swipes + 1):
            if target is not None and self.driver.find_elements(_BY[target.by], target.value):
                return GuiOutcome(Feedback(result={"swipes": swipes}))
            if swipes < action.max_swipes:
                self._swipe(action.direction)
        if target is None:
            return GuiOutcome(Feedback(result={"swipes": action.max_swipes}))
        return GuiOutcome(
            Feedback.failure(
                ErrorKind.ELEMENT_NOT_FOUND,
                f"{target.describe()} not on screen after {action.max_swipes} swipes",
                "until",
            )
        )

    def _keep(self, data: bytes, suffix: str) -> str | None:
        return self._store(data, suffix) if self._store is not None else None

    # -- failures --------------------------------------------------------------------

    def _failure(self, exc: Exception, action: GuiAction) -> Feedback:
        what = action.describe()
        if isinstance(exc, NoSuchElementException):
            return Feedback.failure(
                ErrorKind.ELEMENT_NOT_FOUND, f"{what}: no element on screen matches", "locator"
            )
        if isinstance(exc, InvalidSelectorException) or "XPath parse error" in str(exc):
            return Feedback.failure(
                ErrorKind.INVALID_LOCATOR, f"{what}: the device refused the locator", "locator"
            )
        if isinstance(
            exc,
            InvalidElementStateException
            | ElementNotInteractableException
            | StaleElementReferenceException,
        ):
            return Feedback.failure(
                ErrorKind.PRECONDITION_FAILED, f"{what}: the element is hidden or disabled"
            )
        if isinstance(exc, UnknownMethodException):
            return Feedback.failure(
                ErrorKind.PRECONDITION_FAILED,
                f"{what}: the {self.profile.name} driver does not support it",
            )
        if isinstance(exc, LookupError | ValueError) and not isinstance(exc, WebDriverException):
            return Feedback.failure(ErrorKind.INVALID_ARGUMENTS, f"{what}: {exc}")
        self.broken = True
        timed_out = isinstance(exc, TimeoutException | urllib3.exceptions.ReadTimeoutError)
        kind = ErrorKind.TIMEOUT if timed_out else ErrorKind.BACKEND_ERROR
        return Feedback.failure(kind, f"{what}: device failed: {_reason(exc)}")


def _reason(exc: BaseException) -> str:
    """A one-line reason without stack traces (Appium puts them in messages)."""
    text = str(getattr(exc, "msg", None) or exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return f"{type(exc).__name__}: {first[:300]}"


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


@contextmanager
def session(
    server: str,
    profile: DriverProfile,
    store: Store | None = None,
    command_timeout_s: float = 30.0,
    extra_capabilities: dict[str, Any] | None = None,
) -> Iterator[DeviceSession]:
    """A session for the span of a ``with`` block (tests, one-off tools)."""
    caps = {**profile.capabilities(), **(extra_capabilities or {})}
    device = DeviceSession(connect(server, caps, command_timeout_s), profile, store)
    try:
        yield device
    finally:
        device.close()

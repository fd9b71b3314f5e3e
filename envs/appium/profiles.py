"""What differs between Appium drivers: capabilities, system navigation, live state.

``fake`` is Appium's fake driver with the repo's phone (``apps/phone.xml``): its page
source never changes, so the live screen is the source with each toggle's clicks and
each field's typed value read back; back, home and launching an app are taps on the
phone's own navigation buttons and launcher icons. ``uiautomator2`` is an Android phone
or emulator: its page source is live, back and home are key events, apps are launched
by package name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from appium.webdriver.common.appiumby import AppiumBy
from appium.webdriver.webdriver import WebDriver
from lxml import etree

from contract import InvalidInputError
from envs.appium.phone import PHONE_APP
from envs.screen import (
    OPTIONS,
    PERMISSIONS,
    SCREENS,
    launcher_id,
    option_id,
    parse_screen,
    permission_id,
    screen_id,
)

KEYCODE_HOME = 3
_LIVE = "//*[@checkable='true'] | //MockInputField"


class DriverProfile(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def fresh_session_per_episode(self) -> bool:
        """True when a new session is the way to reset the device between episodes."""
        ...

    def capabilities(self) -> dict[str, Any]: ...

    def back(self, driver: WebDriver) -> None: ...

    def home(self, driver: WebDriver) -> None: ...

    def launch_app(self, driver: WebDriver, app: str) -> None: ...

    def screen(self, driver: WebDriver) -> etree._Element:
        """The current screen as a normalized document, with live state."""
        ...

    def prepare(self, driver: WebDriver, world: Mapping[str, Mapping[str, Any]]) -> None:
        """Bring the device to the GUI state of a task's world, where the driver can."""
        ...


@dataclass(frozen=True)
class FakeProfile:
    app: Path = PHONE_APP
    name: str = "fake"
    fresh_session_per_episode: bool = True

    def capabilities(self) -> dict[str, Any]:
        return {
            "platformName": "Fake",
            "appium:automationName": "Fake",
            "appium:deviceName": "Fake",
            "appium:app": str(self.app.resolve()),
        }

    def back(self, driver: WebDriver) -> None:
        driver.find_element(AppiumBy.ID, "nav:back").click()

    def home(self, driver: WebDriver) -> None:
        driver.find_element(AppiumBy.ID, "nav:home").click()

    def launch_app(self, driver: WebDriver, app: str) -> None:
        driver.find_element(AppiumBy.ID, launcher_id(app)).click()

    def screen(self, driver: WebDriver) -> etree._Element:
        root = parse_screen(driver.page_source)
        nodes = [n for n in etree.XPath(_LIVE)(root) if isinstance(n, etree._Element)]
        elements = driver.find_elements(AppiumBy.XPATH, _LIVE)
        for node, element in zip(nodes, elements, strict=True):
            if node.attrib.get("checkable") == "true":
                clicks = int(str(element.get_attribute("clicks") or 0))
                initially = node.attrib.get("checked") == "true"
                node.attrib["checked"] = "true" if initially ^ (clicks % 2 == 1) else "false"
            else:
                typed = element.text
                if typed:
                    node.attrib["text"] = typed
        return root

    def prepare(self, driver: WebDriver, world: Mapping[str, Mapping[str, Any]]) -> None:
        """A new session starts with every toggle off and every field empty: switch on
        what the world has on and type each screen's content."""
        for collection, make_id, field_name, flag in (
            (PERMISSIONS, permission_id, "permission", "granted"),
            (OPTIONS, option_id, "option", "enabled"),
        ):
            for row in world.get(collection, {}).values():
                if row[flag]:
                    element_id = make_id(row["app"], row[field_name])
                    driver.find_element(AppiumBy.ID, element_id).click()
        for row in world.get(SCREENS, {}).values():
            element = driver.find_element(AppiumBy.ID, screen_id(row["app"], row["screen"]))
            element.send_keys(str(row["content"]))


@dataclass(frozen=True)
class UiAutomator2Profile:
    """An Android phone or emulator. ``packages`` maps the GUI agent's app names to
    Android package names (``[[devices.pool]] apps``)."""

    packages: Mapping[str, str] = field(default_factory=dict)
    name: str = "uiautomator2"
    fresh_session_per_episode: bool = False

    def capabilities(self) -> dict[str, Any]:
        return {
            "platformName": "Android",
            "appium:automationName": "UiAutomator2",
            "appium:noReset": True,
            "appium:newCommandTimeout": 300,
        }

    def back(self, driver: WebDriver) -> None:
        driver.back()

    def home(self, driver: WebDriver) -> None:
        driver.press_keycode(KEYCODE_HOME)

    def launch_app(self, driver: WebDriver, app: str) -> None:
        package = self.packages.get(app)
        if package is None:
            raise InvalidInputError("app", f"no Android package for {app!r}", self.packages)
        driver.activate_app(package)

    def screen(self, driver: WebDriver) -> etree._Element:
        return parse_screen(driver.page_source)

    def prepare(self, driver: WebDriver, world: Mapping[str, Mapping[str, Any]]) -> None:
        """A real phone's apps keep their own state: nothing is seeded (see the README)."""
        self.home(driver)


def driver_profile(driver: str, packages: Mapping[str, str] | None = None) -> DriverProfile:
    """The profile of a pool entry's ``driver``."""
    if driver == "fake":
        return FakeProfile()
    if driver == "uiautomator2":
        return UiAutomator2Profile(dict(packages or {}))
    raise InvalidInputError("driver", f"unknown driver {driver!r}", ("fake", "uiautomator2"))

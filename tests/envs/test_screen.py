"""Screens as documents: page sources normalized, the compact UI tree, XPath selection, and
the sandbox's GUI world rendered as a screen and read back (no server)."""

from __future__ import annotations

import pytest
from lxml import etree

from contract import UIElement
from envs.appium.phone import PHONE_APP, phone_app_xml, sandbox_phone_xml
from envs.sandbox import MobileSandbox
from envs.screen import (
    GUI_COLLECTIONS,
    OPTIONS,
    PERMISSIONS,
    SCREENS,
    ScreenError,
    gui_world_from_screen,
    launcher_id,
    option_id,
    parse_screen,
    permission_id,
    render_gui_world,
    screen_id,
    select,
    ui_tree,
)

UIAUTOMATOR2_SOURCE = """<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>
<hierarchy index="0" class="hierarchy" rotation="0" width="1080" height="2400">
  <android.widget.FrameLayout index="0" package="com.example.transit"
      class="android.widget.FrameLayout" text="" resource-id="" checkable="false"
      checked="false" clickable="false" enabled="true" bounds="[0,0][1080,2400]">
    <android.widget.TextView index="0" class="android.widget.TextView" text="Notifications"
        resource-id="android:id/title" checkable="false" checked="false" clickable="false"
        enabled="true" bounds="[42,300][800,360]"/>
    <android.widget.Switch index="1" class="android.widget.Switch" text=""
        resource-id="com.example.transit:id/notifications" content-desc="Allow notifications"
        checkable="true" checked="true" clickable="true" enabled="true"
        bounds="[900,290][1038,370]"/>
    <android.widget.CheckBox index="2" class="android.widget.CheckBox" text="Camera"
        resource-id="com.example.transit:id/camera" checkable="true" checked="false"
        clickable="true" enabled="false" bounds="[900,400][1038,480]"/>
  </android.widget.FrameLayout>
</hierarchy>
"""

FAKE_SOURCE = """<app width="1080" height="2400">
  <MockButton id="ok" text="OK" clickable="true" left="10" top="20" width="100" height="50"/>
  <MockInputField id="name" text="" content-desc="Your name" left="0" top="70"
      width="1080" height="60"/>
  <MockWebView/>
</app>
"""


def _by_id(root: etree._Element) -> dict[str, dict[str, str]]:
    return {str(n.get("id")): dict(n.attrib) for n in root.iter() if n.get("id")}


# -- parsing ------------------------------------------------------------------------------


def test_a_uiautomator2_source_gets_ids_and_keeps_its_bounds() -> None:
    root = parse_screen(UIAUTOMATOR2_SOURCE)
    switch = _by_id(root)["com.example.transit:id/notifications"]
    assert switch["class"] == "android.widget.Switch"
    assert switch["resource-id"] == switch["id"]
    assert switch["bounds"] == "[900,290][1038,370]"
    assert switch["checked"] == "true"
    title = _by_id(root)["android:id/title"]
    assert title["bounds"] == "[42,300][800,360]"


def test_a_fake_driver_source_gets_classes_and_bounds_from_its_box() -> None:
    root = parse_screen(FAKE_SOURCE.encode())  # bytes are accepted as well as text
    ok, name = _by_id(root)["ok"], _by_id(root)["name"]
    assert (ok["class"], ok["bounds"]) == ("MockButton", "[10,20][110,70]")
    assert (name["class"], name["bounds"]) == ("MockInputField", "[0,70][1080,130]")
    web = root.find("MockWebView")
    assert web is not None
    assert web.get("class") == "MockWebView"
    assert web.get("bounds") is None  # no box, no bounds
    assert root.get("bounds") is None  # the app has a size but no position


@pytest.mark.parametrize(
    "source",
    ["", "not xml at all", "<app><MockButton id='x'></app>", b"\x89PNG\r\n\x1a\n"],
)
def test_a_page_source_that_is_not_xml_is_a_screen_error(source: str | bytes) -> None:
    with pytest.raises(ScreenError, match="the page source is not XML"):
        parse_screen(source)
    assert issubclass(ScreenError, ValueError)


# -- the UI tree --------------------------------------------------------------------------


def test_the_ui_tree_keeps_elements_with_an_id_a_text_or_a_description() -> None:
    tree = ui_tree(parse_screen(UIAUTOMATOR2_SOURCE))
    assert [e.id for e in tree.elements] == [
        "android:id/title",
        "com.example.transit:id/notifications",
        "com.example.transit:id/camera",
    ]
    assert tree.render().splitlines() == [
        '[android:id/title] TextView "Notifications" @42,300,800,360',
        "[com.example.transit:id/notifications] Switch (Allow notifications) "
        "checked clickable @900,290,1038,370",
        '[com.example.transit:id/camera] CheckBox "Camera" unchecked clickable disabled '
        "@900,400,1038,480",
    ]


def test_checked_is_only_read_for_checkable_elements() -> None:
    tree = ui_tree(parse_screen(UIAUTOMATOR2_SOURCE))
    title = tree.find("android:id/title")
    switch = tree.find("com.example.transit:id/notifications")
    camera = tree.find("com.example.transit:id/camera")
    assert title is not None and switch is not None and camera is not None
    assert title.checked is None  # checked="false" on a text view means nothing
    assert (switch.checked, switch.clickable, switch.enabled) == (True, True, True)
    assert (camera.checked, camera.enabled) == (False, False)
    assert tree.find("nothing") is None


def test_the_ui_tree_of_a_fake_source() -> None:
    tree = ui_tree(parse_screen(FAKE_SOURCE))
    assert tree.elements == (
        UIElement(id="ok", cls="MockButton", text="OK", bounds=(10, 20, 110, 70), clickable=True),
        UIElement(
            id="name", cls="MockInputField", description="Your name", bounds=(0, 70, 1080, 130)
        ),
    )
    assert tree.render() == (
        '[ok] MockButton "OK" clickable @10,20,110,70\n'
        "[name] MockInputField (Your name) @0,70,1080,130"
    )


# -- selection ----------------------------------------------------------------------------


def test_select_returns_the_attributes_of_what_an_xpath_selects() -> None:
    root = parse_screen(UIAUTOMATOR2_SOURCE)
    checked = select(root, "//*[@checkable='true' and @checked='true']")
    assert [a["id"] for a in checked] == ["com.example.transit:id/notifications"]
    assert checked[0]["content-desc"] == "Allow notifications"
    toggles = select(root, "//*[@checkable='true']")
    assert [a["id"] for a in toggles] == [
        "com.example.transit:id/notifications",
        "com.example.transit:id/camera",
    ]
    assert select(root, "//*[@id='nothing']") == []


def test_select_ignores_results_that_are_not_elements() -> None:
    root = parse_screen(FAKE_SOURCE)
    assert select(root, "count(//*)") == []  # a number
    assert select(root, "//MockButton/@text") == []  # attribute values
    assert select(root, "string(//MockButton/@id)") == []


def test_select_raises_for_an_xpath_that_does_not_parse() -> None:
    with pytest.raises(etree.XPathError):
        select(parse_screen(FAKE_SOURCE), "//*[")


# -- the GUI world as a screen ------------------------------------------------------------


def test_the_sandbox_gui_world_survives_a_round_trip_through_a_screen() -> None:
    world = MobileSandbox().build_world(0)
    # Some toggles on, so both states travel.
    world[PERMISSIONS]["transit:camera"]["granted"] = True
    world[OPTIONS]["bank:dark_mode"]["enabled"] = True
    screen = render_gui_world(world)
    back = gui_world_from_screen(parse_screen(screen))
    assert set(back) == set(GUI_COLLECTIONS)
    for collection in GUI_COLLECTIONS:
        assert back[collection] == world[collection], collection
    assert back[PERMISSIONS]["transit:camera"]["granted"] is True
    assert back[PERMISSIONS]["transit:location"]["granted"] is False
    assert back[SCREENS]["bank:verification"]["content"].startswith("Your one-time code is ")


def test_the_rendered_screen_has_an_element_per_row_and_a_launcher_per_app() -> None:
    world = MobileSandbox().build_world(0)
    world[PERMISSIONS]["gym:location"]["granted"] = True
    root = parse_screen(render_gui_world(world))
    elements = _by_id(root)
    assert elements[permission_id("gym", "location")]["checked"] == "true"
    assert elements[permission_id("gym", "camera")]["checked"] == "false"
    assert elements[permission_id("gym", "camera")]["checkable"] == "true"
    assert elements[option_id("gym", "auto_renew")]["text"] == "auto renew"
    content = world[SCREENS]["gym:membership"]["content"]
    assert elements[screen_id("gym", "membership")]["text"] == content
    assert elements[launcher_id("gym")]["text"] == "Gym"
    rows = sum(len(world[c]) for c in GUI_COLLECTIONS)
    apps = {row["app"] for c in GUI_COLLECTIONS for row in world[c].values()}
    assert len(elements) == rows + len(apps)
    tree = ui_tree(root)
    gym_location = tree.find(permission_id("gym", "location"))
    assert gym_location is not None and gym_location.checked is True


def test_elements_with_other_ids_are_not_part_of_the_gui_world() -> None:
    root = parse_screen(
        '<screen><toggle id="nav:back" checked="true"/><toggle id="perm:bank"/>'
        '<toggle id="launcher:bank" text="Bank"/><toggle id="perm:bank:camera" checked="true"/>'
        '<text id="screen:bank:verification"/></screen>'
    )
    world = gui_world_from_screen(root)
    assert world[PERMISSIONS] == {
        "bank:camera": {"id": "bank:camera", "app": "bank", "permission": "camera", "granted": True}
    }
    assert world[OPTIONS] == {}
    assert world[SCREENS]["bank:verification"]["content"] == ""


def test_an_empty_world_renders_an_empty_screen() -> None:
    root = parse_screen(render_gui_world({}))
    assert root.tag == "screen" and len(root) == 0
    assert gui_world_from_screen(root) == {PERMISSIONS: {}, OPTIONS: {}, SCREENS: {}}


# -- the fake phone -----------------------------------------------------------------------


def test_the_committed_fake_phone_is_the_sandbox_gui_world() -> None:
    """Regenerate with ``python -m envs.appium.phone > envs/appium/apps/phone.xml``."""
    assert PHONE_APP.read_text() == sandbox_phone_xml()


def test_the_fake_phone_offers_every_gui_element_of_the_sandbox_all_off() -> None:
    world = MobileSandbox().build_world(0)
    root = parse_screen(PHONE_APP.read_text())
    elements = _by_id(root)
    assert elements["nav:back"]["class"] == "MockButton"
    assert elements["nav:home"]["class"] == "MockButton"
    for row in world[PERMISSIONS].values():
        toggle = elements[permission_id(row["app"], row["permission"])]
        assert (toggle["checkable"], toggle["checked"]) == ("true", "false")
    for row in world[OPTIONS].values():
        assert elements[option_id(row["app"], row["option"])]["checked"] == "false"
    for row in world[SCREENS].values():
        field = elements[screen_id(row["app"], row["screen"])]
        assert (field["class"], field["text"]) == ("MockInputField", "")
    # Every element has a box of its own, one below the other.
    tops = [int(n.get("top", -1)) for n in root]
    assert tops == sorted(set(tops)) and tops[0] == 0
    # Every seed's world has the same GUI elements: one phone serves every task.
    assert phone_app_xml(MobileSandbox().build_world(7)) == PHONE_APP.read_text()

"""The fake driver's phone: an app XML that lays out the sandbox's GUI world.

Appium's fake driver loads an app from XML and keeps element state (clicks, typed
values) in its session; its page source never changes. The committed file
``apps/phone.xml`` is what ``phone_app_xml`` writes for the sandbox's GUI world, so the
fake device offers every permission, option and screen a Sub-agent task can ask for
(a test keeps the two in step).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lxml import etree

from envs.screen import (
    OPTIONS,
    PERMISSIONS,
    SCREENS,
    gui_apps,
    launcher_id,
    option_id,
    permission_id,
    rows_of,
    screen_id,
)

PHONE_APP = Path(__file__).parent / "apps" / "phone.xml"
WIDTH, HEIGHT = 1080, 2400
ROW_HEIGHT = 60
NAVIGATION = ("back", "home")


def phone_app_xml(world: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """The fake phone for ``world``'s GUI apps: navigation buttons, a launcher icon per
    app, a toggle per permission and option (all off), an empty field per screen."""
    root = etree.Element("app", {"width": str(WIDTH), "height": str(HEIGHT)})
    top = 0

    def place(tag: str, attrs: dict[str, str]) -> None:
        nonlocal top
        box = {"left": "0", "top": str(top), "width": str(WIDTH), "height": str(ROW_HEIGHT)}
        etree.SubElement(root, tag, {**attrs, **box})
        top += ROW_HEIGHT

    for name in NAVIGATION:
        place("MockButton", {"id": f"nav:{name}", "text": name.title(), "clickable": "true"})
    for app in gui_apps(world):
        title = app.title()
        place(
            "MockListItem",
            {
                "id": launcher_id(app),
                "text": title,
                "content-desc": f"Open {title}",
                "clickable": "true",
            },
        )
        for collection, make_id, field in (
            (PERMISSIONS, permission_id, "permission"),
            (OPTIONS, option_id, "option"),
        ):
            for row in rows_of(world, collection, app):
                name = str(row[field])
                place(
                    "MockButton",
                    {
                        "id": make_id(app, name),
                        "text": name.replace("_", " "),
                        "content-desc": f"{title}: {name.replace('_', ' ')}",
                        "checkable": "true",
                        "checked": "false",
                        "clickable": "true",
                    },
                )
        for row in rows_of(world, SCREENS, app):
            name = str(row["screen"])
            place(
                "MockInputField",
                {"id": screen_id(app, name), "text": "", "content-desc": f"{title}: {name}"},
            )
    return str(etree.tostring(root, encoding="unicode", pretty_print=True))


def sandbox_phone_xml() -> str:
    """``phone_app_xml`` for the sandbox's seeded GUI world (the same for every seed)."""
    from envs.sandbox import MobileSandbox

    return phone_app_xml(MobileSandbox().build_world(0))


if __name__ == "__main__":  # python -m envs.appium.phone > envs/appium/apps/phone.xml
    print(sandbox_phone_xml(), end="")

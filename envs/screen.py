"""Screens as documents: what the GUI agent reads and what ``ui_state`` checks query.

Every backend shows a screen in one shape: XML whose elements carry the attributes
``id``, ``class``, ``text``, ``content-desc``, ``checkable``, ``checked``, ``clickable``,
``enabled`` and ``bounds`` (``[left,top][right,bottom]``). UiAutomator2's page source
has that shape already (``resource-id`` becomes ``id``); the fake driver's app XML is
normalized to it; the sandbox renders its GUI state into it.

The GUI world (permissions, in-app options, read-only screens of apps without an API)
maps to elements by id: ``perm:<app>:<permission>``, ``option:<app>:<option>`` and
``screen:<app>:<screen>``; launcher icons are ``launcher:<app>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lxml import etree

from contract import UIElement, UITree

PERMISSIONS = "gui.permissions"
OPTIONS = "gui.options"
SCREENS = "gui.screens"
GUI_COLLECTIONS = (PERMISSIONS, OPTIONS, SCREENS)
_BOUNDS = re.compile(r"^\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]$")
Rows = dict[str, dict[str, Any]]


class ScreenError(ValueError):
    """A page source that is not an XML document."""


def permission_id(app: str, permission: str) -> str:
    return f"perm:{app}:{permission}"


def option_id(app: str, option: str) -> str:
    return f"option:{app}:{option}"


def screen_id(app: str, screen: str) -> str:
    return f"screen:{app}:{screen}"


def launcher_id(app: str) -> str:
    return f"launcher:{app}"


def parse_screen(source: str | bytes) -> etree._Element:
    """A page source as a normalized screen document (the root element)."""
    data = source.encode() if isinstance(source, str) else source
    try:
        root = etree.fromstring(
            data, parser=etree.XMLParser(resolve_entities=False, no_network=True)
        )
    except etree.XMLSyntaxError as exc:
        raise ScreenError(f"the page source is not XML: {exc}") from None
    for node in root.iter():
        if not isinstance(node.tag, str):
            continue
        _normalize(node)
    return root


def _normalize(node: etree._Element) -> None:
    attrs = node.attrib
    if "resource-id" in attrs and "id" not in attrs:
        attrs["id"] = attrs["resource-id"]
    if "class" not in attrs:
        attrs["class"] = node.tag
    if "bounds" not in attrs and "width" in attrs and "left" in attrs:
        left, top = int(float(attrs["left"])), int(float(attrs.get("top", "0")))
        right = left + int(float(attrs["width"]))
        bottom = top + int(float(attrs.get("height", "0")))
        attrs["bounds"] = f"[{left},{top}][{right},{bottom}]"


def ui_tree(root: etree._Element) -> UITree:
    """The elements worth showing a model: those with an id, a text or a description."""
    elements = []
    for node in root.iter():
        if not isinstance(node.tag, str) or node is root:
            continue
        a = node.attrib
        if not (a.get("id") or a.get("text") or a.get("content-desc")):
            continue
        checkable = a.get("checkable") == "true"
        elements.append(
            UIElement(
                id=a.get("id", ""),
                cls=a.get("class", node.tag),
                text=a.get("text", ""),
                description=a.get("content-desc", ""),
                bounds=_bounds(a.get("bounds", "")),
                clickable=a.get("clickable") == "true",
                enabled=a.get("enabled", "true") != "false",
                checked=(a.get("checked") == "true") if checkable else None,
            )
        )
    return UITree(elements=tuple(elements))


def _bounds(text: str) -> tuple[int, int, int, int] | None:
    match = _BOUNDS.match(text)
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def select(root: etree._Element, xpath: str) -> list[dict[str, str]]:
    """Attributes of the elements ``xpath`` selects (``etree.XPathError`` if malformed)."""
    found = etree.XPath(xpath)(root)
    if not isinstance(found, list):
        return []
    return [dict(node.attrib) for node in found if isinstance(node, etree._Element)]


def to_xml(root: etree._Element) -> str:
    return str(etree.tostring(root, encoding="unicode", pretty_print=True))


# -- the GUI world as a screen, and back ---------------------------------------------------


def render_gui_world(collections: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """The sandbox's GUI state as a screen document (one screen listing every app)."""
    root = etree.Element("screen", {"class": "screen"})
    for app in gui_apps(collections):
        group = etree.SubElement(root, "app", {"id": launcher_id(app), "text": app.title()})
        for row in rows_of(collections, PERMISSIONS, app):
            etree.SubElement(
                group, "toggle", _toggle(permission_id(app, row["permission"]), row["granted"])
            )
        for row in rows_of(collections, OPTIONS, app):
            etree.SubElement(
                group, "toggle", _toggle(option_id(app, row["option"]), row["enabled"])
            )
        for row in rows_of(collections, SCREENS, app):
            etree.SubElement(
                group, "text", {"id": screen_id(app, row["screen"]), "text": str(row["content"])}
            )
    for node in root.iter():
        _normalize(node)
    return to_xml(root)


def _toggle(element_id: str, on: object) -> dict[str, str]:
    label = element_id.rsplit(":", 1)[-1].replace("_", " ")
    return {
        "id": element_id,
        "text": label,
        "checkable": "true",
        "checked": "true" if on else "false",
        "clickable": "true",
    }


def gui_apps(collections: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """The apps the GUI world knows, in first-seen order."""
    seen: dict[str, None] = {}
    for name in GUI_COLLECTIONS:
        for row in collections.get(name, {}).values():
            seen.setdefault(str(row["app"]), None)
    return list(seen)


def rows_of(
    collections: Mapping[str, Mapping[str, Mapping[str, Any]]], name: str, app: str
) -> list[Mapping[str, Any]]:
    """The rows of collection ``name`` that belong to ``app``."""
    return [row for row in collections.get(name, {}).values() if row["app"] == app]


def gui_world_from_screen(root: etree._Element) -> dict[str, Rows]:
    """The GUI world a device shows: permission and option rows from toggles, screen
    rows from their texts; elements with other ids are ignored."""
    world: dict[str, Rows] = {PERMISSIONS: {}, OPTIONS: {}, SCREENS: {}}
    for node in root.iter():
        if not isinstance(node.tag, str):
            continue
        kind, _, rest = node.attrib.get("id", "").partition(":")
        app, _, name = rest.partition(":")
        if not app or not name:
            continue
        row_id = f"{app}:{name}"
        on = node.attrib.get("checked") == "true"
        if kind == "perm":
            world[PERMISSIONS][row_id] = {
                "id": row_id,
                "app": app,
                "permission": name,
                "granted": on,
            }
        elif kind == "option":
            world[OPTIONS][row_id] = {"id": row_id, "app": app, "option": name, "enabled": on}
        elif kind == "screen":
            text = node.attrib.get("text", "")
            world[SCREENS][row_id] = {"id": row_id, "app": app, "screen": name, "content": text}
    return world

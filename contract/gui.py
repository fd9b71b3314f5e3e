"""The GUI sub-agent's vocabulary: how it points at an element, what it does on a screen,
and the compact UI tree it reads back.

A device backend (``envs/appium``) runs these actions; they never reach the planner, which
delegates with a ``SubAgentCall`` and sees the sub-agent's result.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, TypeAdapter

from contract.base import Record

LocatorStrategy = Literal["id", "accessibility_id", "xpath", "class_name"]
LOCATOR_STRATEGIES: tuple[str, ...] = get_args(LocatorStrategy)
Direction = Literal["up", "down", "left", "right"]


class Locator(Record):
    """How to find an element: a resource id, a content description, an XPath or a class."""

    by: LocatorStrategy
    value: str = Field(min_length=1, max_length=1000)

    def describe(self) -> str:
        return f"{self.by}={self.value}"


class _GuiAction(Record):
    def describe(self) -> str:
        """One readable line, e.g. ``tap(id=perm:transit:notifications)``."""
        fields = self.model_dump(mode="json", exclude={"kind"})
        parts = []
        for name, value in fields.items():
            if isinstance(value, dict) and "by" in value:
                parts.append(f"{value['by']}={value['value']}")
            elif value is not None:
                parts.append(f"{name}={value!r}" if isinstance(value, str) else f"{name}={value}")
        return f"{self.kind}({', '.join(parts)})"  # type: ignore[attr-defined]


class Tap(_GuiAction):
    kind: Literal["tap"] = "tap"
    locator: Locator


class LongPress(_GuiAction):
    kind: Literal["long_press"] = "long_press"
    locator: Locator
    duration_ms: int = Field(default=800, ge=100, le=10_000)


class TypeText(_GuiAction):
    """Type ``text`` into an input field (cleared first unless ``clear`` is false)."""

    kind: Literal["type"] = "type"
    locator: Locator
    text: str
    clear: bool = True


class Swipe(_GuiAction):
    """One swipe across the middle of the screen: ``up`` moves the content up."""

    kind: Literal["swipe"] = "swipe"
    direction: Direction


class Scroll(_GuiAction):
    """Swipe in ``direction`` until ``until`` is on screen, at most ``max_swipes`` times."""

    kind: Literal["scroll"] = "scroll"
    direction: Direction = "up"
    until: Locator | None = None
    max_swipes: int = Field(default=5, ge=1, le=50)


class Back(_GuiAction):
    kind: Literal["back"] = "back"


class Home(_GuiAction):
    kind: Literal["home"] = "home"


class LaunchApp(_GuiAction):
    kind: Literal["launch_app"] = "launch_app"
    app: str = Field(min_length=1, max_length=200)


class ReadScreen(_GuiAction):
    """The screen as a compact UI tree (and its page source kept as evidence)."""

    kind: Literal["read_screen"] = "read_screen"


class Screenshot(_GuiAction):
    kind: Literal["screenshot"] = "screenshot"


GuiAction = Annotated[
    Tap | LongPress | TypeText | Swipe | Scroll | Back | Home | LaunchApp | ReadScreen | Screenshot,
    Field(discriminator="kind"),
]
gui_action_adapter: TypeAdapter[GuiAction] = TypeAdapter(GuiAction)


class UIElement(Record):
    """One element of a screen, as the GUI agent reads it."""

    id: str = Field(default="", description="resource id (Android) or id (fake driver)")
    cls: str = Field(default="", description="widget class, e.g. android.widget.Switch")
    text: str = ""
    description: str = Field(default="", description="content description (accessibility)")
    bounds: tuple[int, int, int, int] | None = Field(
        default=None, description="left, top, right, bottom in pixels"
    )
    clickable: bool = False
    enabled: bool = True
    checked: bool | None = Field(default=None, description="for switches and check boxes")

    def line(self) -> str:
        """A compact line: ``[id] Switch "Notifications" (Allow...) checked clickable``."""
        parts = [f"[{self.id}]" if self.id else "[]", self.cls.rsplit(".", 1)[-1]]
        if self.text:
            parts.append(f'"{self.text}"')
        if self.description:
            parts.append(f"({self.description})")
        if self.checked is not None:
            parts.append("checked" if self.checked else "unchecked")
        if self.clickable:
            parts.append("clickable")
        if not self.enabled:
            parts.append("disabled")
        if self.bounds is not None:
            parts.append("@{},{},{},{}".format(*self.bounds))
        return " ".join(parts)


class UITree(Record):
    """The elements of a screen worth showing a model: those with an id, a text or a
    description, in document order."""

    elements: tuple[UIElement, ...] = ()

    def render(self) -> str:
        return "\n".join(e.line() for e in self.elements)

    def find(self, element_id: str) -> UIElement | None:
        return next((e for e in self.elements if e.id == element_id), None)

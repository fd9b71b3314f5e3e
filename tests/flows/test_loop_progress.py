"""The loop's progress page: three charts, inlined as SVG images, whatever turns scored."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET

from flows.loop import Turn, progress_markdown

SVG = "{http://www.w3.org/2000/svg}"
DATA_URI = "data:image/svg+xml;base64,"
IMAGE = re.compile(r"!\[([^\]]*)\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)")
TITLES = [
    "Champion on the development set",
    "Dataset version size",
    "Champion's mean normalized cost",
]
ALTS = ["development success of the champion", "dataset size", "mean cost"]

SCORED = Turn(
    turn=1,
    round_id="round-1",
    collected_by="scripted",
    trajectories=10,
    dataset_id="ds-1",
    dataset_size=8,
    model_id="model-a",
    decision="promoted",
    champion_id="model-a",
    overall=0.4,
    capability_scores={"tool_use": 0.5, "memory": 0.25},
    mean_cost=0.3,
)
UNSCORED = Turn(
    turn=2,
    round_id="round-2",
    collected_by="model-a",
    trajectories=10,
    dataset_id=None,
    dataset_size=0,
    note="the round froze no dataset version: nothing to train on",
)


def _charts(markdown: str) -> list[tuple[str, ET.Element]]:
    """Each image's alt text and its SVG document."""
    found = IMAGE.findall(markdown)
    assert markdown.count(DATA_URI) == len(found)
    return [(alt, ET.fromstring(base64.b64decode(data).decode("utf-8"))) for alt, data in found]


def _title(svg: ET.Element) -> str | None:
    title = svg.find(f"{SVG}title")
    assert title is not None
    return title.text


def _texts(svg: ET.Element) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{SVG}text")]


def _series(svg: ET.Element) -> list[str | None]:
    return [p.get("data-series") for p in svg.iter(f"{SVG}polyline")]


def _points(svg: ET.Element, series: str) -> int:
    (line,) = [p for p in svg.iter(f"{SVG}polyline") if p.get("data-series") == series]
    return len((line.get("points") or "").split())


def test_two_turns_give_three_charts_with_their_titles() -> None:
    markdown = progress_markdown([SCORED, UNSCORED])
    assert markdown.startswith("# The flywheel loop: 2 turn(s)\n")
    assert markdown.count(DATA_URI) == 3
    charts = _charts(markdown)
    assert [alt for alt, _ in charts] == ALTS
    assert [_title(svg) for _, svg in charts] == TITLES

    scores, sizes, costs = (svg for _, svg in charts)
    # Only the scored turn is drawn, and only the capabilities it measured.
    assert _series(scores) == ["overall", "tool_use", "memory"]
    assert all(_points(scores, name) == 1 for name in ("overall", "tool_use", "memory"))
    assert _series(sizes) == ["dataset"] and _points(sizes, "dataset") == 2  # every turn
    assert _series(costs) == ["mean cost"] and _points(costs, "mean cost") == 1
    assert not any("no data" in _texts(svg) for _, svg in charts)


def test_without_a_scored_turn_the_champion_charts_say_no_data() -> None:
    markdown = progress_markdown([UNSCORED])
    assert markdown.startswith("# The flywheel loop: 1 turn(s)\n")
    charts = _charts(markdown)
    assert [_title(svg) for _, svg in charts] == TITLES
    scores, sizes, costs = (svg for _, svg in charts)
    assert "no data" in _texts(scores) and _series(scores) == []
    assert "no data" in _texts(costs) and _series(costs) == []
    assert "no data" not in _texts(sizes) and _series(sizes) == ["dataset"]


def test_no_turn_at_all_still_renders() -> None:
    charts = _charts(progress_markdown([]))
    assert [_title(svg) for _, svg in charts] == TITLES
    assert all("no data" in _texts(svg) for _, svg in charts)


def test_the_page_is_the_same_for_the_same_turns() -> None:
    assert progress_markdown([SCORED, UNSCORED]) == progress_markdown([SCORED, UNSCORED])

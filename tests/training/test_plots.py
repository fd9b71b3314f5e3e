"""SVG training curves: valid XML, lines in the plot area, ticks, escaping, edge cases."""

from __future__ import annotations

import base64
import itertools
import math
import re
import xml.etree.ElementTree as ET

import pytest

from contract import InvalidInputError
from training.plots import (
    SPARK_BLOCKS,
    Series,
    line_chart,
    markdown_figure,
    sparkline,
    svg_data_uri,
)

NS = "{http://www.w3.org/2000/svg}"


def chart(*series: Series, width: int = 640, height: int = 320) -> str:
    return line_chart(
        series, title="Loss", x_label="step", y_label="loss", width=width, height=height
    )


def curve(name: str, ys: list[float], start: float = 0.0) -> Series:
    return Series(name, tuple((start + i, y) for i, y in enumerate(ys)))


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    return root


def polylines(root: ET.Element) -> list[list[tuple[float, float]]]:
    out = []
    for line in root.iter(f"{NS}polyline"):
        pairs = line.attrib["points"].split()
        out.append([(float(x), float(y)) for x, y in (p.split(",") for p in pairs)])
    return out


def plot_area(root: ET.Element) -> tuple[float, float, float, float]:
    frame = next(r for r in root.iter(f"{NS}rect") if r.attrib.get("fill") == "none")
    x, y = float(frame.attrib["x"]), float(frame.attrib["y"])
    return x, y, x + float(frame.attrib["width"]), y + float(frame.attrib["height"])


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text")]


def y_tick_values(root: ET.Element) -> list[float]:
    return [float(t.text or "") for t in root.iter(f"{NS}text") if t.get("text-anchor") == "end"]


def test_one_polyline_per_series_with_its_points_inside_the_plot_area() -> None:
    loss = curve("loss", [2.0 / (i + 1) for i in range(50)])
    reward = curve("reward", [-0.5, 0.1, 0.7, 1.3], start=10)
    root = parse(chart(loss, reward))

    lines = polylines(root)
    assert [len(line) for line in lines] == [50, 4]
    left, top, right, bottom = plot_area(root)
    for line in lines:
        for x, y in line:
            assert left <= x <= right
            assert top <= y <= bottom
    # Few points get markers, many do not; two series get a legend.
    assert len(list(root.iter(f"{NS}circle"))) == 4
    assert {"loss", "reward"} <= set(texts(root))


def test_series_get_distinct_colours_and_a_single_series_no_legend() -> None:
    series = [curve(f"s{i}", [i, i + 1.0]) for i in range(10)]
    root = parse(chart(*series))
    styles = {(p.get("stroke"), p.get("stroke-dasharray")) for p in root.iter(f"{NS}polyline")}
    assert len(styles) == 10

    single = parse(chart(curve("only", [1.0, 2.0])))
    assert "only" not in texts(single)


def test_y_ticks_are_nice_and_bracket_the_data() -> None:
    ys = [-3.7, 0.2, 12.9, 7.5]
    ticks = y_tick_values(parse(chart(curve("r", ys))))

    assert min(ticks) <= min(ys) and max(ticks) >= max(ys)
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1
    (step,) = steps
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 6) in {1.0, 2.0, 5.0}


def test_series_names_and_title_are_escaped() -> None:
    svg = line_chart(
        [curve("<b>&", [1.0, 2.0]), curve('say "hi"', [2.0, 1.0])],
        title="R & D <v2>",
        x_label="x<",
        y_label="y&",
    )
    root = parse(svg)
    assert "<b>&" in texts(root)
    assert "R & D <v2>" in texts(root)
    assert [p.get("data-series") for p in root.iter(f"{NS}polyline")] == ["<b>&", 'say "hi"']


def test_control_characters_in_names_do_not_break_the_xml() -> None:
    root = parse(chart(curve("bad\x00name\x1b", [1.0]), curve("ok", [2.0])))
    assert "badname" in texts(root)


def test_constant_series_and_single_point_render_inside_the_plot() -> None:
    for series in (curve("flat", [0.5] * 5), curve("zero", [0.0] * 3), curve("one", [4.2])):
        root = parse(chart(series))
        (line,) = polylines(root)
        assert len(line) == len(series.points)
        left, top, right, bottom = plot_area(root)
        assert all(left <= x <= right and top <= y <= bottom for x, y in line)
        ticks = y_tick_values(root)
        value = series.points[0][1]
        assert min(ticks) < value < max(ticks)


def test_non_finite_points_are_skipped() -> None:
    ys = [1.0, math.nan, 2.0, math.inf, -math.inf, 3.0]
    root = parse(chart(curve("r", ys), Series("x nan", ((math.nan, 1.0), (1.0, 1.0)))))
    assert [len(line) for line in polylines(root)] == [3, 1]
    assert "nan" not in chart(curve("r", ys)).lower()


def test_empty_input_says_no_data() -> None:
    for series in ((), (Series("empty", ()),), (curve("all nan", [math.nan, math.nan]),)):
        root = parse(line_chart(series, title="t", x_label="x", y_label="y"))
        assert polylines(root) == []
        assert "no data" in texts(root)


def test_an_empty_series_beside_a_full_one_keeps_its_legend_entry() -> None:
    root = parse(chart(curve("full", [1.0, 2.0]), Series("empty", ())))
    assert len(polylines(root)) == 1
    assert "empty" in texts(root)


def test_negative_values_map_below_zero() -> None:
    root = parse(chart(curve("r", [-2.0, 0.0, 2.0])))
    (line,) = polylines(root)
    # SVG y grows downwards: the negative point is lowest on screen.
    assert line[0][1] > line[1][1] > line[2][1]


def test_output_is_deterministic_and_numbers_compact() -> None:
    series = [
        curve("a", [math.sin(i / 3) for i in range(40)]),
        curve("b", [0.1 * i for i in range(7)]),
    ]
    first, second = chart(*series), chart(*series)
    assert first == second
    numbers = re.findall(r'(?:x|y|x1|y1|x2|y2|cx|cy)="(-?[\d.]+)"', first)
    numbers += re.findall(
        r"-?\d+\.\d+", " ".join(p.attrib["points"] for p in parse(first).iter(f"{NS}polyline"))
    )
    assert numbers and all(len(n.partition(".")[2]) <= 2 for n in numbers)


def test_size_is_honoured_and_too_small_is_refused() -> None:
    root = parse(chart(curve("a", [1.0, 2.0]), width=800, height=400))
    assert (root.get("width"), root.get("height")) == ("800", "400")
    with pytest.raises(InvalidInputError):
        chart(curve("a", [1.0]), width=10)


def test_data_uri_decodes_back_to_the_svg() -> None:
    svg = chart(curve("é <&>", [1.0, 2.0]))
    uri = svg_data_uri(svg)
    prefix = "data:image/svg+xml;base64,"
    assert uri.startswith(prefix)
    assert base64.b64decode(uri.removeprefix(prefix)).decode("utf-8") == svg


def test_markdown_figure_escapes_the_alt_text() -> None:
    svg = chart(curve("a", [1.0]))
    figure = markdown_figure(svg, "reward [RL]\n*run*")
    assert figure == f"![reward \\[RL\\] \\*run\\*]({svg_data_uri(svg)})"


def test_sparkline_of_an_increasing_sequence_never_drops() -> None:
    line = sparkline([i**1.5 for i in range(60)], width=20)
    heights = [SPARK_BLOCKS.index(c) for c in line]
    assert len(line) == 20
    assert heights == sorted(heights)
    assert heights[0] == 0 and heights[-1] == len(SPARK_BLOCKS) - 1


def test_sparkline_is_nan_safe() -> None:
    assert sparkline([1.0, math.nan, 3.0]) == SPARK_BLOCKS[0] + " " + SPARK_BLOCKS[-1]
    assert sparkline([math.nan, math.inf]) == "  "
    assert sparkline([]) == ""
    assert len(set(sparkline([2.0, 2.0, 2.0]))) == 1
    assert sparkline([-1e308, 1e308]) == SPARK_BLOCKS[0] + SPARK_BLOCKS[-1]


def x_tick_values(root: ET.Element) -> list[float]:
    return [
        float(t.text or "")
        for t in root.iter(f"{NS}text")
        if t.get("text-anchor") == "middle"
        and (t.text or "").replace(".", "").replace("-", "").isdigit()
    ]


def test_turns_get_whole_number_ticks_and_a_share_its_0_to_1_axis() -> None:
    flat = [Series(f"capability {i}", ((1.0, 0.0), (2.0, 0.0), (3.0, 0.0))) for i in range(5)]
    svg = line_chart(
        flat, title="t", x_label="turn", y_label="success", integer_x=True, y_range=(0.0, 1.0)
    )
    root = parse(svg)
    x_ticks = x_tick_values(root)
    assert x_ticks and all(t == int(t) for t in x_ticks), x_ticks
    y_ticks = y_tick_values(root)
    assert min(y_ticks) == 0.0 and max(y_ticks) == 1.0
    # Lines on top of one another keep showing every colour: no two share a dash pattern
    # among the first four, and every colour differs.
    styles = [(p.get("stroke"), p.get("stroke-dasharray")) for p in root.iter(f"{NS}polyline")]
    assert len({colour for colour, _ in styles}) == 5
    assert len({dash for _, dash in styles[:4]}) == 4
    plain = parse(chart(curve("r", [0.2, 0.4, 0.3], start=1)))
    assert any(t != int(t) for t in x_tick_values(plain)), "without integer_x: fractional ticks"
    wide = parse(line_chart(flat[:1], title="t", x_label="x", y_label="y", y_range=(0.0, 1.0)))
    assert max(y_tick_values(wide)) == 1.0
    beyond = line_chart(
        [Series("s", ((1.0, 0.5), (2.0, 1.6)))],
        title="t",
        x_label="x",
        y_label="y",
        y_range=(0.0, 1.0),
    )
    assert max(y_tick_values(parse(beyond))) >= 1.6, "data outside the range widens it"

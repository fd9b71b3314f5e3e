"""Training curves as small, dependency-free SVG charts (and text sparklines).

A trainer records curves (SFT loss per step; RL mean reward, success rate and output
tokens per update; reward per regime). :func:`line_chart` draws them as a standalone SVG
document, :func:`markdown_figure` embeds one in a Prefect markdown artifact, and
:func:`sparkline` squeezes a curve into one line of text for logs and tables.

Output is deterministic: the same input gives the same bytes. Points whose ``x`` or
``y`` is NaN or infinite are skipped; coordinates carry at most two decimals.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from contract import InvalidInputError

PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#000000",
    "#F0E442",
)
"""Okabe-Ito colours, ordered so the first few are the most distinct on white."""

DASHES = ("", "6 3", "2 2", "8 3 2 3")
"""Dash patterns, taken in turn with the colours: lines that lie on one another (five
capabilities all at 0) still show each colour through the others' gaps."""

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
MARKER_LIMIT = 30
"""Series with at most this many points get a marker per point."""

FONT = 'font-family="sans-serif"'
_NO_DATA_STYLE = ' text-anchor="middle" fill="#888888"'
CHAR_WIDTH = 6.5
"""Rough width of one 11px sans-serif character, for layout."""
LEGEND_MAX_CHARS = 24
MIN_WIDTH = 160
MIN_HEIGHT = 120

_Map = Callable[[float], float]

_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_MD_ALT_SPECIAL = re.compile(r"([\\\[\]*_`<>!])")


@dataclass(frozen=True)
class Series:
    """One named curve: ``points`` are ``(x, y)`` pairs in drawing order."""

    name: str
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class _Axis:
    """A data range, its tick values, and the format of their labels."""

    lo: float
    hi: float
    ticks: tuple[float, ...]
    label_format: str

    def fraction(self, value: float) -> float:
        """Where ``value`` lies between ``lo`` (0) and ``hi`` (1)."""
        span = self.hi / 2 - self.lo / 2  # halves stay finite near the float limit
        return (value / 2 - self.lo / 2) / span if span > 0 else 0.5

    def label(self, value: float) -> str:
        """A tick label, with no ``-0``."""
        text = format(value, self.label_format)
        return text.lstrip("-") if float(text) == 0 else text


def _num(value: float) -> str:
    """A coordinate, compactly: at most two decimals, no trailing zeros, no ``-0``."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _xml(text: str) -> str:
    """Escape ``text`` for element content or a double-quoted attribute."""
    return escape(_XML_INVALID.sub("", text), {'"': "&quot;"})


def _finite(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]


def _padded(lo: float, hi: float) -> tuple[float, float]:
    """Widen an empty range (one value) so it can be drawn."""
    if hi > lo:
        return lo, hi
    pad = abs(lo) * 0.1 or 1.0
    return (lo - pad if math.isfinite(lo - pad) else lo), (
        hi + pad if math.isfinite(hi + pad) else hi
    )


def _nice_step(raw: float) -> tuple[float, int]:
    """The smallest 1, 2 or 5 times a power of ten at least ``raw``, and that power."""
    exponent = math.floor(math.log10(raw))
    for mantissa in (1, 2, 5, 10):
        if mantissa * 10.0**exponent >= raw * (1 - 1e-9):
            if mantissa == 10:
                return 10.0 ** (exponent + 1), exponent + 1
            return mantissa * 10.0**exponent, exponent
    return 10.0 ** (exponent + 1), exponent + 1  # pragma: no cover - loop always returns


def _axis(lo: float, hi: float, target: int, *, integer: bool = False) -> _Axis:
    """An axis whose ticks (1-2-5 steps, about ``target`` of them) bracket ``[lo, hi]``;
    ``integer``: whole-number ticks only (turns, epochs)."""
    lo, hi = _padded(lo, hi)
    span = hi - lo
    if math.isfinite(span):
        step, exponent = _nice_step(span / max(target, 1))
        if integer and step < 1:
            step, exponent = 1.0, 0
        first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
        ticks = tuple(round(i * step, max(0, -exponent)) for i in range(first, last + 1))
        if all(math.isfinite(t) for t in ticks):
            return _Axis(ticks[0], ticks[-1], ticks, _label_format(ticks, exponent))
    return _Axis(lo, hi, (lo, hi), ".3g")


def _label_format(ticks: Sequence[float], exponent: int) -> str:
    """Fixed decimals for everyday ranges; significant digits for tiny or huge ones."""
    largest = max(abs(t) for t in ticks)
    if exponent >= -4 and largest < 1e7:
        return f".{max(0, -exponent)}f"
    digits = math.floor(math.log10(largest)) - exponent + 1 if largest > 0 else 1
    return f".{min(max(digits, 1), 15)}g"


def _text(x: float, y: float, text: str, *, size: int = 11, extra: str = "") -> str:
    attrs = f'x="{_num(x)}" y="{_num(y)}" {FONT} font-size="{size}"'
    return f"<text {attrs}{extra}>{_xml(text)}</text>"


def _legend_name(name: str) -> str:
    return name if len(name) <= LEGEND_MAX_CHARS else name[: LEGEND_MAX_CHARS - 3] + "..."


def _line_style(index: int) -> tuple[str, str]:
    """The colour and the ``stroke-dasharray`` attribute (maybe empty) of series ``index``."""
    colour = PALETTE[index % len(PALETTE)]
    dash = DASHES[(index + index // len(PALETTE)) % len(DASHES)]
    return colour, f' stroke-dasharray="{dash}"' if dash else ""


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    width: int = 640,
    height: int = 320,
    integer_x: bool = False,
    y_range: tuple[float, float] | None = None,
) -> str:
    """A standalone SVG line chart of ``series``, one coloured polyline each.

    Non-finite points are skipped; a series left without points gets no line (but keeps
    its legend entry). With no points at all, the plot area says "no data".
    ``integer_x``: x ticks at whole numbers only (turns). ``y_range``: the y axis spans at
    least this range (a share: ``(0, 1)``), widened only for data outside it.
    """
    if width < MIN_WIDTH:
        raise InvalidInputError("width", f"must be at least {MIN_WIDTH} pixels, got {width}")
    if height < MIN_HEIGHT:
        raise InvalidInputError("height", f"must be at least {MIN_HEIGHT} pixels, got {height}")
    finite = [_finite(s.points) for s in series]
    xs = [x for points in finite for x, _ in points]
    ys = [y for points in finite for _, y in points]
    has_data = bool(xs)

    top, bottom = 32.0, 44.0
    plot_h = height - top - bottom
    if y_range is not None and has_data:
        ys = [*ys, *y_range]
    y_axis = _axis(min(ys), max(ys), max(2, round(plot_h / 50))) if has_data else None
    y_labels = [y_axis.label(t) for t in y_axis.ticks] if y_axis else []
    left = 30.0 + CHAR_WIDTH * max((len(s) for s in y_labels), default=1)
    right = 16.0
    if len(series) > 1:
        longest = max(len(_legend_name(s.name)) for s in series)
        right += 26.0 + CHAR_WIDTH * longest
    plot_w = max(width - left - right, 40.0)
    x_target = max(2, round(plot_w / 90))
    x_axis = _axis(min(xs), max(xs), x_target, integer=integer_x) if has_data else None

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f"<title>{_xml(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        _text(width / 2, 20, title, size=14, extra=' text-anchor="middle" font-weight="bold"'),
        f'<rect x="{_num(left)}" y="{_num(top)}" width="{_num(plot_w)}" '
        f'height="{_num(plot_h)}" fill="none" stroke="#444444" stroke-width="1"/>',
    ]

    def px(x: float) -> float:
        return left + (x_axis.fraction(x) if x_axis else 0.5) * plot_w

    def py(y: float) -> float:
        return top + plot_h - (y_axis.fraction(y) if y_axis else 0.5) * plot_h

    if x_axis and y_axis:
        out += _y_ticks(y_axis, y_labels, py, left, plot_w)
        out += _x_ticks(x_axis, px, top + plot_h)
    else:
        out.append(
            _text(left + plot_w / 2, top + plot_h / 2, "no data", size=13, extra=_NO_DATA_STYLE)
        )
    out.append(_text(left + plot_w / 2, height - 8, x_label, extra=' text-anchor="middle"'))
    label_y = top + plot_h / 2
    out.append(
        _text(
            14,
            label_y,
            y_label,
            extra=f' text-anchor="middle" transform="rotate(-90 14 {_num(label_y)})"',
        )
    )
    for index, points in enumerate(finite):
        out += _series_marks(index, [(px(x), py(y)) for x, y in points], series[index].name)
    if len(series) > 1:
        out += _legend(series, left + plot_w + 14, top, plot_h)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _y_ticks(axis: _Axis, labels: Sequence[str], py: _Map, left: float, plot_w: float) -> list[str]:
    out = []
    for tick, label in zip(axis.ticks, labels, strict=True):
        y = _num(py(tick))
        out.append(
            f'<line x1="{_num(left)}" y1="{y}" x2="{_num(left + plot_w)}" y2="{y}" '
            'stroke="#e5e5e5" stroke-width="1"/>'
        )
        out.append(
            f'<line x1="{_num(left - 4)}" y1="{y}" x2="{_num(left)}" y2="{y}" stroke="#444444"/>'
        )
        out.append(_text(left - 7, py(tick) + 4, label, extra=' text-anchor="end"'))
    return out


def _x_ticks(axis: _Axis, px: _Map, baseline: float) -> list[str]:
    out = []
    for tick in axis.ticks:
        x = _num(px(tick))
        out.append(
            f'<line x1="{x}" y1="{_num(baseline)}" x2="{x}" y2="{_num(baseline + 4)}" '
            'stroke="#444444"/>'
        )
        out.append(_text(px(tick), baseline + 16, axis.label(tick), extra=' text-anchor="middle"'))
    return out


def _series_marks(index: int, pixels: Sequence[tuple[float, float]], name: str) -> list[str]:
    """The polyline of one series and, when it has few points, a marker per point."""
    if not pixels:
        return []
    colour, dash = _line_style(index)
    coords = " ".join(f"{_num(x)},{_num(y)}" for x, y in pixels)
    out = [
        f'<polyline data-series="{_xml(name)}" points="{coords}" fill="none" '
        f'stroke="{colour}" stroke-width="2" stroke-linejoin="round"{dash}/>'
    ]
    if len(pixels) <= MARKER_LIMIT:
        out += [
            f'<circle cx="{_num(x)}" cy="{_num(y)}" r="2.5" fill="{colour}"/>' for x, y in pixels
        ]
    return out


def _legend(series: Sequence[Series], x: float, top: float, plot_h: float) -> list[str]:
    """One entry per series beside the plot; those that do not fit are counted instead."""
    room = max(1, int((plot_h - 8) // 16) + 1)
    shown = len(series) if len(series) <= room else room - 1
    out = []
    for index, item in enumerate(series[:shown]):
        colour, dash = _line_style(index)
        y = top + 8 + 16 * index
        out.append(
            f'<line x1="{_num(x)}" y1="{_num(y)}" x2="{_num(x + 18)}" y2="{_num(y)}" '
            f'stroke="{colour}" stroke-width="2"{dash}/>'
        )
        out.append(_text(x + 22, y + 4, _legend_name(item.name)))
    if shown < len(series):
        more = f"+{len(series) - shown} more"
        out.append(_text(x, top + 12 + 16 * shown, more, extra=' fill="#666666"'))
    return out


def svg_data_uri(svg: str) -> str:
    """``svg`` as a base64 ``data:`` URI, for an ``<img>`` or a markdown image."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def markdown_figure(svg: str, alt: str) -> str:
    """A markdown image of ``svg`` (inlined as a data URI) with escaped ``alt`` text."""
    escaped = _MD_ALT_SPECIAL.sub(r"\\\1", " ".join(alt.split()))
    return f"![{escaped}]({svg_data_uri(svg)})"


def _buckets(values: Sequence[float], width: int) -> list[float]:
    """``values`` averaged down to at most ``width`` buckets (NaN where none is finite)."""
    if len(values) <= width:
        return [v if math.isfinite(v) else math.nan for v in values]
    out = []
    for i in range(width):
        chunk = values[i * len(values) // width : (i + 1) * len(values) // width]
        finite = [v for v in chunk if math.isfinite(v)]
        out.append(math.fsum(v / len(finite) for v in finite) if finite else math.nan)
    return out


def sparkline(values: Sequence[float], width: int = 24) -> str:
    """A one-line block sparkline of ``values``, at most ``width`` characters.

    Longer input is averaged into ``width`` buckets; non-finite values show as blanks,
    and a flat curve sits at mid height.
    """
    if width < 1:
        raise InvalidInputError("width", f"must be at least 1, got {width}")
    points = _buckets(values, width)
    finite = [v for v in points if not math.isnan(v)]
    if not finite:
        return " " * len(points)
    lo, hi = min(finite), max(finite)
    top = len(SPARK_BLOCKS) - 1
    chars = []
    for v in points:
        if math.isnan(v):
            chars.append(" ")
        elif hi == lo:
            chars.append(SPARK_BLOCKS[top // 2])
        else:  # halves keep the span finite even for values near the float limit
            chars.append(SPARK_BLOCKS[round((v / 2 - lo / 2) / (hi / 2 - lo / 2) * top)])
    return "".join(chars)

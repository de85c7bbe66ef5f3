"""Line plots drawn as SVG by hand: step on x, one polyline per named series, ticks at round values.

The UI drew its plots with matplotlib (which can write SVG too: the cost was its drawing, not the
format), the costliest thing a page did, plus importing matplotlib on the first; twenty people
opening a run page at once waited for each of its seven plots in turn while the server shared its
one interpreter among them (docs/benchmarks.md, "The UI under load"). An SVG of a few polylines
is a little text, and the browser draws it. The plots are shown as ``<img>`` data URIs: an SVG
shown that way runs nothing, whatever its text says (and every name in it is escaped anyway).
"""

from __future__ import annotations

import base64
import math
from html import escape

WIDTH, HEIGHT = 336, 208
LEFT, RIGHT, TOP, BOTTOM = 56, 10, 24, 30
# matplotlib's first colours ("tab10"), so the plots look as they did.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
MARKERS_BELOW = 20  # series shorter than this show each point

Series = tuple[tuple[str, tuple[tuple[int, float], ...]], ...]


def line_plot(title: str, series: Series, ylabel: str = "") -> str:
    """A data URI of an SVG plotting each (name, ((step, value), ...)) of ``series`` on one axis.
    Values that are not finite (a NaN loss) are left out, as gaps are in matplotlib."""
    finite = [(name, [(s, v) for s, v in points if math.isfinite(v)]) for name, points in series]
    finite = [(name, points) for name, points in finite if points]
    steps = [s for _, points in finite for s, _ in points] or [0, 1]
    values = [v for _, points in finite for _, v in points] or [0.0, 1.0]
    x_ticks, y_ticks = _ticks(min(steps), max(steps)), _ticks(min(values), max(values))
    x_axis = _Axis(x_ticks[0], x_ticks[-1], LEFT, WIDTH - RIGHT)
    y_axis = _Axis(y_ticks[0], y_ticks[-1], HEIGHT - BOTTOM, TOP)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, sans-serif">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>',
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2:g}" y="15" font-size="10" text-anchor="middle">{escape(title)}</text>',
    ]
    for tick in x_ticks:
        x = x_axis.at(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" stroke="#e3e3e3"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 10}" font-size="7" text-anchor="middle">{_label(tick)}</text>'
        )
    for tick in y_ticks:
        y = y_axis.at(tick)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        parts.append(f'<text x="{LEFT - 3}" y="{y + 2.5:.1f}" font-size="7" text-anchor="end">{_label(tick)}</text>')
    box_w, box_h = WIDTH - RIGHT - LEFT, HEIGHT - BOTTOM - TOP
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{box_w}" height="{box_h}" fill="none" stroke="#555"/>')
    parts.append(f'<text x="{LEFT + box_w / 2:g}" y="{HEIGHT - 4}" font-size="8" text-anchor="middle">step</text>')
    if ylabel:
        parts.append(
            f'<text transform="translate(10 {TOP + box_h / 2:g}) rotate(-90)" font-size="8" '
            f'text-anchor="middle">{escape(ylabel)}</text>'
        )
    for i, (_name, points) in enumerate(finite):
        colour = COLOURS[i % len(COLOURS)]
        xy = [(x_axis.at(s), y_axis.at(v)) for s, v in points]
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        if len(points) < MARKERS_BELOW:
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{colour}"/>' for x, y in xy]
    if len(finite) > 1:
        parts += _legend(finite)
    parts.append("</svg>")
    return "data:image/svg+xml;base64," + base64.b64encode("".join(parts).encode()).decode()


class _Axis:
    """Data values to pixels, from ``low``→``start`` to ``high``→``end``."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        self.low, self.scale, self.start = low, (end - start) / (high - low), start

    def at(self, value: float) -> float:
        return self.start + (value - self.low) * self.scale


def _ticks(low: float, high: float, about: int = 5) -> list[float]:
    """Round values from at most ``low`` to at least ``high``, about ``about`` of them, 1-2-2.5-5
    steps (the axis spans exactly the first to the last)."""
    if high == low:  # one value: a span around it
        pad = abs(low) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / (about - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first, last = math.floor(low / step), math.ceil(high / step)
    return [float(f"{i * step:.12g}") for i in range(first, last + 1)]  # 0.30000000000000004 → 0.3


def _label(value: float) -> str:
    return f"{value:.4g}"


def _legend(series: list[tuple[str, list]]) -> list[str]:
    x = WIDTH - RIGHT - 94
    parts = [
        f'<rect x="{x - 3}" y="{TOP + 2}" width="90" height="{len(series) * 10 + 2}" fill="#fff" fill-opacity="0.8"/>'
    ]
    for i, (name, _points) in enumerate(series):
        y = TOP + 10 + i * 10
        colour = COLOURS[i % len(COLOURS)]
        parts.append(
            f'<line x1="{x}" y1="{y - 2.5}" x2="{x + 12}" y2="{y - 2.5}" stroke="{colour}" stroke-width="1.5"/>'
        )
        parts.append(f'<text x="{x + 15}" y="{y}" font-size="7">{escape(name[:22])}</text>')
    return parts

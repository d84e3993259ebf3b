"""Live curves as inline SVG: one small ``<svg>`` per metric group, built in Python, drawn by the browser.

Why SVG in an ``ipywidgets.HTML`` and not matplotlib (Agg) or a plotting widget: a frame is a string of a few
kilobytes (polylines of the already downsampled :class:`~notebook_accel.widgets.series.Series`, axes and
ticks), built in well under a millisecond of kernel time even with many metrics, where one Agg frame costs
0.05-0.2 s of kernel CPU (see ``benchmarks/dashboard_live.py``); it needs no front-end package beyond
ipywidgets itself, so it renders wherever ipywidgets does (JupyterLab, Notebook 7, VS Code, Colab). Matplotlib
still draws the static PNG left in the cell when the run ends (:mod:`notebook_accel.widgets.plots`).

Each panel: x = step, one polyline per metric with a dot on its latest point (so a single point is visible),
"nice" ticks (1, 2, 5 x 10^k) on both axes and a legend line above the plot.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping

from notebook_accel.widgets.series import Series
from notebook_accel.widgets.run_model import group_of, label_of

__all__ = ["curves_svg", "curves_image", "nice_ticks", "COLORS", "PANEL_HEIGHT"]

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_W, _H = 300, 180  # panel size in px
PANEL_HEIGHT = _H
_GAP = 6  # px between panels
_SVG_HEAD = '<svg xmlns="http://www.w3.org/2000/svg" '
_L, _R, _T, _B = 46, 8, 24, 22  # plot-area margins


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]`` (steps of 1, 2 or 5 x 10^k).

    Example:
        >>> nice_ticks(0, 100)
        [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [round(i * step, 12) for i in range(first, int(math.floor(hi / step + 1e-9)) + 1)]


def _fmt(v: float) -> str:
    """A tick label: short, no trailing zeros."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        return f"{v:.0e}"
    return f"{v:.4g}"


def _limits(values: list[float]) -> tuple[float, float]:
    """The axis range of ``values``, padded; a flat or single value gets a range around it."""
    lo, hi = min(values), max(values)
    if hi == lo:
        pad = abs(lo) * 0.05 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.05
    return lo - pad, hi + pad


def _panel(title: str, lines: list[tuple[str, str, list[float], list[float]]]) -> str:
    """One ``<svg>``: axes, ticks, grid, a polyline and a last-point dot per line, and the legend."""
    xs_all = [x for _, _, xs, _ in lines for x in xs]
    ys_all = [y for _, _, _, ys in lines for y in ys]
    # a viewBox and a flex item that may shrink: in a narrow output (1,000 px with Lab's side panel open) the
    # panels of the row scale down together, at their height, instead of the last one being cut
    out = [f'{_SVG_HEAD}width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
           f'style="font:10px sans-serif;background:#fff;flex:0 1 auto;min-width:0">',
           f'<text x="{_W / 2:.0f}" y="11" text-anchor="middle" font-weight="bold" font-size="11">'
           f'{html.escape(title)}</text>']
    x0, x1, y0, y1 = _L, _W - _R, _H - _B, _T
    out.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#9ca3af"/>')
    if xs_all:
        xlo, xhi = _limits(xs_all)
        ylo, yhi = _limits(ys_all)
        sx, sy = (x1 - x0) / (xhi - xlo), (y0 - y1) / (yhi - ylo)
        for t in nice_ticks(xlo, xhi, 4):
            px = x0 + (t - xlo) * sx
            out.append(f'<line x1="{px:.1f}" y1="{y1}" x2="{px:.1f}" y2="{y0}" stroke="#eee"/>'
                       f'<text x="{px:.1f}" y="{y0 + 12}" text-anchor="middle" fill="#444">{_fmt(t)}</text>')
        for t in nice_ticks(ylo, yhi, 4):
            py = y0 - (t - ylo) * sy
            out.append(f'<line x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}" stroke="#eee"/>'
                       f'<text x="{x0 - 3}" y="{py + 3:.1f}" text-anchor="end" fill="#444">{_fmt(t)}</text>')
        for _, color, xs, ys in lines:
            pts = " ".join(f"{x0 + (x - xlo) * sx:.1f},{y0 - (y - ylo) * sy:.1f}" for x, y in zip(xs, ys))
            if len(xs) > 1:
                out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.3"/>')
            if xs:
                cx, cy = x0 + (xs[-1] - xlo) * sx, y0 - (ys[-1] - ylo) * sy
                out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.5" fill="{color}"/>')
    else:
        out.append(f'<text x="{(x0 + x1) / 2:.0f}" y="{(y0 + y1) / 2:.0f}" text-anchor="middle" fill="#9ca3af">'
                   "no finite value yet</text>")
    legend = []
    for i, (label, color, _, _) in enumerate(lines):
        legend.append(f'<tspan fill="{color}">{"" if i == 0 else "  "}&#9632; {html.escape(label)}</tspan>')
    out.append(f'<text x="{x0}" y="{_T - 4}" font-size="9">{"".join(legend)}</text>')
    out.append("</svg>")
    return "".join(out)


def curves_svg(series: Mapping[str, Series], cache: dict[str, tuple[tuple[object, ...], str, float | None]] | None
               = None) -> str:
    """The live curves of ``series`` as HTML: one SVG panel per metric group, in one row.

    Args:
        series: metric name -> downsampled series (the dashboard's :attr:`RunState.series`).
        cache: each panel as last drawn, by group (filled here): a panel whose series took no value since is
            reused as is, without reading its points.

    Returns:
        An HTML string (a placeholder note when nothing was logged yet).

    Example:
        >>> s = Series(); s.append(1, 0.5)
        >>> "<circle" in curves_svg({"train/loss": s})
        True
    """
    if not series:
        return ('<div style="color:#6b7280;font:12px sans-serif;padding:4px">'
                "curves appear here after the first accelerator.log(...)</div>")
    members: dict[str, list[tuple[int, str]]] = {}
    for i, name in enumerate(series):
        members.setdefault(group_of(name), []).append((i, name))
    panels, last = [], None
    for title, names in members.items():
        key = tuple((name, series[name].count) for _, name in names)
        hit = cache.get(title) if cache is not None else None
        if hit is None or hit[0] != key:
            lines = [(label_of(name), COLORS[i % len(COLORS)], *series[name].points()) for i, name in names]
            ends = [xs[-1] for _, _, xs, _ in lines if xs]
            hit = (key, _panel(title, lines), max(ends) if ends else None)
            if cache is not None:
                cache[title] = hit
        panels.append(hit[1])
        if hit[2] is not None and (last is None or hit[2] > last):
            last = hit[2]
    step = "" if last is None else f' data-last-step="{last:.15g}"'  # the newest plotted step, for tests and tools
    # one row whose panels shrink (at their height) when they outgrow the cell: a new group never adds a row (the
    # page below would jump) and no panel is cut
    return (f'<div style="display:flex;flex-wrap:nowrap;gap:{_GAP}px;overflow-x:auto;overflow-y:hidden"{step}>'
            f'{"".join(panels)}</div>')


def _groups(series: Mapping[str, Series]) -> dict[str, list[tuple[str, str, list[float], list[float]]]]:
    """Each panel's lines (label, colour, xs, ys), in first-seen order."""
    groups: dict[str, list[tuple[str, str, list[float], list[float]]]] = {}
    for i, (name, s) in enumerate(series.items()):
        groups.setdefault(group_of(name), []).append((label_of(name), COLORS[i % len(COLORS)], *s.points()))
    return groups


def curves_image(series: Mapping[str, Series], columns: int = 3) -> bytes:
    """The curves as one SVG document (``columns`` panels a row), for the static result's ``<img>``: the same
    drawing as the live view, made in a few milliseconds (matplotlib's PNG took ~0.25 s of the kernel per run).

    Example:
        >>> s = Series(); s.append(1, 0.5)
        >>> curves_image({"train/loss": s}).startswith(b'<svg xmlns="http://www.w3.org/2000/svg" width="300"')
        True
    """
    groups = _groups(series)
    panels = [_panel(title, lines) for title, lines in groups.items()]
    rows = max(math.ceil(len(panels) / columns), 1)
    wide = min(len(panels), columns) or 1
    width, height = wide * _W + (wide - 1) * _GAP, rows * _H + (rows - 1) * _GAP
    placed = [panel.replace(_SVG_HEAD, f'<svg x="{i % columns * (_W + _GAP)}" y="{i // columns * (_H + _GAP)}" ', 1)
              for i, panel in enumerate(panels)]
    return (f'{_SVG_HEAD}width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            f'{"".join(placed)}</svg>').encode()

"""Live curves: matplotlib (Agg, no pyplot) drawn into PNG bytes for an ``ipywidgets.Image``.

One panel per metric group (the part of the name after the last ``/``: ``train/loss`` and ``eval/loss``
share the ``loss`` panel, with one line each), x = step. The figure and its lines are built once and rebuilt only when
a new metric appears; a redraw only swaps the lines' data (already downsampled to a fixed budget by
:class:`~notebook_accel.widgets.series.Series`), so its cost does not grow with the number of logged steps.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from PIL import Image as PILImage

from notebook_accel.widgets.series import Series
from notebook_accel.widgets.run_model import group_of, label_of

__all__ = ["CurvePlot"]


class CurvePlot:
    """Draws metric series into a PNG, reusing its figure between redraws.

    Args:
        width: figure width in inches.
        panel_height: height of one row of panels in inches.
        dpi: resolution of the PNG.
        columns: panels per row.

    Example:
        >>> from notebook_accel.widgets.series import Series
        >>> s = Series(); s.append(0, 1.0); s.append(1, 0.5)
        >>> png = CurvePlot().render({"train/loss": s})
        >>> png[:4] == b"\\x89PNG"
        True
    """

    def __init__(self, width: float = 9.0, panel_height: float = 2.6, dpi: int = 72, columns: int = 3) -> None:
        self.width = width
        self.panel_height = panel_height
        self.dpi = dpi
        self.columns = columns
        self.figure: Figure | None = None
        self.canvas: FigureCanvasAgg | None = None
        self.lines: dict[str, Line2D] = {}
        self._axes: dict[str, object] = {}
        self._names: tuple[str, ...] = ()

    def render(self, series: Mapping[str, Series]) -> bytes:
        """The PNG of ``series`` (an empty figure with a note when there is nothing to draw yet)."""
        names = tuple(series)
        if self.figure is None or names != self._names:
            self._build(names)
        for name, line in self.lines.items():
            xs, ys = series[name].points()
            line.set_data(xs, ys)
            line.set_marker("o" if len(xs) == 1 else "")  # a lone point has no line to draw: show a dot
        for ax in self._axes.values():
            ax.relim()  # type: ignore[attr-defined]
            ax.autoscale_view()  # type: ignore[attr-defined]
        return self._png()

    def _build(self, names: tuple[str, ...]) -> None:
        """Lay out one panel per group with one line per metric."""
        groups: dict[str, list[str]] = {}
        for name in names:
            groups.setdefault(group_of(name), []).append(name)
        cols = max(1, min(self.columns, len(groups)))
        rows = max(1, math.ceil(len(groups) / cols))
        height = self.panel_height * rows
        fig = Figure(figsize=(self.width, height), dpi=self.dpi)
        # fixed margins (in inches, converted to fractions): a layout engine would cost a second draw per frame
        fig.subplots_adjust(
            left=0.6 / self.width, right=1 - 0.15 / self.width, bottom=0.45 / height, top=1 - 0.3 / height,
            wspace=0.3, hspace=0.55 * 2.6 / self.panel_height,
        )
        self.canvas = FigureCanvasAgg(fig)
        self.lines, self._axes = {}, {}
        if not groups:
            fig.text(0.5, 0.5, "waiting for accelerator.log(...)", ha="center", va="center", color="gray")
        for i, (group, members) in enumerate(groups.items()):
            ax = fig.add_subplot(rows, cols, i + 1)
            ax.set_title(group, fontsize=10, loc="left")
            ax.set_xlabel("step", fontsize=8)
            ax.tick_params(labelsize=8)
            ax.locator_params(nbins=5)
            ax.grid(True, alpha=0.3)
            for name in members:
                (self.lines[name],) = ax.plot([], [], linewidth=1.2, label=label_of(name))
            # above the plot area, right of the title: it never covers a point ("best" inside would scan every
            # point, and any place inside can hide the newest one)
            ax.legend(fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(members), frameon=False,
                      borderaxespad=0.1, handlelength=1.2, columnspacing=0.8)
            self._axes[group] = ax
        self.figure, self._names = fig, names

    def _png(self) -> bytes:
        """Draw the figure and encode it as PNG (low compression: speed matters more than size)."""
        canvas = self.canvas
        if canvas is None:
            raise RuntimeError("CurvePlot._png called before the figure was built")
        canvas.draw()
        width, height = canvas.get_width_height()
        image = PILImage.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
        buf = io.BytesIO()
        image.convert("RGB").save(buf, format="png", compress_level=1)
        return buf.getvalue()

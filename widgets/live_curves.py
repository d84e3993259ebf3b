"""When the live curves are redrawn, and what a redraw reuses: the dashboard's drawing cost, kept to what the eye sees.

A redraw builds the inline SVG of :mod:`notebook_accel.widgets.svg` and sends it to the front end as a widget
value, so each one costs kernel time twice (building, then serialising the message). :class:`LiveCurves` spends
that only where it shows:

- a panel whose series took no value since it was drawn is not rebuilt (its SVG string is reused);
- a redraw whose SVG equals the last one is not sent, and the next one waits twice as long (up to
  ``longest`` seconds): a run logging values that no longer move the curves' pixels costs less and less;
- otherwise redraws come every ``interval`` seconds (2 a second by default: a curve that moves looks live at
  that rate), and never take more than ``share`` of the time (a slow machine draws less often).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from notebook_accel.widgets.series import Series
from notebook_accel.widgets.svg import curves_svg

__all__ = ["LiveCurves"]


class LiveCurves:
    """The live curves' SVG and the schedule of its redraws.

    Args:
        interval: the least number of seconds between two redraws while the curves change.
        share: the largest fraction of time spent redrawing.
        longest: the longest wait between two redraws while new values arrive that change nothing visible.

    Example:
        >>> curves = LiveCurves()
        >>> s = Series(); s.append(0, 1.0)
        >>> curves.draw({"loss": s}, now=0.0), curves.due(0.1), curves.due(0.5)
        (True, False, True)
    """

    def __init__(self, interval: float = 0.5, share: float = 0.05, longest: float = 2.0) -> None:
        self.interval = interval
        self.share = share
        self.longest = longest
        self.svg = ""
        self.redraws = 0  # redraws that changed the picture
        self.unchanged = 0  # redraws that found the same picture (not sent)
        self._wait = interval
        self._next = 0.0
        self._panels: dict[str, tuple[tuple[object, ...], str, float | None]] = {}  # svg.curves_svg's cache

    def due(self, now: float) -> bool:
        """Whether a redraw may happen at ``now``."""
        return now >= self._next

    def draw(self, series: Mapping[str, Series], now: float) -> bool:
        """Rebuild the SVG of ``series`` (reusing unchanged panels); return whether the picture changed."""
        started = time.perf_counter()
        svg = curves_svg(series, self._panels)
        changed = svg != self.svg
        if changed:
            self.svg = svg
            self.redraws += 1
            self._wait = self.interval
        else:
            self.unchanged += 1
            self._wait = min(self._wait * 2, self.longest)
        cost = time.perf_counter() - started
        self._next = now + max(self._wait, cost / self.share)
        return changed

    def reset(self) -> None:
        """Forget the picture (a new run)."""
        self.svg, self._panels, self._wait, self._next = "", {}, self.interval, 0.0


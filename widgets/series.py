"""A metric series kept at a fixed point budget, so drawing a million steps costs what drawing a thousand does.

Points go into buckets of ``width`` consecutive points; each bucket keeps its first and last x and the points
where y was smallest and largest. When there are ``budget`` closed buckets, neighbours are merged in pairs and
the width doubles. Appending is O(1) amortised, memory and :meth:`Series.points` are O(budget), and a single
spike always survives (it is the max of its bucket). Non-finite values (NaN, inf) are counted but not plotted.
:meth:`Series.extend` adds many points with the same result and a Python step per bucket, not per point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["Series"]

# bucket layout: [x_first, x_last, x_at_min, y_min, x_at_max, y_max, count]
_XF, _XL, _XMIN, _YMIN, _XMAX, _YMAX, _N = range(7)


class Series:
    """Streaming min/max downsampling of one metric.

    Args:
        budget: the most buckets kept (each gives at most 2 points to draw); at least 2.

    Example:
        >>> s = Series(budget=100)
        >>> for i in range(10_000):
        ...     s.append(i, 1.0 if i != 5_000 else 9.0)
        >>> xs, ys = s.points()
        >>> len(xs) <= 200, max(ys)
        (True, 9.0)
    """

    __slots__ = ("budget", "width", "count", "last", "_closed", "_open", "_first", "_end")

    def __init__(self, budget: int = 200) -> None:
        if budget < 2:
            raise ValueError(f"Series(budget={budget}) must be at least 2")
        self.budget = budget
        self.width = 1
        self.count = 0
        self.last: tuple[float, float] | None = None
        self._closed: list[list[float]] = []
        self._open: list[float] | None = None
        self._first: tuple[float, float] | None = None  # the first and latest finite points are always drawn
        self._end: tuple[float, float] | None = None

    def append(self, x: float, y: float) -> None:
        """Add the point ``(x, y)``; NaN/inf values are remembered as :attr:`last` but not drawn."""
        self.count += 1
        self.last = (x, y)
        if not math.isfinite(y):
            return
        if self._first is None:
            self._first = (x, y)
        self._end = (x, y)
        b = self._open
        if b is None:
            self._open = [x, x, x, y, x, y, 1]
        else:
            b[_XL] = x
            if y < b[_YMIN]:
                b[_XMIN], b[_YMIN] = x, y
            if y > b[_YMAX]:
                b[_XMAX], b[_YMAX] = x, y
            b[_N] += 1
        ob = self._open
        if ob is not None and ob[_N] >= self.width:
            self._closed.append(ob)
            self._open = None
            if len(self._closed) >= self.budget:
                self._halve()

    def extend(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        """Add the points ``zip(xs, ys)`` (same length), as that many :meth:`append` calls would, with a Python
        step per bucket rather than per point: each bucket's min and max are taken from a slice at once."""
        n = len(ys)
        if n == 0:
            return
        if not math.isfinite(sum(ys)):  # a NaN or inf among them (or a sum past the float range): one by one
            for x, y in zip(xs, ys):
                self.append(x, y)
            return
        self.count += n
        self.last = (xs[-1], ys[-1])
        if self._first is None:
            self._first = (xs[0], ys[0])
        self._end = self.last
        i = 0
        while i < n:
            b = self._open
            j = min(n, i + self.width - (0 if b is None else int(b[_N])))
            part = ys[i:j]
            lo, hi = min(part), max(part)
            at_lo, at_hi = xs[i + part.index(lo)], xs[i + part.index(hi)]  # the first of equal values, as append
            if b is None:
                b = self._open = [xs[i], xs[j - 1], at_lo, lo, at_hi, hi, j - i]
            else:
                b[_XL] = xs[j - 1]
                if lo < b[_YMIN]:
                    b[_XMIN], b[_YMIN] = at_lo, lo
                if hi > b[_YMAX]:
                    b[_XMAX], b[_YMAX] = at_hi, hi
                b[_N] += j - i
            if b[_N] >= self.width:
                self._closed.append(b)
                self._open = None
                if len(self._closed) >= self.budget:
                    self._halve()
            i = j

    def _halve(self) -> None:
        """Merge closed buckets in pairs and double the width."""
        old = self._closed
        merged: list[list[float]] = []
        for i in range(0, len(old) - 1, 2):
            a, b = old[i], old[i + 1]
            lo = a if a[_YMIN] <= b[_YMIN] else b
            hi = a if a[_YMAX] >= b[_YMAX] else b
            merged.append([a[_XF], b[_XL], lo[_XMIN], lo[_YMIN], hi[_XMAX], hi[_YMAX], a[_N] + b[_N]])
        if len(old) % 2:
            merged.append(old[-1])
        self._closed = merged
        self.width *= 2

    def points(self) -> tuple[list[float], list[float]]:
        """The points to draw: the first point, each bucket's min and max in x order, the latest point.

        At most ``2 * (budget + 2)`` points, whatever the number appended.
        """
        xs: list[float] = []
        ys: list[float] = []
        if self._first is None or self._end is None:
            return xs, ys
        buckets = self._closed if self._open is None else [*self._closed, self._open]
        for b in buckets:
            if b[_XMIN] == b[_XMAX]:
                xs.append(b[_XMIN])
                ys.append(b[_YMIN])
            elif b[_XMIN] < b[_XMAX]:
                xs += (b[_XMIN], b[_XMAX])
                ys += (b[_YMIN], b[_YMAX])
            else:
                xs += (b[_XMAX], b[_XMIN])
                ys += (b[_YMAX], b[_YMIN])
        if (xs[0], ys[0]) != self._first:
            xs.insert(0, self._first[0])
            ys.insert(0, self._first[1])
        if (xs[-1], ys[-1]) != self._end:
            xs.append(self._end[0])
            ys.append(self._end[1])
        return xs, ys

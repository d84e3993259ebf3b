"""The one way notebook-accel writes a duration: the dashboard's clock, ETAs, "finished in", the console and a
background run's handle all use :func:`format_duration`, so the same time never reads ``05:35`` in one place and
``335.0s`` in another."""

from __future__ import annotations

__all__ = ["format_duration"]


def format_duration(seconds: float | None) -> str:
    """``4.2s`` under a minute, ``5m 35s`` under an hour, ``1h 02m 03s`` past it; ``?`` when unknown.

    Example:
        >>> [format_duration(s) for s in (4.25, 335, 3723, None)]
        ['4.2s', '5m 35s', '1h 02m 03s', '?']
    """
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{max(seconds, 0.0):.1f}s"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s // 60 % 60:02d}m {s % 60:02d}s"

"""Choosing where a run's events go: the dashboard in a Jupyter kernel with ipywidgets, else the console, or the
user's own sink.

This is the one place that knows both backends: it sits above ``notebook_accel.display`` (the console, the sink
base class) and ``notebook_accel.widgets`` (the dashboard, imported only when chosen: the core package never loads
UI code), so neither has to know the other.
"""

from __future__ import annotations

import sys

from notebook_accel.display.console import ConsoleSink
from notebook_accel.errors import LaunchError, shown
from notebook_accel.events import Sink

__all__ = ["choose_sink", "in_jupyter_kernel"]


def in_jupyter_kernel() -> bool:
    """True when this code runs inside an IPython kernel (a notebook), not a terminal IPython or a script."""
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    shell = get_ipython() if get_ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def _dashboard(show_all_ranks: bool) -> Sink:
    """A live dashboard, imported only now (the core package never loads UI code); raises ImportError."""
    from notebook_accel.widgets.dashboard import Dashboard

    return Dashboard(show_all_ranks=show_all_ranks)


def choose_sink(
    dashboard: object, show_all_ranks: bool, main_rank: int = 0, prefix_template: str | None = None
) -> Sink:
    """Resolve ``notebook_launcher(dashboard=...)``.

    Args:
        dashboard: ``None`` (a dashboard inside a Jupyter kernel when ipywidgets imports, else the console),
            ``False`` (console), ``True`` (dashboard), or any object implementing :class:`Sink`.
        show_all_ranks: show every rank's output, not only the main process's.
        main_rank: the rank whose output is shown unprefixed on the console.
        prefix_template: the console's prefix for other ranks' lines (``None``: ``[rank N] ``).

    Raises:
        LaunchError: ``dashboard`` is of another type, or ``True`` without ipywidgets.
    """
    if dashboard is None and in_jupyter_kernel():
        try:
            return _dashboard(show_all_ranks)
        except ImportError:
            pass  # no ipywidgets: the console works everywhere
    if dashboard is None or dashboard is False:
        return ConsoleSink(show_all_ranks=show_all_ranks, main_rank=main_rank, prefix_template=prefix_template)
    if dashboard is True:
        try:
            return _dashboard(show_all_ranks)
        except ImportError as e:
            raise LaunchError(
                f"dashboard=True but the dashboard cannot be imported ({e}); install ipywidgets "
                "(pip install ipywidgets), or pass dashboard=False for console output"
            ) from e
    if isinstance(dashboard, Sink):
        return dashboard
    raise LaunchError(
        f"dashboard={shown(dashboard)} is not allowed; pass None (automatic), True, False, or an object with "
        "start(info), handle(event) and finish(outcome) methods (a notebook_accel.events.Sink)"
    )

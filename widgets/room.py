"""The room a run's output takes under the cell: the size of its first paint, which the result keeps.

A person reading the cell below loses their place when the output above changes height, so the output is
painted first at the size the run will need, and keeps it to the final result. Two sizes:

- **compact**: one line of a fixed height (:func:`compact_html`: the header with its clock, and what the run is
  doing); a run that ends so leaves a compact result of the same height (:func:`compact_result_html`: the
  headline, the rest folded in a ``<details>`` line). For a short launch (a sub-second one, tutorial 05's).
- **full**: the dashboard's room (the curves' row and the output box reserved before their first values), which
  the final result keeps as its least height (:func:`live_height`).

Which one, the launch cannot know, so the kernel remembers (:class:`RoomMemory`, keyed by the function and its
number of processes) the size each function's last run ended in:

- a function run before paints its first frame at the remembered size at once;
- an unseen one paints nothing (:data:`PENDING`: an empty output, the cell's ``[*]`` says it runs) until the run
  is known to be long (:func:`grows`: its first metric came, or it lasted :data:`GROW_AFTER` seconds; then the
  full room) or it ends (the compact result), so its first paint is its last size;
- a remembered-compact run that turns out long grows once (and is remembered full); a remembered-full one that
  ends fast keeps the full room (its result fills it), and stays remembered full. A run that failed or was
  stopped while compact leaves the memory as it was (it says nothing of how long the function runs).

Pure functions and one small record: :class:`~notebook_accel.widgets.dashboard.Dashboard` decides when to call them.
"""

from __future__ import annotations

import html
from typing import Literal

from notebook_accel.events import RunInfo
from notebook_accel.widgets.run_model import RunState
from notebook_accel.widgets.system_panel import panel_height

__all__ = ["GROW_AFTER", "COMPACT_HEIGHT", "PENDING", "Size", "RoomMemory", "KERNEL_MEMORY", "grows", "compact_html",
           "compact_result_html", "live_height"]

Size = Literal["compact", "full"]

GROW_AFTER = 2.0  # seconds a run without metrics stays one compact line before the dashboard's room is taken
COMPACT_HEIGHT = 46  # px of the compact line: two lines of 20 px and its margins
_LINE = "line-height:20px;height:20px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis"
_GREY = "font-family:sans-serif;font-size:12px;color:#6b7280"
# px of the live view's fixed parts (measured in JupyterLab and Notebook 7 at 1,000 and 1,400 px): the header row,
# each row of the ranks table (its heading too), the two progress rows, the curves' row, the output box and, with
# several ranks, the tabs' bar and frame; the widgets' margins
_HEADER, _RANK_ROW, _BARS = 28, 18, 52
_CURVES, _LOGS, _TABS, _MARGINS = 188, 190, 58, 12
PENDING = '<div class="nacc-pending" style="display:none"></div>'  # an unseen function's output until its size is known


class RoomMemory:
    """The size each function's last run ended in, in this kernel: the first paint of its next launch.

    Example:
        >>> memory = RoomMemory()
        >>> info = RunInfo(2, ("cpu", "cpu"), "gloo", "train", function_key="__main__.train")
        >>> memory.recall(info) is None
        True
        >>> memory.remember(info, "compact", "finished"); memory.recall(info)
        'compact'
    """

    def __init__(self) -> None:
        self._sizes: dict[tuple[str, int], Size] = {}

    @staticmethod
    def _key(info: RunInfo) -> tuple[str, int]:
        """The function (module and qualified name; its plain name when the launcher did not say) and its ranks."""
        return info.function_key or info.function_name, info.num_processes

    def recall(self, info: RunInfo) -> Size | None:
        """The size the last run of ``info``'s function ended in; ``None`` for a function not run before."""
        return self._sizes.get(self._key(info))

    def remember(self, info: RunInfo, size: Size, status: str) -> None:
        """Record that a run of ``info``'s function ended ``size`` with ``status``: a full run always, a compact one
        only when it finished (a failure or a stop while compact says nothing of how long the function runs)."""
        if size == "full" or status == "finished":
            self._sizes[self._key(info)] = size

    def forget(self) -> None:
        """Forget every function (each is then painted as unseen: nothing until its size is known)."""
        self._sizes.clear()


KERNEL_MEMORY = RoomMemory()  # this kernel's: every launch's dashboard is a new object, the memory outlives them


def grows(state: RunState, elapsed: float, grow_after: float = GROW_AFTER) -> bool:
    """Whether the run is known to be long: its first metric came (curves will be drawn), or it lasted
    ``grow_after`` seconds (a run that ends sooner keeps its compact line to the end)."""
    return bool(state.series) or elapsed >= grow_after


def compact_html(header: str, label: str) -> str:
    """The compact line: ``header`` (the live header, its clock included) over one grey line ``label`` (what
    the run is doing), in a box of :data:`COMPACT_HEIGHT` px whatever they say (a long label ends with an
    ellipsis in this line: the grown view, or the result, has it whole)."""
    return (f'<div class="nacc-dashboard nacc-compact" style="height:{COMPACT_HEIGHT}px;box-sizing:border-box;'
            f'padding:3px 2px;line-height:20px"><div class="nacc-header" style="{_LINE}">{header}</div>'
            f'<div style="{_LINE};{_GREY}">{html.escape(label)}</div></div>')


def compact_result_html(headline: str, color: str, error: str, details: str, what: str) -> str:
    """A short run's result in the compact line's room: the ``headline`` in its ``color``, then ``error`` (one
    line, red: a failure is news and may take more room) or the ``details`` (HTML) folded in one ``<details>``
    line titled ``what``."""
    first = f'<div style="{_LINE}"><b style="color:{color}">{html.escape(headline)}</b></div>'
    problem = (f'<div style="color:#b42318;white-space:pre-wrap;line-height:20px">{html.escape(error)}</div>'
               if error else "")
    fold = (f'<details style="line-height:20px"><summary style="{_GREY};cursor:pointer;{_LINE}">'
            f"{html.escape(what)}</summary>{details}</details>")
    return (f'<div class="nacc-compact-result" style="min-height:{COMPACT_HEIGHT}px;box-sizing:border-box;'
            f'padding:3px 2px;font-family:sans-serif;font-size:13px">{first}{problem}{fold}</div>')


def live_height(num_processes: int, tabbed: bool) -> int:
    """The px the grown live view takes with ``num_processes`` ranks (``tabbed``: the output in the "main
    process | all ranks" tabs): the least height of its final result, so that the cell does not shrink.

    Example:
        >>> live_height(2, True) > live_height(1, False)
        True
    """
    ranks = (num_processes + 1) * _RANK_ROW
    return (_HEADER + ranks + _BARS + _CURVES + _LOGS + (_TABS if tabbed else 0) + _MARGINS
            + panel_height(num_processes))

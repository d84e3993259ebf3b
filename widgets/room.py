"""The room a run's output takes under the cell, and when it grows: one compact line first, the dashboard once.

A person reading the cell below loses their place when the output above changes height, so the dashboard's
height changes at most once, and never back:

- the first paint is one compact line of a fixed height (:func:`compact_html`: the header with its clock, and
  what the run is doing), kept while nothing says the run is long; a run that ends in that time (a sub-second
  launch, tutorial 05's) leaves a compact result of the same height (:func:`compact_result_html`: the headline,
  the rest folded in a ``<details>`` line);
- the view grows to the dashboard's room once, when the run is known to be long (:func:`grows`): its first
  metric came (it will draw curves), or it has lasted :data:`GROW_AFTER` seconds. The grown view holds every part
  in its place from then on (the curves' row and the output box reserved before their first values), and the
  final result keeps that height (:func:`live_height`, the room the live view takes: the result's least height).

Pure functions of the run's state: :class:`~notebook_accel.widgets.dashboard.Dashboard` decides when to call them.
"""

from __future__ import annotations

import html

from notebook_accel.widgets.run_model import RunState
from notebook_accel.widgets.system_panel import panel_height

__all__ = ["GROW_AFTER", "COMPACT_HEIGHT", "grows", "compact_html", "compact_result_html", "live_height"]

GROW_AFTER = 2.0  # seconds a run without metrics stays one compact line before the dashboard's room is taken
COMPACT_HEIGHT = 46  # px of the compact line: two lines of 20 px and its margins
_LINE = "line-height:20px;height:20px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis"
_GREY = "font-family:sans-serif;font-size:12px;color:#6b7280"
# px of the live view's fixed parts (measured in JupyterLab and Notebook 7 at 1,000 and 1,400 px): the header row,
# each row of the ranks table (its heading too), the two progress rows, the curves' row, the output box and, with
# several ranks, the tabs' bar and frame; the widgets' margins
_HEADER, _RANK_ROW, _BARS = 28, 18, 52
_CURVES, _LOGS, _TABS, _MARGINS = 188, 190, 58, 12


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

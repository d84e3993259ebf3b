"""The dashboard's system panel: each rank's devices, memory and step-time split, drawn as HTML with inline SVG.

One row per rank: a small cell per figure the rank has (GPU utilisation, GPU memory used/total with the run's
peak, temperature, power where NVML reports them; the worker's process-tree CPU % and resident memory, with
its memory cgroup limit when one applies, and the compiler's processes' memory apart once they ran), each with a
sparkline of the run so far, and a stacked bar of where its steps' time goes (data wait, forward+backward,
communication, optimizer, other) over the run so far (the figure the verdict judges and the final lines repeat: one
step time, never two). Above the rows the machine's free memory, below them the verdict line.

Cost and layout: :func:`panel_html` is a pure function of :class:`~notebook_accel.widgets.system_state.SystemState`
(7 kB and 0.2 ms of kernel CPU for two CPU ranks, 46 kB and 1.6 ms for eight GPU ranks, after an hour of
samples: the sparklines keep a fixed number of points); :class:`SystemPanel` creates its one ``HTML`` widget only when
the first sample or step report arrives (a run without them costs no widget), appends it at the bottom of the
dashboard in the room kept free for it from the first frame (so its arrival moves nothing), and redraws it only
when the state changed. Its lines have fixed heights, so step reports and a verdict arriving later do not make
it grow (the verdict's box is a minimum: a verdict longer than its two lines wraps on rather than ending
mid-phrase); a row wider than the cell scrolls sideways instead of wrapping.
"""

from __future__ import annotations

import html
from typing import Any

from notebook_accel.events import RankSystem
from notebook_accel.monitor.summary import gib
from notebook_accel.monitor.verdict import RankSteps
from notebook_accel.widgets.series import Series
from notebook_accel.widgets.run_model import RunState
from notebook_accel.widgets.system_state import RankFigures, SystemState

__all__ = ["SystemPanel", "panel_html", "panel_height", "sparkline_svg", "step_bar_html", "PARTS"]

# the stacked bar's parts: (RankSteps.split() key, label, colour); short labels, so the legend and a cell's "most"
# fit beside the other figures at a 1,000 px wide notebook (the bar's tooltip and the final lines say them in full)
PARTS = (("data", "data wait", "#f59e0b"), ("compute", "fwd+bwd", "#2563eb"),
         ("comm", "comm", "#db2777"), ("optimizer", "optimizer", "#16a34a"), ("other", "other", "#9ca3af"))
_IN_FULL = {"fwd+bwd": "forward+backward", "comm": "communication"}
_SPARK_W, _SPARK_H = 80, 16
_NOTE = "color:#6b7280"
# fixed heights (px), so the panel's height is known before it is drawn: reserved from the dashboard's first frame
_HEAD_H, _ROW_H, _VERDICT_H, _TOP = 18, 40, 32, 4
_ROW = (f"display:flex;flex-wrap:nowrap;align-items:center;gap:8px;height:{_ROW_H}px;box-sizing:border-box;"
        "overflow-x:auto;border-top:1px solid #eee")
_CELL = "display:inline-flex;flex-direction:column;flex:0 0 auto;white-space:nowrap;font-size:11px;line-height:14px"
_BAR_W = 180
_COMPILER_TITLE = ("resident memory of the compiler processes this rank started (torch.compile's workers, the C++ "
                   "compiler), not in its mem")
_WIDGET_MARGIN = 4  # an ipywidgets HTML widget's margin, above and below together


def panel_height(ranks: int) -> int:
    """The panel's height in px with ``ranks`` rows, its widget's margins included.

    Example:
        >>> panel_height(2)
        138
    """
    return _TOP + _HEAD_H + ranks * _ROW_H + _VERDICT_H + _WIDGET_MARGIN


def sparkline_svg(series: Series | None, percent: bool = False, color: str = "#1d4ed8") -> str:
    """A small ``<svg>`` line of ``series`` (y from 0; a percent figure up to at least 100) with a dot on its
    latest point; an empty frame of the same size before the first point.

    Example:
        >>> s = Series(); s.append(0, 10.0); s.append(1, 20.0)
        >>> "<polyline" in sparkline_svg(s, percent=True)
        True
    """
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_SPARK_W}" height="{_SPARK_H}" '
            f'style="display:block;background:#f9fafb">')
    xs, ys = series.points() if series is not None else ([], [])
    if not xs:
        return head + "</svg>"
    hi = max(max(ys), 100.0 if percent else 0.0) or 1.0
    x0, span = xs[0], (xs[-1] - xs[0]) or 1.0
    pts = " ".join(f"{(x - x0) / span * (_SPARK_W - 4) + 2:.1f},{_SPARK_H - 2 - max(y, 0.0) / hi * (_SPARK_H - 4):.1f}"
                   for x, y in zip(xs, ys))
    cx, _, cy = pts.rpartition(" ")[2].partition(",")
    line = f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.2"/>' if len(xs) > 1 else ""
    return head + line + f'<circle cx="{cx}" cy="{cy}" r="1.8" fill="{color}"/></svg>'


def _cell(label: str, value: str, spark: str, title: str = "") -> str:
    """One figure: its label and value over its sparkline."""
    tip = f' title="{html.escape(title)}"' if title else ""
    return (f'<span style="{_CELL}"{tip}><span><span style="{_NOTE}">{label}</span> {html.escape(value)}</span>'
            f"{spark}</span>")


def _num(n: int | None) -> str:
    """Bytes as GiB with one decimal and no unit (it is said once in the cell), ``"?"`` when unknown."""
    return "?" if n is None else f"{n / 1024**3:.1f}"


def _memory_text(r: RankSystem, peak: int) -> tuple[str, str]:
    """The resident-memory cell's value and tooltip (the cgroup limit when one applies)."""
    value = f"{gib(r.rss_bytes)}, peak {_num(peak)}"
    title = "resident memory of the worker's process tree (DataLoader workers included) and the run's peak"
    if r.memory_limit is not None:
        value += f", limit {_num(r.memory_limit)}"
        title += f"; its memory cgroup holds {gib(r.memory_group_usage)} of a {gib(r.memory_limit)} limit"
    return value, title


def _cells(state: SystemState, figures: RankFigures, final: bool = False) -> list[str]:
    """The rank's figure cells, GPU ones only where they exist (``final``: the run is over, nothing is "yet")."""
    r = figures.last
    if r is None:
        return [f'<span style="{_CELL};{_NOTE}">{"no sample taken" if final else "no sample yet"}</span>']
    spark = figures.sparks.get
    out = []
    if r.gpu_utilization is not None:
        out.append(_cell("GPU", f"{r.gpu_utilization:.0f}%", sparkline_svg(spark("gpu"), percent=True)))
    if r.gpu_memory_used is not None:
        peak = state.peak_gpu_memory(figures.rank)
        out.append(_cell("GPU mem", f"{_num(r.gpu_memory_used)}/{gib(r.gpu_memory_total)}, peak {_num(peak)}",
                         sparkline_svg(spark("gpu_memory"), color="#7c3aed"), "device memory used / total, the run's peak"))
    if r.gpu_temperature is not None:
        out.append(_cell("temp", f"{r.gpu_temperature:.0f}°C", sparkline_svg(spark("temperature"), color="#dc2626")))
    if r.gpu_power_watts is not None:
        out.append(_cell("power", f"{r.gpu_power_watts:.0f} W", sparkline_svg(spark("power"), color="#ea580c")))
    out.append(_cell("CPU", f"{r.cpu_percent:.0f}%", sparkline_svg(spark("cpu"), percent=True, color="#0891b2"),
                     "CPU of the worker's process tree (100% = one core)"))
    value, title = _memory_text(r, state.peak_memory(figures.rank))
    out.append(_cell("mem", value, sparkline_svg(spark("memory"), color="#4d7c0f"), title))
    if "compiler" in figures.sparks:  # the compiler's processes: their memory apart, never in the rank's
        peak = state.peak_compiler_memory(figures.rank)
        out.append(_cell("+ compiler", f"{gib(r.compiler_rss_bytes)}, peak {_num(peak)}",
                         sparkline_svg(spark("compiler"), color="#a16207"), _COMPILER_TITLE))
    return out


def step_bar_html(steps: RankSteps | None, final: bool = False) -> str:
    """Where the steps' time went, as a stacked bar with the mean step time above it (a grey frame of the same
    size before the first report; ``final``: the run is over, and a rank without a report says so). ``steps`` are
    the run's so far, the figure the verdict and the final lines use too.

    Example:
        >>> "data wait 50%" in step_bar_html(RankSteps(10, 1.0, 0.5, 0.4, 0.0, 0.05))
        True
    """
    frame = f"width:{_BAR_W}px;height:10px;display:flex;background:#f3f4f6;border-radius:2px;overflow:hidden"
    box = f"{_CELL};min-width:{_BAR_W}px;gap:2px"  # at least the bar's width; wider text widens it, never overlaps
    if steps is None or not steps.steps:
        note = "steps: none measured" if final else "steps: none measured yet"
        return f'<span style="{box}"><span style="{_NOTE}">{note}</span><span style="{frame}"></span></span>'

    split = steps.split()
    parts, words = [], []
    for key, label, color in PARTS:
        share = max(0.0, min(split[key], 1.0))
        parts.append(f'<span data-part="{key}" style="width:{100 * share:.1f}%;background:{color}"></span>')
        words.append(f"{_IN_FULL.get(label, label)} {share:.0%}")
    title = f"mean of {steps.steps} steps: " + ", ".join(words)
    return (f'<span style="{box}" title="{title}">'
            f'<span><span style="{_NOTE}">step</span> {steps.step_ms:.0f} ms '
            f'<span style="{_NOTE}">· {html.escape(_largest(split))}</span></span>'
            f'<span class="nacc-step-bar" style="{frame}">{"".join(parts)}</span></span>')


def _largest(split: dict[str, float]) -> str:
    """The biggest part in words (``"data wait 46%"``)."""
    key, label, _ = max(PARTS, key=lambda part: split[part[0]])
    return f"{label} {split[key]:.0%}"


def _legend() -> str:
    """The colours of the step bar's parts."""
    return " ".join(f'<span title="{_IN_FULL.get(label, label)}"><span style="color:{color}">&#9632;</span>&nbsp;'
                    f"{label}</span>" for _, label, color in PARTS)


def panel_html(state: SystemState, final: bool = False) -> str:
    """The whole panel: machine line and legend, a row per rank, the verdict line (a note of the same height while
    there is none). Every part has a fixed height: :func:`panel_height` is the height of the whole. ``final``: the
    run has ended (the static result keeps this last frame).

    Example:
        >>> from notebook_accel.events import RankSystem, SystemSample
        >>> s = SystemState(); s.apply(SystemSample(1.0, (RankSystem(0, 97.0, 2**30, 2**30),), 2**33, 2**34))
        >>> "97%" in panel_html(s)
        True
    """
    machine = ""
    if state.host_available is not None and state.host_total is not None:
        machine = f"machine: {gib(state.host_available)} free of {gib(state.host_total)}"
    rows = []
    for rank in sorted(state.ranks):
        figures = state.ranks[rank]
        rows.append(f'<div class="nacc-system-rank" data-rank="{rank}" style="{_ROW}">'
                    f'<b style="flex:0 0 48px">rank {rank}</b>{step_bar_html(state.steps_of(rank), final)}'
                    f'{"".join(_cells(state, figures, final))}</div>')
    found = state.verdict()
    verdict = (f'<b style="color:#b45309">verdict:</b> {html.escape(found)}' if found else
               f'<span style="{_NOTE}">no verdict: nothing clearly {"slowed" if final else "slows"} the run down'
               f'{"" if final else " (yet)"}</span>')
    line = f"height:{_HEAD_H}px;line-height:{_HEAD_H}px;white-space:nowrap;overflow-x:auto;overflow-y:hidden"
    return (f'<div class="nacc-system-panel" style="font-family:sans-serif;font-size:12px;line-height:16px;'
            f'margin-top:{_TOP}px"><div style="display:flex;justify-content:space-between;gap:12px;{line}">'
            f'<span><b>System</b> <span style="{_NOTE}">{machine}</span></span>'
            f'<span style="font-size:11px">{_legend()}</span></div>{"".join(rows)}'
            f'<div class="nacc-verdict" style="min-height:{_VERDICT_H}px">{verdict}</div></div>')


class SystemPanel:
    """Holds the panel's widget. Until the run reports a sample or step times there is none: the dashboard's box
    keeps the panel's height free below its other parts (a bottom padding), so the panel's arrival moves nothing;
    then one ``HTML`` widget of that height is drawn over that room, redrawn when the state changed.

    Example:
        >>> from notebook_accel.events import RunInfo
        >>> from notebook_accel.widgets.run_model import RunState
        >>> import ipywidgets as w
        >>> panel, box = SystemPanel(), w.VBox()
        >>> panel.update(RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train")), box)
        >>> panel.widget is None, box.layout.padding
        (True, '0 0 138px 0')
    """

    def __init__(self) -> None:
        self.widget: Any = None
        self.redraws = 0
        self._seen = -1
        self._reserved = False

    def update(self, run: RunState, box: Any) -> None:
        """Show ``run.system`` in a widget appended to ``box`` (an ipywidgets ``Box``), or keep its room free while
        there is nothing to show."""
        state = run.system
        if state is None:
            if not self._reserved:
                self._reserved = True
                box.layout.padding = f"0 0 {panel_height(len(run.ranks))}px 0"
            return
        if state.version == self._seen:
            return
        self._seen = state.version
        text = panel_html(state)
        room = panel_height(len(state.ranks))
        height = f"{room - _WIDGET_MARGIN}px"
        # drawn over the room kept free (a negative bottom margin as tall as the widget): the box keeps its height
        # in one message, where giving the room back and adding the widget took two (a frame with both showed)
        margin = f"{_WIDGET_MARGIN // 2}px 0 -{room - _WIDGET_MARGIN // 2}px 0"
        self.redraws += 1
        if self.widget is None:
            import ipywidgets as w  # the widgets package's own dependency; imported when a panel is first needed

            self.widget = w.HTML(text, layout=w.Layout(height=height, margin=margin))
            self.widget.add_class("nacc-system")
            if not self._reserved:  # a view made after the first sample: its room and the panel in one message
                self._reserved = True
                box.layout.padding = f"0 0 {room}px 0"
            box.children = (*box.children, self.widget)
            return
        self.widget.value = text
        if self.widget.layout.height != height:  # a rank reported that the first sample did not have
            box.layout.padding = f"0 0 {room}px 0"
            self.widget.layout.height, self.widget.layout.margin = height, margin

"""The static record a finished run leaves in the cell: one output with the curves, the summary and the output.

Widgets need a live kernel (or saved widget state) to render; a saved notebook, an HTML export, GitHub and an
nbval run see only plain outputs. So when the run ends the dashboard *replaces* its live widget view in place
(its display id) with :class:`StaticResult`: one ``text/html`` output (the headline, the error once as one
line, the curves as an inline SVG image, the final metric values, the main process's output in a collapsible
``<details>`` block, in a fixed-width font with error lines red as live, the system panel's last frame with a
line per rank: mean use, peak memory, the step-time
split) with a ``text/plain`` twin for terminals and nbval. The full worker traceback is not
repeated: the exception raised in the cell carries it.
"""

from __future__ import annotations

import base64
import html
from typing import Any

from notebook_accel.durations import format_duration
from notebook_accel.terminal import ansi_to_html
from notebook_accel.widgets.log_style import ERROR_RED, MONOSPACE, line_kinds
from notebook_accel.widgets.room import compact_result_html
from notebook_accel.widgets.run_model import RankState, RunState
from notebook_accel.widgets.system_panel import panel_html

SNAPSHOT_LOG_LINES = 20  # the main process's last output lines in the plain-text summary
_CURVES_ROW = 184  # px of the live curves' row (views.CURVES_HEIGHT): the final values scroll beyond it
SNAPSHOT_HTML_LINES = 1000  # the main process's output lines kept in the collapsible block of the HTML result

__all__ = ["Summary", "StaticResult", "ipython_display", "summary_text", "summary_html", "format_value",
           "format_duration", "node_label"]


def format_value(value: float) -> str:
    """A metric value with 5 significant digits (``nan`` and ``inf`` as written by Python)."""
    return f"{value:.5g}"


def node_label(rank: RankState) -> str:
    """Where a rank runs, for the ranks table of a run that spans machines: its node's address, ``"this machine"``,
    or ``""`` before it started (not known yet)."""
    return rank.node or ("this machine" if rank.pid is not None else "")


def _headline(state: RunState, elapsed: float) -> str:
    """``train: finished in 00:12 (2 processes, gloo, FSDP FULL_SHARD)``, and where the workers ran when not here
    (``..., Ray cluster 10.0.0.1:6379)``: the saved result says it as the live header did)."""
    info = state.info
    noun = "process" if info.num_processes == 1 else "processes"
    engine = f", {state.engine}" if state.engine else ""
    where = f", {info.cluster}" if info.cluster else ""
    return (f"{info.function_name}: {state.shown_status} in {format_duration(elapsed)} ({info.num_processes} {noun}, "
            f"{info.backend}{engine}{where})")


def _last_output(state: RunState, count: int = SNAPSHOT_LOG_LINES) -> list[str]:
    """The main process's last ``count`` output lines."""
    lines = list(state.logs_main)[-count:]
    return [line.text for line in lines]


def _output_html(state: RunState, count: int) -> str:
    """The main process's last ``count`` lines as the live pane drew them: the worker's own colours, and error
    lines (a traceback, an ERROR record: :func:`~.log_style.line_kinds`) red, so a saved notebook and its HTML
    export keep the alarm the live view showed."""
    lines = list(state.logs_main)[-count:]
    out = []
    for line, kind in zip(lines, line_kinds([line.text for line in lines])):
        if line.styled:
            out.append(ansi_to_html(line.styled))
        else:
            text = html.escape(line.text, quote=False)
            out.append(f'<span style="color:{ERROR_RED}">{text}</span>' if kind == "error" else text)
    return "\n".join(out)


def _error(state: RunState) -> str:
    """The outcome's one-line error; none for a stop (the headline's "stopped" says it once, not as an error)."""
    if state.outcome is None or state.shown_status == "stopped":
        return ""
    return state.outcome.error


def _system_lines(state: RunState) -> list[str]:
    """Per rank: mean use, peak memory and the step-time split; then the verdict, if the run had one."""
    system = state.system
    if system is None:
        return []
    lines = [f"system {line}" for line in system.rank_lines()]
    found = system.verdict()
    return lines + [f"verdict: {found}"] if found else lines


def summary_text(state: RunState, elapsed: float) -> str:
    """The plain-text summary (for ``text/plain``, terminals and nbval); each rank's node where the run spans
    machines (``0=finished on 10.0.0.1``)."""
    lines = [_headline(state, elapsed)]
    if state.info.restart:
        lines.append(state.info.restart)
    if _error(state):
        lines.append(f"error: {_error(state)}")
    ranks = sorted(state.ranks.items())
    if state.spans_machines:  # a rank whose node is not known yet (it never started) says nothing of one
        lines.append("ranks: " + ", ".join(f"{r}={s.status}" + (f" on {node_label(s)}" if node_label(s) else "")
                                           for r, s in ranks))
    else:
        lines.append("ranks: " + ", ".join(f"{r}={s.status}" for r, s in ranks))
    lines.extend(_system_lines(state))
    for name, (step, value) in state.latest.items():
        lines.append(f"{name} = {format_value(value)} (step {step})")
    if state.metrics_note():
        lines.append(state.metrics_note())
    output = _last_output(state)
    if output:
        lines.append(f"last output of rank {state.main_rank}:")
        lines.extend(f"  {text}" for text in output)
    if state.info.log_dir:
        lines.append(f"full output of every rank: {state.info.log_dir}/rank<N>.log")
    return "\n".join(lines)


def summary_html(state: RunState, elapsed: float, image: bytes | None = None, where: str = "", *,
                 compact: bool = False, least_height: int = 0) -> str:
    """The HTML result: headline, the error (one line), ``where`` (the ranks' rows and the last position, as the
    live view showed them), the curves (``image``: an SVG document, or PNG bytes, inlined as an ``<img>``) beside
    the final values, output; at least ``least_height`` px (the live view's room: the cell does not shrink).
    ``compact``: a run that ended before its view grew keeps its compact line's room
    (:func:`~notebook_accel.widgets.room.compact_result_html`), everything after the headline folded."""
    esc = html.escape
    color = {"finished": "#1a7f37", "stopped": "#b45309"}.get(state.shown_status, "#b42318")
    parts: list[str] = []
    if state.info.restart:
        parts.append(f'<div style="color:#b54708;margin:2px 0">{esc(state.info.restart)}</div>')
    if where:
        parts.append(f'<div style="margin:2px 0">{where}</div>')
    row = []  # the curves beside the final values, as the live view drew them (one row: the cell keeps its height)
    if image is not None:
        data = base64.b64encode(image).decode("ascii")
        mime = "image/png" if image.startswith(b"\x89PNG") else "image/svg+xml"
        row.append(f'<div style="flex:0 1 auto;min-width:0"><img alt="training curves" style="max-width:100%" '
                   f'src="data:{mime};base64,{data}"/></div>')
    if state.latest:
        rows = "".join(
            f'<tr><td style="overflow-wrap:anywhere">{esc(name)}</td><td>{step}</td><td>{format_value(value)}</td></tr>'
            for name, (step, value) in state.latest.items()
        )
        note = state.metrics_note()
        rows += f'<tr><td colspan="3"><i>{esc(note)}</i></td></tr>' if note else ""
        row.append(f'<div style="flex:0 0 auto;max-width:40%;max-height:{_CURVES_ROW}px;overflow-y:auto"><table><tr>'
                   f"<th>metric</th><th>step</th><th>last value</th></tr>{rows}</table></div>")
    if row:
        parts.append('<div style="display:flex;flex-flow:row nowrap;align-items:flex-start;gap:8px">'
                     f'{"".join(row)}</div>')
    output = _last_output(state, SNAPSHOT_HTML_LINES)
    if not output:  # the live view's one grey line, as a fact
        parts.append(f'<div style="color:#6b7280;font-size:12px;margin:2px 0">rank {state.main_rank} printed '
                     "nothing</div>")
    else:
        # open, at the live pane's height: the cell keeps the size it had while the run was live
        parts.append(f"<details open><summary>output of rank {state.main_rank} ({len(output)} lines)</summary>"
                     f'<pre style="white-space:pre-wrap;max-height:180px;overflow:auto;font-size:12px;{MONOSPACE}">'
                     f"{_output_html(state, SNAPSHOT_HTML_LINES)}</pre></details>")
    if state.system is not None:  # where the live view had the panel: its last frame (the whole run's sparklines,
        # the verdict), then each rank's means and peaks
        lines = state.system.rank_lines()
        parts.append(panel_html(state.system, final=True) + '<div class="nacc-system-summary" style="font-size:12px;'
                     'margin:2px 0">' + "".join(f"<div>system {esc(line)}</div>" for line in lines) + "</div>")
    if state.info.log_dir:
        parts.append(f'<div style="font-size:11px;color:#6b7280">full output of every rank: '
                     f"<code>{esc(state.info.log_dir)}/rank&lt;N&gt;.log</code></div>")
    if compact:  # a short run: its compact line's room, the rest folded
        return compact_result_html(_headline(state, elapsed), color, _error(state), "".join(parts),
                                   "ranks, output and system figures")
    error = (f'<div style="color:#b42318;white-space:pre-wrap;margin:2px 0">{esc(_error(state))}</div>'
             if _error(state) else "")
    return (f'<div style="font-family:sans-serif;font-size:13px;min-height:{least_height}px">'
            f'<b style="color:{color}">{esc(_headline(state, elapsed))}</b>{error}{"".join(parts)}</div>')


class Summary:
    """A displayable summary with both an HTML and a plain-text form."""

    def __init__(self, html_text: str, plain_text: str) -> None:
        self.html = html_text
        self.text = plain_text

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


class StaticResult(Summary):
    """What replaces the live dashboard at the end: one displayable with ``text/html`` and ``text/plain``.

    Example:
        >>> from notebook_accel.events import RunInfo, RunOutcome
        >>> state = RunState(RunInfo(1, ("cpu",), "gloo", "train")); state.finish(RunOutcome("finished", 1.0))
        >>> StaticResult(state, None, 1.0)._repr_mimebundle_()["text/plain"].splitlines()[0]
        'train: finished in 1.0s (1 process, gloo)'
    """

    def __init__(self, state: RunState, image: bytes | None, elapsed: float, where: str = "", *, compact: bool = False,
                 least_height: int = 0) -> None:
        super().__init__(summary_html(state, elapsed, image, where, compact=compact, least_height=least_height),
                         summary_text(state, elapsed))

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        """Both forms in one output (no widget view, so a saved or exported notebook shows it as is)."""
        return {"text/html": self.html, "text/plain": self.text}


def _data(obj: object) -> dict[str, str] | None:
    """The display data of our own static outputs (a frame, the result: two strings); ``None`` for anything else."""
    return {"text/html": obj.html, "text/plain": obj.text} if isinstance(obj, Summary) else None


class _Handle:
    """IPython's display handle, sending our static outputs as their display data: IPython's formatters (a dozen
    lookups per output, about a millisecond of the kernel's CPU each time, three times a warm launch) would make
    the same two strings."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def update(self, obj: object) -> None:
        """Replace the output in place by ``obj``."""
        data = _data(obj)
        if data is None:
            self.handle.update(obj)
        else:
            self.handle.update(data, raw=True)


def ipython_display(obj: object) -> Any:
    """Display ``obj`` in the current cell with a display id; return the handle that can replace it (``None``
    outside IPython). Our static outputs go as their display data, without IPython's formatters."""
    from IPython.display import display  # imported late: only the dashboard needs IPython.display

    data = _data(obj)
    handle = display(obj, display_id=True) if data is None else display(data, raw=True, display_id=True)
    return None if handle is None else _Handle(handle)

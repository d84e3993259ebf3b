"""HTML fragments the dashboard shows, built from a :class:`~notebook_accel.widgets.run_model.RunState`.

Pure functions (no widgets), so they are cheap to test and the dashboard only decides *when* to call them.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping

from notebook_accel.events import epoch_label
from notebook_accel.float8.facts import precision_label
from notebook_accel.terminal import ansi_to_html
from notebook_accel.widgets.log_style import MONOSPACE, line_kinds
from notebook_accel.widgets.snapshot import format_duration, format_value, node_label
from notebook_accel.widgets.log_buffer import LogLine
from notebook_accel.widgets.progress_model import progress_column
from notebook_accel.widgets.run_model import RunState

__all__ = ["header_html", "ranks_html", "progress_text", "position_text", "label_html", "overall_text", "metrics_html", "logs_html",
           "error_html", "bar_row_html", "part_html", "top_html", "body_html", "CURVES_HEIGHT",
           "STATUS_COLORS", "LOG_HEIGHT"]

STATUS_COLORS = {
    "starting": "#6b7280",
    "not started": "#6b7280",
    "running": "#1d4ed8",
    "finished": "#1a7f37",
    "failed": "#b42318",
    "stopped": "#b45309",
    "timeout": "#b42318",
    "interrupted": "#b45309",
    "finishing": "#1a7f37",
}
# the clock keeps its width as its digits change, so nothing after it (or beside the header) moves
_CLOCK = 'style="display:inline-block;min-width:4.2em;font-variant-numeric:tabular-nums"'
_NOTE = "color:#6b7280"
_QUIET = "font-family:sans-serif;font-size:12px;color:#6b7280"  # a one-line note in place of an empty part
_TABLE = 'style="border-collapse:collapse;font-family:sans-serif;font-size:12px"'
_CELL = 'style="padding:1px 10px 1px 0;text-align:left"'
# a node's address or usual host name stays on one line; a longer name (a metric's too) may break anywhere, so it
# wraps in its cell instead of widening the table (a name that may break anywhere is what the table narrows first,
# even when short)
_WRAP_CELL = 'style="padding:1px 10px 1px 0;text-align:left;overflow-wrap:anywhere"'
_SHORT_NODE_CELL = 'style="padding:1px 10px 1px 0;text-align:left;white-space:nowrap"'
_SHORT_NODE = 40  # characters: about 300 px of the ~870 an output has in a 1,000 px notebook
_STDERR = "border-left:2px solid #d1d5db;padding-left:4px"  # stderr that is not an error: a subtle mark only
LOG_HEIGHT = 180  # px of the log pane's scroll box
CURVES_HEIGHT = 184  # px of the row of SVG panels (svg.PANEL_HEIGHT) with its gap: reserved before the first point
_BAR_COLORS = {"": "#2196f3", "success": "#4caf50", "danger": "#f44336", "warning": "#ff9800"}


def _badge(status: str) -> str:
    """A status word in its colour."""
    return f'<b style="color:{STATUS_COLORS.get(status, "#111")}">{html.escape(status)}</b>'


def header_html(state: RunState, elapsed: float, with_phase: bool = True) -> str:
    """``train · running · 12.0s · 2 processes · gloo · FSDP FULL_SHARD``, then (``with_phase``) what the launch is
    doing when nothing else shows it (``starting 2 worker processes``), in grey."""
    info = state.info
    noun = "process" if info.num_processes == 1 else "processes"
    bits = [
        f"<b>{html.escape(info.function_name)}</b>",
        _badge(state.shown_status),
        f"<span {_CLOCK}>{format_duration(elapsed)}</span>",
        f"{info.num_processes} {noun}",
        html.escape(info.backend),
    ]
    if info.cluster:
        bits.append(html.escape(info.cluster))
    if state.engine:
        bits.append(f"<b>{html.escape(state.engine)}</b>")
    if info.mixed_precision not in ("no", ""):
        bits.append(html.escape(precision_label(info.mixed_precision)))
    if with_phase and state.phase and state.outcome is None:
        bits.append(f'<span style="{_NOTE}">{html.escape(state.phase)}</span>')
    restart = f'<div style="color:#b54708">{html.escape(info.restart)}</div>' if info.restart else ""
    return '<div style="font-family:sans-serif;font-size:13px">' + " &middot; ".join(bits) + restart + "</div>"


def ranks_html(state: RunState, with_detail: bool = True) -> str:
    """One row per rank: status, node, device, pid, detail (exit reason or error), and each rank's loop position
    when more than one rank reports one (every rank's prepared DataLoader does; a ``progress()`` loop reports from
    the main process only, and a column empty for every other rank would say nothing). The node column is there
    only when the run spans machines (:attr:`RunState.spans_machines`; a rank on this machine reads "this
    machine"). ``with_detail=False`` leaves the detail out (the static result names the error once, above)."""
    with_progress = sum(1 for s in state.ranks.values() if s.progress) > 1
    heading, counts = progress_column({rank: s.loops for rank, s in state.ranks.items()})
    with_node = state.spans_machines
    names = ("rank", "status", *(("node",) if with_node else ()), "device", "pid",
             *((heading,) if with_progress else ()), *(("",) if with_detail else ()))
    head = "".join(f"<th {_CELL}>{html.escape(h)}</th>" for h in names)
    rows = []
    for rank, s in sorted(state.ranks.items()):
        cells = [f"<td {_CELL}>{c}</td>" for c in (str(rank), _badge(s.status))]
        if with_node:
            label = node_label(s)
            cells.append(f"<td {_SHORT_NODE_CELL if len(label) <= _SHORT_NODE else _WRAP_CELL}>{html.escape(label)}</td>")
        more = [html.escape(s.device), "" if s.pid is None else str(s.pid)]
        if with_progress:
            more.append(html.escape(counts.get(rank, "")))
        if with_detail:
            more.append(html.escape(s.detail[:200]))
        rows.append("<tr>" + "".join(cells) + "".join(f"<td {_CELL}>{c}</td>" for c in more) + "</tr>")
    return f"<table {_TABLE}><tr>{head}</tr>{''.join(rows)}</table>"


def progress_text(state: RunState, now: float = 0.0) -> tuple[float, str]:
    """The current loop's bar: its fraction (0..1; 0 when the total is unknown) and label.

    ``train · epoch index 1 · 9/23 · 4.10 it/s · ETA 3.4s`` (the ETA counts down to ``now``, the dashboard clock).
    """
    p = state.run_progress.current
    if p is None:
        overall = state.run_progress.overall(now)
        if overall is not None:  # no loop reports: the logged steps are the progress
            rate = f" · {overall.rate:.2f} steps/s" if overall.rate is not None else ""
            return 0.0, f"step {overall.done}{rate}"
        if state.worker_phase:  # busy with something slow before any loop (DeepSpeed compiling its op)
            return 0.0, state.worker_phase
        if not state.workers_spoke and state.outcome is None:
            if any(rank.status == "running" for rank in state.ranks.values()):  # as the ranks table says
                return 0.0, "running: no report from the workers yet (imports, rendezvous, engine setup)"
            return 0.0, "waiting for the workers (imports, rendezvous, engine setup)"
        return 0.0, "no progress yet: it shows a prepared DataLoader, progress() or accelerator.log(...)"
    parts = [position_text(state)]
    it_rate = p.rate
    parts.append(f"{it_rate:.2f} it/s" if it_rate is not None else "? it/s")
    if p.total is not None:
        parts.append(f"ETA {format_duration(p.eta_at(now))}")
    fraction = min(p.n / p.total, 1.0) if p.total else 0.0
    return fraction, " · ".join(parts)


def position_text(state: RunState) -> str:
    """Where the last loop stopped, without rate or ETA (for the static result): ``train · epoch index 2 · 16/16``."""
    p = state.run_progress.current
    if p is None:
        return ""
    parts = [p.desc] if p.desc else []
    if p.epoch is not None:
        parts.append(epoch_label(p.epoch))
    parts.append(f"{p.n}/{p.total}" if p.total is not None else f"{p.n}")
    return " · ".join(parts)


def label_html(text: str) -> str:
    """A progress label that wraps instead of being cut off (``""``: an empty line that keeps its height)."""
    return f'<span style="font-family:sans-serif;font-size:12px;line-height:1.4">{html.escape(text)}</span>'


def overall_text(state: RunState, now: float = 0.0) -> tuple[float | None, str]:
    """The whole run's bar: fraction (``None`` when the run's length is unknown) and label.

    ``run · epoch index 1 of 3 · 32/69 batches · ETA 8.0s``; without the epoch count
    ``run · epoch index 1 · 32 batches`` (:func:`~notebook_accel.events.epoch_label`).
    """
    rp = state.run_progress
    o = rp.overall(now)
    if o is None or o.unit != "batches":
        return None, ""
    parts = ["run"]
    if o.epoch is not None:
        parts.append(f"{epoch_label(o.epoch)} of {o.epochs}" if o.epochs is not None else epoch_label(o.epoch))
    parts.append(f"{o.done}/{o.total} batches" if o.total is not None else f"{o.done} batches")
    if o.total is not None:
        parts.append(f"ETA {format_duration(o.eta)}")
    fraction = min(o.done / o.total, 1.0) if o.total else None
    return fraction, " · ".join(parts)


def bar_row_html(fraction: float | None, label: str, style: str = "", css_class: str = "") -> str:
    """A progress row drawn in HTML: a 260 px bar (none when ``fraction`` is ``None``: the length is unknown, the
    label alone) and its label; the row keeps its height when the label is empty. ``style`` is ``""``,
    ``"success"``, ``"danger"`` or ``"warning"``.

    Example:
        >>> 'width:50.0%' in bar_row_html(0.5, "train 5/10")
        True
    """
    bar = ""
    if fraction is not None:
        width = max(0.0, min(fraction, 1.0)) * 100
        bar = ('<div style="flex:0 0 260px;height:12px;margin-right:8px;background:#e5e7eb;border-radius:2px">'
               f'<div style="width:{width:.1f}%;height:100%;background:{_BAR_COLORS.get(style, "#2196f3")};'
               'border-radius:2px"></div></div>')
    cls = f' class="{css_class}"' if css_class else ""
    return (f'<div{cls} style="display:flex;align-items:center;min-height:24px">{bar}'
            f'<div style="flex:1 1 auto">{label_html(label)}</div></div>')


def top_html(parts: Mapping[str, str]) -> str:
    """The top part of the live view from its ``parts``: header, ranks, the run's and the loop's progress rows, the
    error."""
    return part_html(
        f'<div class="nacc-header" style="min-height:24px;display:flex;align-items:center">{parts["header"]}</div>'
        f'<div class="nacc-ranks">{parts["ranks"]}</div>{parts["overall"]}{parts["bar"]}{parts["error"]}')


def body_html(parts: Mapping[str, str], drawn: bool = True) -> str:
    """The curves (one row: more panels shrink together, never wrap to a second row) beside the table of latest
    values (at most 40% of the width, long names wrapping; at most the curves' height, it scrolls down beyond). The row has its height before the first metric
    (``drawn`` false: a grey line in its room), so nothing moves when the curves come
    (:mod:`~notebook_accel.widgets.room`: only a run known to be long shows this view)."""
    inside = parts["curves"] if drawn else (f'<div style="{_QUIET}">curves and values appear here after the first '
                                            "accelerator.log(...)</div>")
    metrics = parts["metrics"] if drawn else ""
    return part_html('<div style="display:flex;flex-flow:row nowrap;align-items:flex-start;gap:8px">'
                     f'<div class="nacc-curves" style="min-height:{CURVES_HEIGHT}px;flex:0 1 auto;min-width:0">'
                     f'{inside}</div><div class="nacc-metrics" style="flex:0 0 auto;max-width:40%;'
                     f'max-height:{CURVES_HEIGHT}px;overflow-y:auto">{metrics}</div></div>')


def part_html(inner: str) -> str:
    """One part of the live view at a plain line height (ipywidgets' HTML widget sets a 28 px one, which would
    make every table row and label taller), wrapping, and as wide as its widget whatever it holds: without the
    inline-size containment the widest thing inside (a row of curves, a long metric name) would widen ipywidgets'
    box past the output's edge (a ~570 px output in JupyterLab with its file browser open) instead of shrinking
    the curves and wrapping the text."""
    return f'<div style="line-height:1.4;white-space:normal;contain:inline-size">{inner}</div>'


def metrics_html(state: RunState) -> str:
    """The latest value of every metric, grouped in first-seen order."""
    if not state.latest:
        return '<span style="color:#6b7280;font-family:sans-serif;font-size:12px">no metrics logged yet</span>'
    head = "".join(f"<th {_CELL}>{h}</th>" for h in ("metric", "step", "value"))
    rows = "".join(
        f"<tr><td {_WRAP_CELL}>{html.escape(name)}</td><td {_CELL}>{'' if step is None else step}</td>"
        f"<td {_CELL}>{format_value(value)}</td></tr>"
        for name, (step, value) in state.latest.items()
    )
    note = state.metrics_note()
    if note:
        rows += f'<tr><td {_CELL} colspan="3"><i>{html.escape(note)}</i></td></tr>'
    return f"<table {_TABLE}><tr>{head}</tr>{rows}</table>"


def logs_html(lines: Iterable[LogLine], with_rank: bool, max_lines: int, height_px: int = LOG_HEIGHT) -> str:
    """A scroll box with the last ``max_lines`` lines, anchored at the bottom (newest visible), in their colours.

    Lines keep the worker's ANSI colours (as HTML); where the worker chose none, only tracebacks, exception lines
    and ERROR/CRITICAL log records are red (:mod:`~notebook_accel.widgets.log_style`), and the rest of stderr
    (tqdm bars, INFO lines, warnings) looks like ordinary output with a thin grey mark at its left. The live
    lines (a tqdm bar being redrawn) come last. When ``lines`` is a :class:`~.log_buffer.LogBuffer`
    whose output is kept in files, a caption says where (the pane keeps only a tail). Without any line the box
    has its full ``height_px`` with one grey line inside, so the first lines move nothing.
    ``flex-direction: column-reverse`` keeps the box scrolled to the end without any script.
    """
    everything = list(lines)
    tail = everything[-max_lines:]
    where = getattr(lines, "where", "")
    caption = ""
    if where:
        shown = f"showing the last {len(tail)} lines &middot; " if len(everything) > len(tail) else ""
        caption = (
            '<div style="font-family:sans-serif;font-size:11px;color:#6b7280;margin:2px 0">'
            f"{shown}every rank&#x27;s full output: <code>{html.escape(where)}/rank&lt;N&gt;.log</code></div>"
        )
    if not tail:  # the box at its height (the grown view holds its room), a grey line inside
        return (f'{caption}<div style="height:{height_px}px;border:1px solid #e5e7eb;padding:4px">'
                f'<div class="nacc-no-output" style="{_QUIET}">no output yet (print() and logging show here)</div></div>')
    out = []
    for line, kind in zip(tail, line_kinds([line.text for line in tail])):
        text = ansi_to_html(line.styled) if line.styled else html.escape(line.text, quote=False)
        prefix = f"[{line.rank}] " if with_rank else ""
        if kind == "error" and not line.styled:
            out.append(f'<span style="color:#b42318">{prefix}{text}</span>')
        elif line.stream == "stderr":
            out.append(f'<span style="{_STDERR}">{prefix}{text}</span>')
        else:
            out.append(prefix + text)
    body = "\n".join(out)
    return (
        f'{caption}<div style="height:{height_px}px;overflow-y:auto;display:flex;flex-direction:column-reverse;'
        'border:1px solid #e5e7eb;padding:4px">'
        f'<pre style="margin:0;font-size:12px;white-space:pre-wrap;{MONOSPACE}">{body}</pre></div>'
    )


def error_html(state: RunState) -> str:
    """The first failure: rank, exception and traceback; else the outcome's error (timeout); else ``""``."""
    f = state.failure
    if f is None:
        if state.outcome is None or not state.outcome.error or state.shown_status == "stopped":
            return ""  # a stop is not an error: the header says "stopped", once
        return (
            '<div style="border-left:4px solid #b42318;padding:4px 8px;background:#fef3f2">'
            f'<b style="color:#b42318;font-family:sans-serif">{html.escape(state.outcome.error)}</b></div>'
        )
    title = html.escape(f"rank {f.rank} failed: " + ": ".join(part for part in (f.exc_type, f.message) if part))
    trace = html.escape(f.traceback[-6000:])
    return (
        '<div style="border-left:4px solid #b42318;padding:4px 8px;background:#fef3f2">'
        f'<b style="color:#b42318;font-family:sans-serif">{title}</b>'
        '<pre style="font-size:11px;white-space:pre-wrap;max-height:260px;overflow:auto;'
        f'{MONOSPACE}">{trace}</pre></div>'
    )

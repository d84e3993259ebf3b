"""The static record a finished run leaves in the cell: a PNG of the curves and a short summary.

Widgets need a live kernel (or saved widget state) to render; a saved notebook, an HTML export and an nbval
run see only plain outputs. So when the run ends the dashboard also displays :func:`snapshot_outputs`:
an ``image/png`` of the curves (when anything was logged) and a summary with ``text/html`` and ``text/plain``
representations (status, elapsed time, per-rank status, final metric values, the error if any, and the main
process's last output lines, so ``accelerator.print`` output survives in a saved notebook too).
"""

from __future__ import annotations

import html

from notebook_accel.widgets.state import RunState

SNAPSHOT_LOG_LINES = 20  # the main process's last output lines kept in the static summary

__all__ = ["Summary", "snapshot_outputs", "summary_text", "summary_html", "format_value", "format_duration"]


def format_value(value: float) -> str:
    """A metric value with 5 significant digits (``nan`` and ``inf`` as written by Python)."""
    return f"{value:.5g}"


def format_duration(seconds: float | None) -> str:
    """``4.2s`` under a minute, else ``mm:ss`` (``h:mm:ss`` past an hour); ``?`` when unknown."""
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{max(seconds, 0.0):.1f}s"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def _headline(state: RunState, elapsed: float) -> str:
    """``train: finished in 00:12 (2 processes, gloo)``."""
    info = state.info
    noun = "process" if info.num_processes == 1 else "processes"
    return f"{info.function_name}: {state.status} in {format_duration(elapsed)} ({info.num_processes} {noun}, {info.backend})"


def _last_output(state: RunState) -> list[str]:
    """The main process's last :data:`SNAPSHOT_LOG_LINES` output lines."""
    lines = list(state.logs_main)[-SNAPSHOT_LOG_LINES:]
    return [line.text for line in lines]


def summary_text(state: RunState, elapsed: float) -> str:
    """The plain-text summary (for ``text/plain``, terminals and nbval)."""
    lines = [_headline(state, elapsed)]
    if state.outcome is not None and state.outcome.error:
        lines.append(f"error: {state.outcome.error}")
    lines.append("ranks: " + ", ".join(f"{r}={s.status}" for r, s in sorted(state.ranks.items())))
    for name, (step, value) in state.latest.items():
        lines.append(f"{name} = {format_value(value)} (step {step})")
    output = _last_output(state)
    if output:
        lines.append(f"last output of rank {state.main_rank}:")
        lines.extend(f"  {text}" for text in output)
    if state.info.log_dir:
        lines.append(f"full output of every rank: {state.info.log_dir}/rank<N>.log")
    return "\n".join(lines)


def summary_html(state: RunState, elapsed: float) -> str:
    """The HTML summary: headline, error, and a table of the final metric values."""
    esc = html.escape
    color = {"finished": "#1a7f37"}.get(state.status, "#b42318")
    parts = [f'<div style="font-family:sans-serif"><b style="color:{color}">{esc(_headline(state, elapsed))}</b>']
    if state.outcome is not None and state.outcome.error:
        parts.append(f'<pre style="color:#b42318;white-space:pre-wrap">{esc(state.outcome.error)}</pre>')
    if state.latest:
        rows = "".join(
            f"<tr><td>{esc(name)}</td><td>{step}</td><td>{format_value(value)}</td></tr>"
            for name, (step, value) in state.latest.items()
        )
        parts.append(f"<table><tr><th>metric</th><th>step</th><th>last value</th></tr>{rows}</table>")
    output = _last_output(state)
    if output:
        parts.append(f"<details><summary>last output of rank {state.main_rank}</summary>"
                     f'<pre style="white-space:pre-wrap">{esc(chr(10).join(output))}</pre></details>')
    if state.info.log_dir:
        parts.append(f'<div style="font-size:11px;color:#6b7280">full output of every rank: '
                     f"<code>{esc(state.info.log_dir)}/rank&lt;N&gt;.log</code></div>")
    parts.append("</div>")
    return "".join(parts)


class Summary:
    """A displayable summary with both an HTML and a plain-text form."""

    def __init__(self, html_text: str, plain_text: str) -> None:
        self.html = html_text
        self.text = plain_text

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def snapshot_outputs(state: RunState, png: bytes | None, elapsed: float) -> list[object]:
    """The objects to display when the run ends: the curves' PNG (if any) and the summary.

    Args:
        state: the finished run.
        png: the final curves (``None`` when nothing was logged).
        elapsed: the run's duration in seconds.

    Returns:
        A list of displayable objects (an ``IPython.display.Image`` and a :class:`Summary`).
    """
    from IPython.display import Image

    out: list[object] = []
    if png is not None:
        out.append(Image(data=png, format="png"))
    out.append(Summary(summary_html(state, elapsed), summary_text(state, elapsed)))
    return out

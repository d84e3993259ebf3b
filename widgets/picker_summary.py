"""The static view of a config picker: what a saved notebook, an HTML export or a terminal shows in its place.

A widget view needs the live kernel (or saved widget state) to render. So a displayed picker writes, under its
form, a second output that is plain ``text/html`` and ``text/plain``: a summary of the configuration the form
describes and the YAML its Save button would write (or the problems that keep it from being valid). It is built
here from plain values (no widgets), so it is cheap to test.

A trusted notebook reopened with a fresh kernel renders the form's output with ipywidgets' renderer, which finds
no model and says so ("Error displaying widget: model not found") above the summary. The summary carries a style
rule (:data:`HIDE_DEAD_FORM`) that hides exactly that: the output right before a picker summary when it is
ipywidgets' renderer with nothing rendered in it (a live form has its widgets inside, so it stays). An untrusted notebook
drops the rule, but it also never uses the widget renderer: it shows the form's short ``text/html`` note.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from notebook_accel.config import Config
from notebook_accel.config.io import config_to_yaml
from notebook_accel.widgets.log_style import MONOSPACE

__all__ = ["describe", "summary_text", "summary_html", "FORM_NOTE", "HIDE_DEAD_FORM"]

FORM_NOTE = "Config picker form (it needs the running kernel; the configuration it describes is shown below)"
# JupyterLab 4 and Notebook 7 put each output in a .jp-OutputArea-child; ipywidgets' renderer marks its own output
# node .jupyter-widgets only when it shows an error (a live form's node holds the widgets' nodes, unmarked)
HIDE_DEAD_FORM = (
    "<style>.jp-OutputArea-child:has(+ .jp-OutputArea-child .nacc-picker-summary)"
    " > .jp-OutputArea-output.jupyter-widgets{display:none}</style>"
)


def describe(config: Config, engine: str = "") -> str:
    """``2 process(es) on GPU (all), FSDP, mixed precision bf16``: the one-line description of ``config``."""
    where = "CPU" if config.use_cpu else f"GPU ({config.gpu_ids or 'all'})"
    engine_part = f", {engine}" if engine else ""
    return f"{config.num_processes} process(es) on {where}{engine_part}, mixed precision {config.mixed_precision}"


def summary_text(config: Config | None, problems: Sequence[str], engine: str = "", path: str = "") -> str:
    """The plain-text summary: the description and the YAML, or the problems."""
    if config is None:
        return "Config picker: not a valid config yet\n" + "\n".join(f"  - {p}" for p in problems)
    where = f" (Save writes {path})" if path else ""
    return f"Config picker: {describe(config, engine)}{where}\n{config_to_yaml(config).rstrip()}"


def summary_html(config: Config | None, problems: Sequence[str], engine: str = "", path: str = "") -> str:
    """The HTML summary: the description, then the YAML in a block (or the problems in red)."""
    esc = html.escape
    head = (f'{HIDE_DEAD_FORM}<div class="nacc-picker-summary" style="font-family:sans-serif;font-size:13px">'
            "<b>Config picker</b>")
    if config is None:
        items = "".join(f"<li>{esc(p)}</li>" for p in problems)
        return (f'{head}<div style="color:#b42318">not a valid config yet:</div>'
                f'<ul style="margin:2px 0">{items}</ul></div>')
    where = f' &middot; Save writes <code>{esc(path)}</code>' if path else ""
    return (f'{head}<div style="color:#1a7f37">&#10003; {esc(describe(config, engine))}{where}</div>'
            '<pre style="font-size:12px;background:#f6f8fa;padding:6px;margin:4px 0;white-space:pre-wrap;'
            f'{MONOSPACE}">'
            f"{esc(config_to_yaml(config))}</pre></div>")

"""How the config picker lays out a labelled control so that every label and value is readable.

An ipywidgets description is cut off with an ellipsis past its ``description_width``, and a control's value is
cut off past the width left to it. So a field's label is split into a short name (the description, which fits
:data:`LABEL_WIDTH`) and its parenthesised explanation (a hint shown beside the control, free to wrap), and every
control gets the same total width :data:`ROW_WIDTH`. The sizes fit a 1,000 px wide notebook.
"""

from __future__ import annotations

import html

import ipywidgets as w

__all__ = ["LABEL_WIDTH", "ROW_WIDTH", "STYLE", "split_label", "labelled", "hint_html"]

LABEL_WIDTH = "230px"  # wide enough for the longest short name ("Min. parameters per wrapped unit")
ROW_WIDTH = "560px"  # the label and the control together: 330 px for values such as "SHARDED_STATE_DICT"
STYLE = {"description_width": LABEL_WIDTH}
_HINT_STYLE = "color:#6b7280;font-size:12px;line-height:1.3;padding:4px 0 0 8px;max-width:360px"


def split_label(label: str) -> tuple[str, str]:
    """``"Port (0 = free)"`` -> ``("Port", "0 = free")``; a label without a trailing parenthesis has no hint.

    Example:
        >>> split_label("CPU offload (parameters and optimizer)")
        ('CPU offload', 'parameters and optimizer')
    """
    name, sep, rest = label.partition(" (")
    if not sep or not rest.endswith(")"):
        return label, ""
    return name, rest[:-1]


def hint_html(hint: str) -> str:
    """The grey explanation shown beside a control (empty for no hint)."""
    return f'<div style="{_HINT_STYLE}">{html.escape(hint)}</div>' if hint else ""


def labelled(control: w.Widget, hint: str) -> w.Widget:
    """``control`` at the row width, with ``hint`` beside it when there is one (the row to put in a form)."""
    control.layout.width = ROW_WIDTH
    control.layout.flex = "0 0 auto"
    if not hint:
        return control
    return w.HBox([control, w.HTML(hint_html(hint))], layout=w.Layout(flex_flow="row wrap", align_items="flex-start"))

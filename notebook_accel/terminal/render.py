"""Styled text (ANSI SGR) as HTML, for the dashboard's log pane."""

from __future__ import annotations

import html
import re

from notebook_accel.terminal.sgr import ANY_ESCAPE, DEFAULT, Style, apply_sgr

__all__ = ["ansi_to_html", "palette"]

_SGR_IN_TEXT = re.compile(r"\x1b\[([0-9;]*)m")

# xterm's 16 basic colours, then the 6x6x6 cube and the grey ramp of the 256-colour palette.
_BASIC = (
    "#000000", "#cd3131", "#0dbc79", "#949800", "#2472c8", "#bc3fbc", "#11a8cd", "#a5a5a5",
    "#666666", "#f14c4c", "#23d18b", "#b5ba00", "#3b8eea", "#d670d6", "#29b8db", "#e5e5e5",
)  # fmt: skip


def palette(index: int) -> str:
    """The ``#rrggbb`` of a 256-colour palette index."""
    if index < 16:
        return _BASIC[index]
    if index < 232:
        index -= 16
        levels = [0 if v == 0 else 55 + 40 * v for v in (index // 36, index // 6 % 6, index % 6)]
        return "#{:02x}{:02x}{:02x}".format(*levels)
    grey = 8 + 10 * (index - 232)
    return f"#{grey:02x}{grey:02x}{grey:02x}"


def _css(style: Style) -> str:
    """The CSS declarations for a style (``""`` for the default)."""
    fg, bg = style.fg, style.bg
    if style.inverse:
        fg, bg = (bg if bg is not None else "#ffffff"), (fg if fg is not None else "#111111")
    if style.bold and isinstance(fg, int) and fg < 8:
        fg += 8  # terminals show bold basic colours bright
    css = []
    if fg is not None:
        css.append(f"color:{fg if isinstance(fg, str) else palette(fg)}")
    if bg is not None:
        css.append(f"background-color:{bg if isinstance(bg, str) else palette(bg)}")
    if style.bold:
        css.append("font-weight:bold")
    if style.dim:
        css.append("opacity:0.7")
    if style.italic:
        css.append("font-style:italic")
    lines = [n for n, on in (("underline", style.underline), ("line-through", style.strike)) if on]
    if lines:
        css.append(f"text-decoration:{' '.join(lines)}")
    return ";".join(css)


def ansi_to_html(text: str) -> str:
    """Styled text (one or more lines) as HTML-escaped text with ``<span style=...>`` for coloured parts.

    Example:
        >>> ansi_to_html("ok \\x1b[31mred\\x1b[0m <b>")
        'ok <span style="color:#cd3131">red</span> &lt;b&gt;'
    """
    if "\x1b" not in text:
        return html.escape(text, quote=False)
    out: list[str] = []
    style = DEFAULT
    pos = 0
    for match in ANY_ESCAPE.finditer(text):
        out.append(_span(text[pos : match.start()], style))
        sgr = _SGR_IN_TEXT.fullmatch(match.group())
        if sgr is not None:
            style = apply_sgr(style, [int(p) if p else 0 for p in sgr.group(1).split(";")] if sgr.group(1) else [])
        pos = match.end()
    out.append(_span(text[pos:], style))
    return "".join(out)


def _span(text: str, style: Style) -> str:
    """Escaped ``text``, wrapped in a span when ``style`` is not the default."""
    if not text:
        return ""
    escaped = html.escape(text, quote=False)
    css = _css(style)
    return f'<span style="{css}">{escaped}</span>' if css else escaped

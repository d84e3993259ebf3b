"""ANSI escape sequences: what they look like, and the text style (SGR) they set.

Shared by the :class:`~notebook_accel.terminal.screen.Screen` (which acts on them) and the renderers (which strip
them or turn them into HTML).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

__all__ = ["Style", "DEFAULT", "RESET", "ESCAPE", "ANY_ESCAPE", "apply_sgr", "strip_ansi"]

# A complete escape sequence (or a lone ESC).
ESCAPE = (
    r"\x1b\[(?P<csi>[0-?]*)[ -/]*(?P<final>[@-~])"  # CSI: parameters, intermediates, final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (window title, hyperlink), ended by BEL or ST
    r"|\x1b[ -/]*[0-~]"  # other escapes (ESC 7, ESC M, character set selection, ...)
    r"|\x1b"  # a lone ESC
)
ANY_ESCAPE = re.compile(ESCAPE)


@dataclass(frozen=True)
class Style:
    """The graphic rendition of a character cell (SGR state).

    ``fg``/``bg`` are ``None`` (the default colour), a palette index 0-255, or ``"#rrggbb"``.
    """

    fg: int | str | None = None
    bg: int | str | None = None
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False
    inverse: bool = False
    strike: bool = False

    def sgr(self) -> str:
        """The SGR sequence that sets exactly this style from a reset state (``""`` for the default style)."""
        codes = [str(c) for c, on in zip((1, 2, 3, 4, 7, 9), self._flags()) if on]
        if self.fg is not None:
            codes.append(_colour_code(self.fg, 30))
        if self.bg is not None:
            codes.append(_colour_code(self.bg, 40))
        return f"\x1b[{';'.join(codes)}m" if codes else ""

    def _flags(self) -> tuple[bool, ...]:
        """Bold, dim, italic, underline, inverse, strike."""
        return (self.bold, self.dim, self.italic, self.underline, self.inverse, self.strike)


DEFAULT = Style()
RESET = "\x1b[0m"


def _colour_code(colour: int | str, base: int) -> str:
    """SGR parameters for a colour: ``31``, ``91``, ``38;5;208`` or ``38;2;r;g;b`` (``base`` 30 or 40)."""
    if isinstance(colour, str):
        r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
        return f"{base + 8};2;{r};{g};{b}"
    if colour < 8:
        return str(base + colour)
    if colour < 16:
        return str(base + 60 + colour - 8)
    return f"{base + 8};5;{colour}"


def _extended_colour(params: list[int], i: int) -> tuple[int | str | None, int]:
    """Read ``5;n`` or ``2;r;g;b`` after a 38/48 at ``params[i]``; returns the colour and the next index."""
    if i + 1 < len(params) and params[i + 1] == 5 and i + 2 < len(params):
        return max(0, min(params[i + 2], 255)), i + 3
    if i + 1 < len(params) and params[i + 1] == 2 and i + 4 < len(params):
        r, g, b = (max(0, min(v, 255)) for v in params[i + 2 : i + 5])
        return f"#{r:02x}{g:02x}{b:02x}", i + 5
    return None, len(params)  # malformed: ignore the rest


def apply_sgr(style: Style, params: list[int]) -> Style:
    """The style after an SGR sequence with ``params`` (an empty list means reset)."""
    if not params:
        return DEFAULT
    i = 0
    while i < len(params):
        p = params[i]
        i += 1
        if p == 0:
            style = DEFAULT
        elif p in _FLAG_ON:
            style = replace(style, **{_FLAG_ON[p]: True})
        elif p in _FLAG_OFF:
            style = replace(style, **dict.fromkeys(_FLAG_OFF[p], False))
        elif 30 <= p <= 37 or 90 <= p <= 97:
            style = replace(style, fg=p - 30 if p < 90 else p - 90 + 8)
        elif 40 <= p <= 47 or 100 <= p <= 107:
            style = replace(style, bg=p - 40 if p < 100 else p - 100 + 8)
        elif p in (38, 48):
            colour, i = _extended_colour(params, i - 1)
            if colour is not None:
                style = replace(style, fg=colour) if p == 38 else replace(style, bg=colour)
        elif p == 39:
            style = replace(style, fg=None)
        elif p == 49:
            style = replace(style, bg=None)
    return style


_FLAG_ON = {1: "bold", 2: "dim", 3: "italic", 4: "underline", 7: "inverse", 9: "strike"}
_FLAG_OFF = {22: ("bold", "dim"), 23: ("italic",), 24: ("underline",), 27: ("inverse",), 29: ("strike",)}


def strip_ansi(text: str) -> str:
    """``text`` without escape sequences (for files, and for sinks that are not terminals)."""
    return ANY_ESCAPE.sub("", text) if "\x1b" in text else text

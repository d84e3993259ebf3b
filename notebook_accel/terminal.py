"""Output as a terminal shows it: carriage returns, cursor movements, erasing and ANSI colours, in pure Python.

Workers write for a terminal: tqdm redraws its bar with ``\\r``, nested bars move the cursor up (``ESC[A``),
libraries colour their text with SGR sequences (``ESC[31m``). A :class:`Screen` replays one output stream the
way a terminal would and hands back the lines that can no longer change (*final* lines) and the few that still
can (the *live* region: the line being written, and the lines a cursor-up has shown to be redrawn in place).

Lines are handed out as *styled text*: plain characters with normalised SGR sequences where the style
changes, and a reset at the end of a styled line. :func:`strip_ansi` turns it into plain text,
:func:`ansi_to_html` into HTML (``<span style="color:...">``) for the dashboard's log pane.

What is understood: ``\\n`` (new line, column 0), ``\\r``, ``\\b``, ``\\t``; CSI ``A``/``B``/``C``/``D`` (cursor
up/down/forward/back), ``E``/``F`` (next/previous line), ``G`` (column), ``K`` (erase in line), ``J`` (erase
below/all), ``m`` (SGR: bold, dim, italic, underline, inverse, strike, 16/256/24-bit colours). Everything else
(other CSI sequences, OSC titles and hyperlinks, other escapes, other control characters) is dropped. A line
above the cursor is final as soon as no cursor-up seen so far could reach it; a line that was redrawn with
``\\r`` (a progress bar) stays live until the line after it ends too, since a nested bar moves back up to it
only after the line feed.

This module imports nothing beyond the standard library: the launcher, the console sink and the dashboard
all use it.

Example:
    >>> s = Screen()
    >>> s.feed("epoch 1\\n10%\\r50%")
    ['epoch 1']
    >>> s.live()
    ['50%']
    >>> s.feed("\\r100%\\ndone\\n")
    ['100%', 'done']
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace

__all__ = ["Screen", "Style", "strip_ansi", "ansi_to_html", "MAX_LINE"]

MAX_LINE = 65536  # a line longer than this without a newline is cut there and handed out (as a terminal wraps)
MAX_REACH = 200  # rows a cursor-up may reach back; more is clamped (a full-screen program is not a log)

# A complete control sequence, or a lone control character. Text between matches is printed as it is.
_ESCAPE = (
    r"\x1b\[(?P<csi>[0-?]*)[ -/]*(?P<final>[@-~])"  # CSI: parameters, intermediates, final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (window title, hyperlink), ended by BEL or ST
    r"|\x1b[ -/]*[0-~]"  # other escapes (ESC 7, ESC M, character set selection, ...)
    r"|\x1b"  # a lone ESC
)
_TOKEN = re.compile(_ESCAPE + r"|[\x00-\x1a\x1c-\x1f\x7f]")  # or a control character (ESC is above)
# An escape that may still be cut short at the end of a chunk: kept until the next chunk completes it.
_INCOMPLETE = re.compile(r"\r\Z|\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[ -/]*)?\Z")
_ONLY_TEXT = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")  # anything but printable text and newlines
_SGR_IN_TEXT = re.compile(r"\x1b\[([0-9;]*)m")
_ANY_ESCAPE = re.compile(_ESCAPE)
_MAX_PENDING = 4096  # an unterminated escape longer than this is dropped


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
_RESET = "\x1b[0m"


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


class _Row:
    """One line of the screen: its characters and, only once a styled character was written, their styles."""

    __slots__ = ("chars", "styles", "redrawn")

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.styles: list[Style] | None = None  # None: every character has the default style
        self.redrawn = False  # the cursor went back over this line's text (a progress bar): it may be redrawn

    def put(self, col: int, text: str, style: Style) -> None:
        """Write ``text`` from column ``col`` on, over what was there (padding with spaces up to ``col``)."""
        chars = self.chars
        if col > len(chars):
            pad = col - len(chars)
            chars.extend(" " * pad)
            if self.styles is not None:
                self.styles.extend([DEFAULT] * pad)
        if self.styles is None and style != DEFAULT:
            self.styles = [DEFAULT] * len(chars)
        chars[col : col + len(text)] = text
        if self.styles is not None:
            self.styles[col : col + len(text)] = [style] * len(text)

    def erase(self, start: int, end: int | None) -> None:
        """Blank columns ``start`` to ``end`` (exclusive; ``None``: to the end of the line)."""
        if end is None or end >= len(self.chars):
            del self.chars[start:]
            if self.styles is not None:
                del self.styles[start:]
            return
        self.chars[start:end] = " " * (end - start)
        if self.styles is not None:
            self.styles[start:end] = [DEFAULT] * (end - start)

    def blank(self) -> bool:
        """Nothing visible on the line (only default-styled spaces)."""
        return not "".join(self.chars).strip() and (self.styles is None or all(s == DEFAULT for s in self.styles))

    def styled(self) -> str:
        """The line as styled text: characters with an SGR sequence where the style changes, reset at the end."""
        if self.styles is None:
            return "".join(self.chars).rstrip(" ")
        end = len(self.chars)
        while end > 0 and self.chars[end - 1] == " " and self.styles[end - 1] == DEFAULT:
            end -= 1  # trailing blanks (a bar's padding) are not part of what the line shows
        out: list[str] = []
        current = DEFAULT
        start = 0
        for i, style in enumerate(self.styles[:end]):
            if style != current:
                out.append("".join(self.chars[start:i]))
                out.append(_RESET + style.sgr() if current != DEFAULT else style.sgr())
                current, start = style, i
        out.append("".join(self.chars[start:end]))
        if current != DEFAULT:
            out.append(_RESET)
        return "".join(out)


class Screen:
    """One output stream replayed as a terminal shows it; hands out final lines and the live region.

    Args:
        max_line: longest line kept without a newline (longer ones are cut and handed out whole).

    Rows above the cursor by more than the farthest cursor-up seen (the *reach*) can no longer change: they
    are handed out by :meth:`feed` as final lines and forgotten. The reach returns to 0 once the cursor has
    moved down past it, so after a nested progress bar ends, printed lines are final at once again.
    """

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._rows: list[_Row] = [_Row()]  # rows not handed out as final yet; the cursor is on one of them
        self._row = 0
        self._col = 0
        self._style = DEFAULT
        self._reach = 0
        self._down_since_up = 0
        self._pending = ""

    def feed(self, text: str) -> list[str]:
        """Write ``text``; return the lines it made final (styled text, without newlines)."""
        text = (self._pending + text).replace("\r\n", "\n")  # CRLF ends a line; it does not redraw it
        self._pending = ""
        cut = _INCOMPLETE.search(text)
        if cut is not None and len(text) - cut.start() <= _MAX_PENDING:
            self._pending = text[cut.start() :]
            text = text[: cut.start()]
        if self._plain_append_ok() and _ONLY_TEXT.search(text) is None:
            return self._append_plain(text)
        pos = 0
        for match in _TOKEN.finditer(text):
            if match.start() > pos:
                self._print(text[pos : match.start()])
            self._control(match)
            pos = match.end()
        if pos < len(text):
            self._print(text[pos:])
        return self._take_final()

    def live(self) -> list[str]:
        """The lines that may still change (styled text), top to bottom; trailing blank lines left out."""
        rows = self._rows
        end = len(rows)
        while end > 0 and rows[end - 1].blank():
            end -= 1
        return [row.styled() for row in rows[:end]]

    def settle(self) -> list[str]:
        """Make final a redrawn line kept live only because a nested bar *might* come back to it.

        Called when the program wrote elsewhere (its other stream) in between: a nested bar moves back up
        at once, so the line is done, and handing it out now keeps the order of the two streams.
        """
        if self._row == 0 or self._reach:
            return []
        for row in self._rows[: self._row]:
            row.redrawn = False
        return self._take_final()

    def close(self) -> list[str]:
        """End of the stream: every remaining line is final (trailing blank lines left out)."""
        self._pending = ""
        lines = self.live()
        self._rows, self._row, self._col, self._reach = [_Row()], 0, 0, 0
        return lines

    # -- writing ------------------------------------------------------------------------------------------
    def _plain_append_ok(self) -> bool:
        """The common case: the cursor at the end of the last row, which has no styles and was not redrawn."""
        row = self._rows[-1]
        return (
            self._reach == 0 and self._row == len(self._rows) - 1 and self._col == len(row.chars)
            and (self._style is DEFAULT or self._style == DEFAULT) and row.styles is None and not row.redrawn
        )

    def _append_plain(self, text: str) -> list[str]:
        """Fast path of :meth:`feed` for uncoloured text and newlines written at the end (most output)."""
        parts = text.split("\n")
        if max(map(len, parts)) + self._col >= self.max_line:
            self._print_lines(parts)
            return self._take_final()
        row = self._rows[-1]
        if len(parts) == 1:
            row.chars.extend(text)
            self._col += len(text)
            return []
        first = "".join(row.chars) + parts[0]
        new = _Row()
        new.chars.extend(parts[-1])
        self._rows[-1] = new
        self._col = len(new.chars)
        self._down_since_up += len(parts) - 1
        return [first.rstrip(" "), *(part.rstrip(" ") for part in parts[1:-1])]

    def _print_lines(self, parts: list[str]) -> None:
        """Print ``parts`` with a newline between each (the slow path, which cuts over-long lines)."""
        for i, part in enumerate(parts):
            if i:
                self._newline()
            self._print(part)

    def _print(self, text: str) -> None:
        """Write printable text at the cursor, cutting over-long lines."""
        while text:
            room = self.max_line - self._col
            if room <= 0:
                self._newline()
                continue
            part, text = text[:room], text[room:]
            self._rows[self._row].put(self._col, part, self._style)
            self._col += len(part)

    def _newline(self) -> None:
        """Line feed: next row (made when at the bottom), column 0."""
        self._row += 1
        self._col = 0
        if self._row == len(self._rows):
            self._rows.append(_Row())
        self._down_since_up += 1
        if self._down_since_up > self._reach:
            self._reach = 0

    def _up(self, n: int) -> None:
        """Cursor up ``n`` rows, not above the first row that is not final yet."""
        n = max(1, n)
        self._reach = min(max(self._reach, n), MAX_REACH)
        self._down_since_up = 0
        self._row = max(0, self._row - n)

    def _control(self, match: re.Match[str]) -> None:
        """Act on one control character or escape sequence."""
        token = match.group()
        if token == "\n":
            self._newline()
        elif token == "\r":  # a carriage return not ending a line: the line is being redrawn
            self._rows[self._row].redrawn = True
            self._col = 0
        elif token == "\b":
            self._col = max(0, self._col - 1)
        elif token == "\t":
            self._col = min((self._col // 8 + 1) * 8, self.max_line)
        elif match.group("final") is not None:
            self._csi(match.group("csi"), match.group("final"))

    def _csi(self, raw: str, final: str) -> None:
        """Act on a CSI sequence (unknown ones, and private-mode ones like ``ESC[?25l``, are ignored)."""
        if raw[:1] in ("?", ">", "<", "="):
            return
        params = [int(p) if p.isdigit() else 0 for p in raw.split(";")] if raw else []
        if final == "m":
            self._style = apply_sgr(self._style, params)
            return
        n = params[0] if params else 0
        row = self._rows[self._row]
        if final == "A":
            self._up(n)
        elif final == "F":
            self._up(n)
            self._col = 0
        elif final in "BE":
            for _ in range(max(1, n)):
                col = self._col
                self._newline()
                self._col = col
            if final == "E":
                self._col = 0
        elif final == "C":
            self._col = min(self._col + max(1, n), self.max_line)
        elif final == "D":
            self._col = max(0, self._col - max(1, n))
        elif final == "G":
            self._col = min(max(1, n) - 1, self.max_line)
        elif final == "K":  # 0: cursor to end, 1: start to cursor, 2: whole line
            row.erase(0 if n in (1, 2) else self._col, self._col + 1 if n == 1 else None)
        elif final == "J":  # 0: cursor to end of screen, 2/3: everything not final yet (1, above: ignored)
            if n in (2, 3):
                self._rows = [_Row() for _ in self._rows]
            elif n == 0:
                row.erase(self._col, None)
                del self._rows[self._row + 1 :]

    def _take_final(self) -> list[str]:
        """Hand out the rows the cursor can no longer reach.

        A redrawn row (a progress bar) right above the cursor stays live: a bar on the next row (tqdm's
        ``position=1``) moves the cursor back up to it only *after* the line feed that left it.
        """
        first_live = max(0, self._row - self._reach)
        if first_live == self._row > 0 and self._rows[first_live - 1].redrawn:
            first_live -= 1
        if first_live == 0:
            return []
        final = self._rows[:first_live]
        del self._rows[:first_live]
        self._row -= first_live
        return [row.styled() for row in final]


def strip_ansi(text: str) -> str:
    """``text`` without escape sequences (for files, and for sinks that are not terminals)."""
    return _ANY_ESCAPE.sub("", text) if "\x1b" in text else text


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
    for match in _ANY_ESCAPE.finditer(text):
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

"""The rows of a :class:`~notebook_accel.terminal.Screen`: one line's characters and styles, and a line longer
than the screen is wide (kept as its head and tail, with what was cut between them counted)."""

from __future__ import annotations

from notebook_accel.terminal.sgr import DEFAULT, RESET, Style

__all__ = ["Row", "LongLine", "CUT_NOTE"]

# Between the head and the tail of a line too long to show: how much of it is not shown, and where it is.
CUT_NOTE = " [... {cut:,} characters not shown here; the log file has the whole line ...] "

class Row:
    """One line of the screen: its characters and, only once a styled character was written, their styles."""

    __slots__ = ("chars", "styles", "redrawn")

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.styles: list[Style] | None = None  # None: every character has the default style
        self.redrawn = False  # a carriage return rewrote it (a progress bar): a nested bar may come back to it

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

    def style(self, col: int) -> Style:
        """The style of the character in column ``col``."""
        return DEFAULT if self.styles is None else self.styles[col]

    def blank(self) -> bool:
        """Nothing visible on the line (only default-styled spaces)."""
        visible = any(not c.isspace() for c in self.chars)  # stops at the first character of most lines
        return not visible and (self.styles is None or all(s == DEFAULT for s in self.styles))

    def styled(self, start: int = 0, end: int | None = None) -> str:
        """Columns ``start`` to ``end`` as styled text: characters with an SGR sequence where the style changes,
        reset at the end. Without ``end`` (to the end of the line) trailing blanks are left out."""
        if end is None:
            end = len(self.chars)
            while end > start and self.chars[end - 1] == " " and self.style(end - 1) == DEFAULT:
                end -= 1  # trailing blanks (a bar's padding) are not part of what the line shows
        if self.styles is None:
            return "".join(self.chars[start:end])
        out: list[str] = []
        current = DEFAULT
        for i in range(start, end):
            style = self.styles[i]
            if style != current:
                out.append(RESET + style.sgr() if current != DEFAULT else style.sgr())
                current = style
            out.append(self.chars[i])
        if current != DEFAULT:
            out.append(RESET)
        return "".join(out)


def _length(row: Row | str) -> int:
    """Columns of a row, or of plain text that filled one."""
    return len(row) if isinstance(row, str) else len(row.chars)


def _columns(row: Row | str, start: int, end: int) -> str:
    """Columns ``start`` to ``end`` of a row (styled) or of plain text."""
    return row[start:end] if isinstance(row, str) else row.styled(start, end)


class LongLine:
    """A line longer than the screen is wide, as the screen keeps it: the styled text of its first ``keep``
    columns, the row it goes on in now, the full row before that one, and how many columns the full rows held.

    Each full row is handed to the transcript (the log file) when the line goes on past it, so memory and time
    stay bounded however long the line gets; what is shown is the head, a note of what was cut, and the last
    ``keep`` columns (:meth:`shown`). A full row may be plain text that never went into a :class:`Row` (the
    screen's fast path for long plain output).

    Args:
        first: the line's first full row.
        row: the row the line goes on in.
        keep: columns shown of the line's head and of its tail.
    """

    __slots__ = ("head", "head_len", "last", "row", "filled", "keep")

    def __init__(self, first: Row | str, row: Row, keep: int) -> None:
        self.keep = keep
        self.head_len = min(keep, _length(first))
        self.head = _columns(first, 0, self.head_len)
        self.last = first
        self.row = row
        self.filled = _length(first)

    def goes_on(self, full: Row | str, row: Row) -> None:
        """The line filled ``full`` (its current row) and goes on in ``row``."""
        self.last, self.row = full, row
        self.filled += _length(full)

    def shown(self) -> str:
        """Head, note, tail: what the line shows (styled text)."""
        row, last, last_len = self.row, self.last, _length(self.last)
        in_row = min(len(row.chars), self.keep)
        in_last = min(last_len, self.keep - in_row, self.filled - self.head_len)  # no column shown twice
        tail = _columns(last, last_len - in_last, last_len) + row.styled(len(row.chars) - in_row)
        cut = self.filled + len(row.chars) - self.head_len - in_row - in_last
        return self.head + (CUT_NOTE.format(cut=cut) if cut > 0 else "") + tail

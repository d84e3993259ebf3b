"""The screen of one output stream: what a terminal shows after the bytes a program wrote (see the package doc)."""

from __future__ import annotations

import re

from notebook_accel.terminal.sgr import DEFAULT, ESCAPE, RESET, Style, apply_sgr

__all__ = ["Screen", "MAX_LINE", "MAX_REACH"]

MAX_LINE = 65536  # a line longer than this without a newline is cut there and handed out (as a terminal wraps)
MAX_REACH = 200  # rows a cursor-up may reach back; more is clamped (a full-screen program is not a log)

# An escape sequence or a lone control character. Text between matches is printed as it is.
_TOKEN = re.compile(ESCAPE + r"|[\x00-\x1a\x1c-\x1f\x7f]")
# An escape that may still be cut short at the end of a chunk: kept until the next chunk completes it.
_INCOMPLETE = re.compile(r"\r\Z|\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[ -/]*)?\Z")
_ONLY_TEXT = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")  # anything but printable text and newlines
_MAX_PENDING = 4096  # an unterminated escape longer than this is dropped


class _Row:
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
                out.append(RESET + style.sgr() if current != DEFAULT else style.sgr())
                current, start = style, i
        out.append("".join(self.chars[start:end]))
        if current != DEFAULT:
            out.append(RESET)
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

"""The screen of one output stream: what a terminal shows after the bytes a program wrote (see the package doc)."""

from __future__ import annotations

import re
from collections.abc import Callable

from notebook_accel.terminal.rows import LongLine, Row
from notebook_accel.terminal.sgr import DEFAULT, ESCAPE, Style, apply_sgr

__all__ = ["Screen", "MAX_LINE", "MAX_REACH"]

MAX_LINE = 16384  # columns of a row: a longer line wraps, and shows only its first and last MAX_LINE // 2
MAX_REACH = 200  # rows a cursor-up may reach back; more is clamped (a full-screen program is not a log)

# An escape sequence or a lone control character. Text between matches is printed as it is.
_TOKEN = re.compile(ESCAPE + r"|[\x00-\x1a\x1c-\x1f\x7f]")
# An escape that may still be cut short at the end of a chunk: kept until the next chunk completes it.
_INCOMPLETE = re.compile(r"\r\Z|\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[ -/]*)?\Z")
_ONLY_TEXT = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")  # anything but printable text and newlines
_MAX_PENDING = 4096  # an unterminated escape longer than this is dropped


class Screen:
    """One output stream replayed as a terminal shows it; hands out final lines and the live region.

    Args:
        max_line: columns of a row. A longer line wraps there (as on a terminal); written at the bottom (most
            output), it is handed out as *one* line: its first and last ``max_line // 2`` characters with a
            note of how many were cut between them (:data:`~notebook_accel.terminal.rows.CUT_NOTE`), so that
            time and memory stay bounded however long it gets. Elsewhere (a row a cursor-up came back to), each
            full row is a line of its own.
        transcript: receives everything that becomes final, in order and whole: each final line with its
            newline, and a long line's full rows (without one) as it goes on past them. A log file written from
            it has every character that was shown, long lines included.

    Rows above the cursor by more than the farthest cursor-up seen (the *reach*) can no longer change: they
    are handed out by :meth:`feed` as final lines and forgotten. The reach returns to 0 once the cursor has
    moved down past it, so after a nested progress bar ends, printed lines are final at once again.
    """

    def __init__(self, max_line: int = MAX_LINE, transcript: Callable[[str], None] | None = None) -> None:
        self.max_line = max_line
        self._transcript = transcript
        self._long: LongLine | None = None  # the bottom row goes on a line that wrapped
        self._ready: list[str] = []  # final lines not handed out yet
        self._rows: list[Row] = [Row()]  # rows not handed out as final yet; the cursor is on one of them
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
        cut = _INCOMPLETE.search(text, max(0, len(text) - _MAX_PENDING))  # only the end can be cut short
        if cut is not None:
            self._pending = text[cut.start() :]
            text = text[: cut.start()]
        if _ONLY_TEXT.search(text) is None:  # text and newlines only: no escape to look for
            if self._plain_append_ok():
                return self._append_plain(text)
            self._print_lines(text.split("\n"))
            self._take_final()
            return self._handed_out()
        pos = 0
        for match in _TOKEN.finditer(text):
            if match.start() > pos:
                self._print(text[pos : match.start()])
            self._control(match)
            pos = match.end()
        if pos < len(text):
            self._print(text[pos:])
        self._take_final()
        return self._handed_out()

    def live(self) -> list[str]:
        """The lines that may still change (styled text), top to bottom; trailing blank lines left out."""
        rows = self._rows
        end = len(rows)
        while end > 0 and rows[end - 1].blank():
            end -= 1
        return [self._shown(row) for row in rows[:end]]

    def settle(self) -> list[str]:
        """Make final a redrawn line kept live only because a nested bar *might* come back to it.

        Called when the program wrote elsewhere (its other stream) in between: a nested bar moves back up
        at once, so the line is done, and handing it out now keeps the order of the two streams.
        """
        if self._row == 0 or self._reach:
            return []
        for row in self._rows[: self._row]:
            row.redrawn = False
        self._take_final()
        return self._handed_out()

    def close(self) -> list[str]:
        """End of the stream: every remaining line is final (trailing blank lines left out)."""
        self._pending = ""
        rows = self._rows
        end = len(rows)
        while end > 0 and rows[end - 1].blank() and (self._long is None or rows[end - 1] is not self._long.row):
            end -= 1  # a long line's last row stays, even blank: its line ends here
        self._ready += self._final(rows[:end])
        self._rows, self._row, self._col, self._reach, self._long = [Row()], 0, 0, 0, None
        return self._handed_out()

    # -- writing ------------------------------------------------------------------------------------------
    def _plain_append_ok(self) -> bool:
        """The common case: the cursor at the end of the last row, which has no styles and was not redrawn."""
        row = self._rows[-1]
        return (
            self._reach == 0 and self._row == len(self._rows) - 1 and self._col == len(row.chars)
            and (self._style is DEFAULT or self._style == DEFAULT) and row.styles is None and not row.redrawn
            and self._long is None
        )

    def _append_plain(self, text: str) -> list[str]:
        """Fast path of :meth:`feed` for uncoloured text and newlines written at the end (most output)."""
        parts = text.split("\n")
        if max(map(len, parts)) + self._col >= self.max_line:
            self._print_lines(parts)
            self._take_final()
            return self._handed_out()
        row = self._rows[-1]
        if len(parts) == 1:
            row.chars.extend(text)
            self._col += len(text)
            return []
        first = "".join(row.chars) + parts[0]
        new = Row()
        new.chars.extend(parts[-1])
        self._rows[-1] = new
        self._col = len(new.chars)
        self._down_since_up += len(parts) - 1
        lines = [first.rstrip(" "), *(part.rstrip(" ") for part in parts[1:-1])]
        if self._transcript is not None:
            self._transcript("\n".join(lines) + "\n")
        return lines

    def _print_lines(self, parts: list[str]) -> None:
        """Print ``parts`` with a newline between each (the slow path, which cuts over-long lines)."""
        for i, part in enumerate(parts):
            if i:
                self._newline()
            self._print(part)

    def _print(self, text: str) -> None:
        """Write printable text at the cursor, wrapping over-long lines (in time linear in ``text``)."""
        pos = 0
        while pos < len(text):
            room = self.max_line - self._col
            if room <= 0:
                self._wrap()
                continue
            if len(text) - pos > self.max_line and self._whole_rows_ok():  # a full row, and the line goes on
                row_text = text[pos : pos + self.max_line]
                self._go_on(row_text, row_text)
                pos += self.max_line
                continue
            part = text[pos : pos + room]
            pos += len(part)
            self._rows[self._row].put(self._col, part, self._style)
            self._col += len(part)

    def _whole_rows_ok(self) -> bool:
        """Plain text may fill whole rows without going into one: at the start of an empty bottom row, no
        cursor-up in reach, no style."""
        row = self._rows[self._row]
        return (self._col == 0 and not row.chars and self._reach == 0 and self._row == len(self._rows) - 1
                and self._style == DEFAULT)

    def _wrap(self) -> None:
        """The cursor is past the last column: the line goes on in the next row.

        At the bottom with no cursor-up in reach (plain output), a full row goes on as a :class:`LongLine`
        (:meth:`_go_on`). Elsewhere, or when the cursor jumped past the end without filling the row, the cursor
        simply moves to the next row.
        """
        full = self._rows[self._row]
        if self._reach or self._row != len(self._rows) - 1 or len(full.chars) < self.max_line:
            self._newline()
            return
        self._go_on(full, full.styled(0, len(full.chars)))

    def _go_on(self, full: Row | str, text: str) -> None:
        """The bottom row is ``full`` (a row, or plain text that never went into one; ``text`` as styled text):
        hand out the rows above it (the transcript keeps the order), write it to the transcript, and go on with
        its line in an empty row."""
        for above in self._rows[: self._row]:
            above.redrawn = False  # nothing comes back up past a wrapped line
        self._take_final()
        if self._transcript is not None:
            self._transcript(text)
        row = Row()
        if self._long is not None and self._long.row is self._rows[self._row]:
            self._long.goes_on(full, row)
        else:
            self._long = LongLine(full, row, self.max_line // 2)
        self._rows[self._row] = row
        self._col = 0

    def _newline(self) -> None:
        """Line feed: next row (made when at the bottom), column 0."""
        self._row += 1
        self._col = 0
        if self._row == len(self._rows):
            self._rows.append(Row())
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
                self._rows = [Row() for _ in self._rows]
            elif n == 0:
                row.erase(self._col, None)
                del self._rows[self._row + 1 :]
            if self._long is not None and all(r is not self._long.row for r in self._rows):
                self._long = None  # erased before it ended: the transcript ends its line
                if self._transcript is not None:
                    self._transcript("\n")

    def _take_final(self) -> None:
        """Hand out the rows the cursor can no longer reach.

        A redrawn row (a progress bar) right above the cursor stays live: a bar on the next row (tqdm's
        ``position=1``) moves the cursor back up to it only *after* the line feed that left it.
        """
        first_live = max(0, self._row - self._reach)
        if first_live == self._row > 0 and self._rows[first_live - 1].redrawn:
            first_live -= 1
        if first_live == 0:
            return
        final = self._rows[:first_live]
        del self._rows[:first_live]
        self._row -= first_live
        self._ready += self._final(final)

    def _final(self, rows: list[Row]) -> list[str]:
        """``rows`` as final lines: written to the transcript, and shown (a long line as head, note, tail)."""
        if not rows:
            return []
        lines = [row.styled() for row in rows]
        if self._transcript is not None:
            self._transcript("\n".join(lines) + "\n")
        long = self._long
        if long is None or all(row is not long.row for row in rows):
            return lines
        self._long = None  # it ended
        return [long.shown() if row is long.row else line for row, line in zip(rows, lines)]

    def _shown(self, row: Row) -> str:
        """What ``row`` shows: the line it goes on when it ends a long line, else its own text."""
        if self._long is not None and self._long.row is row:
            return self._long.shown()
        return row.styled()

    def _handed_out(self) -> list[str]:
        """The final lines gathered since the last call, no longer kept."""
        lines, self._ready = self._ready, []
        return lines

"""Whole lines out of a worker's output bytes, which arrive in arbitrary chunks."""

from __future__ import annotations

__all__ = ["LineSplitter"]

_MAX_PARTIAL = 64 * 1024  # a line this long without a newline is passed on as it is


class LineSplitter:
    """Collects bytes and gives back complete lines, so a print never reaches the cell in fragments.

    A carriage return inside a line (a progress bar redrawing itself) keeps only the text after it.

    Example:
        >>> s = LineSplitter()
        >>> s.feed(b"hel"), s.feed(b"lo\\nwor"), s.finish()
        ([], ['hello'], ['wor'])
    """

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> list[str]:
        """Add ``data``; return the lines it completed (without newlines)."""
        buffered = self._partial + data
        *complete, self._partial = buffered.split(b"\n")
        if len(self._partial) > _MAX_PARTIAL:
            complete.append(self._partial)
            self._partial = b""
        return [_decode(line) for line in complete]

    def finish(self) -> list[str]:
        """The unfinished last line, if any (call at end of file)."""
        rest, self._partial = self._partial, b""
        return [_decode(rest)] if rest else []


def _decode(line: bytes) -> str:
    """Bytes to text, keeping only what a terminal would show after the last carriage return."""
    text = line.decode("utf-8", errors="replace")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    return text

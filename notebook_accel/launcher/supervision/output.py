"""A worker's output as the launcher passes it on: terminal-replayed lines, live partial lines, and a log file.

The supervisor hands each :class:`RankOutput` the bytes it reads from the worker's ordered pipe (stdout and
framed stderr, :mod:`notebook_accel.launcher.child.streams`) and from its fd-2 pipe (C-level stderr). Each stream is
replayed by a :class:`~notebook_accel.terminal.Screen`, so a tqdm bar's ``\\r`` redraws, cursor movements and colours
come out as a terminal shows them, and becomes :class:`~notebook_accel.events.Log` events:

- final lines at once (``Log(rank, stream, "line 1\\nline 2")``), each also appended, without colours, to the
  rank's log file ``rank<N>.log`` in the run's folder, so the whole output stays reachable. A line longer than
  the screen is wide (:data:`~notebook_accel.terminal.MAX_LINE`) is shown as its head and tail with a note of
  what was cut, and goes to the file whole, as it is written: a 100 MB line costs time linear in its length
  and a bounded event, not 100 MB in the kernel's panes;
- the live region (the line being written, or the rows of a nested bar) as ``Log(..., partial=True)`` once it
  has stayed unshown for ``delay`` seconds: a tqdm bar moves a few times a second, and a
  ``print(x, end="", flush=True)`` shows without a newline. The supervisor wakes for :meth:`RankOutput.due`
  at :attr:`RankOutput.next_due` even when no bytes arrive.
"""

from __future__ import annotations

import codecs
import warnings
from pathlib import Path
from collections.abc import Callable
from typing import IO, Literal

from notebook_accel.cell_names import cell_namer
from notebook_accel.events import Log
from notebook_accel.launcher.child.streams import Demux, Segment
from notebook_accel.terminal import Screen, strip_ansi

__all__ = ["RankOutput", "PARTIAL_DELAY"]

PARTIAL_DELAY = 0.2  # seconds an unfinished line waits before it is shown (it often finishes sooner)

Stream = Literal["stdout", "stderr"]


def _decoder() -> codecs.IncrementalDecoder:
    """UTF-8, a character cut between two reads completed by the next; bad bytes replaced."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


class _StreamState:
    """One stream of a rank: its screen, what consumers show of its live region, and since when that is stale."""

    def __init__(self, transcript: Callable[[str], None]) -> None:
        self.screen = Screen(transcript=transcript)
        self.shown = ""  # the live region consumers show now ("" after final lines cleared it)
        self.stale_since: float | None = None  # the live region differs from ``shown`` since then


class RankOutput:
    """The output of one worker: bytes in, :class:`~notebook_accel.events.Log` events out (see the module doc).

    Args:
        rank: the worker's global rank.
        log_path: the file that receives every final line (``None``: no file).
        delay: seconds before a changed live region is sent.

    Example:
        >>> out = RankOutput(0, None)
        >>> out.ordered(b"epoch 1\\n 50%\\r", now=0.0)
        [Log(rank=0, stream='stdout', text='epoch 1', partial=False)]
        >>> out.due(now=0.3)
        [Log(rank=0, stream='stdout', text=' 50%', partial=True)]
    """

    def __init__(self, rank: int, log_path: Path | None, delay: float = PARTIAL_DELAY) -> None:
        self.rank = rank
        self.log_path = log_path
        self.delay = delay
        self._demux = Demux()
        self._streams: dict[Stream, _StreamState] = {name: _StreamState(self._log) for name in ("stdout", "stderr")}
        self._decoders = {"stdout": _decoder(), "stderr": _decoder(), "fd2": _decoder()}
        self._file: IO[str] | None = None
        self._namer = cell_namer()  # a traceback or warning a worker prints names Cell In[6], as IPython does
        if log_path is not None:
            try:
                self._file = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close(); flushed per read
            except OSError as e:
                self._file_failed(e)
        self.closed = False

    # -- input --------------------------------------------------------------------------------------------
    def ordered(self, data: bytes, now: float) -> list[Log]:
        """Bytes from the ordered pipe (stdout, with stderr in frames)."""
        events = self._segments(self._demux.feed(data), now)
        self._flush_file()
        return events

    def stderr(self, data: bytes, now: float) -> list[Log]:
        """Bytes from the fd-2 pipe (C-level stderr)."""
        events = self._write("stderr", self._decoders["fd2"].decode(data), now)
        self._flush_file()
        return events

    def _segments(self, segments: list[Segment], now: float) -> list[Log]:
        """Decode and replay demultiplexed segments in order."""
        events: list[Log] = []
        for stream, data in segments:
            events += self._write(stream, self._decoders[stream].decode(data), now)
        return events

    def _write(self, stream: Stream, text: str, now: float) -> list[Log]:
        """Replay ``text`` on the stream's screen; final lines now, the live region when due.

        A bar line the other stream still holds back (see :meth:`~notebook_accel.terminal.Screen.settle`) is
        handed out first, so the two streams' lines keep the order they were written in.
        """
        if not text:
            return []
        other: Stream = "stderr" if stream == "stdout" else "stdout"
        events = self._after(other, self._streams[other].screen.settle(), now)
        return events + self._after(stream, self._streams[stream].screen.feed(text), now)

    def _after(self, stream: Stream, finals: list[str], now: float) -> list[Log]:
        """The events for lines that became final on ``stream``, and for its live region if it changed."""
        state = self._streams[stream]
        events: list[Log] = []
        was_shown = state.shown
        if finals:
            text = "\n".join(finals)
            events.append(Log(self.rank, stream, text if self._namer is None else self._namer(text)))
            state.shown = ""  # consumers drop the live region on final lines
        live = "\n".join(state.screen.live())
        if live == state.shown:
            state.stale_since = None
        elif finals and was_shown and live:  # a bar that was on screen stays there under the new lines
            events.append(Log(self.rank, stream, live, partial=True))
            state.shown, state.stale_since = live, None
        elif state.stale_since is None:
            state.stale_since = now
        return events

    # -- timing -------------------------------------------------------------------------------------------
    @property
    def next_due(self) -> float | None:
        """When :meth:`due` has something to send (``None``: nothing waits)."""
        times = [s.stale_since + self.delay for s in self._streams.values() if s.stale_since is not None]
        return min(times) if times else None

    def due(self, now: float) -> list[Log]:
        """The live regions that have waited ``delay`` seconds, as partial events."""
        events: list[Log] = []
        for stream, state in self._streams.items():
            if state.stale_since is not None and now >= state.stale_since + self.delay:
                live = "\n".join(state.screen.live())
                state.stale_since = None
                if live != state.shown:
                    state.shown = live
                    events.append(Log(self.rank, stream, live, partial=True))
        return events

    # -- end ----------------------------------------------------------------------------------------------
    def close(self) -> list[Log]:
        """Both pipes are done: flush what is held, hand out every remaining line as final, close the file."""
        if self.closed:
            return []
        self.closed = True
        events = self._segments(self._demux.finish(), 0.0)
        for stream, key in (("stdout", "stdout"), ("stderr", "stderr"), ("stderr", "fd2")):
            events += self._write(stream, self._decoders[key].decode(b"", final=True), 0.0)  # type: ignore[arg-type]
        events = [e for e in events if not e.partial]
        for stream, state in self._streams.items():
            lines = state.screen.close()
            state.stale_since = None
            if lines:
                events.append(Log(self.rank, stream, "\n".join(lines)))
            elif state.shown:
                events.append(Log(self.rank, stream, "", partial=True))  # clear a live region left blank
            state.shown = ""
        if self._file is not None:
            self._file.close()
            self._file = None
        return events

    # -- the log file -------------------------------------------------------------------------------------
    def _log(self, text: str) -> None:
        """Append what the screens made final (their transcript: lines with their newlines, a long line's rows
        as it goes on), without colours, to the rank's file."""
        if self._file is None:
            return
        try:
            self._file.write(strip_ansi(text))
        except (OSError, ValueError) as e:
            self._file_failed(e)

    def _flush_file(self) -> None:
        """Push what this read added to the file (once per read, not per line: a tail -f sees it at once)."""
        if self._file is not None:
            try:
                self._file.flush()
            except (OSError, ValueError) as e:
                self._file_failed(e)

    def _file_failed(self, error: Exception) -> None:
        """Stop writing the file (the run goes on) and say so once."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        self._file = None
        warnings.warn(
            f"notebook-accel: cannot write rank {self.rank}'s output to {self.log_path} ({error}); the run goes on "
            "without its log file (set NOTEBOOK_ACCEL_LOG_DIR to a writable folder, or to 'off')",
            RuntimeWarning,
            stacklevel=2,
        )

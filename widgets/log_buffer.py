"""What a log pane holds: a worker's output as lines, the final ones bounded, the live ones (a tqdm bar) last.

Pure Python, fed by :class:`~notebook_accel.events.Log` events, part of the run model
(:class:`~notebook_accel.widgets.run_model.RunState` keeps one buffer for the main rank and one for all ranks).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from notebook_accel.events import Log
from notebook_accel.terminal import strip_ansi

__all__ = ["LogLine", "LogBuffer"]


@dataclass(frozen=True)
class LogLine:
    """One output line of a worker."""

    rank: int
    stream: Literal["stdout", "stderr"]
    text: str
    styled: str = ""  # the line with its ANSI colours (SGR), when it has any; ``text`` is plain
    live: bool = False  # still being written (a tqdm bar, a line without its newline): shown last, may change


def _lines(event: Log, live: bool) -> list[LogLine]:
    """The event's text as lines."""
    out = []
    for styled in event.text.split("\n"):
        plain = strip_ansi(styled)
        out.append(LogLine(event.rank, event.stream, plain, styled if plain != styled else "", live))
    return out


class LogBuffer:
    """What a log pane shows: the last ``maxlen`` final lines, then the live lines of every rank and stream.

    Output arrives replayed as a terminal shows it (:mod:`notebook_accel.terminal`): final lines, and per rank
    and stream a live region (a tqdm bar being redrawn) that replaces the previous one and is shown last. The
    whole output is kept in the run's log files, in the folder ``where``.

    Iterating gives every line in display order; ``len`` and indexing work on that order too.

    Args:
        maxlen: final lines kept (older ones are dropped; the log files keep them).
        where: where the whole output is kept (a folder), shown by the pane; ``""`` when it is not kept.

    Example:
        >>> b = LogBuffer(100)
        >>> b.add(Log(0, "stdout", "epoch 1")); b.add(Log(0, "stderr", " 40%|####", partial=True))
        >>> [(line.text, line.live) for line in b]
        [('epoch 1', False), (' 40%|####', True)]
    """

    def __init__(self, maxlen: int, where: str = "") -> None:
        self.final: deque[LogLine] = deque(maxlen=maxlen)
        self.live: dict[tuple[int, str], list[LogLine]] = {}
        self.where = where

    def add(self, event: Log) -> None:
        """Apply one event: final lines are appended and end the stream's live region; partial text replaces it."""
        key = (event.rank, event.stream)
        if event.partial:
            if event.text:
                self.live[key] = _lines(event, live=True)
            else:
                self.live.pop(key, None)
            return
        self.live.pop(key, None)
        self.final.extend(_lines(event, live=False))

    def __iter__(self) -> Iterator[LogLine]:
        yield from self.final
        for key in sorted(self.live):
            yield from self.live[key]

    def __len__(self) -> int:
        return len(self.final) + sum(len(lines) for lines in self.live.values())

    def __getitem__(self, index: int) -> LogLine:
        return list(self)[index]

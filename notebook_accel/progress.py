"""``progress(iterable)``: a tqdm-like loop wrapper that reports to the dashboard, main process only.

Where the progress goes, decided once per loop:

- in a worker launched by ``notebook_launcher`` (a channel exists): :class:`~notebook_accel.events.Progress`
  events to the dashboard, posted at most every ``interval`` seconds (plus the first and the last item), so
  the per-item cost is one clock read;
- elsewhere, when stderr is a terminal: one text line on stderr, rewritten in place (``\\r``) at most every
  ``interval`` seconds and ended with a newline;
- otherwise (stderr redirected to a file, a CI log, a process that is not the main one): nothing is shown and
  the items are passed through unchanged.

Prepared DataLoaders already report their epoch progress; use this for other loops (evaluation, data
preparation).
"""

from __future__ import annotations

import sys
import types
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from notebook_accel import channel
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.errors import shown
from notebook_accel.events import Progress

__all__ = ["progress", "format_progress"]

T = TypeVar("T")


def format_progress(n: int, total: int | None, elapsed: float, desc: str = "") -> str:
    """One progress line: ``"desc: 37/100 [00:05<00:08, 7.40 it/s]"`` (no total: no ETA).

    Example:
        >>> format_progress(50, 100, 10.0, "eval")
        'eval: 50/100 [00:10<00:10, 5.00 it/s]'
    """
    rate = n / elapsed if elapsed > 0 else 0.0
    head = f"{desc}: " if desc else ""
    if total is None:
        return f"{head}{n} [{_clock(elapsed)}, {rate:.2f} it/s]"
    eta = (total - n) / rate if rate > 0 else None
    return f"{head}{n}/{total} [{_clock(elapsed)}<{_clock(eta)}, {rate:.2f} it/s]"


def _clock(seconds: float | None) -> str:
    """``mm:ss`` (``h:mm:ss`` past an hour; ``?`` when unknown)."""
    if seconds is None:
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def progress(iterable: Iterable[T], total: int | None = None, desc: str = "", interval: float = 0.1) -> Iterator[T]:
    """Yield the items of ``iterable`` while reporting how far the loop has got.

    Args:
        iterable: the items to loop over.
        total: the number of items (default: ``len(iterable)`` when it has one, else unknown).
        desc: a short label shown before the count ("eval", "epoch 2").
        interval: the least number of seconds between two reports.

    Returns:
        An iterator over the same items.

    Raises:
        ValueError: ``total`` is negative or ``interval`` is not positive.

    Example:
        >>> from notebook_accel import progress
        >>> sum(x for x in progress(range(5), desc="sum"))
        10
    """
    if not isinstance(iterable, Iterable):
        raise TypeError(f"progress(iterable={shown(iterable)}): pass something to loop over (a list, a range, a "
                        "DataLoader)")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 0):
        raise ValueError(f"progress(total={shown(total)}) must be a whole number >= 0, or None (unknown length)")
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
        raise ValueError(f"progress(interval={shown(interval)}) must be a number of seconds > 0")
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    env = LaunchEnvironment.from_environ()
    writer = channel.current()
    if env.rank != 0:
        return iter(iterable)
    if writer is not None:
        return _to_channel(iterable, total, desc, interval, writer, env.rank)
    if sys.stderr is not None and sys.stderr.isatty():
        return _to_terminal(iterable, total, desc, interval)
    return iter(iterable)


def _to_channel(
    items: Iterable[T], total: int | None, desc: str, interval: float, writer: channel.EventWriter, rank: int
) -> Iterator[T]:
    """Post a Progress event at the start, at most every ``interval`` seconds, and at the end."""
    clock = time.monotonic
    writer.post(Progress(rank, 0, total, desc, time.time(), None, "loop"))
    n = 0
    next_at = clock() + interval
    for item in items:
        yield item
        n += 1
        if clock() >= next_at:
            writer.post(Progress(rank, n, total, desc, time.time(), None, "loop"))
            next_at = clock() + interval
    writer.post(Progress(rank, n, total, desc, time.time(), None, "loop"))


def _to_terminal(items: Iterable[T], total: int | None, desc: str, interval: float) -> Iterator[T]:
    """Rewrite one stderr line at most every ``interval`` seconds; end it with a newline."""
    clock = time.monotonic
    start = clock()
    n = 0
    next_at = start + interval
    try:
        for item in items:
            yield item
            n += 1
            now = clock()
            if now >= next_at:
                sys.stderr.write("\r" + format_progress(n, total, now - start, desc))
                sys.stderr.flush()
                next_at = now + interval
    finally:
        sys.stderr.write("\r" + format_progress(n, total, clock() - start, desc) + "\n")
        sys.stderr.flush()


class _CallableModule(types.ModuleType):
    """This module, callable as :func:`progress`.

    ``notebook_accel.progress`` is both this module and the public function: once the module has been
    imported (``from notebook_accel.progress import format_progress``), Python binds the package attribute
    ``progress`` to the module, so ``from notebook_accel import progress`` would give the module instead of
    the function. Making the module callable keeps ``progress(range(10))`` working either way.
    """

    def __call__(
        self, iterable: Iterable[T], total: int | None = None, desc: str = "", interval: float = 0.1
    ) -> Iterator[T]:
        return progress(iterable, total=total, desc=desc, interval=interval)


sys.modules[__name__].__class__ = _CallableModule

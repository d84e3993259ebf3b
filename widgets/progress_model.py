"""Where a run is: the current loop (train or eval loader, a ``progress()`` loop) and the run as a whole.

Fed by :class:`~notebook_accel.events.Progress` events of the main reporting rank (and by metric steps when
no loop reports at all). Pure Python and O(1) per event; :mod:`notebook_accel.widgets.views` turns it into text.

- **Current loop**: the loop that reported last, by its name (``"train"``, ``"eval"``, a ``progress()``
  ``desc``), with its own count, rate and ETA, and the 1-based epoch a prepared loader is in.
- **Overall**: the training loader's batches over all epochs, ``(epoch - 1) * batches + n``. The number of
  epochs is known when the user wraps the epoch loop in ``progress(range(epochs))``: a ``progress()`` loop that
  is still open while a loader reports is taken as the epoch loop, and its ``total`` as the epoch count.
- **No loop at all** (no prepared loader, no ``progress()``): the latest logged step and the step rate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from notebook_accel.events import Progress

__all__ = ["ProgressState", "RunProgress", "Overall", "progress_column"]


@dataclass
class ProgressState:
    """One loop's position, with a rate measured over the recent reports.

    ``arrived`` is the dashboard clock when the last report arrived, so the ETA can count down between reports.
    """

    desc: str = ""
    n: int = 0
    total: int | None = None
    epoch: int | None = None
    arrived: float = 0.0
    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=20))

    @property
    def rate(self) -> float | None:
        """Items per second over the recent reports, ``None`` until two reports are apart in time."""
        if len(self.samples) < 2:
            return None
        (t0, n0), (t1, n1) = self.samples[0], self.samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 and n1 >= n0 else None

    @property
    def eta(self) -> float | None:
        """Seconds left at the current rate as of the last report, ``None`` when total or rate is unknown."""
        rate = self.rate
        if self.total is None or not rate:
            return None
        return max(self.total - self.n, 0) / rate

    def eta_at(self, now: float) -> float | None:
        """The ETA counted down to ``now`` (dashboard clock) since the last report arrived."""
        eta = self.eta
        return None if eta is None else max(eta - max(now - self.arrived, 0.0), 0.0)

    def record(self, n: int, total: int | None, t: float, now: float) -> None:
        """A new position ``n`` of ``total`` at worker time ``t`` (a restart or new total resets the rate)."""
        if n < self.n or total != self.total:
            self.samples.clear()
        self.n, self.total, self.arrived = n, total, now
        self.samples.append((t, n))


@dataclass(frozen=True)
class Overall:
    """The run as a whole: ``done`` of ``total`` units (``None``: unknown), what a unit is, the epoch."""

    done: int
    total: int | None
    unit: str
    epoch: int | None
    epochs: int | None
    rate: float | None
    eta: float | None


class RunProgress:
    """The current loop, the training loop over all epochs, and a fallback on logged steps.

    Example:
        >>> from notebook_accel.events import Progress
        >>> p = RunProgress()
        >>> p.apply(Progress(0, 5, 10, "train", 1.0, 2, "loader"), now=0.0)
        >>> p.current.desc, p.current.epoch, p.overall(0.0).done
        ('train', 2, 15)
    """

    def __init__(self) -> None:
        self.loops: dict[str, ProgressState] = {}
        self.current: ProgressState | None = None
        self.train: str | None = None  # the name of the loader counted as training (the first loader seen)
        self.epoch_loop: ProgressState | None = None  # a progress() loop open around the loaders
        self._open_loop: ProgressState | None = None
        self._overall = ProgressState(desc="overall")
        self.steps = ProgressState(desc="step")  # from metrics, when no loop reports

    def apply(self, event: Progress, now: float) -> None:
        """Record one report of the main reporting rank."""
        loop = self.loops.get(event.desc)
        if loop is None:
            loop = self.loops[event.desc] = ProgressState(desc=event.desc)
        loop.record(event.n, event.total, event.time, now)
        loop.epoch = event.epoch
        if event.source == "loop":
            open_ = event.total is None or event.n < event.total
            self._open_loop = loop if open_ else None
            if loop is not self.epoch_loop:  # the epoch loop shows in the overall bar, not as the current loop
                self.current = loop
            return
        self.current = loop
        if self.train is None and (event.desc == "train" or "train" not in self.loops):
            self.train = event.desc
        if self._open_loop is not None and self._open_loop is not loop:
            self.epoch_loop = self._open_loop
        if event.desc == self.train and loop.total is not None:
            epoch = event.epoch or 1
            self._overall.record((epoch - 1) * loop.total + event.n, self._overall_total(loop), event.time, now)
            self._overall.epoch = epoch

    def on_step(self, step: int, t: float, now: float) -> None:
        """A metric was logged at ``step`` (the fallback progress when no loop reports)."""
        if step >= self.steps.n:
            self.steps.record(step, None, t, now)

    def _overall_total(self, train: ProgressState) -> int | None:
        """All epochs' batches, when the epoch count is known."""
        epochs = self.epochs
        return None if epochs is None or train.total is None else epochs * train.total

    @property
    def epochs(self) -> int | None:
        """The number of epochs, known from a ``progress()`` loop around the loaders."""
        return None if self.epoch_loop is None else self.epoch_loop.total

    def overall(self, now: float) -> Overall | None:
        """The run as a whole, ``None`` before anything (loop or logged step) reported."""
        o = self._overall
        if o.samples:
            return Overall(o.n, o.total, "batches", o.epoch, self.epochs, o.rate, o.eta_at(now))
        if self.current is None and self.steps.samples:
            s = self.steps
            return Overall(s.n, None, "steps", None, None, s.rate, None)
        return None


def progress_column(loops: Mapping[int, Mapping[str, str]]) -> tuple[str, dict[int, str]]:
    """The ranks table's progress column: its heading and each rank's cell, all of the same loop.

    ``loops`` maps each rank to its loops' counts (loop name -> ``"9/23"``, the loop reported last at the end).
    The column shows the loop every reporting rank reports, the one the first of them reported last (rank 0's
    ``tqdm(desc="epochs")`` beside rank 1's training loader would mix two loops in one column); without a loop
    common to all, each cell names its own loop.

    Example:
        >>> progress_column({0: {"train": "32/32", "epochs": "3/3"}, 1: {"train": "32/32"}})
        ('progress (train)', {0: '32/32', 1: '32/32'})
    """
    reporting = {rank: list(counts.items()) for rank, counts in loops.items() if counts}
    if not reporting:
        return "progress", {}
    common = set.intersection(*({name for name, _ in counts} for counts in reporting.values()))
    name = next((n for n, _ in reversed(reporting[min(reporting)]) if n in common), None)
    if name is None:
        return "progress", {rank: " ".join(counts[-1]).strip() for rank, counts in reporting.items()}
    found = {rank: dict(counts)[name] for rank, counts in reporting.items()}
    return (f"progress ({name})" if name else "progress"), found

"""Many ``log`` calls in one event: how a worker's metrics travel to the kernel.

A worker that logs at every step posts one :class:`~notebook_accel.events.Metrics` per ``log`` call. Sent as
they are, the kernel would unpickle one dataclass and one dict per call, and every sink would do its work per
call. Instead the channel's flush (:mod:`notebook_accel.channel`) packs the posted metrics of one rank into a
:class:`MetricsBatch`: a table of names and a few typed arrays (steps, times, values), which unpickles as a
handful of objects however many calls it holds. Every value is kept; nothing is coalesced. Values arrive as
floats (what ``Metrics`` holds; the trackers already turn every logged number into one).

Layout, record by record (one record = one ``log`` call, in logging order): ``steps[i]`` (:data:`NO_STEP` for
``None``), ``times[i]``, and its values, contiguous in ``values``. Consecutive records with the same names in the
same order form a *run* ``(name indices, record count)``; within a run value ``j`` of record ``i`` is at
``offset + i * k + j`` (``k`` names), so one metric's values over a run are one strided slice: a sink can take
them whole (min, max, last) without a Python step per value.

Sinks: every sink takes a batch through ``handle_metrics(batch)``; the dashboard, the console and the background
run's recorder take it whole, and :class:`~notebook_accel.display.base.BaseSink`'s default (also what a user's sink
without that method gets) hands the :class:`~notebook_accel.events.Metrics` events back to ``handle``, one per call,
exactly as they were posted.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from notebook_accel.events import Metrics

__all__ = ["NO_STEP", "MetricsBatch", "Column", "pack"]

NO_STEP = -(1 << 63)  # the step of a ``log`` call without one (the smallest 64-bit integer)
_STEP_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class MetricsBatch:
    """The metrics one rank logged since the channel's last flush (see the module docstring for the layout).

    Attributes:
        rank: the rank that logged them.
        names: every metric name in the batch, each once.
        runs: ``(indices into names, number of records)`` for consecutive records with the same names.
        steps: one step per record (``array("q")``; :data:`NO_STEP` where none was given).
        times: one ``time.time()`` per record (``array("d")``).
        values: every value, record after record (``array("d")``).

    Example:
        >>> from notebook_accel.events import Metrics
        >>> [batch] = pack([Metrics(0, 1, {"loss": 0.5}, 10.0), Metrics(0, 2, {"loss": 0.25}, 11.0)])
        >>> len(batch), batch.record(1)
        (2, Metrics(rank=0, step=2, values={'loss': 0.25}, time=11.0))
    """

    rank: int
    names: tuple[str, ...]
    runs: tuple[tuple[tuple[int, ...], int], ...]
    steps: array[int]
    times: array[float]
    values: array[float]

    def __len__(self) -> int:
        """The number of ``log`` calls (records) in the batch."""
        return len(self.steps)

    def record(self, index: int) -> Metrics:
        """Record ``index`` (negative counts from the end) as the :class:`Metrics` event that was posted."""
        if index < 0:
            index += len(self.steps)
        start = offset = 0
        for keys, count in self.runs:
            if index < start + count:
                at = offset + (index - start) * len(keys)
                values = {self.names[n]: self.values[at + j] for j, n in enumerate(keys)}
                step = self.steps[index]
                return Metrics(self.rank, None if step == NO_STEP else step, values, self.times[index])
            start += count
            offset += count * len(keys)
        raise IndexError(f"record {index} of a batch of {len(self.steps)}")

    def events(self) -> Iterator[Metrics]:
        """Every record as the :class:`Metrics` event that was posted, in logging order."""
        names, steps, times, values = self.names, self.steps, self.times, self.values
        i = offset = 0
        for keys, count in self.runs:
            key_names = [names[n] for n in keys]
            k = len(keys)
            for _ in range(count):
                step = steps[i]
                row = dict(zip(key_names, values[offset:offset + k]))
                yield Metrics(self.rank, None if step == NO_STEP else step, row, times[i])
                i += 1
                offset += k

    def columns(self) -> Iterator[Column]:
        """Each run's metrics, one :class:`Column` per name and run, in logging order of the runs."""
        start = offset = 0
        for keys, count in self.runs:
            k = len(keys)
            steps = self.steps[start:start + count]
            end = offset + count * k
            for j, n in enumerate(keys):
                yield Column(self.names[n], steps, self.values[offset + j:end:k])
            start += count
            offset = end


@dataclass(frozen=True)
class Column:
    """One metric's values over one run of a batch: ``steps[i]`` (:data:`NO_STEP`: none given) and ``values[i]``."""

    name: str
    steps: Sequence[int]
    values: Sequence[float]


class _Packer:
    """Builds one :class:`MetricsBatch` record by record."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.index: dict[str, int] = {}
        self.runs: list[list[Any]] = []  # [keys tuple, count]
        self.steps = array("q")
        self.times = array("d")
        self.values = array("d")
        self._last_names: tuple[str, ...] = ()  # the previous record's names and their indices
        self._last_keys: tuple[int, ...] = ()

    def add(self, event: Metrics) -> bool:
        """Add ``event``; ``False`` (nothing added) when it cannot be packed (a name that is not a string, a value
        that is not a number, a step beyond 64 bits): it then travels as itself."""
        step = NO_STEP if event.step is None else event.step
        if event.step is not None and (type(step) is not int or not NO_STEP < step <= _STEP_MAX):
            return False
        names = event.values
        if type(names) is not dict:
            return False
        same = len(names) == len(self._last_names) and tuple(names) == self._last_names  # the usual case
        if not same and not all(type(name) is str for name in names):
            return False
        size = len(self.values)
        try:
            self.values.extend(names.values())  # numbers only ("d" refuses the rest)
            time = float(event.time)
        except (TypeError, ValueError, OverflowError):
            del self.values[size:]
            return False
        if same:
            keys = self._last_keys
        else:
            index = self.index
            keys = tuple(index.setdefault(name, len(index)) for name in names)
            self._last_names, self._last_keys = tuple(names), keys
        if self.runs and self.runs[-1][0] == keys:
            self.runs[-1][1] += 1
        else:
            self.runs.append([keys, 1])
        self.steps.append(step)
        self.times.append(time)
        return True

    def batch(self) -> MetricsBatch:
        """The batch built so far."""
        runs = tuple((keys, count) for keys, count in self.runs)
        return MetricsBatch(self.rank, tuple(self.index), runs, self.steps, self.times, self.values)


def pack(events: Sequence[Any]) -> list[Any]:
    """The posted ``events`` of one flush, with each rank's :class:`Metrics` packed into one :class:`MetricsBatch`.

    A rank's batch takes the place of its first ``Metrics``; the metrics keep their order among themselves and
    the other events theirs (so within one flush a ``Progress`` posted between two ``log`` calls may arrive
    before the later one). A ``Metrics`` that cannot be packed ends its rank's batch and travels as itself, so
    the metrics' order is kept. A lone ``Metrics`` travels as itself.
    """
    out: list[Any] = []
    open_: dict[int, tuple[_Packer, int]] = {}  # rank -> (its packer, the packer's place in out)
    closed: list[tuple[_Packer, int]] = []
    for event in events:
        if type(event) is not Metrics:
            out.append(event)
            continue
        current = open_.get(event.rank)
        if current is None:
            packer = _Packer(event.rank)
            if packer.add(event):
                open_[event.rank] = (packer, len(out))
            out.append(event)  # replaced by the batch when more join it
        elif not current[0].add(event):
            closed.append(open_.pop(event.rank))
            out.append(event)
    for packer, place in [*closed, *open_.values()]:
        if len(packer.steps) > 1:
            out[place] = packer.batch()
    return out


"""The live tracker: metrics from a launched worker to the dashboard in the kernel.

Each ``log`` call becomes one :class:`~notebook_accel.events.Metrics` event posted to the worker's channel
(:mod:`notebook_accel.channel`). Posting is a deque append; the channel's flusher thread batches the events
and sends them every ``flush_interval`` seconds, so logging at every step costs a few microseconds.
Outside a launched worker there is no channel and ``log`` does nothing.

Non-scalar values (strings, lists, tensors with more than one element) are skipped, with one warning per name.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from notebook_accel import channel
from notebook_accel.events import Metrics
from notebook_accel.tracking.base import GeneralTracker, scalar_values, warn_skipped

__all__ = ["LiveTracker"]


class LiveTracker(GeneralTracker):
    """Streams logged scalars to the live dashboard through the worker's event channel.

    Args:
        rank: the rank written into each event (the main process: 0).

    Example:
        >>> tracker = LiveTracker(rank=0)
        >>> tracker.log({"train/loss": 0.25}, step=10)  # no channel outside a launched worker: nothing sent
        >>> tracker.active
        False
    """

    name: ClassVar[str] = "live"
    requires_logging_directory: ClassVar[bool] = False

    def __init__(self, rank: int = 0) -> None:
        super().__init__()
        self.rank = rank
        self._warned: set[str] = set()

    @property
    def active(self) -> bool:
        """True when this process has a channel to the kernel (it was launched by ``notebook_launcher``)."""
        return channel.current() is not None

    @property
    def tracker(self) -> channel.EventWriter | None:
        """The channel's event writer, or ``None`` outside a launched worker."""
        return channel.current()

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Post the scalar ``values`` at ``step`` to the dashboard; does nothing without a channel."""
        writer = channel.current()
        if writer is None:
            return
        scalars, skipped = scalar_values(values)
        if skipped:
            warn_skipped(self.name, skipped, self._warned)
        if scalars:
            writer.post(Metrics(self.rank, None if step is None else int(step), scalars, time.time()))

    def finish(self) -> None:
        """Send the posted metrics now (the run may be about to end)."""
        writer = channel.current()
        if writer is not None:
            try:
                writer.flush()
            except (OSError, EOFError):
                pass

"""Time FSDP's collectives (parameter all-gather, gradient reduce-scatter) for the step-time breakdown.

``fully_shard`` does not time its communication, but it lets a caller replace the object that issues its
all-gather and reduce-scatter (``set_custom_all_gather`` / ``set_custom_reduce_scatter``).
:func:`time_fsdp_collectives` installs subclasses of torch's default ones that do exactly what the defaults do and
note in a :class:`~notebook_accel.monitor.collectives.CommTimer` when each collective was in flight; on a GPU the
timing events are recorded on the stream FSDP issues it on (its all-gather or reduce-scatter stream, which the
collective's completion is ordered on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from notebook_accel.monitor.collectives import CommTimer, timed_call

if TYPE_CHECKING:
    import torch

__all__ = ["time_fsdp_collectives"]


def _timed_classes() -> tuple[type, type] | None:
    """torch's default FSDP collectives, subclassed to time each call (None when this torch has no such API)."""
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter
    except ImportError:
        return None

    class TimedAllGather(DefaultAllGather):
        """torch's default FSDP all-gather, timed."""

        def __init__(self, timer: CommTimer) -> None:
            super().__init__()
            self.timer = timer

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return timed_call(self.timer, super().__call__, args, kwargs)

    class TimedReduceScatter(DefaultReduceScatter):
        """torch's default FSDP reduce-scatter, timed."""

        def __init__(self, timer: CommTimer) -> None:
            super().__init__()
            self.timer = timer

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return timed_call(self.timer, super().__call__, args, kwargs)

    return TimedAllGather, TimedReduceScatter


def time_fsdp_collectives(modules: list[torch.nn.Module], timer: CommTimer) -> bool:
    """Time the all-gathers and reduce-scatters of every ``fully_shard`` module in ``modules`` into ``timer``.

    Returns False (and changes nothing) when this torch lacks the API, or a module already has a custom
    collective or several parameter groups: its communication then reads 0 rather than being guessed.
    """
    classes = _timed_classes()
    if classes is None:
        return False
    gather_cls, scatter_cls = classes
    groups = []
    for module in modules:
        state = getattr(module, "_get_fsdp_state", None)
        if state is None:
            return False
        for group in state()._fsdp_param_groups:
            if type(group._all_gather_comm).__name__ != "DefaultAllGather" or \
                    type(group._reduce_scatter_comm).__name__ != "DefaultReduceScatter":
                return False
            groups.append(group)
    gather, scatter = gather_cls(timer), scatter_cls(timer)
    for group in groups:
        group._all_gather_comm, group._reduce_scatter_comm = gather, scatter
    return True

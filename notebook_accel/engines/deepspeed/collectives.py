"""Time DeepSpeed's collectives for the step-time breakdown.

DeepSpeed issues its collectives through one backend object (``deepspeed.comm``'s ``cdb``);
:func:`time_deepspeed_collectives` wraps that object's collective methods so each call notes in a
:class:`~notebook_accel.monitor.collectives.CommTimer` when it was in flight. One case is not measured: an
asynchronous collective on a GPU (ZeRO's ``overlap_comm`` reductions), whose end no event on the issuing stream
marks; its time then counts as compute.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from notebook_accel.monitor.collectives import CommTimer

if TYPE_CHECKING:
    import torch

__all__ = ["time_deepspeed_collectives"]

_DEEPSPEED_OPS = ("all_reduce", "all_reduce_coalesced", "inference_all_reduce", "reduce_scatter",
                  "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor", "all_gather_coalesced",
                  "broadcast", "all_to_all_single")


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The first tensor among a collective's arguments (looking into lists), to learn its device."""
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        if isinstance(value, torch.Tensor):
            return value
    return None


def _timed_op(holder: list[CommTimer], op: Any) -> Any:
    """``op`` (a DeepSpeed backend collective) timed into ``holder[0]``."""

    import torch

    def timed(*args: Any, **kwargs: Any) -> Any:
        tensor = _first_tensor(args, kwargs)
        asynchronous = bool(kwargs.get("async_op"))
        if tensor is not None and tensor.device.type == "cuda":
            if asynchronous:  # its end is on the backend's stream: not measured
                return op(*args, **kwargs)
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            work = op(*args, **kwargs)
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            holder[0].add_events(start, end)
            return work
        began = time.perf_counter()
        work = op(*args, **kwargs)
        if asynchronous:
            holder[0].time_work(work, began)
        else:
            holder[0].add(began, time.perf_counter())
        return work

    timed.__wrapped__ = op  # type: ignore[attr-defined]
    return timed


def time_deepspeed_collectives(timer: CommTimer) -> bool:
    """Time the collectives DeepSpeed issues in this process into ``timer`` (after ``deepspeed.initialize``).

    Wraps the backend once per process; a later call only points the wrappers at the new ``timer``. Returns
    False when DeepSpeed's backend is not there (not initialised, or a DeepSpeed without it).
    """
    try:
        from deepspeed.comm import comm as ds_comm
    except ImportError:
        return False
    backend = getattr(ds_comm, "cdb", None)
    if backend is None:
        return False
    holder: list[CommTimer] | None = getattr(backend, "_notebook_accel_timer", None)
    if holder is not None:
        holder[0] = timer
        return True
    holder = [timer]
    for name in _DEEPSPEED_OPS:
        op = getattr(backend, name, None)
        if callable(op):
            setattr(backend, name, _timed_op(holder, op))
    backend._notebook_accel_timer = holder
    return True

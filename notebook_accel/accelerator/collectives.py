"""The Accelerator's collectives that add a rule to :mod:`notebook_accel.ops`: metrics without the padding
``even_batches`` added, and a flag raised on any process seen by all of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from notebook_accel import ops
from notebook_accel.utils.nested import is_tensor_tree, recursively_apply

__all__ = ["any_process_flagged", "gather_for_metrics"]


def gather_for_metrics(input_data: Any, use_gather_object: bool, active_loaders: Sequence[Any],
                       num_processes: int) -> Any:
    """Gather ``input_data`` from every process, then drop the repeats ``even_batches`` padded into the innermost
    active loader's last batch (into each DataLoader worker's last batch, for an iterable dataset read by workers).

    For a loader without automatic batching (``batch_size=None``) each process's data of the last step is kept or
    dropped whole: the first ``remainder`` processes' shares are real.

    Args:
        input_data: (nested) tensors, or any picklable objects.
        use_gather_object: gather as objects even when ``input_data`` is tensors.
        active_loaders: the prepared loaders being iterated, innermost last.
        num_processes: processes in the run.

    Returns:
        The gathered data, without the padded repeats.
    """
    as_objects = use_gather_object or not is_tensor_tree(input_data)
    data = ops.gather_object(input_data) if as_objects else ops.gather(input_data)
    loader = active_loaders[-1] if active_loaders else None
    real = getattr(loader, "padded_real", None)
    if real is None or real <= 0:
        return data

    def kept(rows: int) -> int:
        """Rows of the gathered data that are real: a count of items, or whole processes' shares."""
        if getattr(loader, "batched", True):
            return int(real)
        return rows * int(real) // num_processes

    if as_objects:
        return data[:kept(len(data))] if isinstance(input_data, (list, tuple)) else data
    return recursively_apply(lambda t: t[:kept(t.shape[0])], data)


def any_process_flagged(flag: bool, device: torch.device) -> bool:
    """True on every process when ``flag`` is true on any of them (a collective: call it on every process)."""
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    return bool(ops.reduce(value, "max").item() > 0)

"""accelerate.utils-compatible names: the option classes and the free functions users import from there.

Loaded lazily (PEP 562) so that importing one helper does not import every module, and so that
:mod:`notebook_accel.ops` can use :mod:`notebook_accel.utils.nested` without an import cycle.

Example:
    >>> from notebook_accel.utils import set_seed, DataLoaderConfiguration
"""

from __future__ import annotations

from notebook_accel._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "DataLoaderConfiguration": "notebook_accel.plugins",
    "ProjectConfiguration": "notebook_accel.plugins",
    "GradientAccumulationPlugin": "notebook_accel.plugins",
    "DistributedDataParallelKwargs": "notebook_accel.plugins",
    "GradScalerKwargs": "notebook_accel.plugins",
    "InitProcessGroupKwargs": "notebook_accel.plugins",
    "KwargsHandler": "notebook_accel.plugins",
    "AutocastKwargs": "notebook_accel.plugins",
    "ProfileKwargs": "notebook_accel.plugins",
    "DistributedType": "notebook_accel.state",
    "set_seed": "notebook_accel.utils.random",
    "synchronize_rng_states": "notebook_accel.utils.random",
    "send_to_device": "notebook_accel.utils.nested",
    "recursively_apply": "notebook_accel.utils.nested",
    "gather": "notebook_accel.ops",
    "gather_object": "notebook_accel.ops",
    "broadcast": "notebook_accel.ops",
    "broadcast_object_list": "notebook_accel.ops",
    "reduce": "notebook_accel.ops",
    "pad_across_processes": "notebook_accel.ops",
    "skip_first_batches": "notebook_accel.data",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

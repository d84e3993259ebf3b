"""Type checks of ``Accelerator(...)``'s plain arguments, all made before anything is set up.

The option objects (mixed precision, accumulation, kwargs handlers, trackers) have their own resolvers that
say what is wrong with a value; the arguments here are flags, folders and lists, where Python would accept
almost anything and fail later far from the cause (``cpu="no"`` is true; ``rng_types="torch"`` is five
letters). Every problem is reported at once, with the allowed values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from notebook_accel.errors import shown
from notebook_accel.kwargs_handlers import KwargsHandler
from notebook_accel.plugins import ConfigurationError, DataLoaderConfiguration, ProjectConfiguration

__all__ = ["check_accelerator_arguments", "RNG_TYPES"]

# accelerate's RNGType values: which generators save_state/load_state and synchronisation may name
RNG_TYPES = ("torch", "cuda", "mlu", "musa", "npu", "xla", "xpu", "hpu", "generator")


def _flag(name: str, value: Any, optional: bool = False) -> str | None:
    """A problem with a boolean argument, or ``None``."""
    if isinstance(value, bool) or (optional and value is None):
        return None
    return f"{name}={shown(value)}: pass True or False{' (or None)' if optional else ''}"


def _instance(name: str, value: Any, cls: type) -> str | None:
    """A problem with an argument that must be ``None`` or an instance of ``cls``, or ``None``."""
    if value is None or isinstance(value, cls):
        return None
    return f"{name}={shown(value, 80)}: pass a {cls.__name__}(...) or None"


def _rng_types(value: Any) -> str | None:
    """A problem with ``rng_types``, or ``None``."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        return f"rng_types={shown(value, 80)}: pass a list of names from {list(RNG_TYPES)}, e.g. ['torch'], or None"
    unknown = [v for v in value if getattr(v, "value", v) not in RNG_TYPES]
    if unknown:
        return f"rng_types has unknown entries {shown(unknown, 80)}; allowed names are {list(RNG_TYPES)}"
    return None


def _folder(name: str, value: Any) -> str | None:
    """A problem with a folder argument, or ``None``."""
    if value is None or isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes):
        return None
    return f"{name}={shown(value, 80)}: pass a folder path (str or pathlib.Path) or None"


def _handlers(value: Any) -> str | None:
    """A problem with ``kwargs_handlers``, or ``None``."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        return f"kwargs_handlers={shown(value, 80)}: pass a list of handlers, e.g. [DistributedDataParallelKwargs(...)]"
    wrong = [v for v in value if not isinstance(v, KwargsHandler)]
    if wrong:
        return (
            f"kwargs_handlers has entries that are not handlers: {shown(wrong, 80)}; pass instances such as "
            "DistributedDataParallelKwargs(...), GradScalerKwargs(...), InitProcessGroupKwargs(...)"
        )
    return None


def check_accelerator_arguments(
    *, device_placement: Any, split_batches: Any, cpu: Any, dataloader_config: Any, rng_types: Any,
    project_dir: Any, project_config: Any, step_scheduler_with_optimizer: Any, kwargs_handlers: Any,
    log_system_metrics: Any = False,
) -> None:
    """Raise :class:`~notebook_accel.plugins.ConfigurationError` listing every argument of the wrong kind."""
    problems = [
        _flag("device_placement", device_placement),
        _flag("split_batches", split_batches, optional=True),
        _flag("cpu", cpu),
        _instance("dataloader_config", dataloader_config, DataLoaderConfiguration),
        _rng_types(rng_types),
        _folder("project_dir", project_dir),
        _instance("project_config", project_config, ProjectConfiguration),
        _flag("step_scheduler_with_optimizer", step_scheduler_with_optimizer),
        _handlers(kwargs_handlers),
        _flag("log_system_metrics", log_system_metrics),
    ]
    found = [p for p in problems if p is not None]
    if found:
        raise ConfigurationError("Accelerator(...) got bad arguments:\n  - " + "\n  - ".join(found))

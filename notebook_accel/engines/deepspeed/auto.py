"""Filling a DeepSpeed config's ``"auto"`` values from the Accelerator, as accelerate does.

``train_micro_batch_size_per_gpu`` comes from the prepared loader's batch size, ``gradient_accumulation_steps``
from the Accelerator, ``train_batch_size`` from their product with the number of processes,
``gradient_clipping`` from the plugin (no clipping when unset), ``bf16``/``fp16`` ``enabled`` from
``mixed_precision``. ``"auto"`` values in ``zero_optimization`` (bucket sizes, thresholds) are removed so
DeepSpeed's defaults apply. Anything else left ``"auto"`` is refused with its key named.
"""

from __future__ import annotations

import copy
from typing import Any

from notebook_accel.plugins import ConfigurationError

__all__ = ["fill_auto"]


def _auto(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def _set(config: dict[str, Any], key: str, value: Any) -> None:
    """Replace ``config[key]`` when it is missing or ``"auto"``."""
    if key not in config or _auto(config[key]):
        config[key] = value


def fill_auto(config: dict[str, Any], *, micro_batch: int | None, accumulation: int, world_size: int,
              clipping: float | None, mixed_precision: str) -> dict[str, Any]:
    """A copy of ``config`` with every ``"auto"`` value filled.

    Raises:
        ConfigurationError: the micro batch size is ``"auto"`` without a prepared loader to take it from, or an
            ``"auto"`` is left where no value is known (the keys are named).
    """
    out = copy.deepcopy(config)
    micro = out.get("train_micro_batch_size_per_gpu")
    if micro is None or _auto(micro):
        if micro_batch is None:
            total = out.get("train_batch_size")
            if isinstance(total, int):
                micro_batch = total // (accumulation * world_size)
            else:
                raise ConfigurationError(
                    "DeepSpeed: train_micro_batch_size_per_gpu is 'auto' but no prepared DataLoader gives a batch "
                    "size; pass the DataLoader to the same accelerator.prepare(...) call as the model, or set "
                    "train_micro_batch_size_per_gpu in the DeepSpeed config")
        out["train_micro_batch_size_per_gpu"] = micro_batch
    _set(out, "gradient_accumulation_steps", accumulation)
    _set(out, "train_batch_size", out["train_micro_batch_size_per_gpu"] * out["gradient_accumulation_steps"] * world_size)
    if _auto(out.get("gradient_clipping")):
        if clipping is None:
            out.pop("gradient_clipping")
        else:
            out["gradient_clipping"] = clipping
    for name in ("bf16", "fp16"):
        section = out.get(name)
        if isinstance(section, dict) and _auto(section.get("enabled")):
            section["enabled"] = mixed_precision == name
    zero = out.get("zero_optimization")
    if isinstance(zero, dict):
        for key in [k for k, v in zero.items() if _auto(v)]:
            del zero[key]
    left = sorted(_auto_keys(out))
    if left:
        raise ConfigurationError(f"DeepSpeed config: 'auto' is not known for {', '.join(left)}; set those values "
                                 "in the DeepSpeed config")
    return out


def _auto_keys(tree: Any, prefix: str = "") -> list[str]:
    """The dotted keys still holding ``"auto"``."""
    if isinstance(tree, dict):
        return [k for key, value in tree.items() for k in _auto_keys(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if _auto(tree) else []

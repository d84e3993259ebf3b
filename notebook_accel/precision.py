"""Mixed precision: choosing the mode, autocast, the fp16 GradScaler, and the fp32-output forward wrapper.

``"bf16"`` runs the model's forward under ``torch.autocast`` only; ``"fp16"`` also scales the loss with a
``torch.amp.GradScaler`` so small gradients survive (works on CPU too, with torch >= 2.3). ``"fp8"`` runs the
forward under bf16 autocast too, around the layers :mod:`notebook_accel.float8` converted to torchao's float8.
Outputs of a wrapped forward are cast back to fp32, as accelerate does, so losses and metrics are computed in full
precision.
"""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Any, Literal, cast

import torch

from notebook_accel.errors import shown
from notebook_accel.kwargs_handlers import GradScalerKwargs
from notebook_accel.plugins import ConfigurationError
from notebook_accel.utils.nested import recursively_apply

__all__ = ["MixedPrecision", "MIXED_PRECISION_CHOICES", "resolve_mixed_precision", "autocast_context",
           "make_scaler", "wrap_forward", "unwrap_forward"]

MixedPrecision = Literal["no", "fp16", "bf16", "fp8"]
MIXED_PRECISION_CHOICES: tuple[str, ...] = ("no", "fp16", "bf16", "fp8")
_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.bfloat16}  # fp8: what float8 layers leave


def resolve_mixed_precision(value: str | None, from_launch: str | None) -> MixedPrecision:
    """The mode to use: ``value`` if given, else the launch environment's, else ``"no"``.

    Raises:
        ConfigurationError: the chosen value is not one of ``no``, ``fp16``, ``bf16``, ``fp8``.

    Example:
        >>> resolve_mixed_precision(None, "bf16")
        'bf16'
    """
    chosen = value if value is not None else (from_launch or "no")
    if not isinstance(chosen, str) or chosen.lower() not in MIXED_PRECISION_CHOICES:
        source = "mixed_precision" if value is not None else "the launch config's mixed_precision"
        raise ConfigurationError(
            f"{source}={shown(chosen)} is not supported; allowed: {', '.join(MIXED_PRECISION_CHOICES)}")
    return cast(MixedPrecision, chosen.lower())


def autocast_context(mode: MixedPrecision, device: torch.device,
                     cache_enabled: bool | None = None) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` for ``mode`` on ``device``'s type (with its ``cache_enabled``), or a no-op for ``"no"``."""
    if mode == "no":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_DTYPE[mode], cache_enabled=cache_enabled)


def make_scaler(mode: MixedPrecision, device: torch.device, kwargs: GradScalerKwargs | None) -> Any:
    """A ``torch.amp.GradScaler`` for fp16, else ``None``.

    Raises:
        ConfigurationError: this torch cannot scale gradients on ``device`` (fp16 there is unsupported).
    """
    if mode != "fp16":
        return None
    options = kwargs.to_kwargs() if kwargs is not None else {}
    try:
        return torch.amp.GradScaler(device.type, **options)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ConfigurationError(
            f"mixed_precision='fp16' is not supported on device {device} with torch {torch.__version__} ({e}); "
            "use mixed_precision='bf16' or 'no'"
        ) from e


def _to_fp32(t: torch.Tensor) -> torch.Tensor:
    """Half-precision floating tensors back to fp32; others unchanged."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def wrap_forward(model: torch.nn.Module, mode: MixedPrecision, device: torch.device) -> None:
    """Make ``model.forward`` run under autocast and return fp32 outputs (keeps the original for unwrapping)."""
    if mode == "no" or hasattr(model, "_notebook_accel_original_forward"):
        return
    original = model.forward
    dtype = _DTYPE[mode]

    @functools.wraps(original)
    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device.type, dtype=dtype):
            out = original(*args, **kwargs)
        return recursively_apply(_to_fp32, out)

    model._notebook_accel_original_forward = original  # type: ignore[assignment]
    model.forward = types.MethodType(forward, model)


def unwrap_forward(model: torch.nn.Module) -> None:
    """Undo :func:`wrap_forward` (no-op when it was not applied)."""
    original = model.__dict__.pop("_notebook_accel_original_forward", None)
    if original is not None:
        model.__dict__.pop("forward", None)

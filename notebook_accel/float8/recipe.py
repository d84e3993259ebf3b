"""An Accelerator's fp8 training: torchao's ``Float8LinearConfig`` and layer filter, checked before training.

The options come from, in order of precedence: an ``AORecipeKwargs`` in ``Accelerator(kwargs_handlers=)`` (its
``config``, when given, is used as is), then the launch config's ``fp8_config`` section (sent to every worker),
then accelerate's defaults (``pad_inner_dim=True``; float8 all-gather on under FSDP, off otherwise: it only
changes FSDP2's all-gather). :func:`float8_training` refuses what cannot run before any layer is converted.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from notebook_accel.errors import shown
from notebook_accel.float8.convert import ModuleFilter, convert_model, float8_module_names
from notebook_accel.float8.eager_notice import watch_eager_fp8
from notebook_accel.float8.facts import fp8_problems, torchao_installed
from notebook_accel.kwargs_handlers import AORecipeKwargs, KwargsHandler
from notebook_accel.parameter_map import ParameterMap
from notebook_accel.plugins import ConfigurationError

__all__ = ["Float8Training", "float8_training"]


class Float8Training:
    """How an Accelerator converts its models for fp8 training (built by :func:`float8_training`).

    With FSDP's float8 all-gather, torchao replaces each converted weight by a float8-aware parameter; the
    optimizers given to :meth:`track` are kept on the replacements, in either order of preparing.

    Args:
        config: torchao's ``Float8LinearConfig``.
        module_filter_fn: the user's layer filter, or ``None`` for the default (first and last ``Linear`` kept in
            high precision; dimensions not multiples of 16 are never converted).
    """

    def __init__(self, config: Any, module_filter_fn: ModuleFilter | None = None) -> None:
        self.config = config
        self.module_filter_fn = module_filter_fn
        self._params = ParameterMap("fp8")
        self._optimizers: list[torch.optim.Optimizer] = []

    @property
    def emulate(self) -> bool:
        """True when torchao emulates the float8 matmuls (any device, slow)."""
        return bool(self.config.emulate)

    def convert(self, model: torch.nn.Module) -> torch.nn.Module:
        """Convert ``model``'s eligible ``Linear`` layers in place; returns ``model`` (one with float8 layers
        already is returned as is).

        Warns when no layer qualifies: the model then trains in bf16 only.
        """
        if float8_module_names(model):  # converted already (prepared twice, or by the user): torchao would nest
            return model
        before = dict(model.named_parameters())
        if not convert_model(model, self.config, self.module_filter_fn):
            warnings.warn(f"mixed_precision='fp8': no Linear layer of {type(model).__name__} was converted to "
                          "float8 (the first and last Linear stay in high precision, and both dimensions must be "
                          "multiples of 16); it trains in bf16. Pass AORecipeKwargs(module_filter_func=...) to "
                          "choose the layers", stacklevel=3)
        elif not self.emulate:
            watch_eager_fp8(model)
        self._params.record(before, dict(model.named_parameters()))
        self._params.rebind_all(self._optimizers)
        return model

    def track(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Keep ``optimizer`` on the parameters of the models converted so far and later; returns it."""
        self._params.rebind(optimizer)
        self._optimizers.append(optimizer)
        return optimizer

    def adopt(self, obj: Any) -> Any:
        """What ``prepare`` hands its engine: a module converted (:meth:`convert`), a plain optimizer tracked
        (:meth:`track`), anything else as it is."""
        if isinstance(obj, torch.nn.Module):
            return self.convert(obj)
        if isinstance(obj, torch.optim.Optimizer) and not any(obj is o for o in self._optimizers):
            return self.track(obj)
        return obj


@contextmanager
def _quiet_import() -> Iterator[None]:
    """Silence what importing torchao logs but nobody can act on: a CPU-only torch cannot load torchao's CUDA
    kernels (float8 emulation does not use them), and a newer torch deprecates an enum registration it does."""
    names = ["torch.utils._pytree"] + (["torchao"] if torch.version.cuda is None else [])
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _pick(*values: bool | None) -> bool:
    """The first value that is not ``None``."""
    return next(v for v in values if v is not None)


def _linear_config(handler: AORecipeKwargs | None, options: Mapping[str, Any], engine: str) -> Any:
    """torchao's ``Float8LinearConfig`` from the handler, the launch options and the defaults."""
    with _quiet_import():
        from torchao.float8 import Float8LinearConfig
    if handler is not None and handler.config is not None:
        if not isinstance(handler.config, Float8LinearConfig):
            raise ConfigurationError(f"AORecipeKwargs(config={shown(handler.config)}): expected a torchao "
                                     "torchao.float8.Float8LinearConfig, or None for the defaults")
        return handler.config
    pad = handler.pad_inner_dim if handler is not None else None
    gather = handler.enable_fsdp_float8_all_gather if handler is not None else None
    return Float8LinearConfig(
        pad_inner_dim=_pick(pad, options.get("pad_inner_dim"), True),
        enable_fsdp_float8_all_gather=_pick(gather, options.get("enable_fsdp_float8_all_gather"), engine == "FSDP"),
        emulate=bool(options.get("emulate", False)))


def float8_training(mixed_precision: str, kwargs_handlers: Sequence[KwargsHandler] | None, options: str | None,
                    engine: str, device: torch.device) -> Float8Training | None:
    """The fp8 conversion for an Accelerator, or ``None`` when ``mixed_precision`` is not ``"fp8"``.

    Args:
        mixed_precision: the Accelerator's precision.
        kwargs_handlers: its handlers (the ``AORecipeKwargs`` among them is used).
        options: the launch config's ``fp8_config`` as JSON (``emulate``, ``pad_inner_dim``,
            ``enable_fsdp_float8_all_gather``), if any.
        engine: the engine's name (``"DDP"``, ``"FSDP"``, ``"DEEPSPEED"``).
        device: this process's device.

    Raises:
        ConfigurationError: an ``AORecipeKwargs`` without fp8; torchao missing; a device or engine that cannot
            train in fp8 (unless emulated: see :mod:`notebook_accel.float8.facts`).
    """
    handler = next((h for h in kwargs_handlers or () if isinstance(h, AORecipeKwargs)), None)
    if mixed_precision != "fp8":
        if handler is not None:
            raise ConfigurationError(f"kwargs_handlers: AORecipeKwargs configures fp8 training, but "
                                     f"mixed_precision={shown(mixed_precision)}; pass mixed_precision='fp8' or drop "
                                     "the handler")
        return None
    if not torchao_installed():
        raise ConfigurationError(fp8_problems(emulate=True, engine="DDP", capabilities=None, torchao=False)[0])
    config = _linear_config(handler, json.loads(options) if options else {}, engine)
    capabilities = [torch.cuda.get_device_capability(device)] if device.type == "cuda" else None
    problems = fp8_problems(emulate=bool(config.emulate), engine=engine, capabilities=capabilities, torchao=True)
    if problems:
        raise ConfigurationError("; ".join(problems))
    return Float8Training(config, handler.module_filter_func if handler is not None else None)

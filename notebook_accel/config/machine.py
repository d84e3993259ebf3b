"""Configs that fit this machine: what ``notebook-accel config --default`` writes and what the picker offers.

Pure functions of the detected hardware (:mod:`notebook_accel.hardware` detects it without initialising CUDA).
"""

from __future__ import annotations

from collections.abc import Sequence

from notebook_accel.config.choices import MixedPrecision
from notebook_accel.config.errors import ConfigError
from notebook_accel.config.schema import Config
from notebook_accel.float8.facts import MIN_CAPABILITY
from notebook_accel.hardware import GpuInfo, supports_bf16

__all__ = ["precision_choices", "config_for_machine"]


def precision_choices(gpus: Sequence[GpuInfo], fp8_emulated: bool = False) -> list[MixedPrecision]:
    """The mixed-precision modes ``gpus`` support: on CPU (``[]``) ``no`` and ``bf16``; on GPUs ``no``,
    ``fp16``, ``bf16`` when every GPU has compute capability 8.0 or newer, and ``fp8`` (torchao) when every GPU
    has 8.9 or newer. ``fp8_emulated`` (the config asks for torchao's emulation) offers ``fp8`` everywhere.

    Example:
        >>> precision_choices([])
        ['no', 'bf16']
        >>> precision_choices([], fp8_emulated=True)
        ['no', 'bf16', 'fp8']
    """
    if not gpus:
        choices: list[MixedPrecision] = ["no", "bf16"]
    else:
        choices = ["no", "fp16", "bf16"] if supports_bf16(list(gpus)) else ["no", "fp16"]
    native = bool(gpus) and all(g.compute_capability is not None and g.compute_capability >= MIN_CAPABILITY
                                for g in gpus)
    return [*choices, "fp8"] if native or fp8_emulated else choices


def config_for_machine(gpus: Sequence[GpuInfo], mixed_precision: MixedPrecision = "no") -> Config:
    """One process per GPU on every GPU, or one process on CPU when there is none.

    Raises:
        ConfigError: ``mixed_precision`` is not supported by the hardware (e.g. fp16 on CPU).

    Example:
        >>> config_for_machine([]).use_cpu
        True
    """
    allowed = precision_choices(gpus)
    if mixed_precision not in allowed:
        where = "on CPU" if not gpus else "on these GPUs"
        raise ConfigError([f"mixed_precision: {mixed_precision!r} is not supported {where}; allowed: "
                           f"{', '.join(repr(a) for a in allowed)}"])
    if not gpus:
        return Config(num_processes=1, use_cpu=True, mixed_precision=mixed_precision)
    return Config(num_processes=len(gpus), gpu_ids="all", mixed_precision=mixed_precision)

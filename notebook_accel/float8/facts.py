"""What fp8 training needs, asked without torch: the launcher and the config check it before any worker starts.

``mixed_precision="fp8"`` trains through torchao's float8 ``Linear`` (its ``torch._scaled_mm`` kernels need an
NVIDIA GPU of compute capability 8.9 or newer: Ada, Hopper, Blackwell) and runs the rest of the model under bf16
autocast. torchao's *emulation* (``Float8LinearConfig(emulate=True)``) does the same arithmetic with ordinary
matmuls: it runs on any device, slowly, which is how the CPU tests exercise the whole path.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

__all__ = ["FP8_ENGINES", "FP8_LABEL", "MIN_CAPABILITY", "fp8_problems", "precision_label", "torchao_installed"]

#: the oldest compute capability whose tensor cores multiply float8 (Ada Lovelace, e.g. L4, RTX 4090).
MIN_CAPABILITY: tuple[int, int] = (8, 9)
#: the engines that train a float8-converted model: plain/DDP and FSDP2 (DeepSpeed has its own precision).
FP8_ENGINES: tuple[str, ...] = ("DDP", "FSDP")
#: how a run's header names the precision.
FP8_LABEL = "fp8 (torchao)"
_INSTALL = "pip install 'notebook-accel[fp8]' (or pip install torchao)"
_EMULATE = ("for a slow run anywhere, ask for torchao's emulation: fp8_config: {backend: AO, emulate: true} in the "
            "config, or Accelerator(kwargs_handlers=[AORecipeKwargs(config=Float8LinearConfig(emulate=True))])")


def precision_label(mode: str) -> str:
    """The precision as a run's header shows it: ``"fp8 (torchao)"`` for fp8, else the mode itself.

    Example:
        >>> precision_label("fp8"), precision_label("bf16")
        ('fp8 (torchao)', 'bf16')
    """
    return FP8_LABEL if mode == "fp8" else mode


def torchao_installed() -> bool:
    """True when ``import torchao`` would find the package (nothing is imported)."""
    return importlib.util.find_spec("torchao") is not None


def fp8_problems(*, emulate: bool, engine: str, capabilities: Sequence[tuple[int, int] | None] | None,
                 torchao: bool | None = None) -> list[str]:
    """Why fp8 training cannot run here; empty when it can.

    Args:
        emulate: torchao's emulation was asked for (runs on any device, so no GPU is needed).
        engine: the engine's name (``"DDP"``, ``"FSDP"``, ``"DEEPSPEED"``).
        capabilities: the compute capability of every GPU the run uses (``None`` for one the driver does not
            describe); ``None`` for a run on the CPU.
        torchao: whether torchao is installed; ``None`` looks (:func:`torchao_installed`).

    Example:
        >>> fp8_problems(emulate=False, engine="DDP", capabilities=[(9, 0)], torchao=True)
        []
        >>> fp8_problems(emulate=True, engine="DEEPSPEED", capabilities=None, torchao=True)[0][:40]
        "mixed_precision='fp8' trains with DDP or"
    """
    problems: list[str] = []
    if not (torchao_installed() if torchao is None else torchao):
        problems.append(f"mixed_precision='fp8' needs torchao, which is not installed in this Python; {_INSTALL}")
    if engine not in FP8_ENGINES:
        problems.append(f"mixed_precision='fp8' trains with DDP or FSDP (torchao float8), but the engine is "
                        f"{engine}; use mixed_precision='bf16' with {engine}, or switch to FSDP")
    if emulate:
        return problems
    need = ".".join(map(str, MIN_CAPABILITY))
    if capabilities is None or not capabilities:
        problems.append(f"mixed_precision='fp8' needs an NVIDIA GPU of compute capability >= {need} (Ada, Hopper "
                        f"or newer), but this run uses the CPU; {_EMULATE}")
    else:
        old = [c for c in capabilities if c is None or tuple(c) < MIN_CAPABILITY]
        if old:
            seen = ", ".join("unknown" if c is None else f"{c[0]}.{c[1]}" for c in old)
            problems.append(f"mixed_precision='fp8' needs GPUs of compute capability >= {need} (Ada, Hopper or "
                            f"newer); this run's GPUs have {seen}; use mixed_precision='bf16' there, or {_EMULATE}")
    return problems

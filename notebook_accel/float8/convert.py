"""Which ``Linear`` layers become torchao float8 layers, and the conversion itself.

torchao's rules: a layer converts only when both its dimensions are multiples of 16 (``torch._scaled_mm``'s
alignment); by default the model's first and last ``Linear`` stay in high precision (they are the most sensitive
to float8's rounding: the input projection and the logits). A user's ``module_filter_fn(module, fqn)`` replaces
the first/last rule; the alignment rule always holds.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["ModuleFilter", "convert_model", "default_filter", "float8_module_names", "is_float8_module",
           "plain_tensor"]

ModuleFilter = Callable[[torch.nn.Module, str], bool]
_ALIGN = 16


def _aligned(module: torch.nn.Module) -> bool:
    """True for a ``Linear`` whose in and out features are both multiples of 16."""
    return (isinstance(module, torch.nn.Linear) and module.in_features % _ALIGN == 0
            and module.out_features % _ALIGN == 0)


def default_filter(model: torch.nn.Module) -> ModuleFilter:
    """The filter that converts every aligned ``Linear`` of ``model`` except its first and last one.

    Example:
        >>> model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(3)))
        >>> keep = default_filter(model)
        >>> [keep(m, name) for name, m in model.named_children()]
        [False, True, False]
    """
    linears = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    edges = {linears[0], linears[-1]} if linears else set()
    return lambda module, fqn: fqn not in edges and _aligned(module)


def convert_model(model: torch.nn.Module, config: Any, module_filter_fn: ModuleFilter | None) -> list[str]:
    """Swap ``model``'s chosen ``Linear`` layers for torchao's float8 layers in place; returns their names.

    Args:
        model: the user's module (not yet wrapped by DDP or FSDP).
        config: torchao's ``Float8LinearConfig``.
        module_filter_fn: the user's filter (see the module docstring), or ``None`` for :func:`default_filter`.
    """
    from torchao.float8 import convert_to_float8_training

    if module_filter_fn is None:
        chosen = default_filter(model)
    else:
        user = module_filter_fn
        chosen = lambda module, fqn: _aligned(module) and bool(user(module, fqn))  # noqa: E731
    names = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and chosen(m, name)]
    if names:  # torchao patches inductor's codegen on every call: not for a model it leaves alone
        convert_to_float8_training(model, module_filter_fn=chosen, config=config)
    return names


def is_float8_module(module: torch.nn.Module) -> bool:
    """True for a layer torchao converted to float8 training (without importing torchao: when it is not loaded, no
    layer can be one, and its import would log "Failed to load" lines with the paths of this machine's
    ``site-packages`` into a bf16 run's output)."""
    float8_linear = sys.modules.get("torchao.float8.float8_linear")
    return float8_linear is not None and isinstance(module, float8_linear.Float8Linear)


def plain_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as the plain tensor it holds when it is one of torchao's wrappers (a float8 layer's weight under
    FSDP's float8 all-gather wraps its high-precision weight); any other tensor as it is.

    Example:
        >>> t = torch.ones(2)
        >>> plain_tensor(t) is t
        True
    """
    if not type(tensor).__module__.startswith("torchao.") or not hasattr(tensor, "__tensor_flatten__"):
        return tensor
    inner, _ = tensor.__tensor_flatten__()
    return plain_tensor(getattr(tensor, inner[0])) if len(inner) == 1 else tensor


def float8_module_names(model: torch.nn.Module) -> list[str]:
    """The qualified names of ``model``'s float8 layers (empty when none, or when torchao is absent).

    Example:
        >>> float8_module_names(torch.nn.Linear(16, 16))
        []
    """
    if not any(isinstance(m, torch.nn.Linear) for m in model.modules()):
        return []
    try:
        return [name for name, m in model.named_modules() if is_float8_module(m)]
    except ImportError:
        return []

"""Which submodules get their own ``fully_shard``: accelerate's auto-wrap policies, by class name or by size.

Each wrapped layer is one unit of communication: its parameters are gathered just before it runs and freed
after. :func:`layers_to_wrap` returns them children-first (the order ``fully_shard`` needs), never the root.
"""

from __future__ import annotations

import torch

from notebook_accel.config.accelerate_keys import suggest
from notebook_accel.engines.fsdp.plugin import FullyShardedDataParallelPlugin
from notebook_accel.plugins import ConfigurationError

__all__ = ["layers_to_wrap"]


def _class_names(model: torch.nn.Module) -> list[str]:
    """Class names of every submodule, sorted, without repeats."""
    return sorted({type(m).__name__ for m in model.modules()})


def _by_class(model: torch.nn.Module, names: list[str]) -> list[torch.nn.Module]:
    """Submodules whose class is named in ``names`` (an unknown name is an error with a did-you-mean)."""
    present = _class_names(model)
    missing = [n for n in names if n not in present]
    if missing:
        lines = []
        for name in missing:
            guess = suggest(name, present)
            lines.append(f"{name!r}" + (f" (did you mean {guess!r}?)" if guess else ""))
        raise ConfigurationError(
            f"FSDP transformer_cls_names_to_wrap (fsdp_transformer_layer_cls_to_wrap): {', '.join(lines)} is not a "
            f"class in this model; classes in the model: {', '.join(present)}. Name the repeated layer class "
            "(e.g. the decoder block), or use auto_wrap_policy='SIZE_BASED_WRAP' or 'NO_WRAP'")
    wanted = set(names)
    return [m for m in model.modules() if m is not model and type(m).__name__ in wanted]


def _by_size(model: torch.nn.Module, threshold: int) -> list[torch.nn.Module]:
    """Children-first: a submodule whose not-yet-wrapped parameters reach ``threshold`` is wrapped."""
    chosen: list[torch.nn.Module] = []

    def visit(module: torch.nn.Module) -> int:
        remaining = sum(visit(child) for child in module.children())
        remaining += sum(p.numel() for p in module.parameters(recurse=False))
        if module is not model and remaining >= threshold:
            chosen.append(module)
            return 0
        return remaining

    visit(model)
    return chosen


def _children_first(model: torch.nn.Module, layers: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """``layers`` in post-order (a nested match is sharded before the layer that contains it)."""
    wanted = {id(m) for m in layers}
    order: list[torch.nn.Module] = []

    def visit(module: torch.nn.Module) -> None:
        for child in module.children():
            visit(child)
        if id(module) in wanted and all(m is not module for m in order):
            order.append(module)

    visit(model)
    return order


def layers_to_wrap(model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin) -> list[torch.nn.Module]:
    """The submodules that get their own ``fully_shard`` under ``plugin.auto_wrap_policy``, children first.

    ``None`` as the policy means transformer-based when class names are given or the model declares
    ``_no_split_modules`` (as Hugging Face models do), else no wrap.

    Raises:
        ConfigurationError: a class name that is not in the model, or transformer-based wrapping without names.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
        >>> len(layers_to_wrap(model, FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP",
        ...                                                          min_num_params=10)))
        1
    """
    names = list(plugin.transformer_cls_names_to_wrap or getattr(model, "_no_split_modules", None) or [])
    policy = plugin.auto_wrap_policy or ("TRANSFORMER_BASED_WRAP" if names else "NO_WRAP")
    if policy == "NO_WRAP":
        return []
    if policy == "SIZE_BASED_WRAP":
        return _by_size(model, plugin.size_threshold)
    if not names:
        raise ConfigurationError(
            "FSDP auto_wrap_policy='TRANSFORMER_BASED_WRAP' needs layer class names: set "
            "transformer_cls_names_to_wrap (fsdp_transformer_layer_cls_to_wrap in the config file); classes in "
            f"this model: {', '.join(_class_names(model))}")
    return _children_first(model, _by_class(model, names))

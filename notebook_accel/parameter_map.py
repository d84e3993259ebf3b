"""Re-bind optimizers to the parameters ``prepare`` puts in place of the originals.

FSDP's ``fully_shard`` replaces every parameter of a module with a new ``DTensor`` parameter under the same name;
torchao's float8 conversion replaces a weight with a float8-aware one for FSDP's float8 all-gather. An optimizer
built before ``prepare`` still holds the originals and would update tensors the model no longer uses, so each
prepared optimizer's parameter groups are rewritten to the new parameters, in either order of
``prepare(model, optimizer)`` or ``prepare(optimizer, model)``. The originals are only weakly referenced, so
their full-size memory is freed once nothing else holds them.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch

from notebook_accel.plugins import ConfigurationError

__all__ = ["ParameterMap"]


class ParameterMap:
    """Original parameter -> its replacement, for every model prepared so far.

    Args:
        owner: who replaces parameters (``"FSDP"``, ``"fp8"``), for the error message.

    Example:
        >>> params = ParameterMap("FSDP")
        >>> old, new = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(1))
        >>> params.record({"w": old}, {"w": new})
        >>> opt = torch.optim.SGD([old], lr=0.1)
        >>> params.rebind(opt); opt.param_groups[0]["params"][0] is new
        True
    """

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._map: dict[int, tuple[weakref.ref[torch.Tensor], torch.nn.Parameter]] = {}

    def record(self, before: dict[str, torch.nn.Parameter], after: dict[str, torch.nn.Parameter]) -> None:
        """Pair the parameters of one model before and after the replacement, by name."""
        for name, old in before.items():
            new = after.get(name)
            if new is not None and new is not old:
                self._map[id(old)] = (weakref.ref(old), new)

    def _new(self, param: torch.Tensor) -> torch.Tensor:
        """The replacement of ``param`` (``param`` itself when it was not replaced)."""
        entry = self._map.get(id(param))
        if entry is None or entry[0]() is not param:
            return param
        return entry[1]

    def rebind(self, optimizer: torch.optim.Optimizer) -> None:
        """Point ``optimizer``'s parameter groups at the replacement parameters.

        Raises:
            ConfigurationError: the optimizer already holds state (it stepped) for a replaced parameter; that
                state belongs to the original and cannot follow it.
        """
        stale = [p for p in optimizer.state if self._new(p) is not p]
        if stale:
            raise ConfigurationError(
                f"{self.owner}: the optimizer already has state (it has stepped) for parameters that prepare() "
                "replaced; call accelerator.prepare(model, optimizer) before the first optimizer.step()")
        for group in optimizer.param_groups:
            group["params"] = [self._new(p) for p in group["params"]]

    def rebind_all(self, optimizers: Iterable[torch.optim.Optimizer]) -> None:
        """:meth:`rebind` each optimizer."""
        for optimizer in optimizers:
            self.rebind(optimizer)

"""The prepared optimizer: steps only when gradients sync, through the GradScaler under fp16.

:class:`AcceleratedOptimizer` is a ``torch.optim.Optimizer`` (so LR schedulers and ``isinstance`` checks accept
it) that forwards ``param_groups``, ``state`` and ``defaults`` to the user's optimizer. On an accumulating batch
``step()`` and ``zero_grad()`` do nothing; under fp16 ``step()`` is ``scaler.step`` + ``scaler.update``, and
:attr:`step_was_skipped` tells whether the scaler skipped it because of inf/nan gradients.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from notebook_accel.monitor import steps
from notebook_accel.state import GradientState

__all__ = ["AcceleratedOptimizer"]


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer`` for accumulation and fp16 scaling.

    Args:
        optimizer: the user's optimizer.
        gradient_state: the Accelerator's shared sync flag.
        scaler: a ``torch.amp.GradScaler`` under fp16, else ``None``.

    Example:
        >>> p = torch.nn.Parameter(torch.ones(1))
        >>> opt = AcceleratedOptimizer(torch.optim.SGD([p], lr=1.0), GradientState())
        >>> p.grad = torch.ones(1); opt.step(); p.item()
        0.0
    """

    def __init__(self, optimizer: torch.optim.Optimizer, gradient_state: GradientState, scaler: Any = None) -> None:
        # no super().__init__: every piece of optimizer state lives in (and is forwarded to) ``optimizer``
        self.optimizer = optimizer
        self.gradient_state = gradient_state
        self.scaler = scaler
        self._skipped = False

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The user's optimizer's parameter groups."""
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def state(self) -> Any:
        """The user's optimizer's per-parameter state."""
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:
        """The user's optimizer's defaults."""
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    @property
    def step_was_skipped(self) -> bool:
        """True when the last real step was skipped by the fp16 scaler (inf/nan gradients)."""
        return self._skipped

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Step the user's optimizer when gradients sync (through the scaler under fp16); else nothing."""
        if not self.gradient_state.sync_gradients:
            return None
        step_clock = steps.clock()
        started = time.perf_counter()
        try:
            return self._step(closure)
        finally:
            if step_clock is not None:
                step_clock.optimizer(time.perf_counter() - started)

    def _step(self, closure: Callable[[], Any] | None) -> Any:
        """The real step: the user's optimizer, through the scaler under fp16."""
        if self.scaler is None:
            self._skipped = False
            return self.optimizer.step(closure)
        scale_before = self.scaler.get_scale()
        result = self.scaler.step(self.optimizer, closure) if closure is not None else self.scaler.step(self.optimizer)
        self.scaler.update()
        self._skipped = self.scaler.get_scale() < scale_before  # the scaler backs off exactly when it skipped
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients when gradients sync (accumulating batches keep theirs)."""
        if self.gradient_state.sync_gradients:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Forwarded to the user's optimizer."""
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        """The user's optimizer's state dict."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the user's optimizer."""
        self.optimizer.load_state_dict(state_dict)

    def train(self) -> None:
        """Forwarded for optimizers that have train/eval modes (schedule-free)."""
        if hasattr(self.optimizer, "train"):
            self.optimizer.train()

    def eval(self) -> None:
        """Forwarded for optimizers that have train/eval modes (schedule-free)."""
        if hasattr(self.optimizer, "eval"):
            self.optimizer.eval()

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"

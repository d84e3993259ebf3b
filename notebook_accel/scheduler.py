"""The prepared LR scheduler: steps with real optimizer steps, scaled as accelerate does.

Each real optimizer step consumed ``num_processes`` batches (one per process), so the scheduler steps
``num_processes`` times, or once with ``split_batches`` (where the global batch is the loader's batch). It does
not step on accumulating batches, nor when the fp16 scaler skipped the optimizer step.

Accumulation: build schedulers in optimizer steps (the number of real steps). ``adjust_scheduler`` is accepted
but changes nothing, which is what accelerate 1.x does in practice, so numbers match accelerate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.state import GradientState

__all__ = ["AcceleratedScheduler"]


class AcceleratedScheduler:
    """Wraps an LR scheduler so ``step()`` follows the real optimizer steps.

    Args:
        scheduler: the user's scheduler (built on the user's optimizer).
        optimizers: the prepared optimizers, to see whether the last step was skipped.
        gradient_state: the Accelerator's shared sync flag.
        step_with_optimizer: False steps the scheduler on every call, whatever happened.
        split_batches: step once per optimizer step instead of ``num_processes`` times.
        num_processes: processes in the run.

    Example:
        >>> import torch
        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
        >>> sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        >>> s = AcceleratedScheduler(sched, [], GradientState(), num_processes=2)
        >>> s.step(); s.get_last_lr()
        [0.25]
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: Sequence[AcceleratedOptimizer],
        gradient_state: GradientState,
        step_with_optimizer: bool = True,
        split_batches: bool = False,
        num_processes: int = 1,
    ) -> None:
        self.scheduler = scheduler
        self.optimizers = list(optimizers)
        self.gradient_state = gradient_state
        self.step_with_optimizer = step_with_optimizer
        self.split_batches = split_batches
        self.num_processes = num_processes

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step when the optimizers really stepped (``num_processes`` times unless ``split_batches``)."""
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            return
        if any(opt.step_was_skipped for opt in self.optimizers):
            return
        times = 1 if self.split_batches else self.num_processes
        total = getattr(self.scheduler, "total_steps", None)  # OneCycleLR raises past its end
        for _ in range(times):
            if total is not None and getattr(self.scheduler, "_step_count", 0) > total:
                break
            self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        """The user's scheduler's last learning rates."""
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """The user's scheduler's state dict."""
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the user's scheduler."""
        self.scheduler.load_state_dict(state_dict)

    def get_lr(self) -> Any:
        """The user's scheduler's ``get_lr()``."""
        return self.scheduler.get_lr()

    def print_lr(self, *args: Any, **kwargs: Any) -> Any:
        """Forwarded to the user's scheduler."""
        return self.scheduler.print_lr(*args, **kwargs)

    def __repr__(self) -> str:
        return f"AcceleratedScheduler({self.scheduler!r})"

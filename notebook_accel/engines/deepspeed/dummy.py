"""accelerate's ``DummyOptim``/``DummyScheduler``: stand-ins for the optimizer and the scheduler that a DeepSpeed
config file defines in its ``optimizer``/``scheduler`` sections.

Pass them to ``accelerator.prepare`` with the model (one call) under DeepSpeed: DeepSpeed builds the optimizer and
the scheduler from the config, and ``prepare`` returns them (the optimizer prepared like any other, the scheduler
as a :class:`DeepSpeedScheduler`, which DeepSpeed steps itself). Their ``lr``, ``weight_decay``,
``warmup_num_steps`` and ``total_num_steps`` fill the config's ``"auto"`` values there, as in accelerate
(:func:`fill_from_dummies`).

Nothing here imports torch or deepspeed.

Example:
    >>> optimizer = DummyOptim(model.parameters(), lr=3e-4)            # doctest: +SKIP
    >>> scheduler = DummyScheduler(optimizer, total_num_steps=1000, warmup_num_steps=100)  # doctest: +SKIP
    >>> model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from notebook_accel.plugins import ConfigurationError

__all__ = ["DummyOptim", "DummyScheduler", "DeepSpeedScheduler", "fill_from_dummies"]


class DummyOptim:
    """The optimizer of the DeepSpeed config's ``optimizer`` section, to be built by DeepSpeed in ``prepare``.

    Args:
        params: the model's parameters (or parameter groups), as a torch optimizer takes them.
        lr: fills the section's ``params.lr`` when it is ``"auto"``.
        weight_decay: fills ``params.weight_decay`` when it is ``"auto"``.
        **kwargs: kept in :attr:`kwargs` (accelerate accepts and keeps them too).
    """

    def __init__(self, params: Any, lr: float = 0.001, weight_decay: float = 0, **kwargs: Any) -> None:
        self.params = params
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs


class DummyScheduler:
    """The learning-rate scheduler of the DeepSpeed config's ``scheduler`` section (or ``lr_scheduler_callable``),
    to be built by DeepSpeed in ``prepare``.

    Args:
        optimizer: the :class:`DummyOptim` (its ``lr`` fills ``params.warmup_max_lr`` when ``"auto"``).
        total_num_steps: the run's optimizer steps counted over every process's batches (e.g.
            ``len(train_dataloader) * epochs`` before ``prepare``); fills ``params.total_num_steps`` divided by the
            number of processes, as accelerate does without ``split_batches``, when ``"auto"``.
        warmup_num_steps: fills ``params.warmup_num_steps`` when ``"auto"``.
        lr_scheduler_callable: ``callable(optimizer) -> scheduler``, given to DeepSpeed instead of a config section.
        **kwargs: kept in :attr:`kwargs`.
    """

    def __init__(self, optimizer: Any, total_num_steps: int | None = None, warmup_num_steps: int = 0,
                 lr_scheduler_callable: Callable[[Any], Any] | None = None, **kwargs: Any) -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.lr_scheduler_callable = lr_scheduler_callable
        self.kwargs = kwargs


class DeepSpeedScheduler:
    """What ``prepare`` returns for a :class:`DummyScheduler`: DeepSpeed's scheduler, which its engine steps
    inside its own step (in ``accelerator.backward``), so :meth:`step` does nothing.

    Attributes:
        scheduler: DeepSpeed's scheduler object.
    """

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: DeepSpeed stepped the scheduler with the optimizer."""

    def get_last_lr(self) -> list[float]:
        """The learning rates DeepSpeed's scheduler set last."""
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        """DeepSpeed's scheduler's state (DeepSpeed's checkpoint holds it too)."""
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore DeepSpeed's scheduler's state."""
        self.scheduler.load_state_dict(state)


def _fill(section: dict[str, Any], values: dict[str, Any], owner: str) -> None:
    """Replace the ``"auto"`` entries of ``section["params"]`` with ``values`` (a ``None`` value is not known)."""
    params = section.get("params")
    if not isinstance(params, dict):
        return
    for key, current in params.items():
        if isinstance(current, str) and current.strip().lower() == "auto" and key in values:
            if values[key] is None:
                raise ConfigurationError(f"DeepSpeed config: {owner}.params.{key} is 'auto' but no value is known; "
                                         f"pass it to the Dummy object (e.g. DummyScheduler(optimizer, {key}=1000)) "
                                         "or set it in the config")
            params[key] = values[key]


def fill_from_dummies(config: dict[str, Any], optimizer: DummyOptim | None, scheduler: DummyScheduler | None,
                      num_processes: int) -> dict[str, Any]:
    """A copy of ``config`` whose ``optimizer``/``scheduler`` sections' ``"auto"`` values come from the dummies.

    Raises:
        ConfigurationError: a :class:`DummyOptim` without an ``optimizer`` section, a :class:`DummyScheduler`
            without a ``scheduler`` section or ``lr_scheduler_callable``, or an ``"auto"`` with no known value.
    """
    out = copy.deepcopy(config)
    if optimizer is not None:
        if not isinstance(out.get("optimizer"), dict):
            raise ConfigurationError("DeepSpeed: DummyOptim stands for the optimizer of the DeepSpeed config's "
                                     "'optimizer' section, and the config has none; add one (e.g. {'type': 'AdamW', "
                                     "'params': {'lr': 'auto'}}) or pass a torch optimizer")
        _fill(out["optimizer"], {"lr": optimizer.lr, "weight_decay": optimizer.weight_decay}, "optimizer")
    if scheduler is not None and scheduler.lr_scheduler_callable is None:
        if not isinstance(out.get("scheduler"), dict):
            raise ConfigurationError("DeepSpeed: DummyScheduler stands for the scheduler of the DeepSpeed config's "
                                     "'scheduler' section, and the config has none; add one (e.g. {'type': "
                                     "'WarmupLR', 'params': {'warmup_num_steps': 'auto'}}) or pass "
                                     "DummyScheduler(lr_scheduler_callable=...)")
        total = scheduler.total_num_steps
        if total is not None:  # accelerate's rule without split_batches: each process runs its share of the steps
            total = math.ceil(total / num_processes)
        max_lr = getattr(scheduler.optimizer, "lr", None)
        _fill(out["scheduler"], {"warmup_min_lr": 0, "warmup_max_lr": max_lr, "total_num_steps": total,
                                 "warmup_num_steps": scheduler.warmup_num_steps}, "scheduler")
    return out

"""Local SGD (accelerate's ``accelerate.local_sgd.LocalSGD``): each process steps its own copy of the model for
``local_sgd_steps`` optimizer steps without any gradient all-reduce, then every parameter is averaged across the
processes. Fewer collectives (one per K steps instead of one per step) for a little drift between the copies.

Inside the ``with`` block the prepared model runs under DDP's ``no_sync()``; :meth:`LocalSGD.step` counts the
optimizer steps and averages the parameters on every ``local_sgd_steps``-th one; leaving the block averages once
more, so every process ends with the same model. With one process, or ``enabled=False``, nothing changes: the
model trains as it would without the wrapper.

Example:
    >>> with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=8) as local_sgd:  # doctest: +SKIP
    ...     for batch in loader:
    ...         loss = model(**batch).loss
    ...         accelerator.backward(loss)
    ...         optimizer.step(); optimizer.zero_grad()
    ...         local_sgd.step()
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import TYPE_CHECKING

import torch

from notebook_accel.errors import NotebookAccelError, shown
from notebook_accel.plugins import ConfigurationError
from notebook_accel.state import DistributedType

if TYPE_CHECKING:
    from notebook_accel.accelerator import Accelerator

__all__ = ["LocalSGD", "LocalSGDError"]

_SUPPORTED = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)


class LocalSGDError(NotebookAccelError, NotImplementedError):
    """Local SGD was asked for under an engine that shards the model (FSDP, DeepSpeed)."""


class LocalSGD:
    """Average the model's parameters across processes every ``local_sgd_steps`` optimizer steps, with no
    gradient all-reduce in between (a context manager; call :meth:`step` after each optimizer step).

    Args:
        accelerator: the :class:`~notebook_accel.Accelerator` that prepared ``model``.
        model: the prepared model (its DDP wrapper: the block runs under its ``no_sync()``).
        local_sgd_steps: optimizer steps between two averagings (a whole number >= 1).
        enabled: ``False`` turns local SGD off (the model trains with DDP's all-reduce every step); it is
            also off in a single process.

    Attributes:
        enabled: whether local SGD is on (``enabled`` and more than one process).
        num_steps: the :meth:`step` calls so far.

    Raises:
        LocalSGDError: the model is sharded by FSDP or DeepSpeed (their parameters are not whole on any rank).
        ConfigurationError: ``local_sgd_steps`` is not a whole number >= 1.
    """

    def __init__(self, accelerator: Accelerator, model: torch.nn.Module, local_sgd_steps: int,
                 enabled: bool = True) -> None:
        kind = accelerator.distributed_type
        if kind not in _SUPPORTED:
            raise LocalSGDError(f"LocalSGD: the Accelerator runs {kind.value}, and local SGD averages whole models: "
                                f"it runs only with plain DDP ({', '.join(k.value for k in _SUPPORTED)}); train "
                                "without FSDP/DeepSpeed to use it, or drop the LocalSGD wrapper")
        if isinstance(local_sgd_steps, bool) or not isinstance(local_sgd_steps, int) or local_sgd_steps < 1:
            raise ConfigurationError(f"LocalSGD(local_sgd_steps={shown(local_sgd_steps)}): expected a whole number "
                                     ">= 1 (optimizer steps between two averagings), e.g. local_sgd_steps=8")
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self.enabled = bool(enabled) and kind != DistributedType.NO
        self.num_steps = 0
        self._no_sync = contextlib.ExitStack()

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync.enter_context(self.accelerator.no_sync(self.model))
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            if self.enabled and kind is None:  # a failing block is not averaged: the others may not get here
                self._average()
        finally:
            self._no_sync.close()

    def step(self) -> None:
        """Count one optimizer step; on every ``local_sgd_steps``-th, average the parameters (a collective:
        every process calls it)."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._average()

    def _average(self) -> None:
        """Every parameter becomes its mean across the processes."""
        self.accelerator.wait_for_everyone()
        with torch.no_grad():
            for parameter in self.model.parameters():
                parameter.data = self.accelerator.reduce(parameter.data, reduction="mean")

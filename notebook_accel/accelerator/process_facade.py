"""The process properties and helpers of the :class:`~notebook_accel.Accelerator`, read from its
:class:`~notebook_accel.state.ProcessState` (``accelerator.is_main_process`` is ``accelerator.state.is_main_process``),
and which attempt of a run restarted by ``notebook_launcher(max_restarts=...)`` this process is."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from notebook_accel.environment import restart_state
from notebook_accel.state import DistributedType, ProcessState

__all__ = ["ProcessFacade"]

T = TypeVar("T")


class ProcessFacade:
    """The process properties and helpers of an object holding a :class:`ProcessState` in ``self.state``.

    The :class:`~notebook_accel.Accelerator` inherits these, so ``accelerator.is_main_process`` and
    ``accelerator.print`` read and act on its state.
    """

    state: ProcessState

    @property
    def device(self) -> torch.device:
        """This process's device."""
        return self.state.device

    @property
    def process_index(self) -> int:
        """Global rank."""
        return self.state.process_index

    @property
    def local_process_index(self) -> int:
        """Rank on this machine."""
        return self.state.local_process_index

    @property
    def num_processes(self) -> int:
        """Processes in the run."""
        return self.state.num_processes

    @property
    def is_main_process(self) -> bool:
        """True on global rank 0."""
        return self.state.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        """True on local rank 0 of each machine."""
        return self.state.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        """True on the last rank."""
        return self.state.is_last_process

    @property
    def use_distributed(self) -> bool:
        """True with more than one process."""
        return self.state.use_distributed

    @property
    def distributed_type(self) -> DistributedType:
        """``NO``, ``MULTI_CPU`` or ``MULTI_GPU``."""
        return self.state.distributed_type

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only."""
        self.state.print(*args, **kwargs)

    def wait_for_everyone(self) -> None:
        """Barrier across every process."""
        self.state.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """The main process runs the body first, then the others."""
        return self.state.main_process_first()

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Each machine's local main process runs the body first."""
        return self.state.local_main_process_first()

    def on_main_process(self, function: Callable[..., T]) -> Callable[..., T | None]:
        """Decorator: run only on the main process."""
        return self.state.on_main_process(function)

    def on_local_main_process(self, function: Callable[..., T]) -> Callable[..., T | None]:
        """Decorator: run only on each machine's local main process."""
        return self.state.on_local_main_process(function)

    def on_last_process(self, function: Callable[..., T]) -> Callable[..., T | None]:
        """Decorator: run only on the last process."""
        return self.state.on_last_process(function)

    def on_process(self, function: Callable[..., T] | None = None, process_index: int | None = None) -> Any:
        """Decorator: run only on ``process_index``."""
        return self.state.on_process(function, process_index)

    def split_between_processes(self, inputs: Any,
                                apply_padding: bool = False) -> contextlib.AbstractContextManager[Any]:
        """Context manager yielding this process's contiguous share of ``inputs``."""
        return self.state.split_between_processes(inputs, apply_padding)

    @property
    def restart_count(self) -> int:
        """How many times ``notebook_launcher(max_restarts=...)`` restarted this run (0 in the first attempt)."""
        return restart_state()[0]

    @property
    def resume_from(self) -> str | None:
        """In a restarted run, the checkpoint the failed attempt saved last (resume with ``load_state()``)."""
        return restart_state()[1]

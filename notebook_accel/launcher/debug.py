"""accelerate's ``debug_launcher``: run a training function in several CPU processes to try distributed code."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from notebook_accel.launcher.api import notebook_launcher

__all__ = ["debug_launcher"]


def debug_launcher(function: Callable[..., Any], args: Sequence[Any] = (), num_processes: int = 2) -> Any:
    """Run ``function(*args)`` in ``num_processes`` CPU processes (gloo), even on a machine with GPUs.

    The same as ``notebook_launcher(function, args, num_processes, use_cpu=True)``: it checks a training
    function's distributed logic (sharding, gathering, the main-process-only parts) without any GPU.

    Args:
        function: the training function.
        args: its positional arguments.
        num_processes: how many CPU processes (2 by default, as accelerate's).

    Returns:
        What ``function`` returned on rank 0.

    Raises:
        LaunchError, WorkerError, KeyboardInterrupt: as :func:`notebook_launcher`.

    Example:
        >>> debug_launcher(train, args=(1e-3,))   # doctest: +SKIP
    """
    return notebook_launcher(function, args, num_processes, use_cpu=True)

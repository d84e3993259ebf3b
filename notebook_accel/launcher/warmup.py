"""Pay torch's lazy imports once in the kernel, not once per worker per launch.

The first ``DistributedDataParallel`` a process builds imports ``torch._dynamo`` (about 800 modules, 1 s
and more). A forked worker that imports it throws the work away when it exits, so every launch paid it
again, in every worker at once (N imports competing for the cores). Imported in the kernel before the
fork, it is paid once per kernel and shared by every worker of every later launch (copy-on-write pages).

Only when torch is already imported in the kernel (a notebook that trains has imported it) and the run is
on CPU: with GPUs, the kernel must not risk touching CUDA before the fork, so the import stays in the
workers there.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["WARM_MODULES", "warm_kernel"]

WARM_MODULES = ("torch.distributed", "torch.nn.parallel", "torch._dynamo")


def warm_kernel(backend: str) -> list[str]:
    """Import :data:`WARM_MODULES` here if torch is imported and ``backend`` is ``"gloo"``.

    Returns:
        The modules imported by this call (empty when there was nothing to do).
    """
    if backend != "gloo" or "torch" not in sys.modules:
        return []
    done = []
    for name in WARM_MODULES:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a broken optional part of torch must not stop the launch
                continue
            done.append(name)
    return done

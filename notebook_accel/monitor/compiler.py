"""Which processes of a worker's tree are compiling, so their memory is billed to the compiler, apart from the
rank's own.

``torch.compile`` (inductor) compiles in processes the rank starts, which hold hundreds of MiB to gigabytes while a
model compiles, memory the rank's training does not hold (counted as the rank's, a compiling rank looked like one
with 3 GiB more):

- its compile worker pool, for Triton kernels (GPUs) when ``compile_threads`` > 1: with the default start method
  (``TORCHINDUCTOR_WORKER_START=subprocess``) one side process,
  ``python <torch>/_inductor/compile_worker/__main__.py --parent=<rank pid> ...`` (torch's ``SubprocPool``; each
  imports torch), which forks the pool's workers;
- the C++ compiler, for CPU kernels (``g++`` and its ``cc1plus``, ``as``, ``ld``), and the build tools of a C++ or
  CUDA extension (``ninja``, ``nvcc``), run as subprocesses.

A process is the compiler's when its command line runs torch's compile worker entry point, its name is one of
those tools, or its parent is the compiler's. With ``TORCHINDUCTOR_WORKER_START=fork`` or ``spawn`` the pool's
processes are plain ``multiprocessing`` children of the rank, with nothing that tells them apart from a DataLoader's
workers: they stay the rank's.
"""

from __future__ import annotations

import psutil

__all__ = ["COMPILE_WORKER_ENTRY", "COMPILER_NAMES", "is_compiler"]

COMPILE_WORKER_ENTRY = "_inductor/compile_worker/__main__.py"  # the script torch's SubprocPool runs (torch 2.4+)
_MODULE = "torch._inductor.compile_worker"  # the same, run as ``python -m``
# process names (the kernel's, at most 15 characters) of C/C++/CUDA compilers, their stages and build tools
COMPILER_NAMES = frozenset({"cc", "c++", "gcc", "g++", "clang", "clang++", "cc1", "cc1plus", "as", "ld", "ld.bfd",
                            "ld.gold", "collect2", "lto-wrapper", "ninja", "nvcc", "cicc", "ptxas", "fatbinary"})


def is_compiler(process: psutil.Process, compiler_pids: set[int] | frozenset[int] = frozenset()) -> bool:
    """Whether ``process`` is compiling: it runs torch's compile worker entry point, its name is a compiler's
    (:data:`COMPILER_NAMES`), or its parent is in ``compiler_pids`` (those found so far: a pool's workers are the
    side process's children). A process gone or unreadable is not one.

    Example:
        >>> import os
        >>> is_compiler(psutil.Process(os.getpid()))
        False
    """
    try:
        if compiler_pids and process.ppid() in compiler_pids:
            return True
        if process.name() in COMPILER_NAMES:
            return True
        args = process.cmdline()
    except psutil.Error:
        return False
    return any(arg.replace("\\", "/").endswith(COMPILE_WORKER_ENTRY) or arg == _MODULE for arg in args[:3])

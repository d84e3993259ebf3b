"""The exception types notebook-accel raises.

Every error a user can cause is a subclass of :class:`NotebookAccelError`, so one ``except`` clause catches
all of them, and each also subclasses the builtin a Python user would expect (``ValueError`` for a bad
argument, ``RuntimeError`` for a failed run, ``TimeoutError`` for a hung one), so code written against
accelerate's or torch's exceptions keeps working.

Messages follow one pattern: what went wrong, the offending value, the allowed values, and the fix (in a
notebook, whether the kernel must be restarted).
"""

from __future__ import annotations

__all__ = [
    "NotebookAccelError",
    "LaunchError",
    "CudaInitializedError",
]


class NotebookAccelError(Exception):
    """Base class of every error raised by notebook-accel."""


class LaunchError(NotebookAccelError, ValueError):
    """A launch was refused before any worker started (bad argument, busy port, too many processes).

    Nothing was started and nothing needs cleaning up; fix the argument and run the cell again.
    """


class CudaInitializedError(LaunchError):
    """CUDA is already initialised in this process, so forked workers could not use it.

    The kernel must be restarted; the message names the fix (launch before any CUDA call in the kernel).
    """

"""The exception types notebook-accel raises.

Every error a user can cause is a subclass of :class:`NotebookAccelError`, so one ``except`` clause catches
all of them, and each also subclasses the builtin a Python user would expect (``ValueError`` for a bad
argument, ``RuntimeError`` for a failed run, ``TimeoutError`` for a hung one), so code written against
accelerate's or torch's exceptions keeps working.

Messages follow one pattern: what went wrong, the offending value, the allowed values, and the fix (in a
notebook, whether the kernel must be restarted).
"""

from __future__ import annotations

import reprlib

__all__ = [
    "NotebookAccelError",
    "LaunchError",
    "CudaInitializedError",
    "shown",
]


class _BoundedRepr(reprlib.Repr):
    """``reprlib``'s short repr, without the decimal conversion of huge integers (Python refuses it past 4,300
    digits, and it costs quadratic time below that)."""

    def repr_int(self, x: int, level: int) -> str:
        """A huge integer by its size; others as ``reprlib`` shows them (long ones cut in the middle)."""
        if x.bit_length() > _MAX_SHOWN_BITS:
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_MAX_SHOWN_BITS = 256
_REPR = _BoundedRepr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 2, 6, 6, 4, 6
_REPR.maxstring, _REPR.maxlong, _REPR.maxother = 80, 40, 80


def shown(value: object, width: int = 80) -> str:
    """``repr(value)`` for an error message, at most ``width`` characters and with bounded work whatever the
    value (a 5,000-digit integer, a million-item list, a deeply nested dict)."""
    text = _REPR.repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


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

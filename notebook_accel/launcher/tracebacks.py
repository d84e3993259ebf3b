"""Errors raised in the user's cell without the launcher's own frames in their traceback.

A ``WorkerError`` travels up from the supervising loop through the launcher's modules (and, for the stop
button, from inside ``selectors``): a traceback of frames that say nothing about the user's code, above the
message that does. :func:`user_facing` wraps ``notebook_launcher`` so that the errors it raises on purpose
(every :class:`~notebook_accel.errors.NotebookAccelError`, and ``KeyboardInterrupt``) leave it with those frames
removed, from it and from the exceptions it was raised from. The user's own frames stay (``num_processes=1``
runs the function in the kernel: its frames are the user's), and so do the exception object, its message and
its cause. The one frame left, the wrapper's
``raise``, is marked ``__tracebackhide__`` (pytest hides it); IPython never hides the frame an exception was
raised in, so the exception also gets a ``_render_traceback_`` (IPython's hook for custom tracebacks) that
renders it with IPython's own formatter from the user's frames only: the cell shows its line and the message.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from notebook_accel.errors import NotebookAccelError
from notebook_accel.ipython_tracebacks import IPythonTraceback, without_launcher_frames

__all__ = ["user_facing", "without_launcher_frames"]

F = TypeVar("F", bound=Callable[..., Any])

def _trim_chain(exc: BaseException) -> None:
    """Remove our frames from the exceptions ``exc`` was raised from (an ``OSError`` under a ``LaunchError``)."""
    seen = {id(exc)}
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        cause.with_traceback(without_launcher_frames(cause.__traceback__))
        cause = cause.__cause__ or cause.__context__


def user_facing(function: F) -> F:
    """Decorate a public entry point: its own errors reach the caller with the launcher's frames removed."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841 - read by pytest
        try:
            return function(*args, **kwargs)
        except (NotebookAccelError, KeyboardInterrupt) as e:
            setattr(e, "_render_traceback_", IPythonTraceback(e))  # noqa: B010 - read by IPython
            _trim_chain(e)
            raise e.with_traceback(without_launcher_frames(e.__traceback__))  # noqa: B904 - same exception

    return wrapper  # type: ignore[return-value]

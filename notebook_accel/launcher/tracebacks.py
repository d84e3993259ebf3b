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
import sys
import sysconfig
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, TypeVar

from notebook_accel.errors import NotebookAccelError

__all__ = ["user_facing", "without_launcher_frames"]

F = TypeVar("F", bound=Callable[..., Any])

_PACKAGE = Path(__file__).resolve().parents[1]  # notebook_accel/
_HIDDEN = tuple(str(_PACKAGE / name) + "/" for name in ("launcher", "config"))
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + "/"


def _kind(filename: str) -> str:
    """``"ours"`` for the launcher's and config's files, ``"stdlib"``, or ``"user"``."""
    if filename.startswith(_HIDDEN):
        return "ours"
    if filename.startswith(_STDLIB) and "site-packages" not in filename:
        return "stdlib"
    return "user"


def without_launcher_frames(tb: TracebackType | None) -> TracebackType | None:
    """A copy of the traceback chain without our frames and the standard library's frames they called."""
    kept: list[TracebackType] = []
    in_ours = False
    for entry in _entries(tb):
        kind = _kind(entry.tb_frame.f_code.co_filename)
        if kind == "ours":
            in_ours = True
            continue
        if kind == "user":
            in_ours = False
        elif in_ours:
            continue  # the standard library, called by the launcher (selectors, multiprocessing)
        kept.append(entry)
    chain: TracebackType | None = None
    for entry in reversed(kept):
        chain = TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return chain


def _entries(tb: TracebackType | None) -> list[TracebackType]:
    """The entries of a traceback chain, outermost first."""
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


class _IPythonTraceback:
    """An exception's ``_render_traceback_``: IPython's formatting of its traceback without our frames.

    It holds the exception (a reference cycle the garbage collector breaks) and pickles as nothing: an
    unpickled copy renders nothing and IPython falls back to its usual traceback.
    """

    def __init__(self, exc: BaseException | None = None) -> None:
        self._exc = exc

    def __call__(self) -> list[str]:
        """The structured traceback IPython shows (raises outside IPython, so IPython falls back)."""
        exc = self._exc
        shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
        if exc is None or shell is None:
            raise LookupError("no exception or no IPython shell to render with")
        tb = without_launcher_frames(exc.__traceback__)
        return shell.InteractiveTB.structured_traceback(type(exc), exc, tb)

    def __reduce__(self) -> tuple[type[_IPythonTraceback], tuple[()]]:
        """Pickled without the exception (which holds this object)."""
        return (type(self), ())


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
            setattr(e, "_render_traceback_", _IPythonTraceback(e))  # noqa: B010 - read by IPython
            _trim_chain(e)
            raise e.with_traceback(without_launcher_frames(e.__traceback__))  # noqa: B904 - same exception

    return wrapper  # type: ignore[return-value]

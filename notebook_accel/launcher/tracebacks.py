"""Errors raised in the user's cell without the launcher's own frames in their traceback.

A ``WorkerError`` travels up from the supervising loop through the launcher's modules (and, for the stop
button, from inside ``selectors``): a traceback of frames that say nothing about the user's code, above the
message that does. :func:`user_facing` wraps ``notebook_launcher`` so that the errors it raises on purpose
(every :class:`~notebook_accel.errors.NotebookAccelError`, and ``KeyboardInterrupt``) leave it with those frames
removed. The user's own frames stay (``num_processes=1`` runs the function in the kernel: its frames are the
user's), and so does the exception object, its message and its cause. The one frame left, the wrapper's
``raise``, is marked ``__tracebackhide__``, which IPython honours: the cell shows the user's line and the message.
"""

from __future__ import annotations

import functools
import sysconfig
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, TypeVar

from notebook_accel.errors import NotebookAccelError

__all__ = ["user_facing", "without_launcher_frames"]

F = TypeVar("F", bound=Callable[..., Any])

_PACKAGE = Path(__file__).resolve().parent.parent
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


def user_facing(function: F) -> F:
    """Decorate a public entry point: its own errors reach the caller with the launcher's frames removed."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841 - read by IPython and pytest
        try:
            return function(*args, **kwargs)
        except (NotebookAccelError, KeyboardInterrupt) as e:
            raise e.with_traceback(without_launcher_frames(e.__traceback__))  # noqa: B904 - same exception

    return wrapper  # type: ignore[return-value]

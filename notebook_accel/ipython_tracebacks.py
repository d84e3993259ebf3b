"""IPython's traceback of one of our errors without this package's frames: the user's cell, then the message.

An error raised on purpose (a bad config, a failed launch) carries, between the user's line and the message,
frames of the launcher and the config parser that say nothing about the user's code, and that name files of
wherever the package is installed. :class:`IPythonTraceback` is an exception's ``_render_traceback_`` (IPython's
hook for custom tracebacks) that renders it with IPython's own formatter from the other frames only. The launcher
attaches one to every error ``notebook_launcher`` raises (:mod:`notebook_accel.launcher.tracebacks`), and
:class:`~notebook_accel.config.errors.ConfigError` to itself. IPython is never imported here.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path
from types import TracebackType

__all__ = ["IPythonTraceback", "without_launcher_frames"]

_PACKAGE = Path(__file__).resolve().parent  # notebook_accel/
_HIDDEN = (str(_PACKAGE) + "/",)  # the whole package: an in-process run's Accelerator raising in load_state too
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + "/"


def _kind(filename: str) -> str:
    """``"ours"`` for this package's files, ``"stdlib"``, or ``"user"``."""
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


class IPythonTraceback:
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

    def __reduce__(self) -> tuple[type[IPythonTraceback], tuple[()]]:
        """Pickled without the exception (which holds this object)."""
        return (type(self), ())

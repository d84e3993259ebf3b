"""A worker's failure as the user should see it: their own frames, and which library call they were in.

The traceback a failing worker reports is headed "your code only": frames of this package (the launcher's worker
body, the Accelerator, its collective ops), of torch and of the standard library (``contextlib``'s ``__enter__``,
``functools``' wrappers: mechanics, not the user's code) are left out, in the exception and in those it was raised
from, so what remains is the user's code and the other libraries they called (a ``Trainer``'s frames stay). When
every frame is a library's, the traceback is kept whole rather than shown empty.

:func:`library_call` names the library function the user's code was inside when it failed, with the user's
line, e.g. ``gather (Cell In[8], line 10)``: the launcher uses it to say which collective a rank was in when its peer had
already returned.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType

__all__ = ["user_traceback", "library_call", "is_user_file"]

_PACKAGE = str(Path(os.path.abspath(__file__)).parents[2]) + os.sep  # notebook_accel/ (as the frames name it)
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
_WRAPPERS = frozenset({"wrapper", "inner", "decorate_context", "_fn", "fn"})  # decorators' frames, not the call


def _library_dirs() -> tuple[str, ...]:
    """This package's folder, and torch's when it is imported (a worker that never imported it has no frames of it)."""
    torch = sys.modules.get("torch")
    where = getattr(torch, "__file__", None)
    return (_PACKAGE,) if where is None else (_PACKAGE, os.path.dirname(os.path.abspath(where)) + os.sep)


def _is_library(filename: str, dirs: tuple[str, ...]) -> bool:
    """Whether ``filename`` belongs to this package or to torch."""
    return os.path.abspath(filename).startswith(dirs)


def _trim(te: traceback.TracebackException, dirs: tuple[str, ...], keep_whole: bool, seen: set[int]) -> None:
    """Drop the library frames of ``te`` and of the exceptions it was raised from (once each)."""
    if id(te) in seen:
        return
    seen.add(id(te))
    kept = [frame for frame in te.stack if _is_caller(frame.filename, dirs)]  # no contextlib, functools, ...
    if kept or not keep_whole:
        te.stack = traceback.StackSummary.from_list(kept)
    for inner in (te.__cause__, te.__context__):
        if inner is not None:
            _trim(inner, dirs, False, seen)


def user_traceback(exc: BaseException) -> str:
    """The exception's traceback text with this package's, torch's and the standard library's frames left out.

    Example:
        >>> try:
        ...     int("x")
        ... except ValueError as e:
        ...     user_traceback(e).splitlines()[-1]
        "ValueError: invalid literal for int() with base 10: 'x'"
    """
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    _trim(te, _library_dirs(), True, set())
    return "".join(te.format())


def _is_caller(filename: str, dirs: tuple[str, ...]) -> bool:
    """Whether a frame of ``filename`` can be the one that called into the library: not the library itself, and
    not the standard library (``contextlib``'s ``__exit__`` calls for the user's ``with`` line)."""
    path = os.path.abspath(filename)
    return not path.startswith(dirs) and not (path.startswith(_STDLIB) and "site-packages" not in path)


def is_user_file(filename: str) -> bool:
    """Whether a frame of ``filename`` is the user's code ("your code only": not this package, torch or the standard
    library; another installed library counts as the user's, as a ``Trainer`` does)."""
    return _is_caller(filename, _library_dirs())


def library_call(tb: TracebackType | None) -> str:
    """``'gather (File "/tmp/ipykernel_1/42.py", line 10)'``: the library function the user's innermost frame called
    when the exception was raised below it, and where (the kernel shows it as ``gather (Cell In[8], line 10)``:
    :func:`~notebook_accel.cell_names.short_locations`; ``"all_gather (trainer.py, line 4300)"`` when that frame is
    another installed library's); ``""`` when the exception was raised in the user's own code or no frame is the
    user's."""
    dirs = _library_dirs()
    entries: list[TracebackType] = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    callers = [i for i, entry in enumerate(entries) if _is_caller(entry.tb_frame.f_code.co_filename, dirs)]
    if not callers or not any(_is_library(e.tb_frame.f_code.co_filename, dirs) for e in entries[callers[-1] + 1:]):
        return ""
    caller = entries[callers[-1]]
    below = [entry.tb_frame.f_code.co_name for entry in entries[callers[-1] + 1:]
             if _is_library(entry.tb_frame.f_code.co_filename, dirs)]
    name = next((n for n in below if n not in _WRAPPERS and not n.startswith("_")), below[0])
    filename = caller.tb_frame.f_code.co_filename
    where = (f"{os.path.basename(filename)}, line {caller.tb_lineno}" if "site-packages" in filename
             else f'File "{filename}", line {caller.tb_lineno}')  # the kernel names it: Cell In[8], line 10
    return f"{name} ({where})"

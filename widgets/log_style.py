"""Which output lines look like errors: only those are drawn red in the dashboard's log panes.

stderr carries much more than errors (tqdm bars, ``logging`` INFO lines, warnings), so the stream alone says
nothing about alarm. A line is an *error* when it belongs to a Python traceback (from ``Traceback (most recent
call last):`` to the exception line that ends it), is an exception line itself (``ValueError: ...``), or is a log
record of level ERROR or CRITICAL. Everything else is ordinary output; stderr lines get only a subtle marker.
Pure functions over the lines' plain text, so the pane decides per refresh without any state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

__all__ = ["ERROR_RED", "MONOSPACE", "LineKind", "line_kinds"]

ERROR_RED = "#b42318"  # an error line, live and in the saved result
# logs and configs in a fixed-width font wherever they show (an HTML export's page gives a bare <pre> its text font)
MONOSPACE = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,'Liberation Mono',monospace"

LineKind = Literal["plain", "error"]

_TRACEBACK_START = ("Traceback (most recent call last):", "Exception in thread")
_TRACEBACK_LINK = ("During handling of the above exception", "The above exception was the direct cause")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)(?::|$)")
_ERROR_LEVEL = re.compile(r"(?:^|[\s\[|:])(?:ERROR|CRITICAL|FATAL)(?:[\s\]|:]|$)")


def line_kinds(lines: Sequence[str]) -> list[LineKind]:
    """The kind of each line of ``lines`` (plain text, in order).

    Example:
        >>> line_kinds(["INFO:root:epoch 1", "Traceback (most recent call last):", '  File "x.py", line 1',
        ...             "ValueError: boom", " 40%|####"])
        ['plain', 'error', 'error', 'error', 'plain']
    """
    out: list[LineKind] = []
    in_traceback = False
    for line in lines:
        if line.startswith(_TRACEBACK_START) or line.startswith(_TRACEBACK_LINK):
            in_traceback = True
            out.append("error")
        elif in_traceback:
            continues = not line or line[0].isspace() or line.startswith(_TRACEBACK_LINK)
            in_traceback = continues or line.startswith(_TRACEBACK_START)
            out.append("error")  # the indented frames, then the exception line that ends the traceback
        elif _EXCEPTION.match(line) or _ERROR_LEVEL.search(line):
            out.append("error")
        else:
            out.append("plain")
    return out

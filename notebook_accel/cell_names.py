"""Notebook cells by the names IPython gives them: ``Cell In[6], line 5``, not ``File "/tmp/ipykernel_…/30492.py"``.

IPython compiles each cell under a temporary file name and remembers the execution count of each name; its own
tracebacks print the cell. A traceback formatted by Python's :mod:`traceback` (a worker's) names the temporary
file instead, and so does a warning (``/tmp/ipykernel_…/30492.py:5: UserWarning: …``). The launcher, in the
kernel, rewrites those with the running shell's map (:func:`cell_names`) when a worker's failure arrives, and in
every line a worker prints (:func:`cell_namer`; the workers forget the shell right after the fork); outside IPython
it changes nothing. IPython is never imported here: only looked up when loaded. A location inside a message
(``gather (Cell In[8], line 5)``) goes through :func:`short_locations`, and :func:`without_build_paths` drops the
paths of the machine torch was built on from a C++ library's messages.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

__all__ = ["cell_names", "cell_namer", "cell_label", "rename_cells", "short_locations", "without_build_paths"]

_FRAME = re.compile(r'File "([^"\n]+)", line (\d+)')
_BUILD_PATH = re.compile(r"\[[^\[\]\s]+\.(?:c|cc|cpp|cxx|cu|h|hpp):\d+\] ")  # "[../third_party/gloo/.../pair.cc:553] "
_WARNING = re.compile(r"^([^\s\"][^\n]*?):(\d+): ", re.MULTILINE)  # warnings.formatwarning's "file:line: "


def rename_cells(text: str, name_of: Callable[[str], tuple[str, str] | None]) -> str:
    """Replace each ``File "<file>", line N`` whose file ``name_of`` knows by ``<label> <name>, line N``.

    Example:
        >>> rename_cells('  File "/tmp/ipykernel_1/42.py", line 5, in train',
        ...              lambda f: ("Cell", "In[6]") if f.endswith("42.py") else None)
        '  Cell In[6], line 5, in train'
    """

    def swap(match: re.Match[str]) -> str:
        named = name_of(match.group(1))
        return match.group(0) if named is None else f"{named[0]} {named[1]}, line {match.group(2)}"

    def swap_warning(match: re.Match[str]) -> str:
        named = name_of(match.group(1))
        return match.group(0) if named is None else f"{named[0]} {named[1]}, line {match.group(2)}: "

    return _WARNING.sub(swap_warning, _FRAME.sub(swap, text))


def cell_names(text: str) -> str:
    """``text`` with the frames of notebook cells named as IPython names them (unchanged outside IPython)."""
    namer = cell_namer()
    return text if namer is None else namer(text)


def cell_namer() -> Callable[[str], str] | None:
    """A function renaming the notebook cells' frames and warning locations in a text, with the running IPython
    shell's map (cells run later included), or ``None`` outside IPython (nothing to rename)."""
    getipython = sys.modules.get("IPython.core.getipython")
    shell = getipython.get_ipython() if getipython is not None else None
    name_of = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if name_of is None:
        return None
    return lambda text: rename_cells(text, lambda name: name_of(name) or None)


def cell_label(filename: str) -> str:
    """``"Cell In[6]"`` for a notebook cell's temporary file name in the running IPython shell, else ``filename``."""
    named = cell_names(f'File "{filename}", line 1')
    return named[: -len(", line 1")] if not named.startswith("File ") else filename


def short_locations(text: str) -> str:
    """``text`` with notebook cells named as IPython names them and any other ``File "<path>", line N`` shortened
    to ``<file name>, line N`` (a location inside a message, like ``gather (Cell In[8], line 5)``).

    Example:
        >>> short_locations('gather (File "/home/me/train.py", line 5)')
        'gather (train.py, line 5)'
    """
    return _FRAME.sub(lambda m: f"{m.group(1).rsplit('/', 1)[-1]}, line {m.group(2)}", cell_names(text))


def without_build_paths(text: str) -> str:
    """``text`` without the source locations of the machine a C++ library was built on, which torch and gloo put
    before their messages (``[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer``):
    they name no file of the user's machine. The message stays.

    Example:
        >>> without_build_paths("[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer")
        'Connection closed by peer'
    """
    return _BUILD_PATH.sub("", text)

"""Run a function on a module as soon as it is imported: at once if it already is, else right after its import.

Workers adjust a few third-party modules so they behave as in a script (tqdm's notebook bar) or report to the
dashboard (transformers' ``Trainer``), without importing those modules themselves: an import costs seconds, and
the user may never need it. A hook is a finder at the front of ``sys.meta_path`` that answers only for its one
module name (a string comparison per later import), finds the module through the other finders, and wraps the
loader so the function runs once the module's code has run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any, Callable

__all__ = ["when_imported"]

Action = Callable[[ModuleType], None]


def when_imported(name: str, action: Action) -> Callable[[], None]:
    """Call ``action(module)`` once the module ``name`` is imported (now, if it already is).

    Args:
        name: the module's full dotted name (``"transformers.trainer"``).
        action: what to do with the module; runs in the importing thread, after the module's own code.

    Returns:
        A function that removes the hook if it is still waiting (the action then never runs); it does not undo
        an action that already ran.

    Example:
        >>> seen = []
        >>> undo = when_imported("json", lambda module: seen.append(module.__name__))
        >>> seen
        ['json']
    """
    module = sys.modules.get(name)
    if module is not None:
        action(module)
        return lambda: None
    finder = _AfterImport(name, action)
    sys.meta_path.insert(0, finder)

    def remove() -> None:
        """Take the finder out of ``sys.meta_path`` (a no-op once it has gone)."""
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)

    return remove


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds one module through the other finders and gives it a loader that runs ``action`` after executing."""

    def __init__(self, name: str, action: Action) -> None:
        self._name = name
        self._action = action

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        """For the one module only: the normal spec, with the wrapping loader."""
        if fullname != self._name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                # The finder stays: importlib.util.find_spec (an "is it installed?" check) also lands here
                # without importing; once the module is in sys.modules, the import system no longer asks.
                spec.loader = _ActingLoader(spec.loader, self._action)
                return spec
        return None


class _ActingLoader(importlib.abc.Loader):
    """Wraps a loader: executes the module, then the action on it."""

    def __init__(self, loader: importlib.abc.Loader, action: Action) -> None:
        self._loader = loader
        self._action = action

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """Delegate."""
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        """Execute the module, then the action."""
        self._loader.exec_module(module)
        self._action(module)

    def __getattr__(self, name: str) -> Any:
        """Everything else (``get_resource_reader``, ``is_package``...) is the wrapped loader's."""
        return getattr(self._loader, name)

"""Lazy public names for a package ``__init__`` (PEP 562): each name is imported from its module on first use.

Keeps ``import notebook_accel`` cheap and free of torch/UI imports until a name is actually needed, and lets
one broken or heavy module cost only the names that live in it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build a package's ``__getattr__`` and ``__dir__`` from ``exports`` (public name -> defining module).

    Args:
        package: the package's name, for the error message.
        exports: public name -> the module that defines it.
        namespace: the package's ``globals()``; a loaded name is cached there so later lookups are plain.

    Returns:
        ``(__getattr__, __dir__)`` to assign in the package's ``__init__``.

    Example:
        >>> __getattr__, __dir__ = lazy_exports(__name__, {"sqrt": "math"}, globals())  # doctest: +SKIP
    """

    def __getattr__(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__

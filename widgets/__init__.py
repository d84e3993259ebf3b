"""The notebook UI of notebook-accel (ipywidgets + matplotlib): the live training dashboard and the config picker.

Installed as ``notebook_accel.widgets``; the core package never imports it (workers load no UI code).
Names are loaded on first use, so ``from notebook_accel.widgets import Dashboard`` does not import the config
picker and vice versa.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "Dashboard": "notebook_accel.widgets.dashboard",
    "ConfigPicker": "notebook_accel.widgets.config_picker",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first access (PEP 562)."""
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'notebook_accel.widgets' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Public names, for tab completion."""
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from notebook_accel.widgets.config_picker import ConfigPicker
    from notebook_accel.widgets.dashboard import Dashboard

"""The notebook UI of notebook-accel (ipywidgets + matplotlib): the live training dashboard and the config picker.

Installed as ``notebook_accel.widgets``; the core package never imports it (workers load no UI code).
Names are loaded on first use, so ``from notebook_accel.widgets import Dashboard`` does not import the config
picker and vice versa.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from notebook_accel._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Dashboard": "notebook_accel.widgets.dashboard",
    "ConfigPicker": "notebook_accel.widgets.config_picker",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from notebook_accel.widgets.config_picker import ConfigPicker
    from notebook_accel.widgets.dashboard import Dashboard

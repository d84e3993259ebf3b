"""Keeping the kernel's reported state ``busy`` while a blocking launch runs in the cell.

When a notebook shows its first widget (the dashboard, about a second after Run), the widget manager of JupyterLab and
Notebook 7 (ipywidgets >= 8.1.8, with ipykernel >= 7) asks the kernel for a subshell of its own, over the control
channel (``create_subshell_request``). ipykernel answers on its control thread and publishes a ``busy`` and an
``idle`` status whose parent is that request. The Jupyter server records the kernel's state from every status whose
parent it tracks (the subshell requests are not on its list of untracked ones), and the front end's status bar
follows every status: from that ``idle`` on, both said the kernel was idle while the launch cell, and the cells
queued after it, still showed ``[*]``.

:func:`kernel_stays_busy` wraps that one kernel's status publisher for the length of a blocking launch: after any
``idle`` of the control channel, it publishes ``busy`` again with the running cell's request as parent. A client
that waits for the control request's own ``idle`` still gets it; whoever follows the latest status sees ``busy``
until the cell's own ``idle``. Outside an ipykernel kernel (a script, a terminal) it does nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["kernel_stays_busy"]

_ATTRIBUTE = "_publish_status"  # ipykernel >= 6: Kernel._publish_status(status, channel, parent=None)


def _kernel() -> Any:
    """The ipykernel ``Kernel`` running this code, or ``None`` (never imports IPython itself)."""
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get_ipython() if get_ipython is not None else None
    return getattr(shell, "kernel", None)


@contextmanager
def kernel_stays_busy() -> Iterator[None]:
    """While the block runs, answer every control-channel ``idle`` status with the cell's ``busy`` (see above)."""
    kernel = _kernel()
    original = getattr(kernel, _ATTRIBUTE, None)
    get_parent = getattr(kernel, "get_parent", None)
    cell = get_parent("shell") if callable(get_parent) else None
    if kernel is None or not callable(original) or _ATTRIBUTE in vars(kernel) or not cell:
        yield  # not a kernel, an older ipykernel, or already wrapped (a launch inside a launch)
        return

    def publish(status: str, channel: str, parent: Any = None) -> None:
        original(status, channel, parent)
        if status == "idle" and channel == "control":
            original("busy", "shell", cell)

    setattr(kernel, _ATTRIBUTE, publish)
    try:
        yield
    finally:
        if vars(kernel).get(_ATTRIBUTE) is publish:
            delattr(kernel, _ATTRIBUTE)

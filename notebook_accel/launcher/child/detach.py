"""Make a worker forked from a Jupyter kernel look like a plain Python process to notebook detection.

A fork inherits the kernel's IPython shell, its display and comm hooks, and every module it imported. Code in
the worker that asks "am I in a notebook?" then says yes, and draws for a front end it cannot reach: tqdm.auto
picks its widget bar, whose comm messages go through the kernel's sockets from a process that does not own
them (they are lost, and the kernel logs warnings). In a worker, the answer must be no, as in a script:

- IPython's shell singleton is cleared, so ``IPython.get_ipython()`` returns ``None``; ``get_ipython`` and
  ``__IPYTHON__`` leave the builtins (``display`` stays: without a shell it prints the object's text);
- ``sys.displayhook`` / ``sys.excepthook`` are Python's own again;
- the ``comm`` package creates dummy comms (a widget made in a worker sends nothing);
- ``ipykernel.zmqshell`` leaves ``sys.modules`` (tqdm >= 4.67 looks for it by name; the module object lives on
  for whoever holds it);
- ``tqdm.notebook``'s bar (and ``tqdm.auto``'s, made from it) becomes the console bar: already imported in the
  kernel, its class is patched here; imported later in the worker, it is patched on import.

Only the worker changes: this runs in the forked child, after the fork, on copy-on-write memory.
"""

from __future__ import annotations

import builtins
import sys
from types import ModuleType
from typing import Any

from notebook_accel.import_hooks import when_imported

__all__ = ["detach_from_kernel", "console_tqdm"]

_TQDM_NOTEBOOK = "tqdm.notebook"


def detach_from_kernel() -> None:
    """Apply every step of the module doc in this (forked) process. Safe to call outside a kernel (no-op)."""
    _forget_shell()
    sys.displayhook = sys.__displayhook__
    sys.excepthook = sys.__excepthook__
    comm = sys.modules.get("comm")
    if comm is not None and hasattr(comm, "_create_comm") and hasattr(comm, "_get_comm_manager"):
        setattr(comm, "create_comm", comm._create_comm)  # noqa: B010 - ipykernel replaced these in the kernel
        setattr(comm, "get_comm_manager", comm._get_comm_manager)  # noqa: B010
    sys.modules.pop("ipykernel.zmqshell", None)
    when_imported(_TQDM_NOTEBOOK, console_tqdm)  # now, or once imported (a string comparison per later import)


def _forget_shell() -> None:
    """Clear IPython's shell singleton and the builtins it added."""
    for name in ("get_ipython", "__IPYTHON__"):
        builtins.__dict__.pop(name, None)
    module = sys.modules.get("IPython.core.interactiveshell")
    shell_class = getattr(module, "InteractiveShell", None)
    if shell_class is None or not shell_class.initialized():
        return
    type(shell_class.instance()).clear_instance()  # clears the subclass (ZMQInteractiveShell) and its bases


def console_tqdm(notebook: ModuleType) -> None:
    """Turn ``tqdm.notebook.tqdm`` into the console bar: drop the methods it overrides from tqdm's base class.

    Subclasses (``tqdm.auto.tqdm``) follow. The ``display=`` argument the notebook bar takes is accepted and
    ignored.
    """
    cls = getattr(notebook, "tqdm_notebook", None)
    base = getattr(sys.modules.get("tqdm.std"), "tqdm", None)
    if not isinstance(cls, type) or base is None or cls is base or getattr(cls, "_notebook_accel_console", False):
        return
    for name, value in list(vars(cls).items()):
        if callable(value) or isinstance(value, (property, staticmethod, classmethod)):
            delattr(cls, name)
    bar: type = cls

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - replaces the class's __init__
        kwargs.pop("display", None)
        super(bar, self).__init__(*args, **kwargs)  # type: ignore[arg-type]  # next in the MRO (tqdm.auto: asyncio)

    cls.__init__ = __init__  # type: ignore[misc]
    cls._notebook_accel_console = True  # type: ignore[attr-defined]

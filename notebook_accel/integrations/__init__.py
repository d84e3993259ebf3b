"""Reporting from other libraries' training loops to the dashboard.

``transformers``' ``Trainer`` drives its own ``accelerate.Accelerator``, so none of our reporting (prepared
loaders, ``accelerator.log``) runs in it. :class:`~notebook_accel.integrations.transformers.DashboardCallback`
forwards its logs and its position instead. Inside a run of ``notebook_launcher`` every ``Trainer`` gets it
without a line of code: :func:`add_trainer_callback` (called by the launcher in each worker, and around an
in-process run) puts it into ``transformers.trainer.DEFAULT_CALLBACKS``, the list every ``Trainer`` starts its
callbacks from, once that module is imported. This package imports no transformers itself.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Callable

from notebook_accel.import_hooks import when_imported

__all__ = ["add_trainer_callback", "TRAINER_MODULE"]

TRAINER_MODULE = "transformers.trainer"


def add_trainer_callback(in_worker: bool) -> Callable[[], None]:
    """Give every ``transformers.Trainer`` made from now on the dashboard callback (once transformers' trainer
    module is imported, or at once if it is).

    Args:
        in_worker: this is a forked worker. Then the notebook progress bar transformers chose when it was
            imported in the kernel (HTML through IPython, which a worker cannot show) becomes its console bar,
            as in a script; the console bar's lines reach the dashboard's output pane.

    Returns:
        A function that takes the callback out again (and the hook, if transformers was not imported yet), for
        a run inside the kernel (``num_processes=1``); a worker never needs it.
    """
    patched: list[ModuleType] = []

    def patch(trainer: ModuleType) -> None:
        """Add the callback class to the module's defaults (once) and, in a worker, pick the console bar. Runs
        inside the user's ``import``: a transformers this does not fit gets a warning, never a failed import."""
        try:
            from notebook_accel.integrations.transformers import DashboardCallback

            defaults = getattr(trainer, "DEFAULT_CALLBACKS", None)
            if isinstance(defaults, list) and DashboardCallback not in defaults:
                defaults.append(DashboardCallback)
                patched.append(trainer)
            if in_worker:
                _console_progress(trainer)
        except Exception as e:  # noqa: BLE001 - whatever an unexpected transformers version raises
            warnings.warn(f"notebook-accel could not add its dashboard callback to transformers' Trainer "
                          f"({type(e).__name__}: {e}); pass callbacks=[DashboardCallback()] yourself "
                          "(notebook_accel.integrations.transformers)", RuntimeWarning, stacklevel=2)

    remove_hook = when_imported(TRAINER_MODULE, patch)

    def undo() -> None:
        """Remove the hook and the callback class."""
        remove_hook()
        if not patched:  # transformers was never imported: nothing to take out (and nothing to import)
            return
        from notebook_accel.integrations.transformers import DashboardCallback

        for trainer in patched:
            while DashboardCallback in trainer.DEFAULT_CALLBACKS:
                trainer.DEFAULT_CALLBACKS.remove(DashboardCallback)
        patched.clear()

    return undo


def _console_progress(trainer: ModuleType) -> None:
    """Use transformers' console progress bar where it picked its notebook one (it was imported in a kernel)."""
    chosen = getattr(trainer, "DEFAULT_PROGRESS_CALLBACK", None)
    console = getattr(trainer, "ProgressCallback", None)
    if chosen is not None and console is not None and getattr(chosen, "__name__", "") == "NotebookProgressCallback":
        setattr(trainer, "DEFAULT_PROGRESS_CALLBACK", console)  # noqa: B010 - a module found at run time

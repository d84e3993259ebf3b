"""Pay torch's lazy imports once in the kernel, not once per worker per launch, and early when possible.

The first ``DistributedDataParallel`` a process builds (and its first forward) imports ``torch._dynamo`` (about
800 modules, 1 s and more). A forked worker that imports it throws the work away when it exits, so every launch
paid it again, in every worker at once (N imports competing for the cores). Imported in the kernel before the
fork, it is paid once per kernel and shared by every worker of every later launch (copy-on-write pages).

When: in a Jupyter kernel that has imported torch, on a machine without a visible GPU, the import starts in a
background thread as soon as the launcher is imported (:func:`start_early`), so it happens while the user runs the
next cells; :func:`warm_kernel` finishes it (or does it) right before the first fork, and always waits for that
thread first, since forking while another thread holds import locks could leave a worker stuck. Any other fork
of the kernel (a DataLoader with workers iterated in a cell) waits for it too (:func:`_finish_before_fork`, an
``os.register_at_fork`` hook): a DataLoader worker forked mid-import deadlocked on numpy's module lock. Elsewhere (a
script, or torch not yet imported) it happens at the first launch. With GPUs it stays in the workers, so nothing in
the kernel can touch CUDA before the fork.

The same thread then imports the dashboard (ipywidgets; its final curves are SVG, no matplotlib):
:data:`UI_MODULES`, which the first launch's dashboard then finds imported. That needs no GPU check (nothing of
it touches CUDA), only a kernel with ipywidgets installed. A launch that comes before they are done stops the
thread after the module it is importing (the fork waits only for that); the dashboard imports what it needs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading

from notebook_accel import environment, hardware

__all__ = ["WARM_MODULES", "UI_MODULES", "warm_kernel", "start_early", "warming_needed"]

WARM_MODULES = ("torch.distributed", "torch.nn.parallel", "torch._dynamo")
UI_MODULES = ("notebook_accel.widgets.dashboard",)  # the live view and its final image (no matplotlib: SVG)
_early: list[threading.Thread] = []  # the background import, once started
_halt = threading.Event()  # set by the first launch: the thread imports no further UI module


def _import_all(names: tuple[str, ...] | None = None) -> list[str]:
    """Import each of ``names`` (default :data:`WARM_MODULES`) not imported yet; the ones this call imported."""
    done = []
    for name in WARM_MODULES if names is None else names:
        if name not in sys.modules:
            try:
                with environment.imports_for_workers():  # what an import sets in os.environ is the workers'
                    importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a broken optional part of torch must not stop the launch
                continue
            done.append(name)
    return done


def _ui_wanted() -> bool:
    """Whether the first launch will build a dashboard: ipywidgets is installed (the kernel is checked by the
    caller)."""
    return importlib.util.find_spec("ipywidgets") is not None


def _warm_up(torch_too: bool, ui: bool) -> None:
    """The background thread: torch's modules (the fork waits for them), then the dashboard.

    A launch that comes first stops it after the module being imported (:data:`_halt`): the fork must not wait for
    a second of UI imports it does not need.
    """
    if torch_too:
        _import_all()
    for name in UI_MODULES if ui else ():
        if _halt.is_set():
            return
        _import_all((name,))


def start_early() -> bool:
    """In a Jupyter kernel (once per process), start a daemon thread that imports the dashboard's modules
    (:data:`UI_MODULES`, when ipywidgets is installed) and, when torch is imported and no GPU is visible,
    :data:`WARM_MODULES`. Returns whether it started."""
    if _early or "ipykernel" not in sys.modules:
        return False
    torch_too = "torch" in sys.modules and not hardware.visible_gpu_count()
    ui = _ui_wanted()
    if not torch_too and not ui:
        return False
    thread = threading.Thread(target=_warm_up, args=(torch_too, ui), name="notebook-accel warm-up", daemon=True)
    _early.append(thread)
    os.register_at_fork(before=_finish_before_fork)
    thread.start()
    return True


def _finish_before_fork(limit: float = 30.0) -> None:
    """Before any fork of this process: stop the warm-up after its current UI module and wait for it (at most
    ``limit`` seconds), so that no module lock is held by it at the fork. A child forked while this thread held
    one (a DataLoader worker the user iterates in a cell) waited for it forever."""
    for thread in _early:
        if thread.is_alive() and thread is not threading.current_thread():
            _halt.set()
            thread.join(limit)


def warm_kernel(backend: str, store: bool = False) -> list[str]:
    """Wait for the early import (if any), then import :data:`WARM_MODULES` here if torch is imported and
    ``backend`` is ``"gloo"``. Called right before the workers are forked.

    With ``store`` (this kernel serves the rendezvous store), ``torch.distributed`` is imported here in any
    case: the store starts in the run's own thread, and an import there could meet another launch's import
    (a partly imported torch fails) or a fork (a worker inheriting a held import lock).

    Returns:
        The modules imported by this call (empty when there was nothing left to do).
    """
    _halt.set()
    for thread in _early:
        thread.join()
    if store and "torch.distributed" not in sys.modules:
        importlib.import_module("torch.distributed")
    if backend != "gloo" or "torch" not in sys.modules:
        return []
    return _import_all()


def warming_needed(backend: str) -> bool:
    """Whether :func:`warm_kernel` has work left (an early import still going, or modules to import): the
    launcher then tells the dashboard, since it may take seconds."""
    if any(thread.is_alive() for thread in _early):
        return True
    return backend == "gloo" and "torch" in sys.modules and any(name not in sys.modules for name in WARM_MODULES)

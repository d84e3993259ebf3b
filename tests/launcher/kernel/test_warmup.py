"""The kernel imports what DDP needs once, so a worker finds it imported (checked in a fresh interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch  # noqa: F401 - a kernel that trains has imported torch

from notebook_accel.launcher.kernel import warmup

pytestmark = pytest.mark.timeout(180)

_SCRIPT = """
import sys, torch
from notebook_accel import notebook_launcher
assert "torch._dynamo" not in sys.modules, "the test needs a kernel without torch._dynamo"
def train():
    return "torch._dynamo" in sys.modules  # before anything in the worker imports it
print("RESULT", notebook_launcher(train, num_processes=2, dashboard=False), "torch._dynamo" in sys.modules)
"""


def test_workers_find_dynamo_imported_by_the_kernel() -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_SCRIPT)], capture_output=True, text=True,
                          timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT True True" in done.stdout, done.stdout[-2000:]


def test_no_warm_up_for_gpus_or_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert warmup.warm_kernel("nccl") == []
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert warmup.warm_kernel("gloo") == []


def test_start_early_only_in_a_kernel_with_torch_and_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmup, "_early", [])
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert warmup.start_early() is False  # a script
    monkeypatch.setitem(sys.modules, "ipykernel", sys.modules["sys"])  # looks like a kernel
    monkeypatch.setattr(warmup.hardware, "visible_gpu_count", lambda: 1)
    monkeypatch.setattr(warmup, "_ui_wanted", lambda: False)
    assert warmup.start_early() is False  # GPUs: nothing may touch CUDA before the fork
    monkeypatch.setattr(warmup.hardware, "visible_gpu_count", lambda: 0)
    assert warmup.start_early() is True and len(warmup._early) == 1
    assert warmup.start_early() is False  # once per process
    warmup.warm_kernel("gloo")  # waits for the thread
    assert not warmup._early[0].is_alive() and "torch._dynamo" in sys.modules


_ENVIRON_SCRIPT = """
import os, sys, torch
from notebook_accel import notebook_launcher
assert "torch._dynamo" not in sys.modules and "TORCHINDUCTOR_CACHE_DIR" not in os.environ, "needs a fresh kernel"
before = dict(os.environ)
def train():
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR")
value = notebook_launcher(train, num_processes=2, dashboard=False)
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
from torch._inductor.runtime.cache_dir_utils import default_cache_dir
print("RESULT", changed, value == default_cache_dir())
"""


def _fresh_environment() -> dict[str, str]:
    """This process's environment without what an earlier test's torch._dynamo import set in it: a fresh kernel's."""
    return {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}


def test_the_warm_up_leaves_the_kernels_environment_and_sets_what_torch_sets_in_the_workers() -> None:
    """Importing torch._dynamo sets TORCHINDUCTOR_CACHE_DIR: done in the kernel for the workers, it changed
    where the user's own torch.compile in the kernel writes (issue 34, item 3)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_ENVIRON_SCRIPT)], capture_output=True,
                          text=True, timeout=150, env=_fresh_environment())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT [] True" in done.stdout, done.stdout[-2000:]


def test_a_kernel_imports_dynamo_in_the_background_before_any_launch() -> None:
    from tests.kernel.test_launcher_kernel import execute, running_kernel

    with running_kernel(_fresh_environment()) as (_, kc):
        cell = execute(kc, "import os, sys, time, torch\nfrom notebook_accel import notebook_launcher\n"
                           "deadline = time.monotonic() + 120\n"
                           "while 'torch._dynamo' not in sys.modules and time.monotonic() < deadline:\n"
                           "    time.sleep(0.05)\n"
                           "print('torch._dynamo' in sys.modules, 'TORCHINDUCTOR_CACHE_DIR' in os.environ)",
                      timeout=150)
        assert cell.status == "ok" and cell.stdout == "True False\n", cell.evalue  # the kernel's own environment
        launch = execute(kc, "def train():\n    return 'torch._dynamo' in sys.modules\n"
                             "notebook_launcher(train, num_processes=2, dashboard=False)", timeout=120)
        assert launch.status == "ok" and launch.result == "True", launch.evalue


def test_warming_needed_says_whether_the_launcher_has_imports_left(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch  # noqa: F401 - warming applies once torch is imported

    from notebook_accel.launcher.kernel import warmup

    monkeypatch.setattr(warmup, "WARM_MODULES", ("json",))
    assert warmup.warming_needed("gloo") is False  # imported already: nothing to show
    monkeypatch.setattr(warmup, "WARM_MODULES", ("notebook_accel_no_such_module_for_the_test",))
    assert warmup.warming_needed("gloo") is True
    assert warmup.warming_needed("nccl") is False  # with GPUs the imports stay in the workers


def test_the_dashboard_is_imported_in_the_background(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first launch's dashboard finds ipywidgets imported (GPU or not), after torch's modules; matplotlib is not
    imported (the final curves are SVG)."""
    imported: list[tuple[str, ...]] = []
    monkeypatch.setattr(warmup, "_import_all", lambda names=None: imported.append(names or warmup.WARM_MODULES))
    monkeypatch.setitem(sys.modules, "ipykernel", sys.modules["sys"])  # looks like a kernel
    monkeypatch.setattr(warmup, "_halt", threading.Event())
    ui = [("notebook_accel.widgets.dashboard",)]
    for gpus, expected in ((0, [warmup.WARM_MODULES, *ui]), (1, ui)):
        imported.clear()
        monkeypatch.setattr(warmup, "_early", [])
        monkeypatch.setattr(warmup.hardware, "visible_gpu_count", lambda gpus=gpus: gpus)
        assert warmup.start_early() is True
        warmup._early[0].join(timeout=60)
        assert imported == expected, (gpus, imported)


def test_a_launch_stops_the_ui_imports_so_the_fork_waits_only_for_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    imported: list[tuple[str, ...]] = []
    halt = threading.Event()

    def slow_import(names: tuple[str, ...] | None = None) -> None:
        if names is None:  # torch's modules: still importing when the launch comes
            halt.wait(timeout=60)
        imported.append(names or warmup.WARM_MODULES)

    monkeypatch.setattr(warmup, "_import_all", slow_import)
    monkeypatch.setattr(warmup, "_halt", halt)
    monkeypatch.setattr(warmup, "_early", [])
    monkeypatch.setitem(sys.modules, "ipykernel", sys.modules["sys"])
    monkeypatch.setattr(warmup.hardware, "visible_gpu_count", lambda: 0)
    assert warmup.start_early() is True
    warmup.warm_kernel("nccl")  # the launch: halts the thread and waits for it
    assert not warmup._early[0].is_alive() and imported == [warmup.WARM_MODULES]


def test_a_fork_waits_for_the_warm_up_thread_so_no_module_lock_is_inherited_held(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A DataLoader worker forked while the warm-up imported a numpy module deadlocked on that module's lock."""
    importing = threading.Event()
    release = threading.Event()

    def slow_import() -> None:  # stands for an import in progress
        importing.set()
        release.wait(5)

    thread = threading.Thread(target=slow_import, daemon=True)
    monkeypatch.setattr(warmup, "_early", [thread])
    monkeypatch.setattr(warmup, "_halt", threading.Event())
    thread.start()
    importing.wait(5)
    threading.Timer(0.3, release.set).start()
    warmup._finish_before_fork()  # the os.register_at_fork hook start_early installs
    assert not thread.is_alive() and warmup._halt.is_set()
    warmup._finish_before_fork()  # nothing left to wait for: returns at once

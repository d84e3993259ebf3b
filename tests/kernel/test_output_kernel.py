"""Worker output and launcher errors in a real Jupyter kernel: tqdm.auto is the console bar, clean tracebacks.

A worker forked from a kernel inherits its IPython shell; ``tqdm.auto`` there used to pick the widget bar and
send comm messages through the kernel's sockets from the fork (lost, each logged by the kernel as "attempted to
send message from fork"). Errors raised in the cell used to show the launcher's frames (api.py, supervisor.py,
selectors). Both are checked on what the kernel really sends and logs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kernel.test_launcher_kernel import execute

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("tqdm")

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER_FRAMES = ("api.py", "supervisor.py", "selectors.py", "tracebacks.py", "connection.py", "notebook_accel/")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

SETUP = """
import os, time
from tqdm.auto import tqdm            # a notebook's usual import: the widget bar in the kernel
from notebook_accel import notebook_launcher

def bars():
    for _ in tqdm(range(30), mininterval=0):
        time.sleep(0.005)
    from tqdm.notebook import trange  # imported in the worker too
    for _ in trange(3, mininterval=0):
        pass
    from IPython import get_ipython
    return get_ipython() is None

def broken():
    if int(os.environ["RANK"]) == 1:
        raise ValueError("broken on rank one")
    time.sleep(30)

def forever():
    time.sleep(60)
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Path]]:
    """One kernel for the module, its own stderr (where it logs warnings) kept in a file."""
    log = tmp_path_factory.mktemp("kernel") / "stderr.log"
    km = jupyter_client.KernelManager(kernel_name="python3")
    with open(log, "w") as stderr:
        km.start_kernel(cwd=str(ROOT), stderr=stderr)
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        setup = execute(kc, SETUP, timeout=120)
        assert setup.status == "ok", setup.evalue
        yield km, kc, log
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _error_text(cell: Any) -> str:
    """The traceback the cell shows, without colours."""
    lines = [o for o in cell.outputs if o["type"] == "error"][0]["traceback"]
    return ANSI.sub("", "\n".join(lines))


@pytest.mark.timeout(180)
def test_notebook_tqdm_in_workers_is_the_console_bar_without_widget_messages(kernel: tuple[Any, Any, Path]) -> None:
    _, kc, log = kernel
    cell = execute(kc, "notebook_launcher(bars, num_processes=2, dashboard=False)", timeout=120)
    assert cell.status == "ok", cell.evalue
    assert cell.result == "True"  # no IPython shell in the worker
    kinds = {o["type"] for o in cell.outputs}
    assert not kinds & {"comm_open", "comm_msg", "display_data", "update_display_data"}, kinds
    assert "30/30" in cell.stderr and "3/3" in cell.stderr and "[rank 1]" in cell.stderr  # console bars, as text
    time.sleep(0.5)  # the kernel logs asynchronously
    assert "from fork" not in log.read_text()


@pytest.mark.timeout(180)
def test_errors_in_the_cell_show_no_launcher_frames(kernel: tuple[Any, Any, Path]) -> None:
    km, kc, _ = kernel
    failed = execute(kc, "notebook_launcher(broken, num_processes=2, dashboard=False)")
    assert failed.ename == "WorkerError"
    text = _error_text(failed)
    assert "notebook_launcher(broken, num_processes=2, dashboard=False)" in text  # the user's line
    assert "ValueError: broken on rank one" in text
    assert not [frame for frame in LAUNCHER_FRAMES if frame in text], text

    started: list[float] = []

    def interrupt(cell: Any) -> None:
        if not started and "Launching" in cell.stdout:
            started.append(time.monotonic())
            time.sleep(0.5)
            km.interrupt_kernel()

    stopped = execute(kc, "notebook_launcher(forever, num_processes=2, dashboard=False)", on_output=interrupt)
    assert stopped.ename == "KeyboardInterrupt", stopped.evalue
    text = _error_text(stopped)
    assert "notebook_launcher(forever" in text
    assert not [frame for frame in LAUNCHER_FRAMES if frame in text], text

"""notebook_launcher inside a real Jupyter kernel (ipykernel via jupyter_client).

A kernel has threads, zmq sockets, its own stdout objects and its own SIGINT handling, and the stop button
(``interrupt_kernel``) signals the kernel's whole process group, workers included. One kernel serves every
step here: a 2-process launch, a failing launch, an interrupted launch, then a check that the kernel still
works and that no worker is left.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

ROOT = Path(__file__).resolve().parents[2]

SETUP = """
import logging, os, time
import torch
import torch.distributed as dist
from notebook_accel import notebook_launcher, WorkerError
from tests.helpers import child_pids
logging.basicConfig(format="%(message)s")  # a handler holding the kernel's stderr object

def train(scale):
    dist.init_process_group("gloo")
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} reduced {t.item()}")
    logging.getLogger("nb").warning(f"warning from rank {dist.get_rank()}")
    return t.item() * scale

def broken():
    if int(os.environ["RANK"]) == 1:
        raise ValueError("broken on rank one")
    time.sleep(30)

def forever():
    time.sleep(60)
"""


@dataclass
class CellResult:
    """What one executed cell produced."""

    status: str = ""
    stdout: str = ""
    stderr: str = ""
    result: str = ""
    ename: str = ""
    evalue: str = ""
    outputs: list[dict[str, Any]] = field(default_factory=list)


def execute(kc: Any, code: str, timeout: float = 60.0, on_output: Any = None) -> CellResult:
    """Run ``code`` and gather its iopub output until the kernel is idle again."""
    msg_id = kc.execute(code)
    cell = CellResult()
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        cell.outputs.append({"type": kind, **content})
        if kind == "stream":
            setattr(cell, content["name"], getattr(cell, content["name"]) + content["text"])
            if on_output is not None:
                on_output(cell)
        elif kind == "execute_result":
            cell.result = content["data"].get("text/plain", "")
        elif kind == "error":
            cell.ename, cell.evalue = content["ename"], content["evalue"]
        elif kind == "status" and content["execution_state"] == "idle":
            break
    cell.status = kc.get_shell_msg(timeout=timeout)["content"]["status"]
    return cell


@contextmanager
def running_kernel() -> Iterator[tuple[Any, Any]]:
    """A kernel started in the repository root, ready, and always shut down: (manager, client)."""
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(ROOT))
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel() -> Iterator[tuple[Any, Any]]:
    """One kernel for the module, with SETUP run in it."""
    with running_kernel() as (km, kc):
        setup = execute(kc, SETUP, timeout=120)
        assert setup.status == "ok", setup.evalue
        yield km, kc


@pytest.mark.timeout(180)
def test_launch_in_a_kernel(kernel: tuple[Any, Any]) -> None:
    km, kc = kernel
    cell = execute(kc, "notebook_launcher(train, args=(2.0,), num_processes=2, dashboard=False)")
    assert cell.status == "ok", cell.evalue
    assert cell.result == "6.0"
    assert "Launching 2 processes on CPU (gloo)" in cell.stdout
    assert "rank 0 reduced 3.0" in cell.stdout and "rank 1 reduced" not in cell.stdout
    assert "warning from rank 0\n" in cell.stderr and "[rank 1] warning from rank 1\n" in cell.stderr

    failed = execute(kc, "notebook_launcher(broken, num_processes=2, dashboard=False)")
    assert failed.status == "error" and failed.ename == "WorkerError"
    assert "rank 1" in failed.evalue and "ValueError: broken on rank one" in failed.evalue

    interrupted_at: list[float] = []

    def interrupt_once_launched(cell: CellResult) -> None:
        if not interrupted_at and "Launching" in cell.stdout:
            time.sleep(0.5)
            interrupted_at.append(time.monotonic())
            km.interrupt_kernel()

    stopped = execute(kc, "notebook_launcher(forever, num_processes=2, dashboard=False)", on_output=interrupt_once_launched)
    assert interrupted_at, "the launch never started"
    assert stopped.status == "error" and stopped.ename == "KeyboardInterrupt"
    assert time.monotonic() - interrupted_at[0] < 15

    after = execute(kc, "print(child_pids()); notebook_launcher(train, args=(1.0,), num_processes=2, dashboard=False)")
    assert after.status == "ok", after.evalue
    assert after.stdout.startswith("[]\n") and after.result == "3.0"


@pytest.mark.timeout(120)
def test_default_sink_in_a_kernel(kernel: tuple[Any, Any]) -> None:
    _, kc = kernel
    cell = execute(kc, "notebook_launcher(train, args=(1.0,), num_processes=2)")
    assert cell.status == "ok", cell.evalue
    assert cell.result == "3.0"

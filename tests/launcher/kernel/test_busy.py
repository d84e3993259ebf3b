"""The kernel's reported state stays ``busy`` through a blocking launch, whatever the control channel handles.

The real-kernel test sends what JupyterLab's widget manager sends when the dashboard appears (a
``create_subshell_request`` on the control channel) while a blocking launch runs, and reads the status messages as
the Jupyter server does: the state it records is the latest status whose parent type it tracks. Before the fix that
was the subshell request's ``idle`` until the cell ended.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import pytest

from notebook_accel.launcher.kernel import busy

ROOT = Path(__file__).resolve().parents[3]
# jupyter_server's default MappingKernelManager.untracked_message_types: their statuses leave its state alone
UNTRACKED = {"comm_info_request", "kernel_info_request", "shutdown_request", "interrupt_request", "debug_request",
             "usage_request", "history_request", "complete_request", "inspect_request", "is_complete_request"}

LAUNCH = """
from notebook_accel import notebook_launcher

def nap():
    import time
    time.sleep(4)

notebook_launcher(nap, num_processes=2, dashboard=False)
"""


class _Kernel:
    """The parts of an ipykernel ``Kernel`` the wrapper uses: it records what it publishes."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def _publish_status(self, status: str, channel: str, parent: Any = None) -> None:
        self.sent.append((status, channel, parent))

    def get_parent(self, channel: str) -> dict[str, Any]:
        return {"header": {"msg_type": "execute_request"}}


def test_a_control_idle_is_followed_by_the_cells_busy_while_the_block_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _Kernel()
    monkeypatch.setattr(busy, "_kernel", lambda: kernel)
    cell = kernel.get_parent("shell")
    with busy.kernel_stays_busy():
        kernel._publish_status("busy", "control")
        kernel._publish_status("idle", "control")
        kernel._publish_status("idle", "shell", {"x": 1})  # not the control channel: left alone
    kernel._publish_status("idle", "control")  # after the block: left alone, the wrapper is gone
    assert kernel.sent == [("busy", "control", None), ("idle", "control", None), ("busy", "shell", cell),
                           ("idle", "shell", {"x": 1}), ("idle", "control", None)]
    assert "_publish_status" not in vars(kernel)


def test_outside_a_kernel_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(busy, "_kernel", lambda: None)
    with busy.kernel_stays_busy():
        pass


@pytest.mark.timeout(180)
def test_the_server_sees_the_kernel_busy_until_the_launch_cell_ends() -> None:
    jupyter_client = pytest.importorskip("jupyter_client")
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(ROOT), env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    kc = km.client()
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        info = kc.kernel_info(reply=True, timeout=30)["content"]
        if "kernel subshells" not in info.get("supported_features", []):
            pytest.skip("this ipykernel has no subshells (ipykernel < 7): no front end asks it for one")
        cell_id = kc.execute(LAUNCH)
        statuses: list[tuple[str, str, str]] = []  # (state, parent type, parent id)
        asked = False
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            try:
                msg = kc.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                msg = None
            if msg is not None and msg["msg_type"] == "status":
                parent = msg["parent_header"]
                statuses.append((msg["content"]["execution_state"], parent.get("msg_type", ""),
                                 parent.get("msg_id", "")))
                if statuses[-1] == ("idle", "execute_request", cell_id):
                    break
            if not asked and any(s[2] == cell_id for s in statuses):
                time.sleep(1.5)  # the launch is under way, as when the dashboard appears
                kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
                asked = True
        else:
            raise AssertionError(f"the launch cell did not end: {statuses}")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert ("idle", "create_subshell_request") in [s[:2] for s in statuses], statuses
    tracked = [s for s in statuses[:-1] if s[1] not in UNTRACKED]  # what the server follows, before the cell's idle
    assert tracked[-1][0] == "busy", f"the server saw the kernel {tracked[-1][0]} while the cell ran: {statuses}"

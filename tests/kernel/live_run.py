"""Run one cell in a fresh IPython kernel and keep every iopub message with its arrival time (kernel tests, benchmark).

The cell is sent with :mod:`jupyter_client`; what a front end would receive — comm messages that update widget
values, ``display_data`` and ``update_display_data`` — is recorded as :class:`Message` objects, so a test can
count widget updates and read the newest plotted step of the live curves (``data-last-step`` of the SVG).
"""

from __future__ import annotations

import os
import queue
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LAST_STEP = re.compile(r'data-last-step="([0-9.e+-]+)"')


@dataclass(frozen=True)
class Message:
    """One iopub message: arrival time (``time.time()``), type and content."""

    at: float
    msg_type: str
    content: dict[str, Any]


def run_cell(code: str, timeout: float = 180.0) -> list[Message]:
    """Execute ``code`` in a fresh kernel started in the repository; return its iopub messages in order."""
    from jupyter_client.manager import start_new_kernel

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(REPO), env=env)
    try:
        msg_id = client.execute(code)
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = client.get_iopub_msg(timeout=1.0)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            out.append(Message(time.time(), msg["msg_type"], msg["content"]))
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return out
        raise TimeoutError(f"the cell did not finish within {timeout} s; messages so far: {len(out)}")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def curve_updates(messages: list[Message]) -> list[tuple[float, float]]:
    """``(arrival time, newest plotted step)`` of every comm update that carried new live curves."""
    out = []
    for m in messages:
        if m.msg_type != "comm_msg":
            continue
        value = m.content.get("data", {}).get("state", {}).get("value")
        if isinstance(value, str):
            found = LAST_STEP.search(value)
            if found:
                out.append((m.at, float(found.group(1))))
    return out


def stdout_of(messages: list[Message]) -> str:
    """Everything the cell printed on stdout."""
    return "".join(m.content["text"] for m in messages if m.msg_type == "stream" and m.content["name"] == "stdout")

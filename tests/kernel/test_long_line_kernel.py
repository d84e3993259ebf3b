"""A worker that writes a 100 MB line without a newline, in a real kernel with the default sink (the dashboard).

The screen used to be quadratic there: each redraw of the log pane rendered every 64 kB row of the line, so
10 MB took over a minute and 100 MB never finished. Now the line is one event of bounded size (its head and
tail, and a note of what was cut), and the rank's log file keeps every character. Each case runs as the first
launch of a fresh kernel (the launch a user waits for, warm-up included); the 100 MB one must finish within 3
times the 10-character one: a generous hang guard, with the measured ratio printed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.kernel.test_launcher_kernel import execute, running_kernel

pytest.importorskip("jupyter_client")
pytest.importorskip("ipywidgets")

SETUP = """
import os, sys
os.environ["NOTEBOOK_ACCEL_LOG_DIR"] = {log_dir!r}
from notebook_accel import notebook_launcher

def write(n):
    if int(os.environ["RANK"]) == 0:
        sys.stdout.write("x" * n)
        sys.stdout.flush()
    return n
"""


def first_launch(log_dir: Path, size: int, timeout: float) -> tuple[float, Any, int]:
    """In a fresh kernel: the seconds the first launch of ``write(size)`` took, its cell, and the bytes of
    what the kernel sent for it (display and comm messages included)."""
    with running_kernel() as (_, kc):
        assert execute(kc, SETUP.format(log_dir=str(log_dir)), timeout=120).status == "ok"
        start = time.monotonic()
        cell = execute(kc, f"notebook_launcher(write, args=({size},), num_processes=2)", timeout=timeout)
        took = time.monotonic() - start
        assert execute(kc, "from tests.helpers import child_pids; assert child_pids() == []").status == "ok"
    return took, cell, len(json.dumps(cell.outputs, default=str))


@pytest.mark.timeout(600)
def test_a_100_mb_line_costs_the_kernel_a_few_seconds_and_the_log_file_keeps_it(tmp_path: Path) -> None:
    short, cell, _ = first_launch(tmp_path / "short", 10, timeout=240)
    assert cell.status == "ok", cell.evalue
    size = 100_000_000
    try:
        long, cell, sent = first_launch(tmp_path / "long", size, timeout=3 * short)
    except Exception as e:  # the cell did not end in time (jupyter_client raises queue.Empty)
        pytest.fail(f"a {size:,}-character line did not finish within 3 x {short:.1f} s ({type(e).__name__})")
    print(f"first launch in a fresh kernel: 10 characters {short:.1f} s, 100 MB line {long:.1f} s, "
          f"ratio {long / short:.2f}; the kernel sent {sent:,} bytes for the 100 MB cell")
    assert cell.status == "ok" and cell.result == str(size), cell.evalue
    assert long < 3 * short
    assert sent < 2_000_000, "the screen is not bounded: the kernel sent the line (or many rows of it)"
    logs = list((tmp_path / "long").glob("*/rank0.log"))
    assert len(logs) == 1 and logs[0].stat().st_size == size + 1  # every character, and the line's end
    with open(logs[0], "rb") as f:
        f.seek(size // 2)
        assert f.read(10) == b"x" * 10

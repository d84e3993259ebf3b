"""The kernel imports what DDP needs once, so a worker finds it imported (checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from notebook_accel.launcher import warmup

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

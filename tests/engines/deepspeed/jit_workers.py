"""Worker bodies and helpers for the DeepSpeed just-in-time op tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from notebook_accel import Accelerator
from notebook_accel.engines.deepspeed import DeepSpeedPlugin, jit_ops

_HOLD = "from torch.utils.file_baton import FileBaton; import sys, time; FileBaton(sys.argv[1]).try_acquire(); " \
        "print('held', flush=True); time.sleep(600)"


def hold_lock(path: Path) -> subprocess.Popen[str]:
    """A process that takes torch's build lock at ``path`` the way a build does, and keeps it until killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def stale_lock(path: Path) -> None:
    """A lock left the way a stopped build leaves it: its process killed in the middle."""
    process = hold_lock(path)
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stdout.close()  # type: ignore[union-attr]
    assert path.exists()


def train_zero2(optimizer: str = "AdamW") -> str:
    """Prepare a tiny model under ZeRO-2 (DeepSpeed sets up its group, and on CPU its comm op, in prepare) and take
    one step with the torch optimizer named."""
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    model = torch.nn.Linear(4, 1)
    loader = torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2)
    model, opt, loader = accelerator.prepare(model, getattr(torch.optim, optimizer)(model.parameters(), lr=0.1), loader)
    for x in loader:
        accelerator.backward(model(x).pow(2).mean())
        opt.step()
        break
    return "prepared"


def fake_build(build_dir: str, seconds: float) -> list[str]:
    """Run ``compiling_phase`` around a build that takes ``seconds`` (what the op's build costs is mocked)."""
    op = jit_ops.JitOp("fake_op", "CPU communication op", Path(build_dir) / f"rank{os.environ['RANK']}", None)
    jit_ops.cpu_jit_ops = lambda: [op]  # this worker only: a forked child's module
    with jit_ops.compiling_phase(int(os.environ["RANK"])):
        time.sleep(seconds)
    return ["built"]

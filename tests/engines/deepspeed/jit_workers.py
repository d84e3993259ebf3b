"""Worker bodies and helpers for the DeepSpeed just-in-time op tests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils import file_baton
from torch.utils.file_baton import FileBaton

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


# torch's FileBaton, loaded from its file alone (it needs nothing of torch): the holder starts in a blink
_HOLD_UNTIL_TOLD = "import importlib.util, os, sys; " \
    "spec = importlib.util.spec_from_file_location('file_baton', os.environ['FILE_BATON']); " \
    "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); " \
    "baton = module.FileBaton(os.environ['HOLD_LOCK']); baton.try_acquire(); print('held', flush=True); " \
    "sys.stdin.readline(); baton.release()"


def hold_lock_until_told(path: Path, script: Path | None = None) -> subprocess.Popen[str]:
    """A process that takes torch's build lock at ``path`` and releases it (as a finished build does) when a line
    reaches its stdin (:func:`release`). With ``script``, it runs as that file with the arguments
    ``env --build-deepspeed-ops`` (so that its command line reads like the CLI's when ``script`` is named so)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if script is None:
        argv = [sys.executable, "-c", _HOLD_UNTIL_TOLD]
    else:
        script.write_text(_HOLD_UNTIL_TOLD.replace("; ", "\n"))
        argv = [sys.executable, str(script), "env", "--build-deepspeed-ops"]
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "HOLD_LOCK": str(path), "FILE_BATON": file_baton.__file__})
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def release(holder: subprocess.Popen[str]) -> None:
    """Make a :func:`hold_lock_until_told` process release its lock and end."""
    holder.communicate("\n", timeout=60)
    assert holder.returncode == 0


def work_in(folder: Path, name: str) -> subprocess.Popen[bytes]:
    """A process named ``name`` (``cc1plus``, ``ninja``) whose current folder is ``folder``, as a build's ninja and
    compiler are; it sleeps until killed."""
    link = folder.parent / "bin" / name
    link.parent.mkdir(exist_ok=True)
    if not link.exists():
        link.symlink_to(shutil.which("sleep") or "/bin/sleep")  # the process's name is the name it was run by
    return subprocess.Popen([str(link), "600"], cwd=folder)


def end(process: subprocess.Popen[bytes]) -> None:
    """Kill and reap a :func:`work_in` process."""
    process.kill()
    process.wait()


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


def rank1_builds(build_dir: str, seconds: float) -> list[str]:
    """Rank 1 holds the fake op's build lock and runs a compiler in its folder for ``seconds`` while every rank is
    in ``compiling_phase``; the other ranks wait for the lock to go, as torch does."""
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    op = jit_ops.JitOp("fake_op", "CPU communication op", Path(build_dir), None)
    jit_ops.cpu_jit_ops = lambda: [op]  # this worker only: a forked child's module
    baton = FileBaton(str(op.lock))
    compiler = None
    if rank == 1:
        op.build_dir.mkdir(parents=True, exist_ok=True)
        assert baton.try_acquire()
        compiler = work_in(op.build_dir, "cc1plus")
    dist.barrier()
    try:
        with jit_ops.compiling_phase(rank):
            if compiler is not None:
                time.sleep(seconds)
                end(compiler)
                (op.build_dir / "fake_op.so").write_bytes(b"")
                baton.release()
            else:
                baton.wait()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return ["built"]

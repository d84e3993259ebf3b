"""Worker bodies for the two-process background-save tests (module level, so the launcher can run them); ``engine``
is ``"plain"`` (DDP) or ``"fsdp"`` (FULL_SHARD, sharded state through DCP)."""

from __future__ import annotations

import errno
import json
import os
import pickle
import signal
import threading
import time
from typing import Any

import torch
from torch.utils.data import DataLoader

from notebook_accel import Accelerator, ProjectConfiguration
from notebook_accel.checkpointing import CheckpointError, save
from notebook_accel.utils import set_seed
from tests.engines.fsdp.workers import TinyNet, _plugin, dataset, steps


def _prepared(project_dir: str, engine: str) -> tuple[Accelerator, Any, Any, Any]:
    """A run with automatic checkpoint naming in ``project_dir`` (enough batches for 50 steps): accelerator, model,
    optimizer, batches."""
    accelerator = Accelerator(fsdp_plugin=_plugin("FULL_SHARD", {}) if engine == "fsdp" else None,
                              project_config=ProjectConfiguration(project_dir=project_dir,
                                                                  automatic_checkpoint_naming=True))
    set_seed(0)
    net = TinyNet()
    prepared = accelerator.prepare(net, torch.optim.AdamW(net.parameters(), lr=1e-2),
                                   DataLoader(dataset(400), batch_size=4, shuffle=True))
    return accelerator, prepared[0], prepared[1], iter(prepared[2])


def _in_writer() -> bool:
    return threading.current_thread() is not threading.main_thread()


def _slow_writer(seconds: float) -> None:
    """The background writer waits ``seconds`` before its first file (the loop runs meanwhile)."""
    real = save._write_files

    def slow(*args: Any, **kwargs: Any) -> Any:
        if _in_writer():
            time.sleep(seconds)
        return real(*args, **kwargs)

    save._write_files = slow  # type: ignore[assignment]  # this worker's module; it ends with the run


def _files(path: str) -> dict[str, Any]:
    """Every file's bytes; DCP's ``.metadata`` as the index it holds (DCP writes a fresh save id into it, so two
    blocking saves of one state differ there too) and the manifest without its time and that file's record."""
    out: dict[str, Any] = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
        if name.endswith(".metadata"):
            out[name] = pickle.loads(out[name]).state_dict_metadata
    manifest = json.loads(out.pop("manifest.json"))
    del manifest["created"]
    manifest["files"] = {k: v for k, v in manifest["files"].items() if not k.endswith(".metadata")}
    out["manifest.json"] = manifest
    return out


def same_as_blocking(root: str, engine: str) -> bool:
    """A blocking save and a background save of one state, the loop training (collectives and all) while the
    background one is written: the same files, byte for byte."""
    accelerator, model, optimizer, batches = _prepared(root, engine)
    steps(accelerator, model, optimizer, batches, 2)
    blocking = accelerator.save_state(os.path.join(root, "blocking"))
    _slow_writer(0.5)
    path = accelerator.save_state(os.path.join(root, "background"), async_save=True)
    steps(accelerator, model, optimizer, batches, 3)  # the default group's collectives while the writer agrees
    assert accelerator.wait_for_checkpoint() == path
    return _files(path) == _files(blocking)


def returns_while_writing(root: str, engine: str) -> str:
    """Save in the background (ProjectConfiguration's default) and return at once: the run's end waits."""
    accelerator, model, optimizer, batches = _prepared(root, engine)
    accelerator.project_configuration.async_save = True
    steps(accelerator, model, optimizer, batches, 2)
    _slow_writer(1.0)
    path = accelerator.save_state()
    assert not os.path.exists(path)
    return path


def disk_full_in_background(root: str, engine: str) -> str:
    """checkpoint_0 blocking; rank 1's disk fills while checkpoint_1 is written in the background: both ranks
    raise it at their next save_state, naming checkpoint_1."""
    accelerator, model, optimizer, batches = _prepared(root, engine)
    steps(accelerator, model, optimizer, batches, 2)
    accelerator.save_state()
    if accelerator.process_index == 1:
        real = os.fsync

        def full(fd: int) -> None:
            if _in_writer():
                raise OSError(errno.ENOSPC, "No space left on device")
            real(fd)

        os.fsync = full  # type: ignore[assignment]  # this worker's os; it ends with the run
    accelerator.save_state(async_save=True)
    steps(accelerator, model, optimizer, batches, 2)
    try:
        accelerator.save_state(async_save=True)
    except CheckpointError as e:
        return str(e)
    raise AssertionError("the next save_state should have raised the background save's failure")


def killed_during_background_write(root: str, engine: str, victim: int) -> None:
    """checkpoint_0 blocking; rank ``victim`` is SIGKILLed by its writer in the middle of checkpoint_1's files
    while the loop trains on."""
    accelerator, model, optimizer, batches = _prepared(root, engine)
    steps(accelerator, model, optimizer, batches, 2)
    accelerator.save_state()
    if accelerator.process_index == victim:
        real = os.fsync

        def dies(fd: int) -> None:
            if _in_writer():
                os.kill(os.getpid(), signal.SIGKILL)
            real(fd)

        os.fsync = dies  # type: ignore[assignment]  # this worker's os; it dies in the writer
    accelerator.save_state(async_save=True)
    steps(accelerator, model, optimizer, batches, 50)
    accelerator.wait_for_checkpoint()


def load_newest(root: str, engine: str) -> str:
    """Automatic loading: the newest complete checkpoint's path."""
    accelerator, _, _, _ = _prepared(root, engine)
    return accelerator.load_state()
